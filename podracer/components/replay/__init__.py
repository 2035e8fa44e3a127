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

Runtimes report a replay's throughput (items inserted and sampled per second, and their
ratio) with `RateMeter`, from running totals: a host replay's `info()`, or a device
replay's `counts(state)`, read on the host when a metrics record is written.
"""

from __future__ import annotations

import time
from typing import Any, Dict, NamedTuple, Optional, Tuple

import jax
import numpy as np

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


class RateMeter:
  """Turns a replay's running insert and sample totals into rates between two records."""

  def __init__(self, inserts: int = 0, samples: int = 0):
    self._totals = (inserts, samples)
    self._time = time.perf_counter()

  def rates(self, inserts: int, samples: int) -> Dict[str, float]:
    now = time.perf_counter()
    elapsed = max(now - self._time, 1e-9)
    new_inserts, new_samples = inserts - self._totals[0], samples - self._totals[1]
    self._totals, self._time = (inserts, samples), now
    return dict(replay_inserts_per_s=new_inserts / elapsed,
                replay_samples_per_s=new_samples / elapsed,
                sample_to_insert_ratio=new_samples / max(new_inserts, 1))


def device_counts(replay: Any, experience: Any) -> Optional[Tuple[int, int]]:
  """Items inserted and sampled so far, summed over replicas; None if not a device replay
  (or before its state exists). Reads two scalars per replica from the devices."""
  counts = getattr(replay, "counts", None)
  if counts is None or experience is None:
    return None
  inserts, samples = jax.device_get(counts(experience))
  return int(np.sum(inserts, dtype=np.int64)), int(np.sum(samples, dtype=np.int64))


__all__ = ["RateMeter", "Sample", "device_counts", "importance_weights"]

# Importing the implementations registers them (Reverb itself is imported lazily).
from podracer.components.replay import device, reverb_replay  # noqa: E402,F401
