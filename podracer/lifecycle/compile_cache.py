"""JAX's persistent compilation cache, on by default: a program compiled once is read
back from disk by the next launch that compiles the same program (same code, shapes,
config values that reach the program, JAX and XLA versions, devices and XLA_FLAGS).

The folder (`compile_cache`, a top-level config key):
  unset     JAX_COMPILATION_CACHE_DIR if set (set empty: off, as JAX reads it), else
            $XDG_CACHE_HOME/podracer/xla (~/.cache/podracer/xla): one per user, shared
            by all their runs (off on JAX older than 0.5: OLD_JAX)
  PATH      that folder (`--config.compile_cache=PATH`)
  ""        off (`--config.compile_cache=""`)

Several processes may share it (SEED's learner, `mpirun`'s ranks, two launches at once):
JAX writes from process 0 only, each entry whole under its own name, and a missing or
unreadable entry is compiled again (a corrupt entry: JAX warns and recompiles). A folder
that cannot be written is said once and the run goes on without the cache. Clearing it
is deleting the folder (docs/install.md).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Optional, TextIO

from podracer.errors import ConfigError
from podracer.logs import compile_time

KEY = "compile_cache"
ENV = "JAX_COMPILATION_CACHE_DIR"
MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
# Programs that compile faster than this are not written. JAX's default, 1 s, leaves out
# most of a small run's programs (CartPole's whole update compiles in ~0.5 s); every
# program is kept, as the small ones (a key split, a reset) add up too: PPO
# `cartpole_anakin`'s second launch read 6 programs instead of 2 and ended 0.3 s sooner
# (4.9 s against 5.2 s shell to exit, medians of 3, 2026-12-07), for 44 KB more on disk.
MIN_COMPILE_S = 0.0

# On JAX 0.4.34 (the Reverb lane's) a resumed Sebulba run that read its learner's
# program back from the cache crashed (a segmentation fault reading the step's output,
# tests/test_checkpoint.py's Reverb-table resume, 2026-12-07); compiled afresh it runs.
# There the cache is off unless a folder is named (JAX_COMPILATION_CACHE_DIR or
# --config.compile_cache=PATH).
OLD_JAX = (0, 5)

_warned = set()


def jax_older_than(major: int, minor: int) -> bool:
  """Whether the installed JAX is older than major.minor (read without importing it)."""
  from importlib import metadata  # pylint: disable=import-outside-toplevel
  try:
    version = tuple(int(part) for part in metadata.version("jax").split(".")[:2])
  except (metadata.PackageNotFoundError, ValueError):
    return False
  return version < (major, minor)


def default_folder(environ=None) -> Optional[str]:
  """JAX_COMPILATION_CACHE_DIR if set (None, no cache, if set empty), else the per-user
  XDG cache folder."""
  environ = os.environ if environ is None else environ
  if ENV in environ:
    return environ[ENV] or None
  if jax_older_than(*OLD_JAX):
    return None  # The Reverb lane's JAX: see OLD_JAX.
  base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "podracer", "xla")


def folder(setting: Optional[str], environ=None) -> Optional[str]:
  """The cache folder `compile_cache`'s value names; None when it turns the cache off."""
  if setting is None:
    return default_folder(environ)
  if not isinstance(setting, str):
    raise ConfigError(
        f"`compile_cache` is {setting!r}; it takes a folder for JAX's compilation cache "
        "(--config.compile_cache=PATH), or \"\" to turn the cache off.")
  return os.path.abspath(os.path.expanduser(setting)) if setting else None


def unwritable(path: str) -> Optional[str]:
  """Why `path` cannot hold the cache (made if missing), or None when it can."""
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".podracer-write-check-"):
      pass
  except OSError as e:
    return e.strerror or str(e)
  return None


def use(setting: Optional[str], stream: Optional[TextIO] = None) -> Optional[str]:
  """Turns JAX's persistent cache on in `folder(setting)` (or off); returns the folder
  in use, or None. Call before the first compile of a launch; also starts counting
  compile seconds and cache hits (`podracer.logs.compile_time`)."""
  path = folder(setting)
  why = path and unwritable(path)
  if why:
    if path not in _warned:
      _warned.add(path)
      (stream or sys.stderr).write(
          f"Warning: the compilation cache folder {path} cannot be written ({why}); this "
          "launch compiles without it. Set --config.compile_cache=PATH to a writable "
          "folder, or --config.compile_cache=\"\" to turn the cache off.\n")
    path = None
  _configure(path)
  compile_time.install()
  return path


def _configure(path: Optional[str]) -> None:
  """JAX's cache settings for `path` (None: off), reset if they change."""
  import jax  # pylint: disable=import-outside-toplevel
  from jax.experimental.compilation_cache import compilation_cache  # pylint: disable=import-outside-toplevel
  if not os.environ.get(MIN_COMPILE_ENV):
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_S)
  same = (jax.config.jax_enable_compilation_cache == (path is not None)
          and (path is None or jax.config.jax_compilation_cache_dir == path))
  if same:
    return
  if path is not None:
    jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_enable_compilation_cache", path is not None)
  compilation_cache.reset_cache()  # JAX reads its settings once, at the first compile.
