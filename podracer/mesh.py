"""One device mesh: how a runtime's program is laid out over every device of every process.

A mesh has two named axes: `runs` (independent runs, `num_runs`, side by side: no
collective between them) and `data` (one run's replicas, each with its own environments,
their gradients averaged: `podracer.types.REPLICA_AXIS` names it). Every array a runtime
keeps has one leading axis over the mesh's devices, sharded over both axes (row i on
device i, process-major across processes); `spmd` compiles a per-device function over it
with `jax.jit` and `jax.shard_map`, which is what `jax.pmap` did, on the API JAX keeps.

  mesh_shape(...)    (runs, data) for a device count and a number of runs, checked.
  device_mesh(...)   the `jax.sharding.Mesh` over the given devices of all processes.
  spmd(fn, mesh)     fn over one device's rows, compiled once over the whole mesh.
  put(mesh, tree)    this process's rows (host arrays, [local devices, ...]) -> global.
  feed(mesh, tree)   a call's small host inputs, placed only where they must be.
  local(tree)        a global array -> this process's rows, as host arrays.
  gather(tree)       a global array -> every row, as host arrays, on every process.
  learner_mesh(...)  Sebulba's and SEED's learner devices as a mesh of one run (a
                     replica over K devices: podracer/runtimes/host/learners.py).
  split_batch(n, tree)      [T, B, ...] -> [n, T, B/n, ...]: a batch's share per learner.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from podracer import distributed
from podracer.errors import ConfigError
from podracer.types import REPLICA_AXIS

RUNS = "runs"
DATA = REPLICA_AXIS
AXES = (RUNS, DATA)
# A replica's own devices (`topology.model`, issue 78): the compiler's axis, never manual
# (podracer/components/shardings: which parameter splits over it). A mesh has it when
# K > 1; at K = 1 the mesh is (runs, data) as before.
MODEL = "model"

try:  # jax >= 0.6
  from jax import shard_map as _shard_map  # pylint: disable=g-import-not-at-top
  _UNCHECKED = dict(check_vma=False)
except ImportError:  # jax 0.4.34 (the Reverb lane)
  from jax.experimental.shard_map import shard_map as _shard_map  # type: ignore
  _UNCHECKED = dict(check_rep=False)


def mesh_shape(num_devices: int, num_runs: int = 1, runs: Optional[int] = None,
               data: Optional[int] = None, model: int = 1) -> Tuple[int, int]:
  """(devices on the runs axis, devices on the data axis) for `num_devices` devices of
  all processes. By default runs spread over the devices when `num_runs` is a multiple
  of the device count (one program per device, no collective), else every run is
  data-parallel over all devices. `topology.runs` / `topology.data` choose otherwise.
  With `model` = K > 1 each replica spans K devices: runs x data = num_devices / K."""
  if model < 1 or num_devices % model:
    cpu = (f" On a CPU, XLA_FLAGS=--xla_force_host_platform_device_count={model} (or a "
           f"multiple) makes {model} virtual devices." if num_devices < model else "")
    raise ConfigError(
        f"Config key `topology.model` is {model}: a replica spanning {model} devices needs "
        f"a device count it divides, but the run has {num_devices} device(s). Set "
        f"--config.topology.model to a divisor of {num_devices} (1: a replica on one "
        f"device), or run on a multiple of {model} devices.{cpu}")
  num_devices //= model
  if runs is None and data is None:
    runs = num_devices if num_runs > 1 and num_runs % num_devices == 0 else 1
  if runs is None:
    runs = num_devices // data if data and num_devices % data == 0 else 0
  if data is None:
    data = num_devices // runs if runs and num_devices % runs == 0 else 0
  if runs < 1 or data < 1 or runs * data != num_devices:
    raise ConfigError(
        f"Config keys `topology.runs` ({runs or 'unset'}) and `topology.data` "
        f"({data or 'unset'}) split the mesh into {runs} x {data} devices, but the run has "
        f"{num_devices} device(s): their product must be {num_devices} (e.g. "
        f"--config.topology.runs={num_devices} --config.topology.data=1).")
  if num_runs % runs:
    raise ConfigError(
        f"Config key `topology.runs` is {runs}: the {num_runs} run(s) of `num_runs` do not "
        f"divide over {runs} devices. Make `num_runs` a multiple of {runs}, or set "
        f"--config.topology.runs=1 (every run over all devices).")
  return runs, data


def device_mesh(devices: Sequence[jax.Device], runs: int = 1, model: int = 1) -> Mesh:
  """The mesh over `devices` (all processes', process-major), `runs` rows of them; with
  `model` = K > 1 a third axis, `MODEL`: K consecutive devices hold one replica."""
  if model > 1:
    return Mesh(np.asarray(devices, dtype=object).reshape(runs, -1, model), AXES + (MODEL,))
  return Mesh(np.asarray(devices, dtype=object).reshape(runs, -1), AXES)


@functools.lru_cache(maxsize=None)
def _learner_mesh(local: Tuple[jax.Device, ...], model: int) -> Mesh:
  return device_mesh(distributed.mesh_devices(list(local)), model=model)


def learner_mesh(local: Sequence[jax.Device], model: int = 1) -> Mesh:
  """Sebulba's and SEED's learners: one run, data-parallel over `local` (this process's
  learner devices) and the same positions on every other process; with `model` = K > 1
  each replica spans K consecutive devices (podracer/runtimes/host/learners.py)."""
  return _learner_mesh(tuple(local), model)


def split_batch(num_learners: int, tree: Any) -> Any:
  """[T, B, ...] leaves -> [L, T, B/L, ...]: learner i gets environments i*B/L to
  (i+1)*B/L - 1 (B divides by L: the runtimes check it when they are built)."""
  def split(x):
    x = x.reshape(x.shape[0], num_learners, -1, *x.shape[2:])
    return jax.numpy.moveaxis(x, 1, 0)
  return jax.tree.map(split, tree)


def first_row(tree: Any) -> Any:
  """Row 0 of this process's rows, still on its device (on its replica's devices, where
  a row is split over a `model` axis)."""
  def row(x):
    shard = x.addressable_shards[0].data
    return shard[0] if shard.shape[1:] == x.shape[1:] else x[0]
  return jax.tree.map(row, tree)


def spmd(fn: Callable[..., Any], mesh: Mesh, donate: bool = False) -> Callable[..., Any]:
  """`fn` of one device's rows (their leading axis taken off), compiled once over `mesh`:
  every argument and output has a leading axis of the mesh's size, one row per device.
  Collectives in `fn` name `DATA` (REPLICA_AXIS) or `RUNS`. `donate` gives the first
  argument's buffers to the outputs."""
  rows = PartitionSpec(AXES)

  def per_device(*args):
    out = fn(*jax.tree.map(lambda x: x[0], args))
    return jax.tree.map(lambda x: jax.numpy.expand_dims(x, 0), out)

  mapped = _shard_map(per_device, mesh=mesh, in_specs=rows, out_specs=rows, **_UNCHECKED)
  return jax.jit(mapped, donate_argnums=(0,) if donate else ())


