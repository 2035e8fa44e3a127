"""Host-memory replay (`replay.name=host`): prioritized sequences over stored timelines.

A host replay (see the package docstring) for the default install lane, which has no
Reverb: Sebulba's actor threads `insert` sequences, the learner thread `sample_batch`es
and `write_priorities`. Unlike Reverb (and the device replay), it stores each
environment's timeline once:

* Timelines. Items are sequences of S steps (a `Trajectory`: `timestep`, `action`,
  `extras` per step; `actor_state` once per item), and one stream's consecutive items
  share `overlap` = K steps (`start(item_spec, overlap)`). Row b of every insert from one
  thread continues stream b of that thread (Sebulba's actor threads own their
  environments). Each item therefore adds T = S - K new steps, a "chunk"; the buffer is a
  FIFO ring of chunks (one slot per item, `max_size` slots), and an item is its chunk plus
  the last K steps of the chunks before it in its stream, found through `prev` links. A
  stream's first item also brings its K earlier steps, stored as ceil(K / T) chunks that
  are not items.
* Frame stacks. An observation leaf of uint8 frame stacks [F, H, W] (channels first, as
  EnvPool's Atari) keeps only each step's newest frame. The rest of a stack is rebuilt at
  sample time from the frames of the steps before it, which is exact wherever the stack
  is the previous one shifted by a frame. Where it is not (an episode's first step, the
  padding a stream starts with, any step of an environment that stacks differently) the
  step is a "key": its F-1 older frames go to a key ring, and the steps after it rebuild
  their older frames from that key until F-1 newer frames exist. So stacks come back
  exactly as inserted, whatever an environment fills a new episode's stack with.
* Priorities. A sum tree over the slots holds priority^alpha; sampling descends it for
  a whole batch at once (O(batch log max_size) numpy operations). Items drawn with a
  link to a chunk (or key) the ring has since overwritten are dropped and drawn again.
* Rate. `samples_per_insert` holds samples within `error_buffer` of
  samples_per_insert * (inserts - min_size), blocking whichever side runs ahead, as
  Reverb's SampleToInsertRatio does; a wait longer than `timeout` raises ReplayTimeout.
* Memory. Buffers are `np.empty`: the kernel backs their pages only once written, so
  the ring holds what it has filled (reported as `replay_bytes`). `start` still refuses
  a capacity whose full size exceeds this machine's total memory: the run would be
  killed when the ring fills, hours in.

Why not Flashbax: it is not a dependency of either lane, and its buffers are
jnp.zeros of the full capacity, allocated eagerly on a device; at Atari scale that is the
allocation this replay exists to avoid. Its trajectory buffer shares overlapping
sequences' steps, but does not rebuild frame stacks, so it would hold 4 frames per step.

All methods are thread-safe (one lock; actor threads insert while the learner samples).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np

from podracer import registry
from podracer.components.replay.table import check_local_table, default_error_buffer
from podracer.components.replay.sampled import SampledBatch
from podracer.errors import ReplayTimeout
from podracer.lifecycle.memory import check_fits, gib, host_memory
from podracer.types import PyTree, Trajectory


class SumTree:
  """Sums of non-negative values over `capacity` leaves; batched updates and draws."""

  def __init__(self, capacity: int):
    self.size = 1 << max(0, math.ceil(math.log2(max(capacity, 1))))
    self.tree = np.zeros(2 * self.size, np.float64)

  @property
  def total(self) -> float:
    return float(self.tree[1])

  def get(self, index: np.ndarray) -> np.ndarray:
    return self.tree[self.size + index]

  def set(self, index: np.ndarray, values: np.ndarray) -> None:
    # Duplicates: numpy keeps one of the values, as the device replay's scatter does.
    nodes = self.size + np.asarray(index, np.int64)
    self.tree[nodes] = values
    nodes = np.unique(nodes // 2)
    while nodes[0] >= 1:
      self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
      if nodes[0] == 1:
        break
      nodes = np.unique(nodes // 2)

  def find(self, mass: np.ndarray) -> np.ndarray:
    """The leaf whose cumulative interval holds each mass in [0, total)."""
    node = np.ones(mass.shape, np.int64)
    mass = mass.copy()
    while node[0] < self.size:
      left = self.tree[2 * node]
      right = mass >= left
      mass -= np.where(right, left, 0.0)
      node = 2 * node + right
    return node - self.size


class _Stream:
  """One inserting thread's streams: the last chunks written per row and its key state."""

  def __init__(self, rows: int, depth: int):
    self.chain = np.full((rows, depth), -1, np.int64)  # last `depth` serials, newest last
    self.key_ref = np.full((rows,), -1, np.int64)       # latest key per row
    self.key_dist = np.zeros((rows,), np.int64)         # steps since it


