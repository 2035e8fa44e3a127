"""Where a run's numbers go (`MetricsLogger`): a progress line, its loggers
(`log.loggers`: metrics.jsonl and TensorBoard event files by default, podracer/logs/)
and, at the end, the learning-curve plot (plots.py). The meters runtimes fill records
with are meters.py's, importable from here as before."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO


from podracer.errors import DiskError
from podracer.logs import base, compile_time, disk, plots, runs as runs_lib
from podracer.logs.default import DEFAULT_LOGGERS, PROGRESS_METRICS, default_loggers
# The meters and the plot, importable from here as before 0.17.0 (docs/api.md).
from podracer.logs.meters import (  # noqa: F401
    RateMeter, Window, device_counts, episode_record, episode_sums, learner_record,
    tail_mean, warming_up, windowed_returns)
from podracer.logs.plots import plot_learning_curve  # noqa: F401

METRICS_FILE = base.METRICS_FILE
PLOT_FILE = "learning_curve.png"
# Keys of a config's `log` section (declared in podracer/config/compose.py RUN_KEYS): these, and
# a section of options per logger it names (`log.wandb.project`).
LOG_KEYS = ("progress_metrics", "loggers")


class MetricsLogger:
  """Writes one JSON object per log step and prints a progress line.

  Records need `env_steps`; `sps` and `episode_return` are shown when present, and then
  each of `progress_metrics` the record has. Lines
  are printed at most every `print_interval` seconds (every record is still written).
  With `stop_at_return`, `target_reached` turns true once a record's mean episode return
  reaches it; runtimes check it after each record and stop early. `context` (how many
  processes and devices took part) is added to every record, and so is each of
  `rates_per_env_step` ({metric: work per env step}) times `sps`.

  With a `workdir`, every record goes to the run's loggers: `loggers(resumed)` builds
  them ({name: podracer.base.Logger}; the builder's, from `log.loggers`), by default
  metrics.jsonl and TensorBoard event files. Each gets the same strict-JSON record (None
  for NaN), and each write and close runs inside `podracer.logs.disk.writing`: the first disk
  failure is one DiskError naming the logger's files, after which nothing is written.
  """

  def __init__(self, workdir: Optional[str] = None, stream: Optional[TextIO] = sys.stdout,
               print_interval: float = 1.0, total_env_steps: Optional[int] = None,
               stop_at_return: Optional[float] = None,
               resume_records: Optional[int] = None,
               progress_metrics: Sequence[str] = PROGRESS_METRICS,
               context: Optional[Dict[str, Any]] = None,
               rates_per_env_step: Optional[Dict[str, float]] = None,
               runs: Optional[Any] = None,
               loggers: Optional[Callable[[Optional[List[Dict[str, Any]]]],
                                          Dict[str, base.Logger]]] = None):
    self.workdir = workdir
    # Many runs in one program (podracer/config/runs.py): records carry `run`; see `write_runs`.
    self.runs = runs
    self._reached_runs: set = set()
    self.rates_per_env_step = dict(rates_per_env_step or {})
    self.progress_metrics = tuple(progress_metrics)
    self.context = dict(context or {})
    self.stream = stream
    self.print_interval = print_interval
    self.total_env_steps = total_env_steps
    self.stop_at_return = stop_at_return
    self.target_reached = False
    self.records: List[Dict[str, Any]] = []
    self._start = time.perf_counter()
    # XLA's compile seconds since this logger started (podracer/logs/compile_time.py).
    self._compile_start, self._hits_start = compile_time.seconds(), compile_time.cache_hits()
    self._last_print = -math.inf
    # Names a config chose that the first learner record lacks are said once.
    self._default_progress = tuple(progress_metrics) == PROGRESS_METRICS
    self._progress_checked = False
    self._warm_up_unchecked = True  # whether the replay can reach min_size: said once
    self._loggers: Dict[str, base.Logger] = {}
    self.disk_failed = False  # A write failed because of the disk (see `_write_files`).
    self.layout: Dict[str, Any] = {}  # What the runtime laid out (`describe`).
    if workdir:
      os.makedirs(workdir, exist_ok=True)
      path = os.path.join(workdir, METRICS_FILE)
      if resume_records is not None:  # Continues a checkpointed run: see checkpoint.py.
        self.records = _truncate(path, resume_records)
        self._start -= self.records[-1]["wall_time"] if self.records else 0.0
        self._compile_start -= self.records[0].get("compile_s", 0.0) if self.records else 0.0
      resumed = self.records if resume_records is not None else None
      make = loggers or (lambda kept: default_loggers(workdir, runs and runs.num_runs,
                                                           kept))
      with disk.writing("the run's log files", workdir):
        self._loggers = make(resumed)

  def describe(self, layout: Dict[str, Any]) -> None:
    """What the runtime laid out ({"mesh": {axis: devices}, "param_bytes_per_device":
    bytes}): said in one line before the first record, and part of the summary (the
    `result:` line)."""
    self.layout = dict(layout)
    if self.stream:
      self.stream.write("layout: " + ", ".join(
          f"{k} {_layout_value(v)}" for k, v in self.layout.items()) + "\n")

  def write(self, record: Dict[str, Any], compile_step: bool = False) -> None:
    record = self._add(record, compile_step)
    if (self.stop_at_return is not None and not self.target_reached
        and record.get("episode_return", -math.inf) >= self.stop_at_return):
      self.target_reached = True
      record["target_reached"] = True
    self._show(record)

  def write_runs(self, records: List[Dict[str, Any]], compile_step: bool = False) -> None:
    """The records of one call of many runs, one per run (each with its `run`): all are
    written; the progress line shows their mean return and its range over runs. With
    `stop_at_return`, a run that reaches it is marked (`target_reached` in its record)
    and trains on; `target_reached` turns true once every run has reached it."""
    added = [self._add(record, compile_step) for record in records]
    if self.stop_at_return is not None:
      for record in added:
        if record.get("episode_return", -math.inf) >= self.stop_at_return:
          self._reached_runs.add(record["run"])
        record["target_reached"] = record["run"] in self._reached_runs
      self.target_reached = len(self._reached_runs) == len(added)
    self._show(runs_lib.progress_record(added))

  def _add(self, record: Dict[str, Any], compile_step: bool) -> Dict[str, Any]:
    """Completes a record (context, rates, wall time) and writes it to the files."""
    record = {**self.context, **{k: _plain(v) for k, v in record.items()}}
    if "sps" in record:  # e.g. MuZero's simulations_per_s (Agent.rates_per_env_step)
      record.update({k: record["sps"] * n for k, n in self.rates_per_env_step.items()})
      if record["sps"] and "replay_samples_per_s" in record:
        # Items sampled for learning per env step, over the record's window.
        record["replay_ratio"] = record["replay_samples_per_s"] / record["sps"]
    record["wall_time"] = time.perf_counter() - self._start
    if compile_step:  # With the seconds of its wall_time XLA spent compiling.
      record["includes_compilation"] = True
      record["compile_s"] = compile_time.seconds() - self._compile_start
    self.records.append(record)
    self._write_files(record)
    if self.workdir and len(self.records) == 1:  # The plot at the end needs matplotlib.
      plots.import_in_background()
    return record

  def _show(self, record: Dict[str, Any]) -> None:
    """Checks warm-up and progress metrics once, and prints the progress line when due."""
    now = time.perf_counter()
    done = (self.target_reached or self.total_env_steps is not None
            and record["env_steps"] >= self.total_env_steps)
    if self._warm_up_unchecked and record.get("learning_started") is False:
      self._check_warm_up(record)
    if not self._progress_checked and (record.get("updates") or any(
        k.endswith("loss") for k in record)):
      self._progress_checked = True
      self._check_progress_metrics(record)
    if self.stream and (now - self._last_print >= self.print_interval or done):
      self._last_print = now
      self.stream.write(self.format(record) + "\n")
      self.stream.flush()

  def _check_progress_metrics(self, record: Dict[str, Any]) -> None:
    """At the first record of learner metrics: when the records have none of
    `progress_metrics` (an agent of several objectives prefixes its metrics:
    `critic_loss`), says so once and shows the losses the agent logs instead; when they
    lack some that a config named, says which."""
    # Evaluation's fields come only with the records of an evaluation.
    missing = [k for k in self.progress_metrics
               if k not in record and not k.startswith("eval_")]
    if not missing or not self.stream:
      return
    if not any(k in record for k in self.progress_metrics):
      self.progress_metrics = tuple(sorted(k for k in record if k.endswith("loss"))[:4])
      shown = (f"the progress line shows {', '.join(self.progress_metrics)} instead"
               if self.progress_metrics else "the progress line shows no learner metric")
      self.stream.write(
          f"Warning: the records have none of log.progress_metrics "
          f"({', '.join(missing)}): {shown}; choose with "
          "--config.log.progress_metrics=\"('name', ...)\" from: "
          f"{', '.join(sorted(record))}.\n")
    elif not self._default_progress:
      self.stream.write(
          f"Warning: log.progress_metrics names {', '.join(map(repr, missing))}, which "
          f"the records do not have; they have: {', '.join(sorted(record))}.\n")

  def _check_warm_up(self, record: Dict[str, Any]) -> None:
    """Says, at the first warm-up record, when the replay fills too slowly to reach its
    min_size within the run: learning would never start."""
    size, needed = record.get("replay_size"), record.get("replay_min_size")
    steps, total = record.get("env_steps"), self.total_env_steps
    if not (size and needed and steps and total):
      return  # Nothing inserted yet: the next warm-up record tells.
    self._warm_up_unchecked = False
    # A replay fills at a fixed number of items an env step until it is full.
    projected = size * total / steps
    if projected < needed and self.stream:
      self.stream.write(
          f"Warning: replay.min_size={needed:,} items will not be reached: the replay "
          f"holds {size:,.0f} after {steps:,} env steps, so at most about {projected:,.0f} "
          f"after total_env_steps={total:,}, and learning would not start; lower "
          "replay.min_size or raise total_env_steps.\n")

  def _write_files(self, record: Dict[str, Any]) -> None:
    """Hands the record, as strict JSON, to every logger. After a disk failure (a
    DiskError, raised once) the files are left as they were: nothing more is written to
    them, and `close` neither flushes them nor plots."""
    if not self._loggers or self.disk_failed:
      return
    clean = strict_json(record)
    try:
      for logger in self._loggers.values():
        with disk.writing(logger.what, logger.where, cleanup=logger.undo_partial()):
          logger.write(clean)
    except DiskError:
      self.disk_failed = True
      raise

  def write_video(self, tag: str, video: Any, step: int) -> None:
    """Hands a recorded video (`base.Video`) to every logger that shows videos."""
    if self.disk_failed:
      return
    for logger in self._loggers.values():
      with disk.writing(logger.what, logger.where):
        logger.write_video(tag, video, step)

  def format(self, record: Dict[str, Any]) -> str:
    steps = f"{record['env_steps']:,}"
    if self.total_env_steps:
      steps += f"/{self.total_env_steps:,}"
    parts = [f"[{record['wall_time']:7.1f}s]", f"env steps {steps}"]
    if "sps" in record:
      parts.append(f"{record['sps']:,.0f} steps/s" +
                   (" (incl. compile)" if record.get("includes_compilation") else ""))
    if "episode_return" in record:
      parts.append(f"return {record['episode_return']:.3f}")
      if "episode_return_min" in record:  # Many runs: the mean, then its range over runs.
        parts[-1] += (f" (over {record['num_runs']} runs: min "
                      f"{record['episode_return_min']:.3f}, max "
                      f"{record['episode_return_max']:.3f})")
    if record.get("eval_return") is not None:
      parts.append(f"eval_return {record['eval_return']:.3f}")
    if record.get("learning_started") is False and "replay_size" in record:
      parts.append(f"warming up replay {record['replay_size']:,.0f}/"
                   f"{record.get('replay_min_size', 0):,.0f}")
    for key in self.progress_metrics:
      if key in record:
        parts.append(f"{key} {record[key]:.3g}")
    return " | ".join(parts)

  def summary(self) -> Dict[str, Any]:
    """Final env steps, best and last mean episode return, median steps/s; with many
    runs, each run's and the best run's (`runs_summary`); the seconds of the wall time
    spent compiling (`compile_s`) and the programs the compilation cache gave back."""
    if not self.records:
      return {}
    compiled = dict(compile_s=round(compile_time.seconds() - self._compile_start, 2),
                    compile_cache_hits=compile_time.cache_hits() - self._hits_start)
    if self.runs:
      return {**runs_lib.summary(self.records, self.runs,
                                 self.stop_at_return if self.target_reached else None),
              **self.layout, **compiled}
    return {**self._summary(), **self.layout, **compiled}

  def _summary(self) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    out["env_steps"] = self.records[-1]["env_steps"]
    returns = [r["episode_return"] for r in self.records if "episode_return" in r]
    if returns:
      out["final_episode_return"] = returns[-1]
      out["best_episode_return"] = max(returns)
    sps = sorted(r["sps"] for r in self.records
                 if "sps" in r and not r.get("includes_compilation"))
    if sps:
      out["median_sps"] = sps[len(sps) // 2]
    out["wall_time"] = self.records[-1]["wall_time"]
    if "params_checksum" in self.records[-1]:  # Several processes: host/learner.py.
      out["params_checksum"] = self.records[-1]["params_checksum"]
    if self.target_reached:
      out["stopped_at_return"] = self.stop_at_return
    if self.records[-1].get("learning_started") is False:  # Ended while the replay filled.
      last = self.records[-1]
      out.update(learning_started=False, replay_size=last.get("replay_size"),
                 replay_min_size=last.get("replay_min_size"))
    return out

  def close(self, title: str = "") -> Optional[str]:
    """Closes the loggers and plots the learning curve into the workdir; returns its
    path."""
    loggers, self._loggers = self._loggers, {}
    if self.disk_failed:  # Said once already; closing flushes into the same full disk.
      for logger in loggers.values():
        with contextlib.suppress(Exception):
          logger.close()
      return None
    try:
      for logger in loggers.values():
        with disk.writing(logger.what, logger.where):
          logger.close()
      if not self.workdir or not self.records:  # No plot rather than a blank one.
        return None
      path = os.path.join(self.workdir, PLOT_FILE)
      with disk.writing("learning-curve plot", path):
        return plot_learning_curve(self.records, path, title, runs=self.runs)
    except DiskError:
      self.disk_failed = True
      raise


def _layout_value(value: Any) -> str:
  """{"runs": 1, "data": 2} -> "runs=1 x data=2"; a count with thousands' commas."""
  if isinstance(value, dict):
    return " x ".join(f"{k}={v}" for k, v in value.items())
  return f"{value:,}" if isinstance(value, int) else str(value)


def _truncate(path: str, num_records: int) -> List[Dict[str, Any]]:
  """Keeps the first `num_records` lines of a metrics file; returns them as records."""
  with open(path) as f:
    lines = f.readlines()[:num_records]
  with open(path, "w") as f:
    f.writelines(lines)
  return [json.loads(line) for line in lines]


def strict_json(record: Dict[str, Any]) -> Dict[str, Any]:
  """NaN and infinities become null: strict JSON readers reject Python's bare NaN."""
  return {k: None if isinstance(v, float) and not math.isfinite(v) else v
          for k, v in record.items()}


def _plain(v: Any) -> Any:
  if hasattr(v, "item"):
    return v.item()
  return v
