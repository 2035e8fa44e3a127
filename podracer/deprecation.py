"""Renamed and removed public names keep working for two minor versions and 90 days.

The policy (docs/api.md, CHANGELOG.md): a public name deprecated in version X.Y keeps
working, through a shim, until at least X.(Y+2) **and** at least 90 days after X.Y's
release, whichever is later; a shim that says it goes sooner is refused when it is made
(`ValueError`). A shim warns once per process with the new name (a `DeprecationWarning`,
which Python shows in `__main__` and pytest shows in tests), then does what the new name
does; the CHANGELOG's "Deprecated" line says when it goes. Two kinds:

    class Plan(NamedTuple):
      updates_per_round: int
      updates_per_call = renamed_attribute("updates_per_call", "updates_per_round", "0.9.0")

    __getattr__ = renamed_module_names(__name__, {"old_name": ("new_name", "0.9.0")})
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


MIN_MINOR_VERSIONS = 2  # a deprecated name lasts at least this many minor versions
MIN_DAYS = 90             # ... and at least this many days after the deprecating release


def renamed_message(old: str, new: str, since: str, removed_in: str = "") -> str:
  """What a renamed name's shim says: the new name, and until when the old one works."""
  return (f"`{old}` was renamed `{new}` in podracer {since}; it keeps working until "
          f"{removal(since, removed_in)} and for at least {MIN_DAYS} days after {since}'s "
          f"release; use `{new}` (CHANGELOG.md).")


def removal(since: str, removed_in: str = "") -> str:
  """The first version that may remove a name deprecated in `since`: `removed_in` if
  given (ValueError if sooner than the policy allows), else `MIN_MINOR_VERSIONS` later."""
  major, minor = (int(x) for x in since.split(".")[:2])
  earliest = (major, minor + MIN_MINOR_VERSIONS)
  if not removed_in:
    return f"{earliest[0]}.{earliest[1]}.0"
  if tuple(int(x) for x in removed_in.split(".")[:2]) < earliest:
    raise ValueError(
        f"A name deprecated in {since} cannot be removed in {removed_in}: the policy keeps "
        f"it for {MIN_MINOR_VERSIONS} minor versions (until {earliest[0]}.{earliest[1]}.0) "
        f"and {MIN_DAYS} days (podracer/deprecation.py).")
  return removed_in


class renamed_attribute:  # pylint: disable=invalid-name
  """A class attribute `old` that reads (and, where the instance allows, writes) `new`,
  warning once."""

  def __init__(self, old: str, new: str, since: str, removed_in: str = ""):
    self.old, self.new, self.since = old, new, since
    self.removed_in = removal(since, removed_in)  # Checked against the policy.

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
    warn_once(old, renamed_message(old, new, self.since, self.removed_in), stacklevel=4)


def renamed_module_names(module: str, renamed: Dict[str, Tuple[str, str]]
                         ) -> Callable[[str], Any]:
  """A module `__getattr__` that serves each old name of `renamed` (old -> (new, since))
  with the module's new one, warning once."""
  import sys  # pylint: disable=import-outside-toplevel

  def __getattr__(name: str) -> Any:  # pylint: disable=invalid-name
    if name not in renamed:
      raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new, since = renamed[name]
    warn_once(f"{module}.{name}", renamed_message(f"{module}.{name}", f"{module}.{new}", since))
    return getattr(sys.modules[module], new)
  return __getattr__


class MovedModules:
  """A meta path finder that serves each old module path of `moved` (old -> (new,
  since)) with the module at its new path, warning once: `import podracer.configs` and
  `from podracer.configs import experiment` get `podracer.config.presets`, and `python -m
  OLD` runs NEW. Installed by `podracer/__init__.py` for the modules 0.9.0 grouped into
  packages, so old paths cost no file of their own."""

  def __init__(self, moved: Dict[str, Tuple[str, str]]):
    self.moved = dict(moved)

  def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
    del path, target
    if name not in self.moved:
      return None
    import importlib.machinery  # pylint: disable=import-outside-toplevel
    return importlib.machinery.ModuleSpec(name, self)

  def _warn(self, name: str) -> str:
    new, since = self.moved[name]
    warn_once(name, renamed_message(name, new, since), stacklevel=4)  # the importing line
    return new

  def create_module(self, spec: Any) -> Any:
    import importlib  # pylint: disable=import-outside-toplevel
    return importlib.import_module(self._warn(spec.name))

  def exec_module(self, module: Any) -> None:
    """The module at the new path ran already."""

  def get_code(self, name: str) -> Any:
    """For `python -m OLD` (runpy): NEW's code, run as __main__."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    new = self._warn(name)
    return importlib.util.find_spec(new).loader.get_code(new)


def install_moved_modules(moved: Dict[str, Tuple[str, str]]) -> MovedModules:
  """Puts a `MovedModules` finder for `moved` on `sys.meta_path` (once)."""
  import sys  # pylint: disable=import-outside-toplevel
  for finder in sys.meta_path:
    if isinstance(finder, MovedModules):
      finder.moved.update(moved)
      return finder
  finder = MovedModules(moved)
  sys.meta_path.insert(0, finder)
  return finder