def sharding(mesh: Mesh) -> NamedSharding:
  """One row per device of `mesh`, written as a compiled call writes its outputs' (the
  mesh's axes of one device left out): arrays a resumed run places come in as the step's
  outputs do, so its programs are the first launch's, read from the compilation cache."""
  axes = tuple(axis for axis in AXES if mesh.shape[axis] > 1)
  return NamedSharding(mesh, PartitionSpec(axes if len(axes) > 1 else axes[0])
                       if axes else PartitionSpec())


def put(mesh: Mesh, tree: Any) -> Any:
  """This process's rows ([its devices of the mesh, ...], anywhere) -> global arrays of
  the mesh, one row on each device."""
  rows, mine = sharding(mesh), local_devices_of(mesh)

  def place(x):
    x = x if isinstance(x, jax.Array) else np.asarray(x)
    pieces = [jax.device_put(x[i:i + 1], d) for i, d in enumerate(mine)]
    return jax.make_array_from_single_device_arrays((mesh.devices.size, *x.shape[1:]),
                                                    rows, pieces)

  return jax.tree.map(place, tree)


def feed(mesh: Mesh, tree: Any) -> Any:
  """A call's small host inputs (keys, votes): as they are on one process, where the
  compiled call places them itself (`put` costs ~0.1 ms an array, a tenth of a small
  Sebulba update), else as `put` makes them."""
  return tree if jax.process_count() == 1 else put(mesh, tree)


def local(tree: Any) -> Any:
  """This process's rows of global arrays, in mesh order, as host arrays."""
  def rows(x):
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
      return np.asarray(jax.device_get(x))
    return _rows_of(x.addressable_shards, x.shape, x.dtype)
  return jax.tree.map(rows, tree)


def _rows_of(shards: Sequence[Any], shape: Tuple[int, ...], dtype: Any) -> np.ndarray:
  """The rows (axis 0) that `shards` (each `.index` into an array of `shape` and `.data`)
  hold, joined in order: a row split over a replica's devices (a `model` axis) is put
  together from its pieces; copies of one piece are written once each."""
  starts = sorted({s.index[0].start or 0 for s in shards})
  length = int(shards[0].data.shape[0])
  out = np.empty((len(starts) * length, *shape[1:]), dtype)
  for s in shards:
    first = starts.index(s.index[0].start or 0) * length
    out[(slice(first, first + length), *s.index[1:])] = np.asarray(s.data)
  return out


def gather(tree: Any) -> Any:
  """Every row of global arrays, as host arrays, on every process (a collective over
  processes when there are several: all of them must call it together)."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return multihost_utils.process_allgather(tree, tiled=True)


def local_devices_of(mesh: Mesh) -> List[jax.Device]:
  """This process's devices of `mesh`, in mesh order."""
  return [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
