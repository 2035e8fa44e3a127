"""On-device prioritized replay: a FIFO ring buffer that lives inside the compiled program.

The buffer is a pytree of fixed-size arrays (`DeviceReplayState`), and every method is a
pure function of it, so a replay can be scanned, jitted and laid over a device mesh with the rest of the
agent; each replica (device of the mesh) owns its own shard. `add` writes N items at `next_index`
(wrapping, so the oldest items go first); `sample` draws `batch_size` slots with
replacement, with probability p_i^alpha / sum_j p_j^alpha, by inverse CDF (a cumulative
sum and binary searches: O(capacity + batch_size log capacity), so a prioritized draw
costs about what a uniform one does; `benchmarks/replay.py --part=priorities`). Empty
slots have priority 0, and 0-priority slots are never drawn.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.replay.table import check_local_table, default_error_buffer
from podracer.experience import Sample
from podracer.lifecycle.memory import check_device_fits, tree_bytes
from podracer.types import PyTree, strip_weak_types


def inverse_cdf_draw(weights: jax.Array, key: jax.Array,
                     count: int) -> Tuple[jax.Array, jax.Array]:
  """`count` indices drawn with replacement with probability weights_i / sum(weights),
  and that sum, by inverse CDF: one cumulative sum and `count` binary searches,
  O(N + count log N), where a categorical draw costs O(count * N). A 0-weight index is
  never drawn (its running sum equals the one before it); weights too small to move a
  float32 running sum (below about 1e-7 of the total) are not drawn either. All-zero
  weights give index 0.
  """
  cdf = jnp.cumsum(weights)
  u = jax.random.uniform(key, (count,), cdf.dtype) * cdf[-1]
  indices = jnp.searchsorted(cdf, u, side="right")
  # u rounded up to the total would fall past the end: the last index that has weight
  # (the first whose running sum is the total).
  last = jnp.searchsorted(cdf, cdf[-1], side="left")
  return jnp.minimum(indices, last).astype(jnp.int32), cdf[-1]


class DeviceReplayState(NamedTuple):
  items: PyTree              # [capacity, ...] per leaf
  priorities: jax.Array      # [capacity] float32; 0 for empty slots
  weights: jax.Array         # [capacity] float32: priority^alpha (0 for priority 0), kept
                             # up to date as priorities change so no draw recomputes it
  next_index: jax.Array      # [] int32: the slot the next item goes to
  size: jax.Array            # [] int32: filled slots (always slots 0..size-1)
  max_priority: jax.Array    # [] float32: the largest priority seen so far
  inserts: jax.Array         # [] int32: items added, in total
  samples: jax.Array         # [] int32: sampled items given new priorities, in total


@registry.replay.register("device")
class DeviceReplay:
  """Prioritized FIFO replay held in device memory (see the module docstring).

  Its arguments are the `reverb` replay's, so `--config.replay.name` switches between them.

  Args:
    max_size: slots in the buffer (per replica); the oldest items are overwritten.
    batch_size: items per `sample`.
    priority_exponent: alpha; 0 samples the filled slots uniformly.
    min_size: `can_sample` is false until the buffer holds this many items.
    initial_priority: the priority of items added before any priority is known.
    samples_per_insert: with it, `can_sample` is also false while the items given new
      priorities would exceed samples_per_insert * (inserts - min_size) + error_buffer,
      Reverb's SampleToInsertRatio limit on the sampling side (the runtime sets the
      insert pace). None: no limit.
    error_buffer: slack of that limit; default max(1, samples_per_insert) * batch_size.
    address: Reverb's server address; must stay None (this replay has no server).
    checkpoint: None or True: the buffer is part of the learner's state, which every
      checkpoint of the run holds (podracer/lifecycle/checkpoint.py); it cannot be left out.
  """

  kind = "device"

  def __init__(self, max_size: int, batch_size: int, priority_exponent: float = 0.9,
               min_size: int = 1, initial_priority: float = 1.0,
               samples_per_insert: Optional[float] = None,
               error_buffer: Optional[float] = None, address: Optional[str] = None,
               checkpoint: Optional[bool] = None):
    if checkpoint is False:
      raise ValueError("`checkpoint=False`: this replay's buffer is part of the learner's "
                       "state, which every checkpoint holds; it cannot be left out.")
    check_local_table(address, "on the devices", max_size=max_size, min_size=min_size,
                      batch_size=batch_size, samples_per_insert=samples_per_insert,
                      error_buffer=error_buffer, priority_exponent=priority_exponent,
                      initial_priority=initial_priority)
    self.samples_per_insert = samples_per_insert
    self.error_buffer = (float(error_buffer) if error_buffer is not None else
                         default_error_buffer(samples_per_insert or 1.0, batch_size))
    self.capacity, self.batch_size, self.min_size = max_size, batch_size, min_size
    self.priority_exponent = float(priority_exponent)
    self.initial_priority = float(initial_priority)

  def init(self, item_spec: PyTree) -> DeviceReplayState:
    """An empty buffer; `item_spec` has a shape and dtype per leaf, for ONE item.

    Raises ConfigError, before allocating, if the buffer cannot fit on the device.
    """
    check_device_fits(
        f"The device replay ({self.capacity:,} items of "
        f"{tree_bytes(item_spec):,} bytes, per device)",
        tree_bytes(item_spec, self.capacity) + 4 * self.capacity,
        ["replay.max_size", "replay.name=host"])
    items = jax.tree_util.tree_map(
        lambda s: jnp.zeros((self.capacity, *s.shape), s.dtype), item_spec)
    zero = jnp.zeros((), jnp.int32)
    return strip_weak_types(DeviceReplayState(
        items=items, priorities=jnp.zeros((self.capacity,), jnp.float32),
        weights=jnp.zeros((self.capacity,), jnp.float32),
        next_index=zero, size=zero,
        max_priority=jnp.asarray(self.initial_priority, jnp.float32),
        inserts=zero, samples=zero))

  def add(self, state: DeviceReplayState, items: PyTree,
          priorities: Optional[jax.Array] = None) -> DeviceReplayState:
    """Writes N items (leaves [N, ...]) over the N oldest slots, N at most `max_size` (a
    larger N is refused: one scatter cannot write a slot twice); without priorities each
    gets the largest priority written so far."""
    leaves = jax.tree_util.tree_leaves(items)
    if not leaves:
      raise ValueError("`items` has no arrays to add.")
    n = leaves[0].shape[0]
    if n > self.capacity:
      # Slots would repeat within one scatter, whose winner XLA does not define.
      raise ValueError(f"Cannot add {n} items at once to a replay of `max_size` "
                       f"{self.capacity}.")

    def write(buffer, x):
      x = jnp.asarray(x)
      if x.shape != (n, *buffer.shape[1:]):
        raise ValueError(f"`items` leaf has shape {x.shape}, expected "
                         f"{(n, *buffer.shape[1:])} (N items of the spec given to init).")
      return buffer.at[slots].set(x.astype(buffer.dtype))

    slots = (state.next_index + jnp.arange(n, dtype=jnp.int32)) % self.capacity
    new_items = jax.tree_util.tree_map(write, state.items, items)
    if priorities is None:
      priorities = jnp.full((n,), state.max_priority, jnp.float32)
    else:
      priorities = jnp.maximum(jnp.asarray(priorities, jnp.float32).reshape(n), 0.0)
    return state._replace(
        items=new_items,
        priorities=state.priorities.at[slots].set(priorities),
        weights=state.weights.at[slots].set(self._weight(priorities)),
        next_index=(state.next_index + n) % self.capacity,
        size=jnp.minimum(state.size + n, self.capacity),
        max_priority=jnp.maximum(state.max_priority, jnp.max(priorities)),
        inserts=state.inserts + n)

  def can_sample(self, state: DeviceReplayState) -> jax.Array:
    ready = state.size >= max(self.min_size, 1)
    if self.samples_per_insert is None:
      return ready
    allowed = (self.samples_per_insert * (state.inserts - self.min_size).astype(jnp.float32)
               + self.error_buffer)
    return ready & ((state.samples + self.batch_size).astype(jnp.float32) <= allowed)

  def size(self, state: DeviceReplayState) -> jax.Array:
    return state.size

  def counts(self, state: DeviceReplayState):
    """(items added, sampled items given new priorities) in total; per replica when the
    state is replicated. The runtime turns them into rates."""
    return state.inserts, state.samples

  def sample(self, state: DeviceReplayState, key: jax.Array) -> Sample:
    """`batch_size` slots drawn with replacement, proportionally to priority^alpha."""
    valid = state.priorities > 0
    if self.priority_exponent == 0:
      return self._sample_uniform(state, valid, key)
    weights = state.weights
    indices, total = inverse_cdf_draw(weights, key, self.batch_size)
    # An empty buffer gives finite values; the agent does not learn from it (`can_sample`).
    probabilities = jnp.where(total > 0, weights[indices] / jnp.maximum(total, 1e-30),
                              1.0 / self.capacity)
    items = jax.tree_util.tree_map(lambda buffer: buffer[indices], state.items)
    return Sample(items=items, ids=indices, probabilities=probabilities,
                  size=state.size, priorities=jnp.zeros((self.batch_size,), jnp.float32))

  def items_added_since(self, state: DeviceReplayState, sample: Sample) -> jax.Array:
    """[batch] int32: the items added after each sampled one (0: the newest item). In a
    FIFO ring the slot before `next_index` holds the newest item."""
    return (state.next_index - 1 - sample.ids) % self.capacity

  def _weight(self, priorities: jax.Array) -> jax.Array:
    """priority^alpha; 0, not 0^alpha, for priority 0: such slots are never drawn."""
    return jnp.where(priorities > 0, jnp.power(priorities, self.priority_exponent), 0.0)

  def _sample_uniform(self, state: DeviceReplayState, valid: jax.Array,
                      key: jax.Array) -> Sample:
    """alpha = 0: uniform over the slots with priority > 0, by an exact integer inverse
    CDF: the same distribution as the weighted draw, with no rounding."""
    filled = jnp.cumsum(valid.astype(jnp.int32))
    count = filled[-1]
    # The u-th valid slot (from 0) is the first whose running count exceeds u.
    u = jax.random.randint(key, (self.batch_size,), 0, jnp.maximum(count, 1))
    indices = jnp.searchsorted(filled, u, side="right").astype(jnp.int32)
    # An empty buffer gives slot 0; the agent does not learn from it (`can_sample`).
    indices = jnp.minimum(indices, self.capacity - 1)
    probabilities = jnp.full((self.batch_size,), 1.0, jnp.float32) / jnp.maximum(
        count, 1).astype(jnp.float32)
    items = jax.tree_util.tree_map(lambda buffer: buffer[indices], state.items)
    return Sample(items=items, ids=indices, probabilities=probabilities,
                  size=state.size, priorities=jnp.zeros((self.batch_size,), jnp.float32))

  def update_priorities(self, state: DeviceReplayState, sample: Sample,
                        priorities: jax.Array) -> DeviceReplayState:
    """Sets the sampled slots' priorities (a slot drawn twice keeps one of its values).

    Slots that were empty when sampled keep priority 0, so a batch drawn from an empty
    buffer cannot make its zero items sampleable.
    """
    filled = sample.ids < state.size
    priorities = jnp.maximum(jnp.asarray(priorities, jnp.float32), 0.0)
    priorities = jnp.where(filled, priorities, state.priorities[sample.ids])
    written = state.priorities.at[sample.ids].set(priorities)
    # Weights from the values the scatter kept, so a slot drawn twice agrees with itself.
    weights = state.weights.at[sample.ids].set(self._weight(written[sample.ids]))
    return state._replace(
        priorities=written, weights=weights,
        max_priority=jnp.maximum(state.max_priority,
                                 jnp.max(jnp.where(filled, priorities, 0.0))),
        samples=state.samples + sample.ids.shape[0])
