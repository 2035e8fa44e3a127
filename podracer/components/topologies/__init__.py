"""Device topologies: which devices run what.

Anakin replicates one program over every learning device. (Sebulba's split into actor
and learner devices lives beside it.) All local devices by default; with
`jax.distributed.initialize()` each host runs the same program over its local devices
and `replica_mean` spans all hosts.
"""

from __future__ import annotations

import sys
from typing import List, Optional, Sequence

import jax

from podracer import registry
from podracer.errors import ConfigError


@registry.topologies.register("replicate")
class Replicate:
  """Replicates the whole program over `num_devices` local devices (all by default)."""

  def __init__(self, num_devices: Optional[int] = None, platform: Optional[str] = None):
    devices = jax.local_devices(backend=platform) if platform else jax.local_devices()
    if num_devices is not None:
      if not 1 <= num_devices <= len(devices):
        raise ConfigError(
            f"Config key `topology.num_devices` is {num_devices}, but this host has "
            f"{len(devices)} {devices[0].platform} device(s).")
      devices = devices[:num_devices]
    # The local devices the whole program is replicated over (one replica each).
    self.devices: List[jax.Device] = devices

  @property
  def num_devices(self) -> int:
    return len(self.devices)

  @property
  def num_replicas(self) -> int:
    """Replicas across all hosts (equal to `num_devices` on one host)."""
    return self.num_devices * jax.process_count()

  def __repr__(self) -> str:
    return f"Replicate({self.num_devices} x {self.devices[0].platform})"


@registry.topologies.register("actor_learner")
class ActorLearner:
  """Sebulba's split: actor devices run inference, learner devices run updates.

  Give device indices (`actor_devices`, `learner_devices`) or counts (`num_actors`,
  `num_learners`). By default one device acts and learns; with N > 1 devices a quarter
  (at least one) act and the rest learn: 2 actors and 6 learners on 8 devices.
  """

  def __init__(self, actor_devices: Optional[Sequence[int]] = None,
               learner_devices: Optional[Sequence[int]] = None,
               num_actors: Optional[int] = None, num_learners: Optional[int] = None,
               platform: Optional[str] = None):
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
    # The devices the actor threads run inference on, and those the learner's pmapped
    # update runs over (its replicas); both lists hold this process's local devices.
    self.actor_devices: List[jax.Device] = actors
    self.learner_devices: List[jax.Device] = learners

  @property
  def num_replicas(self) -> int:
    return len(self.learner_devices) * jax.process_count()

  def __repr__(self) -> str:
    ids = lambda ds: ",".join(str(d.id) for d in ds)
    return f"ActorLearner(actors=[{ids(self.actor_devices)}], " \
           f"learners=[{ids(self.learner_devices)}])"


def _device(devices, index: int, key: str):
  if not 0 <= index < len(devices):
    raise ConfigError(f"`{key}` names device {index}, but this host has devices "
                      f"0..{len(devices) - 1}.")
  return devices[index]
