"""Device topologies: which devices run what.

Anakin replicates one program over every learning device. (Sebulba's split into actor
and learner devices lives beside it.) All local devices by default; with
`jax.distributed.initialize()` each host runs the same program over its local devices
and `replica_mean` spans all hosts.
"""

from __future__ import annotations

from typing import List, Optional

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
