"""The host-memory replay alone: timelines stored once, frame stacks rebuilt exactly,
prioritized sampling, priority updates, the rate limiter and the memory check."""

import threading

import jax
import numpy as np
import pytest

from podracer.components.replay.host import HostReplay, SumTree
from podracer.errors import ConfigError, ReplayTimeout
from podracer.types import StepType, TimeStep, Trajectory

F, H, W = 4, 3, 2


def _streams(rng, rows, steps):
  """Frame-stack timelines [rows, steps]: each step pushes a new frame, except at episode
  starts (FIRST), whose stacks are arbitrary (here random), as an environment may fill."""
  stacks = np.zeros((rows, steps, F, H, W), np.uint8)
  step_type = np.full((rows, steps), StepType.MID, np.int32)
  for b in range(rows):
    for s in range(steps):
      first = s == 0 or rng.random() < 0.08
      if first:
        stacks[b, s] = rng.integers(0, 255, (F, H, W))
        step_type[b, s] = StepType.FIRST
      else:
        stacks[b, s, :-1] = stacks[b, s - 1, 1:]
        stacks[b, s, -1] = rng.integers(0, 255, (H, W))
  return stacks, step_type


def _items(stacks, step_type, overlap, new, start_id):
  """The sequences an actor inserts: K-1 LAST padding copies of the first step, then the
  timeline; item j covers [j*T, j*T + K + T). actor_state carries each item's id."""
  rows, steps = step_type.shape
  pad = overlap - 1
  stacks = np.concatenate([np.repeat(stacks[:, :1], pad, 1), stacks], 1)
  step_type = np.concatenate([np.full((rows, pad), StepType.LAST, np.int32), step_type], 1)
  reward = np.arange(stacks.shape[1], dtype=np.float32)[None].repeat(rows, 0)
  out, ident = [], start_id
  for j in range((stacks.shape[1] - overlap) // new):
    window = slice(j * new, j * new + overlap + new)
    ids = ident + np.arange(rows, dtype=np.float32)
    ident += rows
    out.append(Trajectory(
        timestep=TimeStep(step_type[:, window], reward[:, window], np.ones_like(
            reward[:, window]), stacks[:, window]),
        actor_state=ids[:, None], action=(reward[:, window] % 3).astype(np.int32), extras={}))
  return out


def _spec(item):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), item)


def _by_id(items):
  table = {}
  for item in items:
    for b in range(item.actor_state.shape[0]):
      table[float(item.actor_state[b, 0])] = jax.tree.map(lambda x, b=b: x[b], item)
  return table


@pytest.mark.parametrize("overlap,new", [(5, 4), (3, 6), (1, 2)])
def test_sampled_sequences_and_frame_stacks_equal_what_was_inserted(overlap, new):
  rng = np.random.default_rng(0)
  threads_items = [_items(*_streams(rng, 3, 70), overlap, new, start_id=1000 * k)
                   for k in range(2)]
  replay = HostReplay(batch_size=16, max_size=25, seed=1)
  replay.start(_spec(threads_items[0][0]), overlap=overlap)
  # Two inserting threads, each continuing its own three streams, in turns; the ring wraps.
  turns = threading.Barrier(2)

  def insert_all(items):
    for item in items:
      replay.insert(item)
      turns.wait()

  workers = [threading.Thread(target=insert_all, args=(items,)) for items in threads_items]
  for worker in workers:
    worker.start()
  for worker in workers:
    worker.join()
  assert replay.info()["replay_inserts"] == 6 * len(threads_items[0])
  truth = _by_id([i for items in threads_items for i in items])
  ids = lambda rounds: {float(i.actor_state[b, 0]) for items in threads_items
                        for i in items[-rounds:] for b in range(3)}
  seen = set()
  for _ in range(20):
    items, keys, probabilities, size = replay.sample_batch()
    assert 0 < size <= 25 and np.all(probabilities > 0)
    for b in range(16):
      ident = float(items.actor_state[b, 0])
      seen.add(ident)
      expected = truth[ident]
      jax.tree.map(np.testing.assert_array_equal,
                   jax.tree.map(lambda x, b=b: x[b], items), expected)
  # FIFO: 25 slots hold at most the last 4 rounds of 6 items, and the newest are drawn.
  assert seen <= ids(4) and seen & ids(1)
  # Fewer bytes than the sequences and stacks they stand for.
  stored = replay.info()["replay_bytes"]
  assert stored < len(truth) * sum(x.nbytes for x in jax.tree.leaves(next(iter(
      truth.values()))))


