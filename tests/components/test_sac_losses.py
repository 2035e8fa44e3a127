"""SAC's losses against values computed by hand, and where their gradients go."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.components.losses import (soft_policy_loss, soft_q_target, temperature_loss,
                                        twin_q_loss)


def test_soft_q_target_bootstraps_the_smaller_q_minus_the_entropy_term():
  reward = jnp.array([1.0, -2.0, 0.5])
  discount = jnp.array([0.99, 0.0, 0.99])  # the second transition terminated
  next_q1, next_q2 = jnp.array([10.0, 5.0, -1.0]), jnp.array([8.0, 7.0, -3.0])
  next_log_prob = jnp.array([-1.0, 2.0, 0.5])
  y = soft_q_target(reward, discount, next_q1, next_q2, next_log_prob, alpha=0.2)
  expected = [1.0 + 0.99 * (8.0 + 0.2), -2.0, 0.5 + 0.99 * (-3.0 - 0.1)]
  np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_twin_q_loss_regresses_both_critics_and_holds_the_target_constant():
  q1, q2, y = jnp.array([1.0, 2.0]), jnp.array([0.0, 4.0]), jnp.array([2.0, 2.0])
  # 0.5 mean((q1 - y)^2 + (q2 - y)^2) = 0.5 * ((1 + 0) + (4 + 4)) / 2
  assert float(twin_q_loss(q1, q2, y)) == pytest.approx(2.25)
  grad_q1, grad_q2, grad_y = jax.grad(twin_q_loss, argnums=(0, 1, 2))(q1, q2, y)
  np.testing.assert_allclose(grad_q1, (q1 - y) / 2)
  np.testing.assert_allclose(grad_q2, (q2 - y) / 2)
  np.testing.assert_array_equal(grad_y, 0.0)


def test_soft_policy_loss_trades_q_for_entropy():
  log_prob, q1, q2 = jnp.array([-1.0, 0.5]), jnp.array([3.0, -1.0]), jnp.array([2.0, 1.0])
  loss = soft_policy_loss(log_prob, q1, q2, alpha=0.5)
  assert float(loss) == pytest.approx(((-0.5 - 2.0) + (0.25 + 1.0)) / 2)
  # Raising either action's value of the smaller critic lowers the loss.
  _, grad_q1, grad_q2 = jax.grad(soft_policy_loss, argnums=(0, 1, 2))(log_prob, q1, q2, 0.5)
  np.testing.assert_allclose(grad_q1, [0.0, -0.5])
  np.testing.assert_allclose(grad_q2, [-0.5, 0.0])


def test_temperature_rises_when_entropy_is_below_target_and_falls_above():
  target_entropy = -1.0
  log_alpha = jnp.float32(np.log(0.5))
  # Entropy -mean(log_prob) = -2 < -1: too little exploration, so alpha must grow, i.e.
  # the loss's gradient in log alpha is negative (gradient descent raises log alpha).
  low_entropy = jnp.array([2.0, 2.0])
  grad = jax.grad(temperature_loss)(log_alpha, low_entropy, target_entropy)
  assert float(grad) == pytest.approx(-(2.0 - 1.0))
  high_entropy = jnp.array([-3.0, -1.0])  # entropy 2 > -1
  grad = jax.grad(temperature_loss)(log_alpha, high_entropy, target_entropy)
  assert float(grad) == pytest.approx(-(-2.0 - 1.0))
  assert float(temperature_loss(log_alpha, high_entropy, target_entropy)) == pytest.approx(
      -np.log(0.5) * (-3.0))
  # No gradient reaches the policy through its log-probabilities.
  np.testing.assert_array_equal(
      jax.grad(temperature_loss, argnums=1)(log_alpha, low_entropy, target_entropy), 0.0)
