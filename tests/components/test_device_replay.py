"""The on-device prioritized replay: FIFO writes, sampling statistics, jit and pmap."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import builder, mesh, registry
from podracer.components.replay import Sample, importance_weights
from podracer.logs.metrics import RateMeter, device_counts
from podracer.components.replay.device import DeviceReplay, DeviceReplayState

SPEC = {"obs": jax.ShapeDtypeStruct((3,), jnp.float32),
        "action": jax.ShapeDtypeStruct((), jnp.int32)}
# Chi-square critical value for 3 degrees of freedom at p = 0.001.
CHI2_3DOF_999 = 16.266


def _items(values):
  """Item i is recognisable from its action: obs = [a, a, a]."""
  values = jnp.asarray(values, jnp.int32)
  return {"obs": jnp.repeat(values[:, None].astype(jnp.float32), 3, axis=1),
          "action": values}


def _draws(replay, state, seed=0):
  return jax.jit(replay.sample)(state, jax.random.PRNGKey(seed))


def test_init_has_fixed_shapes_and_strong_dtypes():
  replay = DeviceReplay(max_size=5, batch_size=2)
  state = replay.init(SPEC)
  chex.assert_shape(state.items["obs"], (5, 3))
  chex.assert_shape(state.items["action"], (5,))
  chex.assert_shape(state.priorities, (5,))
  for leaf, dtype in [(state.priorities, jnp.float32), (state.next_index, jnp.int32),
                      (state.size, jnp.int32), (state.max_priority, jnp.float32),
                      (state.inserts, jnp.int32), (state.samples, jnp.int32)]:
    assert leaf.dtype == dtype and not leaf.weak_type
  assert int(replay.size(state)) == 0
  assert not bool(replay.can_sample(state))


def test_add_then_sample_returns_added_items():
  replay = DeviceReplay(max_size=8, batch_size=16)
  state = replay.add(replay.init(SPEC), _items([10, 11, 12]))
  assert (int(state.size), int(state.next_index), int(state.inserts)) == (3, 3, 3)
  np.testing.assert_array_equal(state.priorities, [1, 1, 1, 0, 0, 0, 0, 0])
  sample = _draws(replay, state)
  assert isinstance(sample, Sample)
  chex.assert_shape(sample.items["obs"], (16, 3))
  chex.assert_shape([sample.items["action"], sample.ids, sample.probabilities,
                     sample.priorities], (16,))
  assert set(np.asarray(sample.ids)) <= {0, 1, 2}
  np.testing.assert_array_equal(sample.items["action"], 10 + sample.ids)
  np.testing.assert_array_equal(sample.items["obs"][:, 0], 10 + sample.ids)
  np.testing.assert_allclose(sample.probabilities, 1 / 3, rtol=1e-6)
  assert int(sample.size) == 3
  np.testing.assert_array_equal(sample.priorities, 0)


def test_fifo_overwrites_the_oldest_items():
  replay = DeviceReplay(max_size=4, batch_size=64)
  state = replay.init(SPEC)
  state = replay.add(state, _items([0, 1, 2]))
  state = replay.add(state, _items([3, 4, 5]))  # overwrites slots 0 and 1
  assert (int(state.size), int(state.next_index), int(state.inserts)) == (4, 2, 6)
  np.testing.assert_array_equal(state.items["action"], [4, 5, 2, 3])
  sampled = set(np.asarray(_draws(replay, state).items["action"]))
  assert sampled == {2, 3, 4, 5}  # 64 uniform draws over 4 items cover them all


def test_items_added_since_counts_the_items_added_after_each_sampled_one():
  replay = DeviceReplay(max_size=4, batch_size=64)
  state = replay.add(replay.init(SPEC), _items([0, 1, 2]))
  state = replay.add(state, _items([3, 4, 5]))  # slots hold 4, 5, 2, 3
  sample = _draws(replay, state)
  since = np.asarray(jax.jit(replay.items_added_since)(state, sample))
  np.testing.assert_array_equal(since, 5 - np.asarray(sample.items["action"]))
  assert set(since) == {0, 1, 2, 3}


def test_add_rejects_more_items_than_capacity_and_wrong_shapes():
  replay = DeviceReplay(max_size=2, batch_size=1)
  state = replay.init(SPEC)
  with pytest.raises(ValueError, match="max_size"):
    replay.add(state, _items([0, 1, 2]))
  with pytest.raises(ValueError, match="shape"):
    replay.add(state, {"obs": jnp.zeros((1, 4)), "action": jnp.zeros((1,), jnp.int32)})


# 0 is uniform over the filled slots, drawn by inverse CDF rather than categorically.
@pytest.mark.reverb_lane
@pytest.mark.parametrize("exponent", [1.0, 0.5, 0.0])
def test_sampling_frequencies_follow_priority_to_the_alpha(exponent):
  replay = DeviceReplay(max_size=6, batch_size=20_000, priority_exponent=exponent)
  state = replay.add(replay.init(SPEC), _items([0, 1, 2, 3]),
                     priorities=jnp.array([1.0, 2.0, 3.0, 4.0]))
  sample = _draws(replay, state, seed=42)
  expected = np.array([1.0, 2.0, 3.0, 4.0]) ** exponent
  expected /= expected.sum()
  counts = np.bincount(np.asarray(sample.ids), minlength=6)
  assert counts[4:].sum() == 0  # empty slots
  chi2 = np.sum((counts[:4] - 20_000 * expected) ** 2 / (20_000 * expected))
  assert chi2 < CHI2_3DOF_999, (counts, expected)
  np.testing.assert_allclose(sample.probabilities, expected[sample.ids], rtol=1e-5)


def test_zero_priority_items_are_never_sampled():
  replay = DeviceReplay(max_size=4, batch_size=5_000, priority_exponent=0.0)
  state = replay.add(replay.init(SPEC), _items([0, 1, 2, 3]),
                     priorities=jnp.array([1.0, 0.0, 5.0, 0.0]))
  sample = _draws(replay, state)
  assert set(np.asarray(sample.ids)) == {0, 2}
  np.testing.assert_allclose(sample.probabilities, 0.5)  # alpha = 0: uniform over p > 0


def test_update_priorities_changes_distribution_and_max_priority():
  replay = DeviceReplay(max_size=4, batch_size=4_000, priority_exponent=1.0)
  state = replay.add(replay.init(SPEC), _items([0, 1, 2, 3]))
  assert float(state.max_priority) == 1.0
  sample = Sample(items=None, ids=jnp.array([0, 1, 2], jnp.int32),
                  probabilities=jnp.zeros(3), size=state.size, priorities=jnp.zeros(3))
  state = jax.jit(replay.update_priorities)(state, sample, jnp.array([0.0, 6.0, 0.0]))
  np.testing.assert_array_equal(state.priorities, [0.0, 6.0, 0.0, 1.0])
  assert float(state.max_priority) == 6.0
  assert int(state.samples) == 3
  drawn = _draws(replay, state)
  assert set(np.asarray(drawn.ids)) == {1, 3}
  assert 0.8 < np.mean(np.asarray(drawn.ids) == 1) < 0.91  # 6/7 expected
  # New items without priorities get the largest priority seen.
  state = replay.add(state, _items([7]))
  np.testing.assert_array_equal(state.priorities, [6.0, 6.0, 0.0, 1.0])


def test_update_priorities_leaves_empty_slots_empty():
  replay = DeviceReplay(max_size=4, batch_size=8)
  state = replay.init(SPEC)
  sample = replay.sample(state, jax.random.PRNGKey(0))
  chex.assert_shape(sample.ids, (8,))
  assert np.all(np.isfinite(sample.probabilities))
  state = replay.update_priorities(state, sample, jnp.full((8,), 3.0))
  np.testing.assert_array_equal(state.priorities, 0.0)
  assert float(state.max_priority) == 1.0


def test_importance_weights_match_hand_computation():
  sample = Sample(items=None, ids=jnp.arange(3), size=jnp.array(4, jnp.int32),
                  probabilities=jnp.array([0.5, 0.25, 0.125]), priorities=jnp.zeros(3))
  # (4 * P)^-0.5 = [2, 1, 0.5]^-0.5 = [0.7071, 1, 1.4142], over the max 1.4142.
  np.testing.assert_allclose(importance_weights(sample, 0.5), [0.5, 0.70710678, 1.0],
                             rtol=1e-6)
  np.testing.assert_allclose(importance_weights(sample, 0.0), [1.0, 1.0, 1.0])


def test_scanned_adds_under_jit_compile_once():
  replay = DeviceReplay(max_size=8, batch_size=4)

  @jax.jit
  def fill(state, key):
    def body(state, i):
      return replay.add(state, _items(jnp.stack([2 * i, 2 * i + 1]))), None
    state, _ = jax.lax.scan(body, state, jnp.arange(5))
    return state, replay.sample(state, key)

  state, sample = fill(replay.init(SPEC), jax.random.PRNGKey(1))
  # 10 items through 8 slots: 0 and 1 were overwritten by 8 and 9.
  np.testing.assert_array_equal(state.items["action"], [8, 9, 2, 3, 4, 5, 6, 7])
  assert (int(state.size), int(state.next_index), int(state.inserts)) == (8, 2, 10)
  np.testing.assert_array_equal(sample.items["action"],
                                state.items["action"][sample.ids])
  # The state's types do not change, so feeding it back does not recompile.
  chex.assert_trees_all_equal_shapes_and_dtypes(state, replay.init(SPEC))
  fill(state, jax.random.PRNGKey(2))
  assert fill._cache_size() == 1


@pytest.mark.reverb_lane
def test_replicas_on_a_mesh_sample_only_their_own_shard():
  num = jax.local_device_count()
  assert num == 8
  replay = DeviceReplay(max_size=4, batch_size=32)

  def run(replica, key):
    state = replay.init(SPEC)
    state = replay.add(state, _items(100 * replica + jnp.arange(3)))
    return state, replay.sample(state, key)

  replicas = jnp.arange(num)
  state, sample = mesh.spmd(run, mesh.device_mesh(jax.local_devices()))(
      replicas, jax.random.split(jax.random.PRNGKey(0), num))
  chex.assert_shape(sample.items["obs"], (num, 32, 3))
  np.testing.assert_array_equal(state.size, 3)
  owner = np.asarray(sample.items["action"]) // 100
  np.testing.assert_array_equal(owner, np.broadcast_to(np.arange(num)[:, None], (num, 32)))
  assert np.all(np.asarray(sample.items["action"]) % 100 < 3)


def test_can_sample_respects_min_size():
  replay = DeviceReplay(max_size=8, batch_size=2, min_size=3)
  state = replay.init(SPEC)
  can_sample = jax.jit(replay.can_sample)
  state = replay.add(state, _items([0, 1]))
  assert not bool(can_sample(state))
  state = replay.add(state, _items([2]))
  assert bool(can_sample(state))
  # min_size=0 still needs one item: an empty buffer has nothing to sample.
  replay = DeviceReplay(max_size=4, batch_size=2, min_size=0)
  state = replay.init(SPEC)
  assert not bool(replay.can_sample(state))
  assert bool(replay.can_sample(replay.add(state, _items([0]))))


def test_counts_are_summed_over_replicas_and_become_rates(monkeypatch):
  replay = DeviceReplay(max_size=8, batch_size=3)
  state = replay.add(replay.init(SPEC), _items([1, 2]))
  sample = replay.sample(state, jax.random.PRNGKey(0))
  state = replay.update_priorities(state, sample, jnp.ones(3))
  assert device_counts(replay, state) == (2, 3)
  stacked = jax.tree.map(lambda x: jnp.stack([x, x]), state)  # two replicas
  assert device_counts(replay, stacked) == (4, 6)
  assert device_counts(object(), state) is None  # replays without counters: no rates

  clock = iter([10.0, 12.0, 16.0])
  monkeypatch.setattr("podracer.logs.metrics.time.perf_counter", lambda: next(clock))
  meter = RateMeter(inserts=100, samples=0)
  assert meter.rates(140, 100) == dict(replay_inserts_per_s=20.0, replay_samples_per_s=50.0,
                                       sample_to_insert_ratio=2.5)
  # Rates are over the window since the previous record only.
  assert meter.rates(140, 120) == dict(replay_inserts_per_s=0.0, replay_samples_per_s=5.0,
                                       sample_to_insert_ratio=20.0)


@pytest.mark.parametrize("kwargs, argument", [
    (dict(max_size=0, batch_size=2), "max_size"),
    (dict(max_size=2.5, batch_size=2), "max_size"),
    (dict(max_size=4, batch_size=0), "batch_size"),
    (dict(max_size=4, batch_size=2, priority_exponent=-0.1), "priority_exponent"),
    (dict(max_size=4, batch_size=2, min_size=5), "min_size"),
    (dict(max_size=4, batch_size=2, min_size=-1), "min_size"),
    (dict(max_size=4, batch_size=2, initial_priority=0.0), "initial_priority"),
])
def test_constructor_errors_name_the_argument(kwargs, argument):
  with pytest.raises(ValueError, match=f"`{argument}`"):
    DeviceReplay(**kwargs)


def test_built_through_the_registry():
  builder.register_builtin_components()
  replay = registry.build(registry.replay, {"name": "device", "max_size": 8, "batch_size": 2},
                          key="replay")
  assert isinstance(replay, DeviceReplay) and replay.kind == "device"
  assert (replay.capacity, replay.batch_size) == (8, 2)
  assert isinstance(replay.init(SPEC), DeviceReplayState)


def test_uniform_sampling_skips_zero_priority_slots_anywhere_in_a_wrapped_buffer():
  replay = DeviceReplay(max_size=8, batch_size=4_000, priority_exponent=0.0)
  state = replay.add(replay.init(SPEC), _items(list(range(6))),
                     priorities=jnp.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]))
  # Wraps: slots 6, 7, 0, 1 are overwritten; slot 0 becomes 0-priority, slot 1 real.
  state = replay.add(state, _items([6, 7, 8, 9]), priorities=jnp.array([1.0, 1.0, 0.0, 1.0]))
  sample = _draws(replay, state, seed=3)
  assert set(np.asarray(sample.ids)) == {1, 2, 3, 5, 6, 7}
  counts = np.bincount(np.asarray(sample.ids), minlength=8)[[1, 2, 3, 5, 6, 7]]
  chi2 = np.sum((counts - 4_000 / 6) ** 2 / (4_000 / 6))
  assert chi2 < 20.5, counts  # chi-squared, 5 degrees of freedom, p = 0.001
  np.testing.assert_allclose(sample.probabilities, 1 / 6)
  # The sampled items are the ones in those slots.
  np.testing.assert_array_equal(sample.items["action"],
                                np.asarray(state.items["action"])[sample.ids])
  assert set(np.asarray(sample.items["action"])) == {9, 2, 3, 5, 6, 7}


def test_prioritized_sampling_skips_zero_priority_slots_and_keeps_weights_in_step():
  replay = DeviceReplay(max_size=8, batch_size=4_000, priority_exponent=0.6)
  state = replay.add(replay.init(SPEC), _items(list(range(6))),
                     priorities=jnp.array([1.0, 0.0, 2.0, 1.0, 0.0, 3.0]))
  state = replay.add(state, _items([6, 7, 8, 9]), priorities=jnp.array([1.0, 4.0, 0.0, 1.0]))
  # Slot 5 drawn twice with two values: its weight follows whichever value it kept.
  sample = Sample(items=None, ids=jnp.array([5, 5, 3], jnp.int32),
                  probabilities=jnp.zeros(3), size=state.size, priorities=jnp.zeros(3))
  state = jax.jit(replay.update_priorities)(state, sample, jnp.array([5.0, 7.0, 0.5]))
  priorities = np.asarray(state.priorities)
  expected = np.where(priorities > 0, priorities ** 0.6, 0.0)
  np.testing.assert_allclose(state.weights, expected, rtol=1e-6)
  drawn = _draws(replay, state, seed=5)
  assert set(np.asarray(drawn.ids)) == {1, 2, 3, 5, 6, 7}
  expected /= expected.sum()
  counts = np.bincount(np.asarray(drawn.ids), minlength=8)[[1, 2, 3, 5, 6, 7]]
  chi2 = np.sum((counts - 4_000 * expected[[1, 2, 3, 5, 6, 7]]) ** 2
                / (4_000 * expected[[1, 2, 3, 5, 6, 7]]))
  assert chi2 < 20.5, counts  # chi-squared, 5 degrees of freedom, p = 0.001
  np.testing.assert_allclose(drawn.probabilities, expected[drawn.ids], rtol=1e-5)


@pytest.mark.parametrize("exponent", [0.0, 0.6])
def test_a_draw_costs_no_array_of_batch_times_capacity(exponent):
  """Prioritized draws by inverse CDF, like uniform ones: no [batch, capacity] array
  (a categorical draw's Gumbel noise), which made them ~100x slower than uniform."""
  replay = DeviceReplay(max_size=10_000, batch_size=128, priority_exponent=exponent)
  state = replay.add(replay.init(SPEC), _items(list(range(64))))
  jaxpr = jax.make_jaxpr(replay.sample)(state, jax.random.PRNGKey(0))
  assert max(_array_sizes(jaxpr.jaxpr)) <= 10_000 * 3  # The items' leaf, [capacity, 3].


def _array_sizes(jaxpr):
  """The sizes of every array a jaxpr makes, in its nested jaxprs too."""
  for eqn in jaxpr.eqns:
    for v in eqn.outvars:
      yield int(np.prod(getattr(v.aval, "shape", ())))
    for param in eqn.params.values():
      for inner in param if isinstance(param, (tuple, list)) else [param]:
        inner = getattr(inner, "jaxpr", inner)
        if hasattr(inner, "eqns"):
          yield from _array_sizes(inner)
