"""TensorBoard event files beside `metrics.jsonl`, so `tensorboard --logdir=WORKDIR` works.

Written with tensorboardX, a small writer that needs protobuf but no TensorFlow. Every
numeric value of a metrics record becomes a scalar of the same name, at step `env_steps`.
`read_scalars` reads the files back (tests use it; TensorBoard itself reads them too).

A resumed run (podracer/checkpoint.py) keeps the records up to its checkpoint and drops
the later ones from `metrics.jsonl`; its writer replaces the event files with those kept
records, so the steps it writes again appear once, with the values `metrics.jsonl` has.
"""

from __future__ import annotations

import glob
import math
import os
import struct
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

EVENTS_PREFIX = "events.out.tfevents."
FLUSH_SECONDS = 5  # How stale a live TensorBoard view of a run may be.


class TensorBoardWriter:
  """Writes metrics records as TensorBoard scalars into `logdir`."""

  def __init__(self, logdir: str):
    from tensorboardX import SummaryWriter  # Lazy: only runs with a workdir import it.
    # Names are per second; the suffix keeps a resumed run's file apart from those it
    # replaces, even within one second of them.
    self._writer = SummaryWriter(logdir=logdir, flush_secs=FLUSH_SECONDS,
                                 filename_suffix=f".{os.getpid()}.{time.time_ns()}")

  def write(self, record: Dict[str, Any]) -> None:
    step = int(record["env_steps"])
    for name, value in record.items():
      # Non-finite values (null in metrics.jsonl) are left out: TensorBoard cannot plot
      # them, and tensorboardX prints a warning for each.
      if (name != "env_steps" and isinstance(value, (int, float))
          and not isinstance(value, bool) and math.isfinite(value)):
        self._writer.add_scalar(name, value, global_step=step)

  def flush(self) -> None:
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


def open_writer(logdir: str, stream=sys.stderr,
                resumed: Optional[List[Dict[str, Any]]] = None
                ) -> Optional[TensorBoardWriter]:
  """A writer, or None (saying why once) where tensorboardX is missing. With `resumed`
  (the records a resumed run kept), the event files in `logdir` are replaced by one
  holding those records."""
  earlier = event_files(logdir)
  try:
    writer = TensorBoardWriter(logdir)
  except ImportError as e:  # A venv made before it was a dependency: still run.
    if stream:
      stream.write(f"Not writing TensorBoard event files: {e} (pip install "
                   "tensorboardX, see setup.py).\n")
    return None
  if resumed is not None:
    for record in resumed:
      writer.write(record)
    writer.flush()
    for path in earlier:
      os.remove(path)
  return writer


def event_files(logdir: str) -> List[str]:
  return sorted(glob.glob(os.path.join(logdir, EVENTS_PREFIX + "*")))


def read_scalars(logdir: str) -> Dict[str, List[Tuple[int, float]]]:
  """{tag: [(step, value), ...]} from every event file in `logdir`, in file order."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  scalars: Dict[str, List[Tuple[int, float]]] = {}
  for path in event_files(logdir):
    for data in _records(path):
      event = event_pb2.Event.FromString(data)
      for value in event.summary.value:
        scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
  return scalars


def _records(path: str):
  """The payloads of a TFRecord file: length (8 bytes), its CRC (4), data, data CRC (4)."""
  with open(path, "rb") as f:
    while True:
      header = f.read(12)
      if len(header) < 12:
        return
      (length,) = struct.unpack("<Q", header[:8])
      data = f.read(length)
      f.read(4)
      yield data
