"""Renamed and removed public names keep working for one minor version (docs/api.md).

A shim warns once per process with the new name (a `DeprecationWarning`, which Python
shows in `__main__` and pytest shows in tests), then does what the new name does; the
CHANGELOG's "Deprecated" line says when it goes. Two kinds:

    class Plan(NamedTuple):
      updates_per_round: int
      updates_per_call = renamed_attribute("updates_per_call", "updates_per_round", "0.4.0",
                                           removed_in="0.7.0")  # (0.6.0 had this one)

    __getattr__ = renamed_module_names(__name__, {"old_name": ("new_name", "0.6.0")})
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable, Dict, Set, Tuple

_warned: Set[str] = set()
_lock = threading.Lock()


def warn_once(key: str, message: str, stacklevel: int = 3) -> None:
  """`DeprecationWarning(message)` the first time `key` is seen in this process."""
  with _lock:
    if key in _warned:
      return
    _warned.add(key)
  warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def _message(old: str, new: str, since: str, removed_in: str = "") -> str:
  return (f"`{old}` was renamed `{new}` in podracer {since} and will be removed in "
          f"{removed_in or _next_minor(since)}; use `{new}` (CHANGELOG.md).")


def _next_minor(version: str) -> str:
  major, minor = version.split(".")[:2]
  return f"{major}.{int(minor) + 1}.0"


class renamed_attribute:  # pylint: disable=invalid-name
  """A class attribute `old` that reads (and, where the instance allows, writes) `new`,
  warning once."""

  def __init__(self, old: str, new: str, since: str, removed_in: str = ""):
    self.old, self.new, self.since, self.removed_in = old, new, since, removed_in

  def __get__(self, instance: Any, owner: type) -> Any:
    if instance is None:
      return self
    self._warn(owner)
    return getattr(instance, self.new)

  def __set__(self, instance: Any, value: Any) -> None:
    self._warn(type(instance))
    setattr(instance, self.new, value)

  def _warn(self, owner: type) -> None:
    # `owner` from the access: a NamedTuple's body does not call __set_name__ on 3.11.
    old, new = f"{owner.__name__}.{self.old}", f"{owner.__name__}.{self.new}"
    warn_once(old, _message(old, new, self.since, self.removed_in), stacklevel=4)


def renamed_module_names(module: str, renamed: Dict[str, Tuple[str, str]]
                         ) -> Callable[[str], Any]:
  """A module `__getattr__` that serves each old name of `renamed` (old -> (new, since))
  with the module's new one, warning once."""
  import sys  # pylint: disable=import-outside-toplevel

  def __getattr__(name: str) -> Any:  # pylint: disable=invalid-name
    if name not in renamed:
      raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new, since = renamed[name]
    warn_once(f"{module}.{name}", _message(f"{module}.{name}", f"{module}.{new}", since))
    return getattr(sys.modules[module], new)
  return __getattr__
