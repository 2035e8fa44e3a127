"""Actor-critic losses and advantages against values computed by hand."""

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.components.losses import (PolicyGradientBatch, PPOLoss, categorical_entropy,
                                        generalized_advantages, transition_mask)
from podracer.types import StepType, TimeStep

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def _timestep(step_type, reward, discount):
  col = lambda x, dt: jnp.asarray(x, dt)[:, None]  # [T+1] -> [T+1, B=1]
  return TimeStep(col(step_type, jnp.int32), col(reward, jnp.float32),
                  col(discount, jnp.float32), None)


def test_gae_without_episode_end():
  ts = _timestep([F, M, M, M], [0, 1, 2, 3], [1, 1, 1, 1])
  values = jnp.array([0.5, 1.0, 1.5, 2.0])[:, None]
  adv, target = generalized_advantages(ts, values, discount=0.9, gae_lambda=0.8)
  # deltas: 1 + .9*1 - .5 = 1.4; 2 + .9*1.5 - 1 = 2.35; 3 + .9*2 - 1.5 = 3.3
  expected = [1.4 + 0.72 * (2.35 + 0.72 * 3.3), 2.35 + 0.72 * 3.3, 3.3]
  np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-6)
  np.testing.assert_allclose(target[:, 0], np.array(expected) + [0.5, 1.0, 1.5], rtol=1e-6)


def test_truncated_gae_is_rlaxs_to_the_bit():
  import jax  # pylint: disable=import-outside-toplevel
  import rlax  # pylint: disable=import-outside-toplevel
  from podracer.components.losses.actor_critic import truncated_gae  # pylint: disable=import-outside-toplevel
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  r_t, values = jax.random.normal(keys[0], (37,)), jax.random.normal(keys[1], (38,))
  discount_t = 0.99 * (jax.random.uniform(keys[2], (37,)) > 0.1)
  lambda_t = 0.95 * (jax.random.uniform(keys[3], (37,)) > 0.2)
  ours = jax.jit(truncated_gae)(r_t, discount_t, lambda_t, values)
  theirs = jax.jit(rlax.truncated_generalized_advantage_estimation)(
      r_t, discount_t, lambda_t, values)
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_gae_over_windows_is_each_windows_own_gae_bootstrapped_after_it():
  """`window` cuts the trace every w steps, as Brax's PPO computes GAE over its unrolls:
  a 6-step rollout in windows of 3 is the GAE of each 3-step window on its own."""
  rng = np.random.default_rng(0)
  reward, values = rng.normal(size=7), rng.normal(size=7)
  ts = _timestep([F] + [M] * 6, reward, [1] * 7)
  adv, target = generalized_advantages(ts, jnp.asarray(values)[:, None], discount=0.9,
                                       gae_lambda=0.8, window=3)
  for start in (0, 3):
    part = _timestep([M] * 4, reward[start:start + 4], [1] * 4)
    own, own_target = generalized_advantages(
        part, jnp.asarray(values[start:start + 4])[:, None], discount=0.9, gae_lambda=0.8)
    np.testing.assert_allclose(adv[start:start + 3, 0], own[:, 0], rtol=1e-5)
    np.testing.assert_allclose(target[start:start + 3, 0], own_target[:, 0], rtol=1e-5)
  whole, _ = generalized_advantages(ts, jnp.asarray(values)[:, None], discount=0.9,
                                    gae_lambda=0.8)
  assert not np.allclose(whole[:3, 0], adv[:3, 0])  # The cut changed the first window.


def test_gae_terminated_episode_does_not_bootstrap_or_leak():
  ts = _timestep([F, M, L, F], [0, 1, 2, 0], [1, 1, 0, 1])
  values = jnp.array([1.0, 2.0, 3.0, 4.0])[:, None]
  adv, _ = generalized_advantages(ts, values, discount=0.9, gae_lambda=0.8)
  # t=1 ends the episode: delta = 2 - 2 = 0; t=2 acts on LAST (ignored): masked to 0.
  np.testing.assert_allclose(adv[:, 0], [1 + 0.9 * 2 - 1, 0.0, 0.0], atol=1e-6)


@pytest.mark.reverb_lane
def test_gae_truncated_episode_bootstraps_from_last_observation():
  ts = _timestep([F, M, L, F], [0, 1, 2, 0], [1, 1, 1, 1])
  values = jnp.array([1.0, 2.0, 3.0, 4.0])[:, None]
  adv, _ = generalized_advantages(ts, values, discount=0.9, gae_lambda=0.8)
  delta1 = 2 + 0.9 * 3 - 2
  np.testing.assert_allclose(adv[:, 0], [1.8 + 0.72 * delta1, delta1, 0.0], atol=1e-6)


