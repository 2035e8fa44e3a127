"""The in-graph side every host replay shares: its state is the batch the runtime sampled.

A host replay (Reverb, the host-memory replay) is driven by the runtime on the host; in
the compiled learner step the agent still calls the replay interface, and these methods
make that a no-op around the `Sample` the runtime handed over (see podracer/experience.py).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from podracer.experience import Sample
from podracer.types import PyTree, strip_weak_types


class SampledBatch:
  """Mixin: `init`, `add`, `can_sample`, `sample`, `update_priorities` of a host replay.

  The class using it sets `batch_size`.
  """

  kind = "host"
  batch_size: int

  def init(self, item_spec: PyTree) -> Sample:
    """A batch of zeros: `batch_size` items shaped like `item_spec` (ONE item)."""
    n = self.batch_size
    items = jax.tree_util.tree_map(lambda s: jnp.zeros((n, *s.shape), s.dtype), item_spec)
    return strip_weak_types(Sample(
        items=items, ids=jnp.arange(n, dtype=jnp.int32),
        probabilities=jnp.zeros((n,), jnp.float32), size=jnp.zeros((), jnp.int32),
        priorities=jnp.zeros((n,), jnp.float32)))

  def add(self, state: Sample, items: PyTree, priorities: Optional[jax.Array] = None):
    """No-op: the runtime inserts on the host."""
    del items, priorities
    return state

  def can_sample(self, state: Sample) -> jax.Array:
    del state
    return jnp.bool_(True)  # The runtime only hands over batches it could draw.

  def sample(self, state: Sample, key: jax.Array) -> Sample:
    del key
    return state

  def update_priorities(self, state: Sample, sample: Sample,
                        priorities: jax.Array) -> Sample:
    """Keeps the new priorities in the state, for the runtime to write back."""
    del sample
    return state._replace(priorities=jnp.asarray(priorities, jnp.float32))
