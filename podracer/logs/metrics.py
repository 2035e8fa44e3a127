"""Where a run's numbers go: a progress line, its loggers (`log.loggers`: metrics.jsonl
and TensorBoard event files by default, podracer/logs/) and a learning-curve plot; and
the host-side meters runtimes fill records with (replay rates, device counters)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from podracer.errors import DiskError
from podracer.logs import base, disk, runs as runs_lib
from podracer.logs.default import DEFAULT_LOGGERS, PROGRESS_METRICS, default_loggers

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
    self._last_print = -math.inf
    # Names a config chose that the first learner record lacks are said once.
    self._progress_checked = tuple(progress_metrics) == PROGRESS_METRICS
    self._warm_up_unchecked = True  # whether the replay can reach min_size: said once
    self._loggers: Dict[str, base.Logger] = {}
    self.disk_failed = False  # A write failed because of the disk (see `_write_files`).
    if workdir:
      os.makedirs(workdir, exist_ok=True)
      path = os.path.join(workdir, METRICS_FILE)
      if resume_records is not None:  # Continues a checkpointed run: see checkpoint.py.
        self.records = _truncate(path, resume_records)
        self._start -= self.records[-1]["wall_time"] if self.records else 0.0
      resumed = self.records if resume_records is not None else None
      make = loggers or (lambda kept: default_loggers(workdir, runs and runs.num_runs,
                                                           kept))
      with disk.writing("the run's log files", workdir):
        self._loggers = make(resumed)

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
    if compile_step:
      record["includes_compilation"] = True
    self.records.append(record)
    self._write_files(record)
    return record

  def _show(self, record: Dict[str, Any]) -> None:
    """Checks warm-up and progress metrics once, and prints the progress line when due."""
    now = time.perf_counter()
    done = (self.target_reached or self.total_env_steps is not None
            and record["env_steps"] >= self.total_env_steps)
    if self._warm_up_unchecked and record.get("learning_started") is False:
      self._check_warm_up(record)
    if not self._progress_checked and "loss" in record:
      self._progress_checked = True
      # Evaluation's fields come only with the records of an evaluation.
      missing = [k for k in self.progress_metrics
                 if k not in record and not k.startswith("eval_")]
      if missing and self.stream:
        self.stream.write(
            f"Warning: log.progress_metrics names {', '.join(map(repr, missing))}, which "
            f"the records do not have; they have: {', '.join(sorted(record))}.\n")
    if self.stream and (now - self._last_print >= self.print_interval or done):
      self._last_print = now
      self.stream.write(self.format(record) + "\n")
      self.stream.flush()

  def _check_warm_up(self, record: Dict[str, Any]) -> None:
    """Says, at the first warm-up record, when the replay fills too slowly to reach its
    min_size within the run: learning would never start."""
    size, needed = record.get("replay_size"), record.get("replay_min_size")
    steps, total = record.get("env_steps"), self.total_env_steps
    if not (size and needed and steps and total):
      return  # Nothing inserted yet: the next warm-up record tells.
    self._warm_up_unchecked = False
    # At most: Anakin's replay_size is a mean over its first call, about half its end.
    projected = 2 * size * total / steps
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
    runs, each run's and the best run's (`runs_summary`)."""
    out: Dict[str, Any] = {}
    if not self.records:
      return out
    if self.runs:
      return runs_lib.summary(self.records, self.runs,
                              self.stop_at_return if self.target_reached else None)
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
    if "params_checksum" in self.records[-1]:  # Several processes: see sebulba/learner.py.
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


def episode_sums(stats: Any, xp: Any = np) -> Any:
  """[count, return sum, length sum] of the episodes that ended at `stats.done` steps.

  `stats` is an EpisodeStats of any shape; `xp` is numpy on the host or jax.numpy in a
  compiled program (Anakin sums in the graph, Sebulba's actors on the host).
  """
  done = stats.done
  # Products, not `where`: the same sums, and cheaper on the host, where actors call this.
  return xp.stack([xp.sum(done), xp.sum(stats.episode_return * done),
                   xp.sum(stats.episode_length * done)]).astype(xp.float32)


def episode_record(sums: Any) -> Dict[str, float]:
  """The record keys of `episode_sums` (summed further): mean return and length, count."""
  count, return_sum, length_sum = (float(x) for x in sums)
  if not count:
    return {}
  return dict(episode_return=return_sum / count, episode_length=length_sum / count,
              episodes=count)


def windowed_returns(records: List[Dict[str, Any]], window: int) -> List[Tuple[int, float]]:
  """(env steps, mean return of the episodes that ended in the last `window` env steps) at
  each record with episodes. Runs whose records cover different numbers of env steps (4x
  the environments per batch, another `log_interval`) are then compared alike: a record's
  mean over one or two episodes is noisy, and a run of more, smaller records has more
  chances to show one high mean, so "first record >= X" favours it."""
  ended, points = [], []  # (env steps, episodes, mean return) of each record with episodes
  for record in records:
    if record.get("episodes", 0) > 0 and "episode_return" in record:
      now = record["env_steps"]
      ended.append((now, record["episodes"], record["episode_return"]))
      inside = [(n, mean) for steps, n, mean in ended if steps > now - window]
      points.append((now, sum(n * mean for n, mean in inside) / sum(n for n, _ in inside)))
  return points


