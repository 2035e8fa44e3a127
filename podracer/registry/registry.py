"""A registry maps component names to factories, one registry per kind of component.

Components are looked up by the name given in a config (`config.env.name`, ...). A miss
raises `UnknownComponentError`, which says what kind was asked for, what exists and what
is closest, so a typo in a config costs one read of the error message.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, TypeVar

from podracer.registry import imports
from podracer.errors import ConfigError

T = TypeVar("T", bound=Callable[..., Any])


class UnknownComponentError(ConfigError, KeyError):
  """A config named a component that no registry entry has."""

  def __init__(self, kind: str, name: str, known: List[str], key: Optional[str] = None):
    self.kind, self.name, self.known = kind, name, known
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
    where = f" (config key `{key}`)" if key else ""
    msg = f"Unknown {kind} '{name}'{where}."
    if close:
      msg += " Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    msg += f" Registered {plural(kind)}: " + (", ".join(known) if known else "none") + "."
    super().__init__(msg + " " + (_found_unregistered(kind, name) or _import_hint(kind)))

  def __str__(self) -> str:  # KeyError would otherwise quote the message.
    return self.args[0]


def plural(kind: str) -> str:
  """A registry kind's plural, as messages say it: environments, losses, replays."""
  if kind.endswith(("s", "x", "sh", "ch")):
    return kind + "es"
  if kind.endswith("y") and kind[-2:-1] not in "aeiou":
    return kind[:-1] + "ies"
  return kind + "s"


def with_article(kind: str) -> str:
  """'a loss', 'an environment', 'an optimizer'."""
  return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def _import_hint(kind: str) -> str:
  """Where a component of one's own comes from: the module that registers it must be
  imported (podracer/registry/imports.py), and which ones were."""
  done = imports.imported()
  loaded = (f"The modules imported with --import or the config's `imports` are: "
            f"{', '.join(done)}." if done else
            "No module was imported with --import or the config's `imports`.")
  return (f"{with_article(kind).capitalize()} of your own is registered when the module "
          f"that registers it is imported: pass --import=MODULE (a module on the path, a "
          f".py file or a package directory) to podracer.launch, or list it in the config "
          f"file (c.imports = (\"MODULE\",)). {loaded}")


def _found_unregistered(kind: str, name: str) -> Optional[str]:
  """Where `name` is, if an imported module of the user's has it but it is not
  registered: a function or class of that name whose `@register` was forgotten, or a
  module under an imported package that registers it but was never imported (found by
  a text search for `register("name")`). None if neither."""
  for module_name in imports.imported_modules():
    for loaded, module in sorted(sys.modules.items()):
      if module is None or not (loaded == module_name or loaded.startswith(module_name + ".")):
        continue
      found = _defined_as(module, loaded, name)
      if found:
        return (f"Module '{loaded}' defines {found} but does not register it: decorate it "
                f"with `@registry.{_registry_attribute(kind)}.register(\"{name}\")` (or "
                "call that on it) so that a config can name it.")
    package = getattr(sys.modules.get(module_name), "__path__", None)
    for folder in package or ():
      where = _registering_file(folder, name)
      if where:
        sub = module_name + "." + os.path.relpath(where, folder)[:-3].replace(os.sep, ".")
        sub = sub[:-len(".__init__")] if sub.endswith(".__init__") else sub
        if sub in sys.modules:
          continue
        return (f"Module '{sub}' ({where}) registers '{name}', but nothing imported it: "
                f"the imported package '{module_name}' does not import it. Pass "
                f"--import={sub}, or import it in {module_name}'s __init__.py.")
  return None


def _folded(name: str) -> str:
  """A name without case or underscores: `PMUnregistered` and `pm_unregistered` agree."""
  return name.replace("_", "").lower()


