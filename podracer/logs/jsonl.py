"""metrics.jsonl: the run's records, one strict-JSON object a line."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable, Dict, List, Optional

from podracer.logs.base import METRICS_FILE, Logger


class JsonlLogger(Logger):
  """metrics.jsonl: one strict-JSON object a line (null for NaN), what a resumed run
  rewinds and `podracer.report` reads."""

  what = "metrics"

  def __init__(self, workdir: str, resumed: Optional[List[Dict[str, Any]]] = None):
    self.where = os.path.join(workdir, METRICS_FILE)
    # A resumed run's kept records are already in the file (MetricsLogger cut it back).
    self._file = open(self.where, "w" if resumed is None else "a", encoding="utf-8")

  def write(self, record: Dict[str, Any]) -> None:
    self._file.write(json.dumps(record, allow_nan=False) + "\n")
    self._file.flush()

  def undo_partial(self) -> Callable[[], None]:
    """Cuts the file back to its size before this record: every record flushed is
    whole, so metrics.jsonl stays readable after a full disk."""
    size = os.path.getsize(self.where)

    def cut():
      with contextlib.suppress(Exception):
        self._file.close()
      with contextlib.suppress(OSError):
        os.truncate(self.where, size)
    return cut

  def close(self) -> None:
    self._file.close()
