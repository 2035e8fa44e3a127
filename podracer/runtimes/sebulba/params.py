"""Moving data between Sebulba's devices: parameters to actors, trajectories to learners."""

from __future__ import annotations

import hashlib
import threading
from typing import Dict, List

import jax
import numpy as np

from podracer.types import REPLICA_AXIS, PyTree


class ParamsStore:
  """The newest parameters, one copy per actor device, with a version number."""

  def __init__(self, devices: List[jax.Device]):
    self._devices = devices
    self._lock = threading.Lock()
    self._params: Dict[jax.Device, PyTree] = {}
    self.version = -1

  def push(self, params_on_learner: PyTree, version: int) -> None:
    copies = {d: jax.device_put(params_on_learner, d) for d in self._devices}
    with self._lock:
      self._params, self.version = copies, version

  def get(self, device: jax.Device):
    with self._lock:
      return self._params[device], self.version


def first_replica(tree: PyTree) -> PyTree:
  """Replica 0's copy of pmapped output, still on its learner device."""
  return jax.tree.map(lambda x: x.addressable_shards[0].data[0], tree)


def shard_over(devices: List[jax.Device], split: PyTree) -> PyTree:
  """[L, ...] arrays (anywhere) -> arrays sharded over the L `devices`, slice i on i."""
  mesh = jax.sharding.Mesh(np.array(devices), (REPLICA_AXIS,))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(REPLICA_AXIS))

  def shard(x):
    pieces = [jax.device_put(x[i:i + 1], d) for i, d in enumerate(devices)]
    return jax.make_array_from_single_device_arrays(x.shape, sharding, pieces)

  return jax.tree.map(shard, split)


def checksum(tree: PyTree) -> str:
  """A digest of a tree's values: equal on every process when their parameters are."""
  digest = hashlib.sha256()
  for leaf in jax.tree.leaves(jax.device_get(tree)):
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return digest.hexdigest()[:16]