def _defined_as(module: Any, loaded: str, name: str) -> Optional[str]:
  """How `module` defines what a config names `name` without registering it: a function
  or class of that name, or a class whose CamelCase name is `name` in snake_case
  (`PMUnregistered` for 'pm_unregistered'); None if it defines neither."""
  own = {k: v for k, v in vars(module).items()
         if callable(v) and getattr(v, "__module__", None) == loaded}
  if name in own:
    return f"`{name}`"
  classes = [k for k, v in own.items() if isinstance(v, type) and _folded(k) == _folded(name)]
  return f"class `{classes[0]}` (named '{name}' in the config)" if classes else None


def _registering_file(folder: str, name: str) -> Optional[str]:
  pattern = re.compile(r"register\(\s*(name\s*=\s*)?['\"]" + re.escape(name) + r"['\"]",
                       re.IGNORECASE)
  for root, _, files in sorted(os.walk(folder)):
    for file in sorted(f for f in files if f.endswith(".py")):
      path = os.path.join(root, file)
      try:
        with open(path, encoding="utf-8") as f:
          if pattern.search(f.read()):
            return path
      except (OSError, UnicodeDecodeError):
        continue
  return None


# The `podracer.registry` attributes whose name is not their kind's plural (registry/__init__.py).
_ATTRIBUTES = {"replay": "replay", "device topology": "topologies"}


def _registry_attribute(kind: str) -> str:
  """The `podracer.registry` attribute of a kind: `environments`, `losses`, `replay`,
  `topologies`."""
  return _ATTRIBUTES.get(kind, plural(kind))


class DuplicateComponentError(ConfigError, ValueError):
  """Two different components were registered under one name."""


class Registry:
  """Names to factories for one kind of component (environment, network, loss, ...)."""

  def __init__(self, kind: str):
    self.kind = kind
    self._entries: Dict[str, Callable[..., Any]] = {}

  def register(self, name: Optional[str] = None, obj: Optional[T] = None, *,
               override: bool = False):
    """Registers `obj` under `name`; usable as `@reg.register("name")` or a call.

    Registering a second, different object under a taken name is an error unless
    `override=True`. Re-registering the same definition (same module and qualified name,
    as happens when a config file is loaded twice) replaces the entry quietly.
    """
    def add(target: T) -> T:
      key = name or getattr(target, "__name__", None)
      if not key:
        raise ValueError(f"Cannot register {target!r} as {with_article(self.kind)} without "
                         "a name.")
      key = key.lower()
      existing = self._entries.get(key)
      if existing is not None and not override and not _same_definition(existing, target):
        raise DuplicateComponentError(
            f"{with_article(self.kind).capitalize()} named '{key}' is already registered "
            f"({_describe(existing)}); pick another name or pass override=True to replace "
            "it.")
      self._entries[key] = target
      return target

    if obj is not None:
      return add(obj)
    return add

  def get(self, name: str, *, key: Optional[str] = None) -> Callable[..., Any]:
    """The factory registered as `name` (case-insensitive); `key` names the config key."""
    if not isinstance(name, str):
      raise ConfigError(f"Config key `{key or self.kind}` must name "
                        f"{with_article(self.kind)} (a string), got {name!r}.")
    try:
      return self._entries[name.lower()]
    except KeyError:
      raise UnknownComponentError(self.kind, name, self.names(), key) from None

  def names(self) -> List[str]:
    return sorted(self._entries)

  def unregister(self, name: str) -> None:
    self._entries.pop(name.lower(), None)

  def __contains__(self, name: object) -> bool:
    return isinstance(name, str) and name.lower() in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())

  def __len__(self) -> int:
    return len(self._entries)

  def __repr__(self) -> str:
    return f"Registry({self.kind!r}: {', '.join(self.names())})"


def _same_definition(a: Any, b: Any) -> bool:
  if a is b:
    return True
  ident = lambda o: (getattr(o, "__module__", None), getattr(o, "__qualname__", None))
  return ident(a) == ident(b) and ident(a) != (None, None)


def _describe(obj: Any) -> str:
  where = inspect.getmodule(obj)
  return f"{getattr(obj, '__qualname__', repr(obj))} from {where.__name__ if where else '?'}"
