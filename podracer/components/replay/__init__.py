"""Replay components (`registry.replay`): where off-policy agents keep their experience.

An agent talks to its replay only through in-graph methods that mean the same thing for
every kind, so the agent's code does not change when `--config.replay.name` does:

  init(item_spec) -> state               item_spec: PyTree of jax.ShapeDtypeStruct, ONE item
  add(state, items, priorities) -> state items: PyTree of [N, ...] (e.g. sequences)
  can_sample(state) -> bool scalar       enough items to learn from
  sample(state, key) -> Sample           `batch_size` items, proportional to priority^alpha
  update_priorities(state, sample, priorities) -> state

Kinds (`kind` attribute):
  "device"  The buffer is a pytree inside the compiled program (Anakin; Sebulba learners).
            Under pmap each replica owns its own shard of the buffer.
  "host"    The buffer is a server (Reverb). The runtime inserts items and samples batches
            on the host; the in-graph state is the sampled batch (a `Sample`): `add` leaves
            it alone, `sample` returns it, `update_priorities` stores the new priorities in
            it for the runtime to send back. Host replays also implement the runtime side:
            `start(item_spec)`, `insert(items, priorities)`, `sample_batch(batch_size)`,
            `write_priorities(keys, priorities)`, `info()`, `close()`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from podracer.types import PyTree


class Sample(NamedTuple):
  """A batch drawn from a replay, with what prioritized replay's corrections need."""
  items: PyTree              # [batch, ...] the sampled items
  indices: jax.Array         # [batch] int32: buffer slots (device) / rows of the host batch
  probabilities: jax.Array   # [batch] float32: the probability each item was drawn with
  size: jax.Array            # [] int32: items in the replay when the batch was drawn
  priorities: jax.Array      # [batch] float32: new priorities (host kind), else unused


def importance_weights(sample: Sample, exponent: float) -> jax.Array:
  """Prioritized replay's (size * P(i))^-beta, normalised by its maximum (Schaul et al.)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  size = jnp.maximum(sample.size.astype(jnp.float32), 1.0)
  weights = jnp.power(size * jnp.maximum(sample.probabilities, 1e-12), -exponent)
  return weights / jnp.max(weights)


__all__ = ["Sample", "importance_weights"]

# Importing the implementations registers them (Reverb itself is imported lazily).
from podracer.components.replay import device, reverb_replay  # noqa: E402,F401
