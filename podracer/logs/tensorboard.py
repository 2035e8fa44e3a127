"""TensorBoard event files beside `metrics.jsonl`, so `tensorboard --logdir=WORKDIR` works.

Written with tensorboardX, a small writer that needs protobuf but no TensorFlow. Every
numeric value of a metrics record becomes a scalar of the same name, at step `env_steps`.
`read_scalars` reads the files back (tests use it; TensorBoard itself reads them too).

A resumed run (podracer/lifecycle/checkpoint.py) keeps the records up to its checkpoint and drops
the later ones from `metrics.jsonl`; its writer replaces the event files with those kept
records, so the steps it writes again appear once, with the values `metrics.jsonl` has.
"""

from __future__ import annotations

import glob
import math
import os
import struct
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from podracer.logs.base import Logger

EVENTS_PREFIX = "events.out.tfevents."
FLUSH_SECONDS = 5  # How stale a live TensorBoard view of a run may be.
# tensorboardX writes from a thread of its own, through a queue of this many events that
# blocks when full: so large that a dead writer thread cannot block the run before the
# next `write` notices it died.
MAX_QUEUE = 1_000_000
_thread_failures: List[BaseException] = []  # what tensorboardX's writer threads raised


def _catch_writer_thread_failures() -> None:
  """Keeps what tensorboardX's writer thread raises (a full disk) for the run's thread to
  raise at its next write, rather than printing a traceback and dying unnoticed."""
  if getattr(threading.excepthook, "podracer_tensorboard", False):
    return
  previous = threading.excepthook

  def hook(args):
    if args.thread is not None and type(args.thread).__module__.startswith("tensorboardX"):
      _thread_failures.append(args.exc_value)
    else:
      previous(args)
  hook.podracer_tensorboard = True
  threading.excepthook = hook


def _raise_thread_failure() -> None:
  if _thread_failures:
    raise _thread_failures[0]


class TensorBoardWriter:
  """Writes metrics records as TensorBoard scalars into `logdir`."""

  def __init__(self, logdir: str):
    from tensorboardX import SummaryWriter  # Lazy: only runs with a workdir import it.
    # Names are per second; the suffix keeps a resumed run's file apart from those it
    # replaces, even within one second of them.
    _catch_writer_thread_failures()
    _thread_failures.clear()
    self._writer = SummaryWriter(logdir=logdir, flush_secs=FLUSH_SECONDS,
                                 max_queue=MAX_QUEUE,
                                 filename_suffix=f".{os.getpid()}.{time.time_ns()}")

  def write(self, record: Dict[str, Any]) -> None:
    _raise_thread_failure()
    step = int(record["env_steps"])
    for name, value in record.items():
      # Non-finite values (null in metrics.jsonl) are left out: TensorBoard cannot plot
      # them, and tensorboardX prints a warning for each.
      if (name != "env_steps" and isinstance(value, (int, float))
          and not isinstance(value, bool) and math.isfinite(value)):
        self._writer.add_scalar(name, value, global_step=step)

  def write_gif(self, tag: str, video: Any, step: int) -> None:
    """An animated GIF as an image summary: TensorBoard's images dashboard plays it
    (what tensorboardX's add_video writes, without moviepy)."""
    from tensorboardX.proto.summary_pb2 import Summary  # pylint: disable=import-outside-toplevel
    _, height, width, channels = video.shape
    image = Summary.Image(height=height, width=width, colorspace=channels,
                          encoded_image_string=video.gif)
    summary = Summary(value=[Summary.Value(tag=tag, image=image)])
    self._writer.file_writer.add_summary(summary, global_step=step)

  def flush(self) -> None:
    self._writer.flush()
    _raise_thread_failure()

  def close(self) -> None:
    try:
      self._writer.close()
    except Exception:
      # A full disk refused the last flush: mark tensorboardX's files closed, or its
      # exit hook flushes into the same disk again and prints the traceback.
      for file_writer in getattr(self._writer, "all_writers", {}).values():
        event_writer = getattr(file_writer, "event_writer", None)
        if event_writer is not None and hasattr(event_writer, "_closed"):
          event_writer._closed = True  # pylint: disable=protected-access
      raise
    _raise_thread_failure()


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


class PerRunWriter:
  """One writer per run of many (podracer/config/runs.py), each in `logdir/run_R`, so that
  TensorBoard shows the runs side by side; records are routed by their `run`."""

  def __init__(self, writers: List[TensorBoardWriter]):
    self.writers = writers

  def write(self, record: Dict[str, Any]) -> None:
    self.writers[record["run"]].write(record)

  def flush(self) -> None:
    for writer in self.writers:
      writer.flush()

  def close(self) -> None:
    for writer in self.writers:
      writer.close()


def open_run_writers(logdir: str, num_runs: int, stream=sys.stderr,
                     resumed: Optional[List[Dict[str, Any]]] = None
                     ) -> Optional[PerRunWriter]:
  """`open_writer` for each of `num_runs` runs, in `logdir/run_0`, `run_1`, ..."""
  writers = []
  for run in range(num_runs):
    kept = None if resumed is None else [r for r in resumed if r.get("run") == run]
    writer = open_writer(os.path.join(logdir, f"run_{run}"), stream, kept)
    if writer is None:
      return None
    writers.append(writer)
  return PerRunWriter(writers)


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


class TensorBoardLogger(Logger):
  """TensorBoard event files (tensorboardX, no TensorFlow): each numeric value a scalar at
  step `env_steps`; None (NaN) left out; many runs in run_0/, run_1/, ..."""

  what = "TensorBoard event files"

  def __init__(self, workdir: str, num_runs: Optional[int] = None,
               resumed: Optional[List[Dict[str, Any]]] = None):
    self.where = workdir
    self._writer = (open_run_writers(workdir, num_runs, resumed=resumed)
                    if num_runs else open_writer(workdir, resumed=resumed))

  def write(self, record: Dict[str, Any]) -> None:
    if self._writer is not None:
      self._writer.write(record)

  def write_video(self, tag: str, video: Any, step: int) -> None:
    """Into run 0's events (of many runs, run_0/): run 0 is what was recorded."""
    if self._writer is not None:
      getattr(self._writer, "writers", [self._writer])[0].write_gif(tag, video, step)

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
