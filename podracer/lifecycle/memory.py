"""Memory checked before it is allocated: how many bytes a buffer needs, how many the
place it goes to has, and one clear `ConfigError` when they do not fit.

Replays and runtimes call `check_fits` at build time, before the first big allocation,
so an oversized config fails in a second with the keys to change, not minutes later
with an allocator's traceback (or an OOM kill hours into a run).
"""

from __future__ import annotations

import math
import os
from typing import Any, Optional, Sequence

import jax
import numpy as np

from podracer.errors import ConfigError
from podracer.types import PyTree


def tree_bytes(spec: PyTree, count: int = 1) -> int:
  """Bytes of `count` copies of the arrays (or ShapeDtypeStructs) in `spec`."""
  return count * sum(int(math.prod(x.shape)) * np.dtype(x.dtype).itemsize
                     for x in jax.tree_util.tree_leaves(spec))


def host_memory() -> tuple:
  """(total, available) bytes of this machine's memory."""
  try:
    import psutil  # pylint: disable=import-outside-toplevel
  except ImportError:  # Not a declared dependency; Linux says the same through sysconf.
    page = os.sysconf("SC_PAGE_SIZE")
    return (os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page)
  memory = psutil.virtual_memory()
  return int(memory.total), int(memory.available)


def device_memory(device: Optional[jax.Device] = None) -> tuple:
  """(bytes an allocation may use, where) on `device` (default: the first device).

  Accelerators report their allocator's limit in `memory_stats()`; the CPU backend does
  not (or reports nothing useful), and its arrays live in host memory: what is available
  there counts.
  """
  device = device or jax.devices()[0]
  stats = None
  if device.platform != "cpu":
    try:
      stats = device.memory_stats()
    except Exception:  # pylint: disable=broad-except
      stats = None
  if stats and stats.get("bytes_limit"):
    free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return free, f"free on {device.device_kind} {device.id}"
  return host_memory()[1], "available host memory (the CPU device's arrays live there)"


def gib(n: float) -> str:
  return f"{n / 2**30:.2f} GiB"


def check_fits(what: str, needed: int, available: int, where: str,
               keys: Sequence[str]) -> None:
  """Raises ConfigError naming the bytes needed and available and the keys to change."""
  if needed <= available:
    return
  raise ConfigError(
      f"{what} needs {needed:,} bytes ({gib(needed)}) but only {available:,} bytes "
      f"({gib(available)}) are {where}. To fit, change "
      f"{' or '.join(f'`{k}`' for k in keys)}.")


def check_device_fits(what: str, needed: int, keys: Sequence[str],
                      devices: Optional[Sequence[Any]] = None) -> None:
  """`check_fits` against the first of `devices` (default: the default backend's)."""
  available, where = device_memory(devices[0] if devices else None)
  check_fits(what, needed, available, where, keys)
