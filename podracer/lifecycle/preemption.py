"""SIGTERM, what `timeout`, SLURM and Kubernetes send before they kill a job, handled like
Ctrl-C: the run stops every thread and environment, writes its metrics, plot and `result:`
line, and the launcher exits with status 143 (128 + SIGTERM), well inside the usual 30 s
grace period.

The launcher calls `handle_sigterm()` once. The first SIGTERM then raises `Terminated` in
the main thread; since it is a `KeyboardInterrupt`, every cleanup path the runtimes have
for Ctrl-C runs for it unchanged. Later SIGTERMs are ignored so that they cannot cut that
cleanup short (a scheduler follows up with SIGKILL anyway). Inside `deferred()` blocks the
exception waits for the block to end: Anakin steps its donated state in one, so that the
state a final checkpoint saves is whole.
"""

from __future__ import annotations

import contextlib
import signal

_deferral = dict(depth=0, pending=False, coordinated=False)

EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT


class Terminated(KeyboardInterrupt):
  """Raised in the main thread by the first SIGTERM."""

  signal_name = "SIGTERM"


def handle_sigint() -> None:
  """From now on SIGINT (Ctrl-C, `kill -INT`) raises KeyboardInterrupt in the main thread,
  also in a launcher that started with SIGINT ignored: a background job of a
  non-interactive shell (`cmd &` in a script, as CI runners start jobs) inherits SIG_IGN,
  Python then keeps ignoring it, and the run trained on through every `kill -INT`."""
  signal.signal(signal.SIGINT, signal.default_int_handler)


def handle_sigterm() -> None:
  """From now on the first SIGTERM raises `Terminated` in the main thread (or, once
  `coordinate()` was called, only marks the stop as requested)."""

  def on_sigterm(signum, frame):
    del signum, frame
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if _deferral["depth"] or _deferral["coordinated"]:
      _deferral["pending"] = True
    else:
      raise Terminated()

  signal.signal(signal.SIGTERM, on_sigterm)


@contextlib.contextmanager
def deferred():
  """A SIGTERM during the block raises `Terminated` when the block ends (main thread)."""
  _deferral["depth"] += 1
  try:
    yield
  finally:
    _deferral["depth"] -= 1
  if _deferral["pending"] and not _deferral["depth"] and not _deferral["coordinated"]:
    _deferral["pending"] = False
    raise Terminated()


def coordinate() -> None:
  """A run over several processes that checkpoints: from now on a SIGTERM only marks the
  stop as requested (`requested()`), and the processes agree on the step at which all
  save and stop (podracer/lifecycle/checkpoint.py's `MultiProcessCheckpointer`), so that none
  stops in a collective the others are still in."""
  _deferral["coordinated"] = True


def requested() -> bool:
  """Whether a SIGTERM asked this process to stop (in a coordinated run)."""
  return bool(_deferral["pending"])


def raise_if_requested() -> None:
  """`Terminated` if a SIGTERM asked to stop (the end of a coordinated stop)."""
  if _deferral["pending"]:
    _deferral["pending"] = False
    raise Terminated()


def stopped_by(interrupt: KeyboardInterrupt) -> str:
  """'SIGTERM' or 'SIGINT': which signal a KeyboardInterrupt stands for."""
  return getattr(interrupt, "signal_name", "SIGINT")


def exit_status(interrupt: KeyboardInterrupt) -> int:
  return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPTED

