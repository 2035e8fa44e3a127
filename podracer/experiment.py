"""A built run (`Experiment`): `train()` wraps the runtime's training in what every run
has (the metrics logger and its sinks, checkpoints, evaluation, the non-finite watch, a
video at the end) and returns a summary of the metrics. `podracer.builder.build` makes
one from a config.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional, TextIO, Tuple

import jax

from podracer import deprecation, distributed, registry
from podracer.components import loggers as loggers_lib
from podracer.config import population as population_config
from podracer.config.population import ManyRuns
from podracer.config.runs import Runs
from podracer.errors import ConfigError, DiskError
from podracer.lifecycle import checkpoint, evaluation, guards, video
from podracer.logs.base import Video
from podracer.logs.metrics import DEFAULT_LOGGERS, LOG_KEYS, MetricsLogger
from podracer.runtime import Plan, Runtime


class Experiment:
  """A built run: `run()` trains and returns a summary of the metrics."""

  def __init__(self, config: Any, runtime: Runtime, agent: Any, plan: Plan,
               runs: Optional[Runs] = None, many: Optional[ManyRuns] = None):
    self.config, self.runtime, self.agent, self.plan = config, runtime, agent, plan
    if many is None and runs:
      many = ManyRuns(runs, None, None)
    self.many = many  # What many runs of one program ask (builder._build_runs), or None.
    self.runs = many.runs if many else None
    # Set by `train`: what a launcher reports from when a signal stops it (None before).
    self.logger: Optional[MetricsLogger] = None
    self.checkpointer: Optional[checkpoint.Checkpointer] = None

  def run(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
    """Deprecated (0.17.0): `train`."""
    deprecation.warn_once("Experiment.run", deprecation.renamed_message(
        "Experiment.run", "Experiment.train", "0.17.0"))
    return self.train(*args, **kwargs)

  def train(self, workdir: Optional[str] = None, stream: Optional[TextIO] = sys.stdout,
            print_interval: float = 1.0, checkpoints_in: Optional[str] = None
            ) -> Dict[str, Any]:
    """Trains, writing records into `workdir` (none: printed only) and checkpoints into
    `checkpoints_in` (default: `workdir`; processes other than 0 of a run over several
    write no records but their part of every checkpoint)."""
    self.checkpointer = checkpointer = checkpoint.for_run(self.config, self.runtime,
                                                          checkpoints_in or workdir)
    resumed = checkpointer.num_records() if checkpointer else None
    # Kept so that a launcher can still report a run that a signal stopped.
    taking_part = dict(num_processes=distributed.process_count(),
                       num_devices=distributed.devices_taking_part(self.runtime.topology))
    try:
      self.logger = logger = MetricsLogger(
          workdir, stream=stream, print_interval=print_interval,
          total_env_steps=self.plan.total_env_steps,
          stop_at_return=self.config.get("stop_at_return"), resume_records=resumed,
          context=taking_part, rates_per_env_step=self.agent.rates_per_env_step,
          runs=self.runs, loggers=_loggers(self.config, workdir, self.runs),
          **log_options(self.config))
    except BaseException:  # A logger that cannot start (a missing package): nothing ran.
      if checkpointer:
        checkpointer.close()
      raise
    rounded = self._rounded_budget()
    if rounded and stream:
      stream.write(rounded + "\n")
    if self.runs and stream:
      stream.write(population_config.describe_many(self.many))
    watched = guards.NonFiniteWatch(logger, self.config.get("nan_policy", "stop"))
    try:
      final = self.runtime.train(watched, checkpointer=checkpointer,
                                 evaluation=evaluation.for_run(self.config, self.runtime))
      if self.config.get("eval_video") and workdir and distributed.process_index() == 0:
        self._record_video(final, workdir, logger, stream)
    except DiskError:
      logger.disk_failed = True  # The disk is full or failing: write nothing more.
      raise
    finally:
      logger.close(title=_title(self.config, self.runs))
      if checkpointer:
        checkpointer.close()
    summary = logger.summary()
    if rounded:
      summary.update(requested_env_steps=self.config.total_env_steps,
                     planned_env_steps=self.plan.total_env_steps)
    return dict(summary, records=logger.records)

  def _record_video(self, state: Any, workdir: str, logger: Any,
                    stream: Optional[TextIO]) -> None:
    """`eval_video` episodes of run 0's evaluation policy: WORKDIR/videos/final.mp4 (or
    .gif), and into TensorBoard and W&B where they log."""
    nets = self.runtime.final_nets(state, run=0)
    env = video.watchable_env(self.runtime, "Config key `eval_video`", seed=self.config.seed)
    frames = video.record_run(self.agent, env, nets, jax.random.PRNGKey(self.config.seed),
                              self.config.eval_video)
    path = video.write(os.path.join(workdir, "videos", "final"), frames)
    gif = video.encode(frames, "gif")
    logger.write_video("eval_video", Video(path, gif, frames.shape), self.plan.total_env_steps)
    if stream:
      stream.write(f"wrote {path} ({len(frames)} frames, {self.config.eval_video} "
                   "episodes of the evaluation policy)\n")

  def _rounded_budget(self) -> Optional[str]:
    """What to say when the plan's whole calls round `total_env_steps` up; else None."""
    requested, planned = self.config.total_env_steps, self.plan.total_env_steps
    if planned == requested:
      return None
    return (f"total_env_steps={requested:,} runs {planned:,} env steps: a run takes whole "
            f"calls (Anakin) or learner batches (Sebulba) of {self.plan.env_steps_per_round:,} "
            f"env steps, {self.plan.num_rounds:,} here; fewer environments, a shorter "
            f"rollout or fewer updates per call make the steps finer.")