@registry.replay.register("host")
class HostReplay(SampledBatch):
  """Prioritized sequence replay in host memory (see the module docstring).

  Args: those of the `device` and `reverb` replays (so `--config.replay.name` switches
  between them): `max_size` items (sequences), `batch_size`, `min_size`,
  `samples_per_insert`, `error_buffer` (default max(1, samples_per_insert) * batch_size),
  `priority_exponent` (alpha), `initial_priority` (of items inserted without one);
  `address` must stay None (no server), `checkpoint` unset or False (its contents are
  not checkpointed yet). `timeout`: seconds a call waits on the rate
  limiter before raising ReplayTimeout. `seed`: of the sampling generator.
  """

  def __init__(self, batch_size: int, max_size: int, min_size: int = 1,
               samples_per_insert: Optional[float] = None,
               error_buffer: Optional[float] = None, priority_exponent: float = 0.9,
               initial_priority: float = 1.0, address: Optional[str] = None,
               timeout: float = 2.0, seed: int = 0, checkpoint: Optional[bool] = None):
    if checkpoint:
      raise ValueError("`checkpoint=True`: the host replay's contents are not checkpointed "
                       "yet (a resumed run starts with an empty replay); leave "
                       "`replay.checkpoint` unset, or use the device or Reverb replay.")
    check_local_table(address, "in this process", max_size=max_size, min_size=min_size,
                      batch_size=batch_size, samples_per_insert=samples_per_insert,
                      error_buffer=error_buffer, priority_exponent=priority_exponent,
                      initial_priority=initial_priority, timeout=timeout)
    self.batch_size, self.max_size, self.min_size = batch_size, max_size, min_size
    self.samples_per_insert = samples_per_insert
    self.error_buffer = (float(error_buffer) if error_buffer is not None else
                         default_error_buffer(samples_per_insert or 1.0, batch_size))
    self.priority_exponent = float(priority_exponent)
    self.initial_priority = float(initial_priority)
    self.timeout = float(timeout)
    self._rng = np.random.default_rng(seed)
    self._cond = threading.Condition()
    self._started = self._closed = False
    self._streams: Dict[int, _Stream] = {}
    self.inserts = self.samples = self._held = 0
    self._next_serial = self._next_key = 0

  # -- layout ---------------------------------------------------------------------------

  def start(self, item_spec: PyTree, overlap: int = 0) -> None:
    """Lays the buffers out for items like `item_spec` (ONE item) that repeat the last
    `overlap` steps of their stream's previous item; checks they fit in host memory."""
    if self._started:
      raise RuntimeError("HostReplay.start() was already called.")
    needed = self.bytes_needed(item_spec, overlap)
    total, _ = host_memory()
    check_fits(
        f"The host replay at capacity ({self.max_size:,} sequences of {self.new_steps} new "
        f"steps, {self.bytes_per_step:,.0f} bytes per step; it allocates pages as it fills "
        f"them, but would outgrow this machine before it was full)", needed, total,
        "this machine's total memory",
        ["replay.max_size", "env.img_height", "env.img_width"])
    n = self.max_size
    # np.empty: the kernel backs pages when first written, so memory grows as it fills.
    self._steps = [np.empty((n * self.new_steps, *shape), dtype)
                   for shape, dtype in self._step_shapes]
    self._keys = {i: np.empty((n, *shape), dtype) for i, (shape, dtype) in
                  self._key_shapes.items()}
    self._items = [np.empty((n, *shape), dtype) for shape, dtype in self._item_shapes]
    if self._keys:
      self._key_ref = np.empty((n * self.new_steps,), np.int64)
      self._key_dist = np.empty((n * self.new_steps,), np.uint8)
    self._serial = np.full((n,), -1, np.int64)
    self._prev = np.full((n,), -1, np.int64)
    self._is_item = np.zeros((n,), bool)
    self._tree = SumTree(n)
    self._started = True

  def bytes_needed(self, item_spec: PyTree, overlap: int = 0) -> int:
    """Bytes the buffers take at capacity for such items (nothing is allocated); sets
    `bytes_per_step`, those per stored env step."""
    if isinstance(item_spec, Trajectory):
      steps = (item_spec.timestep, item_spec.action, item_spec.extras)
      per_item = item_spec.actor_state
      length = int(item_spec.timestep.step_type.shape[0])
    else:  # Not a sequence (e.g. transitions): every leaf belongs to the item.
      steps, per_item, length, overlap = (), item_spec, 1, 0
    if not 0 <= overlap < length:
      raise ValueError(f"Items of {length} steps cannot repeat {overlap} of them.")
    self._treedef = jax.tree_util.tree_structure(item_spec)
    self._sequences = isinstance(item_spec, Trajectory)
    self._step_def = jax.tree_util.tree_structure(steps)
    self._item_def = jax.tree_util.tree_structure(per_item)
    self.overlap, self.length, self.new_steps = overlap, length, length - overlap
    spec = lambda leaf, skip: (tuple(int(d) for d in leaf.shape[skip:]), np.dtype(leaf.dtype))
    step_leaves = jax.tree_util.tree_leaves(steps)
    frames = [_is_frame_stack(leaf) for leaf in step_leaves]
    # A frame leaf keeps one [H, W] frame per step; its keys the F-1 older ones.
    self._step_shapes = [spec(leaf, 2 if f else 1) for leaf, f in zip(step_leaves, frames)]
    self._key_shapes = {i: ((leaf.shape[1] - 1, *spec(leaf, 2)[0]), np.dtype(leaf.dtype))
                        for i, (leaf, f) in enumerate(zip(step_leaves, frames)) if f}
    self._item_shapes = [spec(leaf, 0) for leaf in jax.tree_util.tree_leaves(per_item)]
    if len({shape[0] for shape, _ in self._key_shapes.values()}) > 1:
      raise ValueError("Observation frame stacks of different depths are not supported.")
    self.stack = 1 + max([shape[0] for shape, _ in self._key_shapes.values()], default=0)
    t = self.new_steps
    # Chunks an item reads before its own: those holding its K earlier steps, and the
    # F-1 frames before them that rebuild its first stacks.
    self.depth = max(1, math.ceil((overlap + self.stack - 1) / t))
    nbytes = lambda shapes: sum(math.prod(shape) * dtype.itemsize for shape, dtype in shapes)
    self.chunk_bytes = (t * nbytes(self._step_shapes) + nbytes(self._item_shapes)
                        + 17 + (9 * t if self._key_shapes else 0))  # links; key refs
    # The key ring has a slot per chunk (one episode start per T steps, at most).
    self.key_bytes = nbytes(self._key_shapes.values())
    self.bytes_per_step = (self.chunk_bytes + self.key_bytes) / t
    tree = 2 * 8 * (1 << max(0, math.ceil(math.log2(self.max_size))))
    return self.max_size * (self.chunk_bytes + self.key_bytes) + tree

  @property
  def steps_stored(self) -> int:
    """Env steps the ring holds (the new steps of its chunks)."""
    return min(self._next_serial, self.max_size) * self.new_steps

  @property
  def bytes_used(self) -> int:
    """Bytes of the buffers' filled part (pages never written take no memory)."""
    chunks = min(self._next_serial, self.max_size)
    keys = min(self._next_key, self.max_size)
    return chunks * self.chunk_bytes + keys * self.key_bytes + self._tree.tree.nbytes

  # -- rate limiter ---------------------------------------------------------------------

  def _insert_allowed(self) -> bool:
    if self.samples_per_insert is None or self._held < self.min_size:
      return True
    ahead = self.samples_per_insert * (self.inserts - self.min_size) - self.samples
    return ahead <= self.error_buffer

  def _sample_allowed(self, n: int) -> bool:
    if self._held < max(self.min_size, 1) or self._tree.total <= 0:
      return False
    if self.samples_per_insert is None:
      return True
    allowed = self.samples_per_insert * (self.inserts - self.min_size) + self.error_buffer
    return self.samples + n <= allowed

  def _wait(self, ready, what: str) -> None:
    if not self._cond.wait_for(lambda: self._closed or ready(), self.timeout):
      raise ReplayTimeout(f"The host replay's {what} waited {self.timeout:g}s on its rate "
                          f"limiter (retry unless the run is stopping).")
    if self._closed:
      raise RuntimeError(f"HostReplay.{what}() after close().")

  # -- insert ---------------------------------------------------------------------------

  def insert(self, items: PyTree, priorities: Optional[np.ndarray] = None,
             stream: Any = None) -> None:
    """Inserts N sequences (leaves [N, ...]); row b continues stream b of `stream` (a
    hashable name; None: the calling thread's, as each Sebulba actor thread's rows are its
    environments; SEED names each worker connection's)."""
    stream_key = threading.get_ident() if stream is None else ("named", stream)
    if not self._started:
      raise RuntimeError("HostReplay.insert() before start(item_spec).")
    leaves, treedef = jax.tree_util.tree_flatten(items)
    if treedef != self._treedef:
      raise ValueError(f"`items` has structure {treedef}, but start() was given "
                       f"{self._treedef}.")
    if self._sequences:
      steps = [np.asarray(x) for x in
               jax.tree_util.tree_leaves((items.timestep, items.action, items.extras))]
      per_item = [np.asarray(x) for x in jax.tree_util.tree_leaves(items.actor_state)]
    else:
      steps, per_item = [], [np.asarray(x) for x in leaves]
    rows = (steps or per_item)[0].shape[0]
    for x, buffer in zip(steps, self._steps):
      if x.shape[:2] != (rows, self.length):
        raise ValueError(f"A step leaf is {list(x.shape)}; expected [{rows}, "
                         f"{self.length}, ...] (N sequences of the spec given to start()).")
    prio = (np.full((rows,), self.initial_priority) if priorities is None else
            np.maximum(np.asarray(priorities, np.float64).reshape(rows), 0.0))
    with self._cond:
      self._wait(self._insert_allowed, "insert")
      stream = self._streams.get(stream_key)
      if stream is not None and stream.chain.shape[0] != rows:
        raise ValueError(f"This stream inserted {stream.chain.shape[0]} sequences at a "
                         f"time before, and {rows} now: its rows are its streams.")
      if stream is None:
        stream = self._streams[stream_key] = self._open_stream(rows, steps)
      else:
        self._check_continues(stream, steps)
      forced = before = None
      if self.overlap:  # The step before the new ones is the item's step K-1.
        before = [x[:, self.overlap - 1] for x in steps]
      else:  # No step before them in the item: the first new step is a key.
        forced = np.zeros((rows, self.new_steps), bool)
        forced[:, 0] = True
      new = [x[:, self.overlap:] for x in steps]
      self._append(stream, new, per_item, prio, forced, before)
      self.inserts += rows
      self._cond.notify_all()

  def _open_stream(self, rows: int, steps: List[np.ndarray]) -> _Stream:
    """A new stream: its first items' K earlier steps first, right-aligned in non-item
    chunks; its first step is a key (no stack before it)."""
    stream = _Stream(rows, self.depth)
    lead = math.ceil(self.overlap / self.new_steps)
    if lead:
      pad = lead * self.new_steps - self.overlap
      head = [np.concatenate([np.repeat(x[:, :1], pad, 1), x[:, :self.overlap]], 1)
              for x in steps]
      forced = np.zeros((rows, lead * self.new_steps), bool)
      forced[:, pad] = True
      self._append(stream, head, None, None, forced, before=None)
    return stream

  def _check_continues(self, stream: _Stream, steps: List[np.ndarray]) -> None:
    """Items must repeat their stream's last K steps: compares the small step leaves."""
    if not self.overlap:
      return
    addresses = self._addresses(stream.chain, np.arange(-self.overlap, 0) + self.new_steps)
    # Rows whose last chunks a small ring already overwrote cannot be compared.
    chain = stream.chain
    rows = np.all((chain < 0) | (self._serial[np.maximum(chain, 0) % self.max_size] == chain),
                  axis=1)
    for i, (x, buffer) in enumerate(zip(steps, self._steps)):
      if i in self._keys or x[0, 0].size > 64:
        continue
      if not np.array_equal(buffer[addresses[rows]], x[rows, :self.overlap]):
        raise ValueError(
            f"Inserted sequences do not repeat the last {self.overlap} steps of this "
            f"thread's previous ones (the `overlap` given to start()): each thread's rows "
            f"must continue the same environments.")

  def _append(self, stream: _Stream, steps: List[np.ndarray],
              per_item: Optional[List[np.ndarray]], priorities: Optional[np.ndarray],
              forced_keys: Optional[np.ndarray], before: Optional[List[np.ndarray]]):
    """Writes steps [rows, m*T, ...] as m chunks per row; the last chunks are items when
    `per_item` is given. `before`: the step before the first one, to find keys."""
    t, n = self.new_steps, self.max_size
    rows = stream.chain.shape[0]
    width = steps[0].shape[1] if steps else t
    m = width // t
    serials = self._next_serial + np.arange(m * rows, dtype=np.int64).reshape(m, rows).T
    slots = serials % n
    # Slots overwritten: what pointed at their old chunk fails the serial check later.
    old = slots.reshape(-1)
    self._tree.set(old, np.zeros(old.shape))
    self._held -= int(np.count_nonzero(self._is_item[old]))
    self._is_item[old] = False
    prev = np.concatenate([stream.chain[:, -1:], serials[:, :-1]], 1)
    self._serial[slots], self._prev[slots] = serials, prev
    addresses = (slots[:, :, None] * t + np.arange(t)).reshape(rows, width)
    flat = addresses.reshape(-1)
    for i, (x, buffer) in enumerate(zip(steps, self._steps)):
      buffer[flat] = (x[:, :, -1] if i in self._keys else x).reshape(-1, *buffer.shape[1:])
    if self._keys:
      self._write_keys(stream, steps, forced_keys, before, flat)
    if per_item is not None:
      last = slots[:, -1]
      for x, buffer in zip(per_item, self._items):
        buffer[last] = x
      self._is_item[last] = True
      self._held += rows
      self._tree.set(last, self._mass(priorities))
    stream.chain = np.concatenate([stream.chain, serials], 1)[:, -self.depth:]
    self._next_serial += m * rows

  def _write_keys(self, stream: _Stream, steps, forced, before, flat) -> None:
    """Finds key steps (stack != the step before's stack shifted by one frame), stores
    their older frames, and every step's latest key and distance to it."""
    rows, width = steps[0].shape[:2]
    is_key = np.zeros((rows, width), bool) if forced is None else forced.copy()
    for i in self._keys:
      x = steps[i]
      is_key[:, 1:] |= np.any(
          (x[:, 1:, :-1] != x[:, :-1, 1:]).reshape(rows, width - 1, -1), axis=2)
      if before is not None:
        is_key[:, 0] |= np.any((x[:, 0, :-1] != before[i][:, 1:]).reshape(rows, -1), 1)
    ids = self._next_key + np.cumsum(is_key.reshape(-1)) - 1
    ids = ids.reshape(rows, width)
    position = np.where(is_key, np.arange(width), -1)
    last_key = np.maximum.accumulate(position, axis=1)
    has = last_key >= 0
    take = np.take_along_axis(ids, np.maximum(last_key, 0), 1)
    ref = np.where(has, take, stream.key_ref[:, None])
    dist = np.where(has, np.arange(width) - last_key,
                    stream.key_dist[:, None] + 1 + np.arange(width))
    key_slots = ids[is_key] % self.max_size
    for i, ring in self._keys.items():
      ring[key_slots] = steps[i][is_key][:, :-1]
    self._key_ref[flat] = ref.reshape(-1)
    self._key_dist[flat] = np.minimum(dist, 255).reshape(-1)
    stream.key_ref, stream.key_dist = ref[:, -1].copy(), dist[:, -1].copy()
    self._next_key += int(np.count_nonzero(is_key))

  # -- sample ---------------------------------------------------------------------------

  def _addresses(self, chains: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Step addresses [B, len(offsets)] of offsets relative to the newest chunk's start
    (negative: earlier chunks); chains [B, depth] are serials, newest last (-1: none)."""
    t, depth = self.new_steps, chains.shape[1]
    column = depth - 1 + offsets // t
    serial = chains[:, column]
    return (np.maximum(serial, 0) % self.max_size) * t + offsets % t

  def _chains(self, slots: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Serials [B, depth+1] of each item's chunk and those before it, and whether each
    item's chunks (and keys) are all still stored."""
    chains = np.full((len(slots), self.depth + 1), -1, np.int64)
    chains[:, -1] = self._serial[slots]
    ok = self._is_item[slots] & (chains[:, -1] >= 0)
    for j in range(self.depth - 1, -1, -1):
      prev = self._prev[chains[:, j + 1] % self.max_size]
      prev = np.where(chains[:, j + 1] >= 0, prev, -1)
      # -1: the stream began there (never read); else the chunk must still be stored.
      ok &= (prev < 0) | (self._serial[np.maximum(prev, 0) % self.max_size] == prev)
      chains[:, j] = prev
    return chains, ok

  def sample_batch(self, batch_size: Optional[int] = None
                   ) -> Tuple[PyTree, np.ndarray, np.ndarray, int]:
    """Draws `batch_size` items with replacement, with probability p^alpha / sum p^alpha.

    Returns (items [B, ...] as given to `start`, keys int64 [B] for `write_priorities`,
    probabilities float32 [B], items held).
    """
    n = self.batch_size if batch_size is None else int(batch_size)
    with self._cond:
      self._wait(lambda: self._sample_allowed(n), "sample_batch")
      slots = np.zeros((n,), np.int64)
      todo = np.arange(n)
      chains = np.zeros((n, self.depth + 1), np.int64)
      while len(todo):
        if self._tree.total <= 0:
          raise ReplayTimeout("Every item of the host replay was dropped while sampling.")
        drawn = self._tree.find(self._rng.uniform(0, self._tree.total, len(todo)))
        drawn = np.minimum(drawn, self.max_size - 1)
        got, stored = self._chains(drawn)
        if self._keys:
          stored &= self._keys_stored(got)
        gone = np.unique(drawn[~stored])
        if len(gone):  # Links to overwritten chunks or keys: these items are gone.
          self._held -= int(np.count_nonzero(self._is_item[gone]))
          self._is_item[gone] = False
          self._tree.set(gone, np.zeros(gone.shape))
        # A rounding error may land on a leaf of priority 0: draw that one again.
        ok = stored & (self._tree.get(drawn) > 0)
        slots[todo[ok]], chains[todo[ok]] = drawn[ok], got[ok]
        todo = todo[~ok]
      probabilities = (self._tree.get(slots) / self._tree.total).astype(np.float32)
      items = self._gather(slots, chains)
      self.samples += n
      size = self._held
      self._cond.notify_all()
    return items, self._serial[slots].copy(), probabilities, size

  def sampled_age(self, keys: np.ndarray) -> float:
    """Env steps taken since the items `keys` (from `sample_batch`) were inserted, mean
    over them: each chunk inserted after an item's last one is `new_steps` env steps of
    one environment (0: the newest item)."""
    with self._cond:
      newest = self._next_serial - 1
    return float(np.mean(newest - np.asarray(keys, np.int64))) * self.new_steps

  def _keys_stored(self, chains: np.ndarray) -> np.ndarray:
    """Whether the keys these items' steps rebuild their stacks from are still stored."""
    own = self._addresses(chains, np.arange(-self.overlap, self.new_steps))
    needed = self._key_dist[own] < self.stack - 1
    stored = self._key_ref[own] >= self._next_key - self.max_size
    return np.all(stored | ~needed, axis=1)

  def _gather(self, slots: np.ndarray, chains: np.ndarray) -> PyTree:
    lookback = self.stack - 1
    offsets = np.arange(-self.overlap - lookback, self.new_steps)
    addresses = self._addresses(chains, offsets)          # [B, L + S]
    own = addresses[:, lookback:]                          # [B, S]
    steps = []
    for i, buffer in enumerate(self._steps):
      if i in self._keys:
        steps.append(self._stacks(i, addresses, own))
      else:
        steps.append(buffer[own])
    per_item = jax.tree_util.tree_unflatten(self._item_def,
                                            [buffer[slots] for buffer in self._items])
    if not self._sequences:
      return per_item
    timestep, action, extras = jax.tree_util.tree_unflatten(self._step_def, steps)
    return Trajectory(timestep, per_item, action, extras)

  def _stacks(self, i: int, addresses: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Frame stacks [B, S, F, ...] rebuilt from newest frames and keys."""
    frames, ring = self._steps[i][addresses], self._keys[i]  # [B, L+S, ...]
    f = ring.shape[1] + 1
    b, s = own.shape
    out = np.empty((b, s, f, *frames.shape[2:]), frames.dtype)
    dist = self._key_dist[own].astype(np.int64)
    key_slot = self._key_ref[own] % self.max_size
    for k in range(f):
      # Stack position k of step j is the newest frame of step j - (f-1-k).
      out[:, :, k] = frames[:, k:k + s]
      if k < f - 1:
        # Frames from before the step's key: the key's own older frames, shifted.
        rows, cols = np.nonzero(dist + k - (f - 1) < 0)
        out[rows, cols, k] = ring[key_slot[rows, cols], k + dist[rows, cols]]
    return out

  # -- priorities and statistics --------------------------------------------------------

  def write_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
    """Sets the priorities of the items `keys` (from sample_batch); gone ones are skipped."""
    keys = np.asarray(keys, np.int64).reshape(-1)
    priorities = np.asarray(priorities, np.float64).reshape(-1)
    if keys.shape != priorities.shape:
      raise ValueError(f"{keys.shape[0]} keys but {priorities.shape[0]} priorities.")
    if not np.all(np.isfinite(priorities)):
      raise ValueError(f"Priorities must be finite, got {priorities}.")
    with self._cond:
      slots = keys % self.max_size
      live = (self._serial[slots] == keys) & self._is_item[slots]
      if np.any(live):
        self._tree.set(slots[live], self._mass(priorities[live]))

  def _mass(self, priorities: np.ndarray) -> np.ndarray:
    """p^alpha; 0 for p <= 0 even when alpha is 0: 0-priority items are never drawn."""
    positive = priorities > 0
    return np.where(positive, np.power(np.where(positive, priorities, 1.0),
                                       self.priority_exponent), 0.0)

  def info(self) -> Dict[str, int]:
    with self._cond:
      return dict(replay_size=self._held, replay_max_size=self.max_size,
                  replay_inserts=self.inserts, replay_samples=self.samples,
                  replay_bytes=self.bytes_used if self._started else 0)

  def close(self) -> None:
    with self._cond:
      self._closed = True
      self._cond.notify_all()


def _is_frame_stack(leaf: Any) -> bool:
  """[S, F, H, W] uint8 with F > 1: channels-first frame stacks (EnvPool's Atari)."""
  return np.dtype(leaf.dtype) == np.uint8 and len(leaf.shape) >= 4 and leaf.shape[1] > 1


def describe(replay: HostReplay) -> str:
  """One line: capacity and bytes per step, for logs and benchmarks."""
  return (f"host replay: {replay.max_size:,} items x {replay.new_steps} new steps, "
          f"{replay.bytes_per_step:,.0f} bytes/step, {gib(replay.bytes_used)} filled")
