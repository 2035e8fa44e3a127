"""Observation normalisation (running statistics in the parameters) and reward scaling:
the statistics against numpy over batches and merged over 8 replicas, the wrapped
network, and a wrong section refused."""

import chex
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import mesh
from podracer.components.normalizers import (NETWORK, RETURN, STATISTICS,
                                             ObservationNormalizer, ReturnStd, RewardScale)
from podracer.errors import ConfigError
from podracer.testing import fake_trajectory
from podracer.types import (ACTION_MASK, ArraySpec, DiscreteSpec, EnvSpec, REPLICA_AXIS,
                            StepType, TimeStep)

SPEC = EnvSpec(ArraySpec((3,), np.float32), ArraySpec((1,), np.float32, "a", -1.0, 1.0))


def _batches(count=4, rows=50, seed=0):
  rng = np.random.default_rng(seed)
  scale, shift = np.array([1.0, 20.0, 1e-3]), np.array([0.0, -300.0, 5.0])
  return [(rng.normal(size=(rows, 3)) * scale + shift).astype(np.float32)
          for _ in range(count)]


def _replicated(fn):
  """fn over one replica (REPLICA_AXIS bound, of size 1)."""
  return lambda *args: jax.vmap(fn, axis_name=REPLICA_AXIS)(
      *jax.tree.map(lambda x: x[None], args))


def test_statistics_over_batches_are_numpys_and_normalise_within_the_clip():
  norm = ObservationNormalizer(SPEC, clip=5.0)
  update = jax.jit(_replicated(norm.update))
  stats, seen = jax.tree.map(lambda x: x[None], norm.init()), []
  for batch in _batches():
    stats = update(jax.tree.map(lambda x: x[0], stats), batch)
    seen.append(batch)
    rows = np.concatenate(seen)
    assert float(stats.count[0]) == len(rows)
    np.testing.assert_allclose(stats.mean[0], rows.mean(0), rtol=1e-5, atol=1e-6)
    # float32 rounding: the third feature's deviations are 1e-3 of its mean 5.
    np.testing.assert_allclose(stats.m2[0] / stats.count[0], rows.astype(np.float64).var(0),
                               rtol=1e-3)
  stats = jax.tree.map(lambda x: x[0], stats)
  z = norm.normalize(stats, rows)
  exact = rows.astype(np.float64)
  want = np.clip((exact - exact.mean(0)) / np.sqrt(exact.var(0) + 1e-8), -5, 5)
  np.testing.assert_allclose(z, want, atol=2e-3)
  np.testing.assert_allclose(np.std(z, 0)[:2], 1.0, rtol=1e-3)
  far = norm.normalize(stats, rows[:1] + 1e6)
  assert float(jnp.max(far)) == 5.0


def test_eight_replicas_merge_into_one_set_the_statistics_of_all_their_rows():
  devices = jax.local_devices()[:8]
  assert len(devices) == 8, "tests/conftest.py sets 8 virtual CPU devices"
  norm = ObservationNormalizer(SPEC)
  batches = _batches(count=8, rows=32, seed=1)
  per_device = np.stack(batches)  # [8, 32, 3]: each replica's own rows
  update = mesh.spmd(lambda stats, rows: norm.update(stats, rows), mesh.device_mesh(devices))
  stats = update(jax.tree.map(lambda x: np.stack([x] * 8), norm.init()), per_device)
  rows = np.concatenate(batches)
  for replica in range(8):  # One set of statistics, the same on every device.
    assert float(stats.count[replica]) == 256
    np.testing.assert_allclose(stats.mean[replica], rows.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.m2[replica] / 256, rows.astype(np.float64).var(0),
                               rtol=1e-3)


def test_the_wrapped_network_keeps_the_statistics_in_its_parameters_without_gradient():
  norm = ObservationNormalizer(SPEC)
  net = hk.without_apply_rng(hk.transform(lambda o: hk.Linear(2)(o)))
  wrapped = norm.wrap(net)
  params = wrapped.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
  assert set(params) == {NETWORK, STATISTICS}
  rows = jnp.asarray(_batches(1)[0])
  updated = _replicated(norm.updated)(params, rows)
  updated = jax.tree.map(lambda x: x[0], updated)
  expected = net.apply(params[NETWORK], norm.normalize(updated[STATISTICS], rows))
  chex.assert_trees_all_close(wrapped.apply(updated, rows), expected)
  # Two versions of the parameters normalise with their own statistics.
  assert not np.allclose(wrapped.apply(params, rows), wrapped.apply(updated, rows))
  grads = jax.grad(lambda p: jnp.sum(wrapped.apply(p, rows)))(updated)
  assert all(float(jnp.abs(g).max()) == 0 for g in jax.tree.leaves(grads[STATISTICS]))