def log_options(config: Any) -> Dict[str, Any]:
  """The `log` section's keys (metrics.LOG_KEYS) as MetricsLogger arguments; its logger
  names and their sections (`log.<name>`) are checked here and built by `_loggers`."""
  log = config.get("log") or {}
  unknown = sorted(set(log) - set(LOG_KEYS) - set(registry.loggers.names()))
  if unknown:
    raise ConfigError(f"Config key(s) {', '.join(f'`log.{k}`' for k in unknown)} are not "
                      f"read; the `log` section takes: {', '.join(LOG_KEYS)}, and a "
                      f"section of options per logger ({', '.join(registry.loggers)}).")
  names, options = _logger_sections(log)
  for name in set(names) | set(options):  # a section of an unused logger is checked too
    loggers_lib.check_options(name, options.get(name, {}))
  return {k: v for k, v in dict(log).items()
          if k in LOG_KEYS and k != "loggers" and v is not None}


def _logger_sections(log: Any) -> Tuple[Tuple[str, ...], Dict[str, Dict[str, Any]]]:
  """(the logger names `log.loggers` gives, {name: its `log.<name>` options set})."""
  names = log.get("loggers") or DEFAULT_LOGGERS
  if isinstance(names, str):
    names = (names,)
  options = {name: {k: v for k, v in dict(log[name]).items() if v is not None}
             for name in registry.loggers.names() if name in log and log[name]}
  return tuple(names), options


def _loggers(config: Any, workdir: Optional[str], runs: Optional[Runs]):
  """What builds the run's loggers once its workdir and kept records are known."""
  names, options = _logger_sections(config.get("log") or {})
  run = dict(workdir=workdir, num_runs=runs.num_runs if runs else None,
             config=config.to_dict() if hasattr(config, "to_dict") else dict(config))
  return lambda resumed: loggers_lib.build_loggers(names, options, resumed=resumed, **run)


def _title(config: Any, runs: Optional[Runs] = None) -> str:
  seeds = f"seed {config.seed}"
  if runs:  # The swept values are in the legend.
    seeds = f"{runs.num_runs} runs, seeds {min(runs.seeds)}-{max(runs.seeds)}"
  return f"{config.agent.name} on {config.env.name} ({config.runtime.name}, {seeds})"
