"""metrics.csv: a column per metric, for spreadsheets."""

from __future__ import annotations

import csv
from typing import Any, Dict, List, Optional

import os

from podracer.logs.base import CSV_FILE, Logger


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
