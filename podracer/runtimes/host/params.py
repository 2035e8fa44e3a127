"""The learner's parameters on their way to the actors (`ParamsStore`), and how stale
they may be (`PolicyLagBound`). Trajectories go the other way through the channel
(channel.py), sharded over the learners by the mesh (podracer/mesh.py)."""

from __future__ import annotations

import hashlib
import itertools
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from podracer import mesh as mesh_lib
from podracer.components import shardings
from podracer.runtimes.host.threads import POLL
from podracer.types import PyTree


class ActorPlace:
  """Where one actor's inference runs (a Sebulba actor thread's, a SEED inference
  thread's): one actor device, or, with `topology.actor_model` = K > 1, a group of K
  actor devices over which the parameters lie as the sharding policy says (whole on
  none of them), the rest (observations, actor state, keys) on each (`data`: what
  `jax.device_put` takes). The compiler partitions the policy's call over the group."""

  def __init__(self, devices: Sequence[jax.Device], rule: Optional[shardings.Rule] = None):
    self.devices = tuple(devices)
    self.name = "+".join(str(d.id) for d in self.devices)
    self._rule, self._shardings = rule, None
    self.mesh: Optional[Mesh] = None
    self.data: Any = self.devices[0]
    if len(self.devices) > 1:
      self.mesh = Mesh(np.array(self.devices), (mesh_lib.MODEL,))
      self.data = NamedSharding(self.mesh, PartitionSpec())

  def put_params(self, params: PyTree) -> PyTree:
    """`params` (anywhere) laid on this place: on its device, or split over its group."""
    if self.mesh is None:
      return jax.device_put(params, self.data)
    if self._shardings is None:  # The tree is the same at every push.
      rule = self._rule or shardings.replicated(len(self.devices))
      specs = shardings.param_specs(rule, params, len(self.devices))
      self._shardings = jax.tree.map(lambda s: NamedSharding(self.mesh, s), specs,
                                     is_leaf=lambda x: isinstance(x, PartitionSpec))
    return jax.device_put(params, self._shardings)

  def __repr__(self) -> str:
    return f"ActorPlace({self.name})"


def actor_places(devices: Sequence[jax.Device], model: int = 1,
                 rule: Optional[shardings.Rule] = None) -> List[ActorPlace]:
  """The actor devices in groups of `model` (consecutive), a place each."""
  return [ActorPlace(devices[i:i + model], rule) for i in range(0, len(devices), model)]


class ParamsStore:
  """The newest parameters, one copy per actor place (a device, or a group of devices
  the parameters are split over), with a version number (the learner updates they
  have seen)."""

  def __init__(self, places: Sequence[Any]):
    # Places, or devices (as before 0.22: each its own place; `get` takes either).
    self._places = [p if isinstance(p, ActorPlace) else ActorPlace([p]) for p in places]
    self._place_of = {**{p: p for p in self._places}, **dict(zip(places, self._places))}
    self._changed = threading.Condition()
    self._params: Dict[ActorPlace, PyTree] = {}
    self.version = -1

  def push(self, params_on_learner: PyTree, version: int) -> None:
    copies = {p: p.put_params(params_on_learner) for p in self._places}
    with self._changed:
      self._params, self.version = copies, version
      self._changed.notify_all()

  def advance(self, version: int) -> None:
    """The same parameters as `version` (a turn that changed none): no new copies."""
    with self._changed:
      self.version = version
      self._changed.notify_all()

  def get(self, place: Any, at_least: int = -1,
          stop: Optional[threading.Event] = None) -> Optional[Tuple[PyTree, int]]:
    """(params on `place` (one given to the store), version), waiting for a version >=
    `at_least`; None if `stop` is set first."""
    place = self._place_of[place]
    with self._changed:
      while self.version < at_least:
        if stop is not None and stop.is_set():
          return None
        self._changed.wait(POLL)
      return self._params[place], self.version


class PolicyLagBound:
  """Bounds the policy lag: the updates the learner has made since the parameters that
  acted a trajectory were pushed (runtime.max_policy_lag).

  The learner takes one trajectory per update, in the order they are queued. So each
  trajectory has a ticket n (the update that will learn from it), is acted with
  parameters of version >= n - max_lag, and is queued in ticket order. Producer i of P
  holds tickets i, i + P, i + 2P, ... (from the first update), the same in every run.
  With max_lag 1 the learner learns from trajectory n while the actors act trajectory
  n + 1 with its previous parameters: Cleanba's one-step lag; 0 alternates acting and
  learning, and then trajectory n is always acted by the same producer with version n,
  so the run is the same every time.
  """

  def __init__(self, max_lag: int, first_update: int, producers: int = 1):
    self.max_lag, self.producers, self.first_update = max_lag, producers, first_update
    self._turn = threading.Condition()
    self._next_queued = first_update

  def tickets(self, producer: int) -> Iterator[int]:
    """Producer `producer`'s tickets (0 <= producer < producers), in order."""
    if not 0 <= producer < self.producers:
      raise ValueError(f"producer {producer} of {self.producers}")
    return itertools.count(self.first_update + producer, self.producers)

  def wait_turn(self, ticket: int, stop: threading.Event) -> bool:
    """Waits until every earlier ticket's trajectory is queued; False if stopped."""
    with self._turn:
      while self._next_queued != ticket:
        if stop.is_set():
          return False
        self._turn.wait(POLL)
      return True

  def queued(self, ticket: int) -> None:
    with self._turn:
      self._next_queued = ticket + 1
      self._turn.notify_all()


first_replica = mesh_lib.first_row  # Replica 0's copy of the learners' output.


def checksum(tree: PyTree) -> str:
  """A digest of a tree's values: equal on every process when their parameters are."""
  digest = hashlib.sha256()
  for leaf in jax.tree.leaves(jax.device_get(tree)):
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return digest.hexdigest()[:16]