def test_priorities_set_what_is_drawn_and_the_probabilities_reported():
  rng = np.random.default_rng(1)
  items = _items(*_streams(rng, 4, 40), 2, 4, start_id=0)
  replay = HostReplay(batch_size=256, max_size=100, priority_exponent=0.5, seed=2)
  replay.start(_spec(items[0]), overlap=2)
  for item in items:
    replay.insert(item)
  _, keys, probabilities, _ = replay.sample_batch()
  np.testing.assert_allclose(probabilities, 1.0 / replay._held, rtol=1e-5)
  favourite = keys[0]
  replay.write_priorities(np.array([favourite]), np.array([replay._held * 99.0]))
  _, keys, probabilities, _ = replay.sample_batch()
  share = np.mean(keys == favourite)
  expected = np.sqrt(replay._held * 99.0) / (np.sqrt(replay._held * 99.0) + replay._held - 1)
  assert abs(share - expected) < 0.1, (share, expected)
  np.testing.assert_allclose(probabilities[keys == favourite], expected, rtol=1e-4)
  # Priority 0: never drawn again; keys of overwritten items are skipped.
  replay.write_priorities(np.array([favourite, 10**9]), np.array([0.0, 5.0]))
  _, keys, _, _ = replay.sample_batch()
  assert favourite not in keys
  replay.priority_exponent = 0.0  # Uniform, but 0-priority items still never drawn.
  replay.write_priorities(np.array([keys[0]]), np.array([0.0]))
  _, again, probabilities, _ = replay.sample_batch()
  assert favourite not in again and keys[0] not in again
  np.testing.assert_allclose(probabilities[0], 1.0 / (replay._held - 2), rtol=1e-5)


def test_sampled_age_counts_the_env_steps_inserted_after_the_sampled_items():
  rng = np.random.default_rng(3)
  items = _items(*_streams(rng, 2, 30), 2, 4, start_id=0)  # 7 inserts of 2 rows
  replay = HostReplay(batch_size=512, max_size=100, priority_exponent=0.0, seed=4)
  replay.start(_spec(items[0]), overlap=2)
  for item in items:
    replay.insert(item)
  got, keys, _, _ = replay.sample_batch()
  # Item id i was the (i+1)-th inserted, each of 4 new env steps of one environment.
  newest = 2 * len(items) - 1
  ages = (newest - got.actor_state[:, 0]) * 4
  assert replay.sampled_age(keys) == pytest.approx(float(np.mean(ages)))
  assert replay.sampled_age(keys[:1]) == ages[0]
  assert 0 < replay.sampled_age(keys) < newest * 4


def test_rate_limiter_holds_samples_and_inserts_to_samples_per_insert():
  rng = np.random.default_rng(2)
  items = _items(*_streams(rng, 2, 60), 2, 2, start_id=0)
  replay = HostReplay(batch_size=4, max_size=200, min_size=4, samples_per_insert=2.0,
                      error_buffer=8.0, timeout=0.05)
  replay.start(_spec(items[0]), overlap=2)
  with pytest.raises(ReplayTimeout):  # Fewer than min_size items.
    replay.sample_batch()
  replay.insert(items[0])
  replay.insert(items[1])                    # 4 items: 2 * (4 - 4) + 8 samples allowed
  replay.sample_batch()
  replay.sample_batch()
  with pytest.raises(ReplayTimeout):
    replay.sample_batch()                    # a third batch would exceed it
  for item in items[2:6]:                    # inserting allows more (and is not held:
    replay.insert(item)                      # samples are not behind)
  for _ in range(4):
    replay.sample_batch()
  info = replay.info()
  assert (info["replay_inserts"], info["replay_samples"]) == (12, 24)
  # An insert waits while samples_per_insert * (inserts - min_size) - samples, before
  # it, exceeds error_buffer: here before the 6th of these.
  for item in items[6:11]:                   # ahead before each: -8, -4, 0, 4, 8
    replay.insert(item)
  with pytest.raises(ReplayTimeout):         # 12 > 8: the learner must catch up
    replay.insert(items[11])
  replay.sample_batch()
  replay.insert(items[11])                   # 12 - 4 = 8 <= 8 again


def test_inserts_that_do_not_continue_their_streams_are_refused():
  rng = np.random.default_rng(3)
  items = _items(*_streams(rng, 2, 30), 3, 4, start_id=0)
  replay = HostReplay(batch_size=2, max_size=50)
  replay.start(_spec(items[0]), overlap=3)
  replay.insert(items[0])
  with pytest.raises(ValueError, match="do not repeat"):
    replay.insert(items[2])


def test_capacity_beyond_this_machines_memory_is_a_config_error():
  rng = np.random.default_rng(4)
  items = _items(*_streams(rng, 1, 10), 2, 2, start_id=0)
  replay = HostReplay(batch_size=2, max_size=10**15)
  with pytest.raises(ConfigError, match=r"needs [\d,]+ bytes .*replay.max_size"):
    replay.start(_spec(items[0]), overlap=2)


def test_sum_tree_finds_the_leaf_of_each_cumulative_mass():
  tree = SumTree(5)
  tree.set(np.arange(5), np.array([1.0, 0.0, 2.0, 3.0, 4.0]))
  assert tree.total == 10.0
  np.testing.assert_array_equal(tree.find(np.array([0.0, 0.99, 1.0, 2.99, 3.0, 9.99])),
                                [0, 0, 2, 2, 3, 4])
  tree.set(np.array([4]), np.array([0.0]))
  assert tree.total == 6.0
