"""The V-trace loss against targets and advantages computed by hand.

With `baseline_coef=1` and no entropy bonus, the loss's gradients give back the per-step
quantities: dL/dV_t = -mask_t (v_t - V_t) / N and, for two actions under a uniform policy,
dL/dlogits[t, a_t] = -mask_t A_t / (2 N), with N the number of unmasked transitions.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import registry
from podracer.components.losses import VTraceBatch, VTraceLoss, vtrace_batch
from podracer.types import StepType, TimeStep

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
GAMMA = 0.9


def _timestep(step_type, reward, discount):
  """Columns are environments: lists of [T+1] become [T+1, B]."""
  arr = lambda x, dt: jnp.asarray(x, dt).T.reshape(len(np.asarray(x).T), -1)
  return TimeStep(arr(step_type, jnp.int32), arr(reward, jnp.float32),
                  arr(discount, jnp.float32), None)


def _batch(timestep, behaviour_prob=0.5):
  """Action 0 everywhere, acted with probability `behaviour_prob`."""
  shape = timestep.step_type.shape
  return vtrace_batch(timestep, jnp.zeros(shape, jnp.int32),
                      jnp.full(shape, np.log(behaviour_prob), jnp.float32), discount=GAMMA)


def _targets_and_advantages(batch, values, **loss_kwargs):
  """v_t and A_t recovered from the gradients of the loss (see the module docstring)."""
  loss_fn = VTraceLoss(baseline_coef=1.0, entropy_coef=0.0, reduction="mean", **loss_kwargs)
  logits = jnp.zeros((*batch.mask.shape, 2))  # pi(a|s) = 0.5
  grad_fn = jax.jit(jax.grad(lambda l, v, b: loss_fn(l, v, b)[0], argnums=(0, 1)))
  grad_logits, grad_values = grad_fn(logits, values, batch)
  n = jnp.sum(batch.mask)
  targets = values[:-1] - n * grad_values[:-1]
  advantages = -2 * n * grad_logits[..., 0]
  return targets, advantages, grad_values


def test_on_policy_lambda_one_targets_are_n_step_returns():
  ts = _timestep([F, M, M, M], [0, 1, 2, 3], [1, 1, 1, 1])
  values = jnp.array([0.5, 1.0, 1.5, 2.0])[:, None]
  targets, advantages, grad_values = _targets_and_advantages(_batch(ts), values)
  # v_t = r_{t+1} + g r_{t+2} + ... + g^k V(s_3).
  expected = [1 + .9 * 2 + .81 * 3 + .729 * 2.0, 2 + .9 * 3 + .81 * 2.0, 3 + .9 * 2.0]
  np.testing.assert_allclose(targets[:, 0], expected, rtol=1e-5)
  # On-policy with lambda 1: A_t = r_{t+1} + g v_{t+1} - V(s_t) = v_t - V(s_t).
  np.testing.assert_allclose(advantages[:, 0], np.array(expected) - [0.5, 1.0, 1.5],
                             rtol=1e-5)
  # The bootstrap value only enters targets, which are held constant.
  assert grad_values[-1, 0] == 0.0


@pytest.mark.reverb_lane
def test_loss_and_metrics_by_hand():
  ts = _timestep([F, M, M, M], [0, 1, 2, 3], [1, 1, 1, 1])
  values = jnp.array([0.5, 1.0, 1.5, 2.0])[:, None]
  loss_fn = VTraceLoss(baseline_coef=0.5, entropy_coef=0.01, reduction="mean")
  loss, metrics = loss_fn(jnp.zeros((3, 1, 2)), values, _batch(ts))
  advantages = np.array([6.188, 5.32, 3.3])  # v_t - V(s_t) from the test above.
  policy_loss = -np.mean(np.log(0.5) * advantages)
  value_loss = 0.5 * np.mean(advantages ** 2)
  chex.assert_trees_all_close(metrics["policy_loss"], policy_loss, rtol=1e-5)
  chex.assert_trees_all_close(metrics["value_loss"], value_loss, rtol=1e-5)
  chex.assert_trees_all_close(metrics["entropy"], np.log(2.0), rtol=1e-6)
  chex.assert_trees_all_close(metrics["rho"], 1.0, rtol=1e-6)
  chex.assert_trees_all_close(
      loss, policy_loss + 0.5 * value_loss - 0.01 * np.log(2.0), rtol=1e-5)


def test_sum_reduction_is_the_mean_times_the_number_of_real_transitions():
  """The IMPALA paper's losses are sums over time and batch (its RMSProp eps and gradient
  clipping are calibrated for them); the reset transition is not counted."""
  ts = _timestep([F, M, L, F, M], [0, 1, 2, 0, 1], [1, 1, 0, 1, 1])
  values = jnp.array([0.5, 1.0, 1.5, 2.0, 2.5])[:, None]
  logits = jnp.array([[0.3, -0.2], [0.0, 1.0], [2.0, 0.0], [-1.0, 0.5]])[:, None]
  mean_loss, mean_metrics = VTraceLoss(reduction="mean")(logits, values, _batch(ts))
  sum_loss, sum_metrics = VTraceLoss(reduction="sum")(logits, values, _batch(ts))
  assert VTraceLoss().reduction == "sum"
  chex.assert_trees_all_close(sum_loss, 3.0 * mean_loss, rtol=1e-6)
  chex.assert_trees_all_close(sum_metrics, mean_metrics)  # metrics stay per-transition
  with pytest.raises(ValueError, match="reduction"):
    VTraceLoss(reduction="max")


@pytest.mark.reverb_lane
def test_off_policy_truncates_the_trace_with_clipped_ratios():
  ts = _timestep([F, M, M], [0, 1, 2], [1, 1, 1])
  values = jnp.array([1.0, 2.0, 3.0])[:, None]
  # mu(a|s) = 1, pi(a|s) = 0.5: rho = c = 0.5 at every step.
  targets, advantages, _ = _targets_and_advantages(_batch(ts, behaviour_prob=1.0), values)
  delta = [0.5 * (1 + .9 * 2 - 1), 0.5 * (2 + .9 * 3 - 2)]
  v1 = 2 + delta[1]
  np.testing.assert_allclose(targets[:, 0], [1 + delta[0] + .9 * .5 * delta[1], v1],
                             rtol=1e-5)
  np.testing.assert_allclose(advantages[:, 0], [0.5 * (1 + .9 * v1 - 1), delta[1]],
                             rtol=1e-5)


def test_ratios_above_one_are_clipped():
  ts = _timestep([F, M, M], [0, 1, 2], [1, 1, 1])
  values = jnp.array([1.0, 2.0, 3.0])[:, None]
  on_policy = _targets_and_advantages(_batch(ts), values)
  # mu(a|s) = 0.25: rho = 2 is clipped to 1, as on-policy; a larger pg threshold keeps 2.
  clipped = _targets_and_advantages(_batch(ts, behaviour_prob=0.25), values)
  chex.assert_trees_all_close(clipped[:2], on_policy[:2], rtol=1e-5)
  loose = _targets_and_advantages(_batch(ts, behaviour_prob=0.25), values,
                                  clip_pg_rho_threshold=4.0)
  chex.assert_trees_all_close(loose[0], on_policy[0], rtol=1e-5)
  chex.assert_trees_all_close(loose[1], 2 * on_policy[1], rtol=1e-5)


def test_termination_and_truncation_in_one_batch():
  # Column 0 terminates at s_2 (d=0), column 1 is truncated there (d=1); s_3 is a reset.
  ts = _timestep([[F, M, L, F], [F, M, L, F]], [[0, 1, 2, 7], [0, 1, 2, 7]],
                 [[1, 1, 0, 1], [1, 1, 1, 1]])
  values = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
  batch = _batch(ts)
  np.testing.assert_array_equal(batch.mask, [[1, 1], [1, 1], [0, 0]])
  targets, advantages, grad_values = _targets_and_advantages(batch, values)
  # Terminated: v_1 = r_2, no bootstrap.
  np.testing.assert_allclose(targets[:2, 0], [1 + .9 * 2, 2], rtol=1e-5)
  np.testing.assert_allclose(advantages[:2, 0], [1 + .9 * 2 - 1, 0], atol=1e-5)
  # Truncated: v_1 = r_2 + g V(s_LAST); the reset transition does not leak into it.
  v1 = 2 + .9 * 3
  np.testing.assert_allclose(targets[:2, 1], [1 + .9 * v1, v1], rtol=1e-5)
  np.testing.assert_allclose(advantages[:2, 1], [1 + .9 * v1 - 1, v1 - 2], rtol=1e-5)
  # The reset transition out of LAST contributes nothing.
  np.testing.assert_array_equal(advantages[2], [0, 0])
  np.testing.assert_array_equal(grad_values[2:], 0)


def test_masked_step_does_not_change_the_loss():
  ts = _timestep([F, M, L, F], [0, 1, 2, 0], [1, 1, 0, 1])
  batch = _batch(ts)
  loss_fn = registry.losses.get("vtrace")()
  logits = jnp.array([[0.0, 0.0], [1.0, -1.0], [0.0, 0.0]])[:, None]
  values = jnp.array([1.0, 2.0, 3.0, 4.0])[:, None]
  loss, _ = loss_fn(logits, values, batch)
  # Anything about the reset transition (its logits, action, behaviour, s_2 and s_3's
  # values for a terminated episode, the next episode's first reward) is ignored.
  changed_batch = batch._replace(
      action=batch.action.at[2].set(1),
      behaviour_log_prob=batch.behaviour_log_prob.at[2].set(-5.0),
      reward=batch.reward.at[2].set(100.0))
  changed, _ = loss_fn(logits.at[2].set(jnp.array([[3.0, -3.0]])),
                       values.at[2:].set(-50.0), changed_batch)
  chex.assert_trees_all_close(changed, loss, rtol=1e-6)


def test_vtrace_batch_masks_resets_and_discounts():
  ts = _timestep([F, L, F, M], [0, 5, 9, 1], [1, 0, 1, 1])
  batch = _batch(ts)
  assert isinstance(batch, VTraceBatch)
  np.testing.assert_array_equal(batch.mask[:, 0], [1, 0, 1])
  np.testing.assert_allclose(batch.reward[:, 0], [5, 0, 1])
  np.testing.assert_allclose(batch.discount[:, 0], [0, 0, GAMMA], rtol=1e-6)


@pytest.mark.parametrize("lambda_,behaviour_prob", [(1.0, 0.5), (0.5, 0.8)])
def test_no_gradient_flows_through_targets_or_advantages(lambda_, behaviour_prob):
  ts = _timestep([F, M, L, F], [0, 1, 2, 0], [1, 1, 1, 1])
  values = jnp.array([0.5, 1.0, 1.5, 2.0])[:, None]
  # Without the baseline loss, values enter only the targets and advantages.
  loss_fn = VTraceLoss(baseline_coef=0.0, entropy_coef=0.0, lambda_=lambda_)
  grad_values = jax.grad(lambda v: loss_fn(jnp.zeros((3, 1, 2)), v,
                                           _batch(ts, behaviour_prob))[0])(values)
  np.testing.assert_array_equal(grad_values, 0.0)
