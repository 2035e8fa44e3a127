"""How long JAX spent compiling, and how many programs its persistent cache gave back,
counted from JAX's own monitoring events (`jax.monitoring`): what a record's and the
result line's `compile_s` and `compile_cache_hits` report.

`seconds()` is XLA's compile time (or, for a program the persistent cache holds, the
time to load it: JAX's `backend_compile_duration`), summed over the process since
`install()`; tracing and lowering are not in it (the cache saves neither). JAX-free at
import: JAX is imported when `install` is called.
"""

from __future__ import annotations

import threading

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

_lock = threading.Lock()
_totals = {"seconds": 0.0, "hits": 0}
_installed = [False]


def _on_duration(event: str, duration: float, **_) -> None:
  if event == BACKEND_COMPILE_EVENT:
    with _lock:
      _totals["seconds"] += duration


def _on_event(event: str, **_) -> None:
  if event == CACHE_HIT_EVENT:
    with _lock:
      _totals["hits"] += 1


def install() -> None:
  """Starts counting (once per process; later calls do nothing)."""
  with _lock:
    if _installed[0]:
      return
    _installed[0] = True
  from jax import monitoring  # pylint: disable=import-outside-toplevel
  monitoring.register_event_duration_secs_listener(_on_duration)
  monitoring.register_event_listener(_on_event)


def seconds() -> float:
  """XLA compile seconds in this process since `install` (0.0 before it)."""
  with _lock:
    return _totals["seconds"]


def cache_hits() -> int:
  """Programs loaded from the persistent compilation cache since `install`."""
  with _lock:
    return _totals["hits"]