def tail_mean(values: Sequence[float], fraction: float = 0.2) -> Optional[float]:
  """The mean of the last `fraction` of `values` (at least the last one; None if there are
  none): what a run "held", as the learning tests, docs and benchmarks say it."""
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"fraction {fraction} is not in (0, 1]")
  values = list(values)
  tail = values[min(int(len(values) * (1.0 - fraction)), len(values) - 1):]
  return sum(tail) / len(tail) if tail else None


def warming_up(record: Dict[str, Any], replay: Any) -> Dict[str, Any]:
  """Fields of a record of updates that learned nothing while a device replay held fewer
  than `replay.min_size` items: `learning_started: false` and the min size, as a host
  replay's warm-up records say (the progress line reads `warming up replay N/M`)."""
  min_size = getattr(replay, "min_size", None)
  if (min_size and record.get("learning") == 0
      and record.get("replay_size", min_size) < min_size):
    return dict(learning_started=False, replay_min_size=min_size)
  return {}


def learner_record(metrics: Dict[str, Any]) -> Dict[str, float]:
  """A learner's metrics (scalars, or one per update) as record values: their means."""
  return {k: float(np.mean(v)) for k, v in metrics.items()}


class Window:
  """What a runtime sums between two metrics records; every runtime writes through one.

  `add_steps` counts env steps and finished episodes, `add_mean` a value to average over
  the window (timings, policy lag; names in `means` are reported, 0 if never added),
  `metrics` holds the learner's latest metrics (`add_metrics`). `record` turns the window
  into one record.
  """

  def __init__(self, means: Tuple[str, ...] = ()):
    self.start = time.perf_counter()
    self.env_steps = 0
    self.episodes = np.zeros(3)
    self._sums: Dict[str, float] = {k: 0.0 for k in means}
    self._counts: Dict[str, int] = {k: 0 for k in means}
    self._maxes: Dict[str, float] = {}
    self.metrics: Dict[str, Any] = {}

  def add_steps(self, env_steps: int, episodes: Any = None) -> None:
    self.env_steps += env_steps
    if episodes is not None:
      self.episodes += np.asarray(episodes, np.float64).reshape(-1, 3).sum(0)

  def add_mean(self, name: str, value: float) -> None:
    self._sums[name] = self._sums.get(name, 0.0) + value
    self._counts[name] = self._counts.get(name, 0) + 1

  def add_metrics(self, metrics: Dict[str, Any]) -> None:
    """An update's metrics become the window's, unless that update learned nothing
    (`learning` 0: its replay still filled or its rate limiter held it) and one before it
    in this window did: a record shows the last update that learned, not zeros."""
    learned = lambda m: float(np.mean(m.get("learning", 1.0))) > 0  # per update, or mean
    if self.metrics and learned(self.metrics) and not learned(metrics):
      return
    self.metrics = metrics

  def add_max(self, name: str, value: float) -> None:
    self._maxes[name] = max(self._maxes.get(name, value), value)

  def record(self, env_steps: int, updates: int) -> Dict[str, Any]:
    elapsed = max(time.perf_counter() - self.start, 1e-9)
    record: Dict[str, Any] = dict(env_steps=env_steps, updates=updates,
                                  sps=self.env_steps / elapsed)
    record.update({k: v / max(self._counts[k], 1) for k, v in self._sums.items()})
    record.update(self._maxes)
    record.update(episode_record(self.episodes))
    record.update(learner_record(self.metrics))
    return record


class RateMeter:
  """Turns a replay's running insert and sample totals into rates between two records."""

  def __init__(self, inserts: int = 0, samples: int = 0):
    self._totals = (inserts, samples)
    self._time = time.perf_counter()

  def rates(self, inserts: int, samples: int) -> Dict[str, float]:
    now = time.perf_counter()
    elapsed = max(now - self._time, 1e-9)
    new_inserts, new_samples = inserts - self._totals[0], samples - self._totals[1]
    self._totals, self._time = (inserts, samples), now
    return dict(replay_inserts_per_s=new_inserts / elapsed,
                replay_samples_per_s=new_samples / elapsed,
                sample_to_insert_ratio=new_samples / max(new_inserts, 1))


def device_counts(replay: Any, experience: Any) -> Optional[Tuple[int, int]]:
  """Items inserted and sampled so far, summed over replicas; None if not a device replay
  (or before its state exists). Reads two scalars per replica from the devices."""
  counts = getattr(replay, "counts", None)
  if counts is None or experience is None:
    return None
  inserts, samples = (_local_sum(x) for x in counts(experience))
  return int(inserts), int(samples)