def test_transition_mask_drops_the_step_after_last():
  ts = _timestep([F, L, F, M], [0, 0, 0, 0], [1, 0, 1, 1])
  np.testing.assert_array_equal(transition_mask(ts)[:, 0], [1, 0, 1])


def _batch(**overrides):
  fields = dict(observation=jnp.zeros((3, 1)), action=jnp.array([0, 1, 0]),
                behaviour_log_prob=jnp.log(jnp.array([0.25, 0.25, 0.9])),
                behaviour_value=jnp.array([1.0, 2.0, 0.0]),
                advantage=jnp.array([1.0, -1.0, 100.0]),
                value_target=jnp.array([0.0, 2.0, 50.0]),
                mask=jnp.array([1.0, 1.0, 0.0]))
  fields.update(overrides)
  return PolicyGradientBatch(**fields)


@pytest.mark.reverb_lane
def test_ppo_loss_by_hand():
  loss_fn = PPOLoss(clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.01, clip_value=False,
                    normalize_advantages=False)
  logits = jnp.zeros((3, 2))  # pi = 0.5 everywhere, so rho = 0.5 / 0.25 = 2.
  value = jnp.array([1.0, 2.0, -7.0])
  loss, metrics = loss_fn(logits, value, _batch())
  # A=+1: min(2, 1.2) = 1.2; A=-1: min(-2, -1.2) = -2; the third entry is masked.
  policy_loss = -(1.2 - 2.0) / 2
  value_loss = 0.5 * (1.0 + 0.0) / 2
  entropy = np.log(2.0)
  chex.assert_trees_all_close(metrics["policy_loss"], policy_loss, rtol=1e-6)
  chex.assert_trees_all_close(metrics["value_loss"], value_loss, rtol=1e-6)
  chex.assert_trees_all_close(metrics["entropy"], entropy, rtol=1e-6)
  chex.assert_trees_all_close(loss, policy_loss + 0.5 * value_loss - 0.01 * entropy,
                              rtol=1e-6)
  assert metrics["clip_fraction"] == pytest.approx(1.0)


def test_ppo_value_clipping_takes_the_pessimistic_error():
  loss_fn = PPOLoss(clip_epsilon=0.2, clip_value=True, normalize_advantages=False)
  batch = _batch(behaviour_value=jnp.zeros(3), value_target=jnp.ones(3),
                 mask=jnp.array([1.0, 0.0, 0.0]))
  _, metrics = loss_fn(jnp.zeros((3, 2)), jnp.ones(3), batch)
  # Unclipped error (1-1)^2 = 0; clipped value 0.2 gives 0.64; the max counts.
  assert metrics["value_loss"] == pytest.approx(0.5 * 0.64)


def test_advantage_normalization_ignores_masked_entries():
  loss_fn = PPOLoss(clip_epsilon=10.0, value_coef=0.0, entropy_coef=0.0,
                    normalize_advantages=True)
  batch = _batch(behaviour_log_prob=jnp.log(jnp.full(3, 0.5)),
                 advantage=jnp.array([3.0, 1.0, 1e6]))
  loss, _ = loss_fn(jnp.zeros((3, 2)), jnp.zeros(3), batch)
  # rho = 1: the loss is minus the mean normalized advantage of the two real entries: 0.
  assert abs(float(loss)) < 1e-5


def test_categorical_entropy_of_uniform():
  np.testing.assert_allclose(categorical_entropy(jnp.zeros((2, 4))), np.log(4.0), rtol=1e-6)


def test_brax_form_advantages_are_braxs_compute_gae_over_one_unroll():
  """`form="brax"` is Brax's `compute_gae` (r + gamma v_{t+1} - V, v the lambda-return
  targets) on one unroll without episode ends; the targets are GAE's in both."""
  losses = pytest.importorskip("brax.training.agents.ppo.losses")
  rng = np.random.default_rng(1)
  reward, values = rng.normal(size=(6, 3)), rng.normal(size=(7, 3))
  ts = TimeStep(jnp.full((7, 3), M, jnp.int32).at[0].set(F), jnp.asarray(reward[[0, *range(6)]]),
                jnp.ones((7, 3)), None)
  adv, target = generalized_advantages(ts, jnp.asarray(values), discount=0.97,
                                       gae_lambda=0.95, form="brax")
  zeros = jnp.zeros((6, 3))
  vs, theirs = losses.compute_gae(truncation=zeros, termination=zeros,
                                  rewards=jnp.asarray(reward), values=jnp.asarray(values[:-1]),
                                  bootstrap_value=jnp.asarray(values[-1]), lambda_=0.95,
                                  discount=0.97)
  np.testing.assert_allclose(adv, theirs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(target, vs, rtol=1e-5, atol=1e-5)
  gae, _ = generalized_advantages(ts, jnp.asarray(values), discount=0.97, gae_lambda=0.95)
  assert not np.allclose(gae, adv)