def test_integer_observations_are_refused_and_a_mask_passes_unnormalised():
  board = EnvSpec(ArraySpec((3, 3), np.int8), DiscreteSpec(9))
  with pytest.raises(ConfigError, match=r"'running_mean_std'.*int8.*remove the "
                     r"`observation_normalizer` section"):
    ObservationNormalizer(board)
  masked = EnvSpec({"observation": ArraySpec((2,), np.float32),
                    ACTION_MASK: ArraySpec((3,), np.bool_)}, DiscreteSpec(3))
  norm = ObservationNormalizer(masked)
  observation = {"observation": jnp.ones((4, 2)) * 7.0, ACTION_MASK: jnp.ones((4, 3), bool)}
  stats = jax.tree.map(lambda x: x[0], _replicated(norm.update)(norm.init(), observation))
  out = norm.normalize(stats, observation)
  assert out[ACTION_MASK].dtype == jnp.bool_ and out[ACTION_MASK].all()
  np.testing.assert_allclose(out["observation"], 0.0, atol=1e-3)


def test_reward_scale_scales_what_the_learner_sees_only():
  trajectory = fake_trajectory(SPEC, num_envs=2, length=4)
  scaled, metrics = RewardScale(10.0)(trajectory)
  chex.assert_trees_all_close(scaled.timestep.reward, 10.0 * trajectory.timestep.reward)
  chex.assert_trees_all_equal(scaled.timestep.observation, trajectory.timestep.observation)
  assert metrics == {}


def _numpy_returns(rewards, firsts, discount):
  """Each column's discounted return, 0 again at an episode's first step."""
  out, carried = np.zeros_like(rewards), np.zeros(rewards.shape[1])
  for t in range(len(rewards)):
    carried = np.where(firsts[t], 0.0, rewards[t] + discount * carried)
    out[t] = carried
  return out


def test_return_std_carries_each_environments_return_and_divides_by_its_deviation():
  rng = np.random.default_rng(0)
  steps, envs, discount = 12, 3, 0.9
  rewards = rng.normal(2.0, 1.0, (steps, envs)).astype(np.float32)
  firsts = rng.random((steps, envs)) < 0.2
  norm = ReturnStd(discount=discount, clip=0.8)
  carried, returns = jnp.zeros(envs), []
  for t in range(steps):  # As the actors carry it, one step at a time.
    step_type = np.where(firsts[t], StepType.FIRST, StepType.MID)
    carried = norm.discounted_return(carried, TimeStep(step_type, rewards[t], 1.0, None))
    returns.append(carried)
  expected = _numpy_returns(rewards, firsts, discount)
  np.testing.assert_allclose(np.stack(returns), expected, rtol=1e-5)

  trajectory = fake_trajectory(SPEC, num_envs=envs, length=steps - 1)
  trajectory = trajectory._replace(
      timestep=trajectory.timestep._replace(reward=jnp.asarray(rewards)),
      extras={**trajectory.extras, RETURN: jnp.stack(returns)})
  state = norm.init()
  for _ in range(2):  # The second batch's statistics merge both.
    scaled, state, metrics = _replicated(norm.normalize)(state, trajectory)
    state = jax.tree.map(lambda x: x[0], state)
  seen = np.concatenate([expected[1:].reshape(-1)] * 2)
  np.testing.assert_allclose(float(state.count), seen.size)
  np.testing.assert_allclose(float(state.mean), seen.mean(), rtol=1e-5)
  std = np.sqrt(seen.var() + 1e-8)
  np.testing.assert_allclose(float(metrics["return_std"][0]), std, rtol=1e-4)
  np.testing.assert_allclose(scaled.timestep.reward[0], np.clip(rewards / std, -0.8, 0.8),
                             rtol=1e-4)
  assert np.abs(rewards / std).max() > 0.8  # The clip did something.