def _local_sum(x: Any) -> int:
  """The sum of this process's part of an array that may span processes."""
  parts = [s.data for s in x.addressable_shards] if hasattr(x, "addressable_shards") else [x]
  return sum(int(np.sum(np.asarray(p), dtype=np.int64)) for p in parts)


def plot_learning_curve(records: List[Dict[str, Any]], path: str, title: str = "",
                        runs: Optional[Any] = None) -> str:
  """Mean episode return (and `eval_return`) against env steps over steps/s; with many
  runs (`runs`), every run thin and each group's mean with its spread over seeds."""
  import matplotlib  # Lazy: only runs that write a plot pay for the import.
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  # Population-based training: a panel per hyperparameter, each member's schedule.
  keys = list(runs.swept) if runs and any("parent" in r for r in records) else []
  fig, axes = plt.subplots(2 + len(keys), 1, figsize=(7, 6 + 2 * len(keys)), sharex=True,
                           gridspec_kw=dict(height_ratios=[3, 1] + [2] * len(keys)),
                           layout="constrained" if keys else None)
  ax_ret, ax_sps = axes[0], axes[1]
  if keys:
    _plot_population(fig, axes[2:], records, keys)
  if runs:
    _plot_runs(ax_ret, records, runs)
    # Steps/s of all runs together, one point per call.
    records = [dict(r, sps=r["sps"] * runs.num_runs) for r in records
               if r["run"] == 0 and "sps" in r]
  points = [(r["env_steps"], r["episode_return"]) for r in records
            if r.get("episode_return") is not None]
  if points and not runs:
    ax_ret.plot(*zip(*points), marker=".", lw=1.2, label="training (acting policy)")
  evaluated = [(r["env_steps"], r["eval_return"]) for r in records
               if r.get("eval_return") is not None]
  if evaluated and not runs:
    ax_ret.plot(*zip(*evaluated), marker="o", lw=1.2, color="tab:orange",
                label="evaluation (eval_return)")
    ax_ret.legend(loc="best")
  ax_ret.set_ylabel("mean episode return")
  ax_ret.set_title(title or "learning curve")
  ax_ret.grid(alpha=0.3)
  sps = [(r["env_steps"], r["sps"]) for r in records
         if "sps" in r and not r.get("includes_compilation")]
  if sps:
    ax_sps.plot(*zip(*sps), color="tab:gray", lw=1.0)
  ax_sps.set_ylabel("env steps/s")
  axes[-1].set_xlabel("env steps")
  ax_sps.grid(alpha=0.3)
  if not keys:  # (the population's colour bar takes the constrained layout)
    fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def _plot_runs(ax: Any, records: List[Dict[str, Any]], runs: Any) -> None:
  """Each run a thin line; each group (all runs, or one per swept value) its mean, bold,
  over a band from its runs' min to max."""
  lines, bands = runs_lib.curves(records, runs)
  for xs, ys in lines:
    ax.plot(xs, ys, lw=0.5, alpha=0.35, color="tab:gray")
  for i, (label, xs, mean, low, high) in enumerate(bands):
    color = f"C{i % 10}"
    ax.fill_between(xs, low, high, color=color, alpha=0.2)
    ax.plot(xs, mean, lw=2.0, color=color, label=f"{label} (mean, band: min-max)")
  if bands:
    ax.legend(loc="best", fontsize="small")


def _plot_population(fig: Any, axes: Any, records: List[Dict[str, Any]],
                     keys: List[str]) -> None:
  """Each PBT member's value of each key over env steps, coloured by its final return:
  where the population's values went, and which ended best."""
  from matplotlib import cm, colors  # pylint: disable=import-outside-toplevel
  members = runs_lib.by_run(records)
  finals = {m: next((r["episode_return"] for r in reversed(kept)
                     if r.get("episode_return") is not None), None)
            for m, kept in members.items()}
  known = [f for f in finals.values() if f is not None] or [0.0]
  norm = colors.Normalize(min(known), max(known) if max(known) > min(known) else
                          min(known) + 1.0)
  for ax, key in zip(axes, keys):
    for member, kept in members.items():
      points = [(r["env_steps"], r[key]) for r in kept if r.get(key) is not None]
      final = finals[member]
      color = cm.viridis(norm(final)) if final is not None else "tab:gray"
      if points:
        ax.step(*zip(*points), where="post", lw=1.0, color=color, alpha=0.8)
    values = [r[key] for r in records if r.get(key) is not None]
    if values and min(values) > 0 and max(values) / min(values) > 10:
      ax.set_yscale("log")
    ax.set_ylabel(key.rsplit(".", 1)[-1])
    ax.grid(alpha=0.3)
  fig.colorbar(cm.ScalarMappable(norm=norm, cmap="viridis"), ax=list(axes),
               label="member's final return")


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
