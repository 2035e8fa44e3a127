"""Loading `--config=path/to/config.py[:NAME]`, with every way it can go wrong said as one
paragraph naming the file: missing, unreadable, not a file, a syntax error, an exception
while it loads, no `get_config`, a `get_config` that needs a NAME it was not given (or
takes none and was given one), a NAME the file does not define, and a `get_config` that
raises or returns something other than a ConfigDict.

The launcher's config flag parses through `load` (podracer/launch.py), so these errors
are the same whatever else is on the command line (overrides, section swaps, sweeps).
No JAX here: a missing file is reported in well under a second.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from typing import Any, Optional, Tuple

from podracer.errors import ConfigError, deepest_frame

# The module name ml_collections gives the config file of the `config` flag.
MODULE_NAME = "config_config"
EXAMPLE = "--config=agents/ppo/config.py:cartpole_anakin"


class UnknownConfigName(ValueError):
  """A config file's `get_config(NAME)` was asked for a NAME it does not define
  (`podracer.config.presets.getter` raises it, listing the names it has)."""


def split(flag_value: str) -> Tuple[str, Optional[str]]:
  """`path/to/config.py:NAME` -> (path, NAME or None)."""
  path, sep, name = flag_value.partition(":")
  return path, (name if sep else None)


def check_readable(path: str) -> None:
  """A ConfigError naming `path` (and the directory a relative one was looked in) unless
  it is a file this process can read."""
  where = f" (looked in {os.getcwd()})" if not os.path.isabs(path) else ""
  if not path:
    raise ConfigError(f"--config names no file; pass --config=path/to/config.py:NAME, "
                      f"e.g. {EXAMPLE}.")
  if os.path.isdir(path):
    raise ConfigError(f"config file '{path}' is a directory{where}; pass the config "
                      f"file inside it, e.g. {EXAMPLE}.")
  if not os.path.isfile(path):
    raise ConfigError(f"config file '{path}' does not exist{where}; pass "
                      f"--config=path/to/config.py:NAME, e.g. {EXAMPLE}.")
  try:
    with open(path, "rb") as f:
      f.read(1)
  except OSError as e:
    raise ConfigError(f"config file '{path}' cannot be read{where}: {e.strerror or e} "
                      f"({type(e).__name__}); check its permissions and its disk.") from None


def load(flag_value: str) -> Any:
  """The config `--config=FLAG_VALUE` names: the file's `get_config()` or
  `get_config(NAME)`, locked. ConfigError with one paragraph for anything wrong."""
  path, name = split(flag_value)
  check_readable(path)
  module = _import(path)
  get_config = getattr(module, "get_config", None)
  if not callable(get_config):
    raise ConfigError(f"config file '{path}' defines no get_config(); a config file "
                      "defines `def get_config():` (or `def get_config(name):`, called "
                      "with NAME from --config=FILE:NAME) returning an "
                      "ml_collections.ConfigDict.")
  args = () if name is None else (name,)
  _check_arguments(path, get_config, args)
  try:
    config = get_config(*args)
  except UnknownConfigName as e:
    raise ConfigError(f"config file '{path}' does not define the config '{name}': "
                      f"{e}") from None
  except ConfigError as e:
    raise ConfigError(f"config file '{path}': {e}") from None
  except Exception as e:  # pylint: disable=broad-except
    call = f"get_config({name!r})" if args else "get_config()"
    raise ConfigError(f"config file '{path}': {call} raised {_describe(e, path)}.") from e
  from ml_collections import config_dict  # pylint: disable=import-outside-toplevel
  if not isinstance(config, config_dict.ConfigDict):
    raise ConfigError(f"config file '{path}': get_config() returned "
                      f"{type(config).__name__}, not an ml_collections.ConfigDict.")
  config.lock()
  return config


def _import(path: str) -> Any:
  """The config file as the module MODULE_NAME (as ml_collections loads it); its own
  folder is importable (the launcher puts it on sys.path)."""
  spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
  if spec is None or spec.loader is None:
    raise ConfigError(f"config file '{path}' is not a Python file Python can load; a "
                      f"config file is a .py module, e.g. {EXAMPLE}.")
  module = importlib.util.module_from_spec(spec)
  sys.modules[MODULE_NAME] = module
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    line = f" (line {e.lineno})" if e.lineno else ""
    raise ConfigError(f"config file '{path}' is not valid Python: {e.msg}{line}.") from e
  except ImportError as e:
    missing = f"module '{e.name}'" if e.name else "a module"
    raise ConfigError(
        f"config file '{path}' could not import {missing} ({type(e).__name__}: {e}). "
        f"Modules in the config file's folder ({os.path.dirname(os.path.abspath(path))}) "
        "are importable; others must be installed or on PYTHONPATH.") from e
  except ConfigError as e:  # A component it registers clashes with a built-in.
    raise ConfigError(f"config file '{path}' failed to load: {e}") from None
  except Exception as e:  # pylint: disable=broad-except
    raise ConfigError(f"config file '{path}' raised an error while it was loading: "
                      f"{_describe(e, path)}.") from e
  return module


def _check_arguments(path: str, get_config: Any, args: Tuple[str, ...]) -> None:
  """`get_config` must take the arguments --config gives it: NAME or nothing."""
  try:
    inspect.signature(get_config).bind(*args)
  except TypeError:
    if args:
      raise ConfigError(f"config file '{path}' was given the config name '{args[0]}' "
                        f"(--config={path}:{args[0]}), but its get_config() takes no "
                        f"argument; drop ':{args[0]}' (--config={path}).") from None
    raise ConfigError(f"config file '{path}' needs a config name: its get_config"
                      f"{inspect.signature(get_config)} takes an argument that "
                      f"--config={path} does not give; pass --config={path}:NAME.") from None
  except ValueError:  # No signature (a builtin): let the call say.
    pass


def _describe(error: BaseException, path: str) -> str:
  """`TypeName: message (line N)`, N the deepest line of `path` in the traceback."""
  text = " ".join(str(error).split()) or "(no message)"
  target = os.path.abspath(path)
  frame = deepest_frame(error, lambda filename: os.path.abspath(filename) == target)
  at = f" at line {frame.lineno}" if frame else ""
  return f"{type(error).__name__}{at}: {text}"
