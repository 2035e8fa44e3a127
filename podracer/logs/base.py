"""What every logger is: `Logger` (`write(record)`, `close()`), and the files of a run's
records. `metrics.MetricsLogger` drives the loggers a run names in `log.loggers`
(podracer/components/loggers registers them by name); one module a sink: jsonl.py,
csv.py, tensorboard.py, wandb.py; default.py names the set a run gets by default.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

METRICS_FILE = "metrics.jsonl"


class Video(NamedTuple):
  """A recorded video: its file, the same frames as GIF bytes, and their [T, H, W, C]."""
  path: str
  gif: bytes
  shape: Tuple[int, int, int, int]


CSV_FILE = "metrics.csv"


class Logger:
  """Records in, somewhere out (see the module's docstring)."""

  what = "records"  # what the disk-failure paragraph calls this logger's files
  where = "."       # their path (a file or the directory)

  def write(self, record: Dict[str, Any]) -> None:
    raise NotImplementedError

  def close(self) -> None:
    """Flushes and closes; called once, at the end of the run."""

  def write_video(self, tag: str, video: "Video", step: int) -> None:
    """A video of the agent playing (`eval_video`), where the sink shows videos; the
    default shows none."""

  def undo_partial(self) -> Optional[Callable[[], None]]:
    """What removes a write the disk took only part of (called before each write), or
    None: metrics.jsonl is cut back to its last whole record."""
    return None
