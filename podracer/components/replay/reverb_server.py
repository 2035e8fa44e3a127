"""A standalone Reverb server holding one prioritized replay table.

Run it before the actors and learners that connect to it (`replay.address=HOST:PORT`):

  python -m podracer.components.replay.reverb_server --port=8000 --max_size=1000000
      --samples_per_insert=4 --min_size=1000 --batch_size=64 --checkpoint_dir=/tmp/ckpt

It prints one line with its address and serves until Ctrl-C (or SIGTERM). The table is
built by `make_table`, which the `reverb` replay component also uses for its embedded
server, so the two are configured alike. Reverb is imported lazily: this module imports
without it (it only exists in the reverb install lane).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from typing import Any, Optional

from podracer.components.replay.table import check_table_args, default_error_buffer

REVERB_LANE_HINT = (
    "Reverb is only installed in the reverb lane (dm-reverb 0.14 needs Python 3.11 and "
    "TensorFlow 2.15): `pip install -c requirements/reverb.txt -e \".[reverb]\"` on "
    "Python 3.11, or `bash scripts/setup_env.sh reverb` and .venv-reverb/bin/python.")


def import_reverb():
  """The `reverb` module, or an ImportError that says which install lane has it."""
  try:
    import reverb  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError(f"The Reverb replay needs `import reverb`, which failed here ({e}). "
                      f"{REVERB_LANE_HINT}") from e
  return reverb


def make_table(*, name: str = "replay", max_size: int, min_size: int = 1,
               samples_per_insert: Optional[float] = None,
               error_buffer: Optional[float] = None, priority_exponent: float = 0.9,
               batch_size: int = 1) -> Any:
  """A `reverb.Table`: prioritized sampling, FIFO removal and a rate limiter.

  With `samples_per_insert`, SampleToInsertRatio keeps the samples within
  `error_buffer` (default `default_error_buffer(samples_per_insert, batch_size)`) of
  samples_per_insert * (inserts - min_size), blocking whichever side runs ahead; without
  it, MinSize only holds samples back until `min_size` items are in.
  """
  check_table_args(max_size=max_size, min_size=min_size,
                   samples_per_insert=samples_per_insert, error_buffer=error_buffer,
                   priority_exponent=priority_exponent)
  reverb = import_reverb()
  if samples_per_insert is None:
    limiter = reverb.rate_limiters.MinSize(min_size)
  else:
    if error_buffer is None:
      error_buffer = default_error_buffer(samples_per_insert, batch_size)
    limiter = reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=float(samples_per_insert), min_size_to_sample=min_size,
        error_buffer=float(error_buffer))
  return reverb.Table(name=name, sampler=reverb.selectors.Prioritized(priority_exponent),
                      remover=reverb.selectors.Fifo(), max_size=max_size,
                      rate_limiter=limiter)


def make_server(table: Any, *, port: Optional[int] = None,
                checkpoint_dir: Optional[str] = None) -> Any:
  """A running `reverb.Server` for `table` on `port` (None: a free one).

  With `checkpoint_dir`, checkpoints go there and the server starts from the latest one
  found there, if any (Reverb restores it when the server is built).
  """
  reverb = import_reverb()
  checkpointer = None
  if checkpoint_dir is not None:
    os.makedirs(checkpoint_dir, exist_ok=True)
    checkpointer = reverb.checkpointers.DefaultCheckpointer(path=checkpoint_dir)
  return reverb.Server(tables=[table], port=port, checkpointer=checkpointer)


def _define_flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  flags.DEFINE_integer("port", 8000, "Port to serve on.")
  flags.DEFINE_string("table", "replay", "Name of the replay table.")
  flags.DEFINE_integer("max_size", 1_000_000, "Items the table holds; the oldest go first.")
  flags.DEFINE_integer("min_size", 1, "Items the table must hold before sampling.")
  flags.DEFINE_float("samples_per_insert", None,
                     "Target samples per inserted item (SampleToInsertRatio); unset: "
                     "only min_size limits sampling.")
  flags.DEFINE_float("error_buffer", None,
                     "How far samples may stray from the target; default "
                     "max(1, samples_per_insert) * batch_size.")
  flags.DEFINE_integer("batch_size", 64,
                       "The learners' batch size; only sizes the default error_buffer.")
  flags.DEFINE_float("priority_exponent", 0.9, "Prioritized sampling's alpha.")
  flags.DEFINE_string("checkpoint_dir", None,
                      "Where checkpoints go; the server starts from the latest one there.")
  return flags.FLAGS


def main(argv, flag_values) -> None:
  del argv
  f = flag_values
  try:
    table = make_table(name=f.table, max_size=f.max_size, min_size=f.min_size,
                       samples_per_insert=f.samples_per_insert,
                       error_buffer=f.error_buffer,
                       priority_exponent=f.priority_exponent, batch_size=f.batch_size)
  except ValueError as e:
    sys.exit(f"reverb_server: {e}")  # One line, no traceback; exit status 1.
  server = make_server(table, port=f.port, checkpoint_dir=f.checkpoint_dir)
  stopping = threading.Event()
  # SIGTERM stops as cleanly as Ctrl-C does; Ctrl-C works also in a server started with
  # SIGINT ignored (a background job of a script).
  signal.signal(signal.SIGTERM, lambda *_: stopping.set())
  signal.signal(signal.SIGINT, signal.default_int_handler)
  print(f"Reverb server on localhost:{server.port} (from other hosts: "
        f"{socket.gethostname()}:{server.port}), table '{f.table}'; Ctrl-C stops it.",
        flush=True)
  try:
    # A timed wait, unlike server.wait(), lets Python see Ctrl-C.
    while not stopping.wait(0.5):
      pass
  except KeyboardInterrupt:
    pass
  finally:
    server.stop()
  print("Reverb server stopped.", flush=True)


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  FLAGS = _define_flags()
  app.run(lambda argv: main(argv, FLAGS))
