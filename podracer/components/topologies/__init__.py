"""Device topologies: which devices run what.

Anakin lays one program over a mesh of every learning device of every process
(podracer/mesh.py): its `runs` axis holds runs side by side, its `data` axis one run's
replicas. (Sebulba's split into actor and learner devices lives beside it.) All local
devices by default; with `jax.distributed.initialize()` each host runs the same program
over its local devices and the mesh, so `replica_mean`, spans all hosts.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Sequence, Tuple

import jax

from podracer import distributed, registry, mesh as mesh_lib
from podracer.components import shardings
from podracer.errors import ConfigError


# Said when a replica spans several devices and keeps its whole network on each.
_WHOLE_ON_EACH = ("Note: topology.model={model} with topology.sharding=replicated keeps the "
                  "whole network and optimizer state on each of a replica's {model} "
                  "devices; set --config.topology.sharding=fsdp or tensor to split them.\n")


@registry.topologies.register("replicate")
class Replicate:
  """The whole program over `num_devices` local devices (all by default) of every process,
  as a mesh of `runs` x `data` devices (podracer/mesh.py: by default runs spread over the
  devices when `num_runs` is a multiple of their count, else each run uses them all).
  `model` = K > 1 makes each replica span K devices, a third mesh axis, its parameters
  and optimizer state laid over them by the `sharding` policy (registry.shardings:
  `replicated`, `fsdp`, `tensor`, or one's own; a name or a section with its options)."""

  def __init__(self, num_devices: Optional[int] = None, platform: Optional[str] = None,
               runs: Optional[int] = None, data: Optional[int] = None, model: int = 1,
               sharding: Any = "replicated"):
    devices = jax.local_devices(backend=platform) if platform else jax.local_devices()
    if num_devices is not None:
      if not 1 <= num_devices <= len(devices):
        raise ConfigError(
            f"Config key `topology.num_devices` is {num_devices}, but this host has "
            f"{len(devices)} {devices[0].platform} device(s).")
      devices = devices[:num_devices]
    # This process's devices of the mesh (one row of every array each).
    self.devices: List[jax.Device] = devices
    self._asked = (runs, data)
    self._shape: Optional[Tuple[int, int]] = None
    # A replica's devices (the mesh's `model` axis) and how its parameters lie on them.
    self.model, self._sharding = model, sharding
    self.rule = shardings.build(sharding, model)
    self._said_whole = False

  def arrange(self, num_runs: int) -> Tuple[int, int]:
    """Lays `num_runs` runs on the mesh: (devices on its runs axis, on its data axis);
    a split that does not fit is a ConfigError naming the keys (podracer/mesh.py)."""
    self._shape = mesh_lib.mesh_shape(self.num_devices * jax.process_count(), num_runs,
                                      *self._asked, model=self.model)
    if not self._said_whole:  # Said once, for a mesh that holds.
      self._said_whole = True
      _say_if_whole_on_each(self.model, self._sharding)
    return self._shape

  @property
  def shape(self) -> Tuple[int, int]:
    """(runs, data): as `arrange` laid the runs out, else for one run."""
    return self._shape or self.arrange(1)

  @property
  def mesh(self) -> "jax.sharding.Mesh":
    """The mesh over this topology's devices of every process (process-major)."""
    return mesh_lib.device_mesh(distributed.mesh_devices(self.devices), self.shape[0],
                                self.model)

  @property
  def num_devices(self) -> int:
    return len(self.devices)

  @property
  def num_replicas(self) -> int:
    """Replicas of one run (the mesh's data axis): all devices of all hosts by default."""
    return self.shape[1]

  def __repr__(self) -> str:
    runs, data = self.shape
    layout = f", mesh runs={runs} x data={data}" if runs > 1 else ""
    layout += f", model={self.model}" if self.model > 1 else ""
    return f"Replicate({self.num_devices} x {self.devices[0].platform}{layout})"


@registry.topologies.register("actor_learner")
class ActorLearner:
  """Sebulba's split: actor devices run inference, learner devices run updates.

  Give device indices (`actor_devices`, `learner_devices`) or counts (`num_actors`,
  `num_learners`). By default one device acts and learns; with N > 1 devices a quarter
  (at least one) act and the rest learn: 2 actors and 6 learners on 8 devices.
  `model` = K > 1 makes each learner replica span K of the learner devices (a mesh of
  data L/K x model K), its parameters and optimizer state laid over them by the
  `sharding` policy, as Replicate's; the actors act with replica 0's parameters
  gathered onto their own device, or, with `actor_model` = K_a > 1, split over groups of
  K_a actor devices by the same policy (each group one actor place: its threads' policy
  calls partitioned over it by the compiler, the rest whole on each of its devices).
  """

  def __init__(self, actor_devices: Optional[Sequence[int]] = None,
               learner_devices: Optional[Sequence[int]] = None,
               num_actors: Optional[int] = None, num_learners: Optional[int] = None,
               platform: Optional[str] = None, model: int = 1,
               sharding: Any = "replicated", actor_model: int = 1):
    devices = jax.local_devices(backend=platform) if platform else jax.local_devices()
    n = len(devices)
    pick = lambda idx, key: [_device(devices, i, key) for i in idx]
    if actor_devices is not None or learner_devices is not None:
      if actor_devices is None or learner_devices is None:
        raise ConfigError("Give both `topology.actor_devices` and "
                          "`topology.learner_devices`, or neither.")
      actors = pick(actor_devices, "topology.actor_devices")
      learners = pick(learner_devices, "topology.learner_devices")
    elif n == 1:
      actors = learners = list(devices)
    else:
      num_actors = num_actors or max(1, n // 4)
      num_learners = num_learners or n - num_actors
      if num_actors + num_learners > n:
        raise ConfigError(
            f"`topology.num_actors` ({num_actors}) + `topology.num_learners` "
            f"({num_learners}) exceed the {n} devices of this host.")
      actors = list(devices[:num_actors])
      learners = list(devices[num_actors:num_actors + num_learners])
    if not actors or not learners:
      raise ConfigError("Sebulba needs at least one actor and one learner device.")
    shared = sorted({d.id for d in actors} & {d.id for d in learners})
    if shared and (len(shared) < len(actors) or len(shared) < len(learners)):
      # One device that acts and learns is the 1-device setup; a partial overlap is
      # allowed (a device may do both) but usually a mistake, so it is said.
      sys.stderr.write(f"Warning: devices {shared} both act and learn "
                       f"(topology.actor_devices and topology.learner_devices overlap): "
                       "their inference and updates share the device.\n")
    # The devices the actor threads run inference on, and those the learner's update
    # update runs over (its replicas); both lists hold this process's local devices.
    self.actor_devices: List[jax.Device] = actors
    self.learner_devices: List[jax.Device] = learners
    # A learner replica's devices, and how its parameters lie on them.
    self.model = model
    self.rule = shardings.build(sharding, model)
    _check_groups("model", f"a learner replica spanning {model} devices needs a learner",
                  "learner", len(learners), model, sharding, learner_devices is not None)
    # The actors' places: each actor device, or groups of `actor_model` of them.
    self.actor_model = actor_model
    _check_groups("actor_model", f"actors whose parameters span {actor_model} devices "
                  "need an actor", "actor", len(actors), actor_model, sharding,
                  actor_devices is not None)
    self.actor_rule = shardings.build(sharding, actor_model)

  @property
  def num_replicas(self) -> int:
    return len(self.learner_devices) // self.model * jax.process_count()

  def __repr__(self) -> str:
    ids = lambda ds: ",".join(str(d.id) for d in ds)
    model = f", model={self.model}" if self.model > 1 else ""
    model += f", actor_model={self.actor_model}" if self.actor_model > 1 else ""
    return f"ActorLearner(actors=[{ids(self.actor_devices)}], " \
           f"learners=[{ids(self.learner_devices)}]{model})"


def _check_groups(key: str, what: str, role: str, count: int, size: int, sharding: Any,
                  listed: bool) -> None:
  """`count` devices of `role` in groups of `size` (`topology.KEY`): a size that does not
  divide them is a ConfigError naming the keys; whole networks on each said in one line."""
  if size < 1 or count % size:
    more = (f"give --config.topology.{role}_devices a number of devices it divides"
            if listed else f"--config.topology.num_{role}s to a multiple of {size}")
    raise ConfigError(
        f"Config key `topology.{key}` is {size}: {what} device count it divides, but "
        f"there are {count} {role} device(s). Set --config.topology.{key} to a divisor of "
        f"{count}, or {more}.")
  _say_if_whole_on_each(size, sharding)


def _say_if_whole_on_each(model: int, sharding: Any) -> None:
  """One line, where a replica spans K > 1 devices under the `replicated` policy."""
  if model > 1 and sharding in (None, "replicated"):
    sys.stderr.write(_WHOLE_ON_EACH.format(model=model))


def _device(devices, index: int, key: str):
  if not 0 <= index < len(devices):
    raise ConfigError(f"`{key}` names device {index}, but this host has devices "
                      f"0..{len(devices) - 1}.")
  return devices[index]
