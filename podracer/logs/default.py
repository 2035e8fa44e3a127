"""The loggers a run gets when it names none (`log.loggers`' default), and the metrics
its progress line shows by default."""

from __future__ import annotations

from typing import Dict, List, Optional, Any

from podracer.logs.base import Logger
from podracer.logs.jsonl import JsonlLogger
from podracer.logs.tensorboard import TensorBoardLogger

# Where records go unless `log.loggers` says otherwise (podracer/components/loggers).
DEFAULT_LOGGERS = ("jsonl", "tensorboard")
# The learner metrics the progress line shows by default, when a record has them. A
# config's `log.progress_metrics` picks others: any metric a loss returns, by name.
PROGRESS_METRICS = ("loss", "policy_loss", "value_loss", "entropy", "policy_lag")


def default_loggers(workdir: str, num_runs: Optional[int] = None,
                    resumed: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Logger]:
  """metrics.jsonl and TensorBoard event files: where records go when a run names no
  loggers (`log.loggers`' default)."""
  return dict(jsonl=JsonlLogger(workdir, resumed),
              tensorboard=TensorBoardLogger(workdir, num_runs, resumed))
