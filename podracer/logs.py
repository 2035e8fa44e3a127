"""The loggers that write a run's records into its workdir, and what every logger is.

`Logger` is the interface (`write(record)`, `close()`); `metrics.MetricsLogger` drives
the ones a run names in `log.loggers` (podracer/components/loggers registers them by
name): `JsonlLogger` (metrics.jsonl), `TensorBoardLogger` (event files, run_N/ per run of
many) and `CsvLogger` (metrics.csv, a column per metric); W&B's is podracer/wandb_log.py.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from typing import Any, Callable, Dict, List, Optional

from podracer import tensorboard

METRICS_FILE = "metrics.jsonl"
CSV_FILE = "metrics.csv"


class Logger:
  """Records in, somewhere out (see the module's docstring)."""

  what = "records"  # what the disk-failure paragraph calls this logger's files
  where = "."       # their path (a file or the directory)

  def write(self, record: Dict[str, Any]) -> None:
    raise NotImplementedError

  def close(self) -> None:
    """Flushes and closes; called once, at the end of the run."""

  def undo_partial(self) -> Optional[Callable[[], None]]:
    """What removes a write the disk took only part of (called before each write), or
    None: metrics.jsonl is cut back to its last whole record."""
    return None


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


class TensorBoardLogger(Logger):
  """TensorBoard event files (tensorboardX, no TensorFlow): each numeric value a scalar at
  step `env_steps`; None (NaN) left out; many runs in run_0/, run_1/, ..."""

  what = "TensorBoard event files"

  def __init__(self, workdir: str, num_runs: Optional[int] = None,
               resumed: Optional[List[Dict[str, Any]]] = None):
    self.where = workdir
    self._writer = (tensorboard.open_run_writers(workdir, num_runs, resumed=resumed)
                    if num_runs else tensorboard.open_writer(workdir, resumed=resumed))

  def write(self, record: Dict[str, Any]) -> None:
    if self._writer is not None:
      self._writer.write(record)

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()


class CsvLogger(Logger):
  """metrics.csv for spreadsheets: a header of every metric seen so far (a record with a
  new one rewrites the file with the wider header), a row per record, an empty cell
  for a metric a record lacks or for NaN."""

  what = "metrics.csv"

  def __init__(self, workdir: str, resumed: Optional[List[Dict[str, Any]]] = None):
    self.where = os.path.join(workdir, CSV_FILE)
    self._rows: List[Dict[str, Any]] = []
    self._columns: List[str] = []
    self._file = None
    for record in resumed or ():
      self._add(record)
    self._rewrite()

  def write(self, record: Dict[str, Any]) -> None:
    if self._add(record):
      self._rewrite()
    else:
      csv.DictWriter(self._file, self._columns).writerow(record)
      self._file.flush()

  def _add(self, record: Dict[str, Any]) -> bool:
    """Keeps the row; whether it brought a column the header lacks."""
    self._rows.append(record)
    new = [k for k in record if k not in self._columns]
    self._columns.extend(new)
    return bool(new)

  def _rewrite(self) -> None:
    if self._file is not None:
      self._file.close()
    self._file = open(self.where, "w", newline="", encoding="utf-8")
    writer = csv.DictWriter(self._file, self._columns)
    writer.writeheader()
    writer.writerows(self._rows)
    self._file.flush()

  def close(self) -> None:
    if self._file is not None:
      self._file.close()


def read_csv(path: str) -> List[Dict[str, Any]]:
  """metrics.csv's rows with numbers as numbers and empty cells left out (tests read it)."""
  rows = []
  with open(path, newline="", encoding="utf-8") as f:
    for row in csv.DictReader(f):
      rows.append({k: _number(v) for k, v in row.items() if v != ""})
  return rows


def _number(text: str) -> Any:
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      continue
  return {"True": True, "False": False}.get(text, text)


def default_loggers(workdir: str, num_runs: Optional[int] = None,
                    resumed: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Logger]:
  """metrics.jsonl and TensorBoard event files: where records go when a run names no
  loggers (`log.loggers`' default)."""
  return dict(jsonl=JsonlLogger(workdir, resumed),
              tensorboard=TensorBoardLogger(workdir, num_runs, resumed))
