"""Threads that share one stop flag, and queue waits that notice it.

Every blocking wait in Sebulba polls the stop flag every `POLL` seconds, so a failure in
any thread, Ctrl-C, or the end of the run stops all of them within about a second.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from typing import Any, Callable, List

POLL = 0.1  # Seconds between checks of the stop flag in every blocking wait.
# After a failure, how long the others are waited for: a thread inside a compile (the
# learner's first update: seconds on a slow CPU) cannot notice the stop flag, and the
# run's cause is said now, not after it (the threads are daemons: the failed run's exit
# ends them).
FAILED_JOIN_S = 2.0


class ThreadGroup:
  """Threads that share one stop flag: any failure sets it, and `shutdown` reports it."""

  def __init__(self):
    self.stop = threading.Event()
    self.failures: List[str] = []
    # Errors the launcher reports in one paragraph, not as a crash: a ConfigError met
    # only when traced, a DiskError (the workdir's disk is full or failing), an
    # environment's bad step (EnvironmentStepError).
    self.user_errors: List[BaseException] = []
    self.threads: List[threading.Thread] = []

  def spawn(self, name: str, fn: Callable[..., Any], *args: Any) -> threading.Thread:
    def body():
      try:
        fn(*args)
      except BaseException as e:  # noqa: B902 -- any failure must stop the whole run.
        from podracer.errors import (  # pylint: disable=import-outside-toplevel
            ConfigError, DiskError, EnvironmentStepError)
        if isinstance(e, (ConfigError, DiskError, EnvironmentStepError)):
          self.user_errors.append(e)
        self.failures.append(f"{name} failed:\n{traceback.format_exc()}")
        self.stop.set()

    thread = threading.Thread(target=body, name=name, daemon=True)
    self.threads.append(thread)
    thread.start()
    return thread

  def shutdown(self, timeout: float = 10.0) -> None:
    """Stops and joins every thread; raises ThreadFailure with the failures' tracebacks."""
    from podracer.errors import ThreadFailure  # pylint: disable=import-outside-toplevel
    self.stop.set()
    if self.failures:
      timeout = min(timeout, FAILED_JOIN_S)
    deadline = time.monotonic() + timeout
    for t in self.threads:
      t.join(timeout=max(0.0, deadline - time.monotonic()))
    if self.user_errors:  # Bad input or a full disk, not a crash: said in a paragraph.
      raise self.user_errors[0]
    if self.failures:
      raise ThreadFailure("\n".join(self.failures))
    alive = [t.name for t in self.threads if t.is_alive()]
    if alive:
      raise RuntimeError(f"Sebulba threads did not stop within {timeout:.0f} s: "
                         f"{', '.join(alive)}")


def put(q: "queue.Queue", item: Any, stop: threading.Event) -> bool:
  """Puts `item`, waiting for room; False if the run stopped first."""
  while not stop.is_set():
    try:
      q.put(item, timeout=POLL)
      return True
    except queue.Full:
      continue
  return False


def get(q: "queue.Queue", stop: threading.Event) -> Any:
  """The next item, waiting for one; None if the run stopped first."""
  while not stop.is_set():
    try:
      return q.get(timeout=POLL)
    except queue.Empty:
      continue
  return None


def drain(q: "queue.Queue") -> List[Any]:
  """Everything in the queue now, without waiting."""
  out = []
  while True:
    try:
      out.append(q.get_nowait())
    except queue.Empty:
      return out


def injected_failure(where: str) -> RuntimeError:
  # The wall-clock time lets a test in another process measure how fast the run stops.
  return RuntimeError(f"injected {where} failure (runtime.inject_failure={where}) at unix "
                      f"time {time.time():.3f}")
