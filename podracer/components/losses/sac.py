"""Soft actor-critic's three losses (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms
and Applications"), as pure functions of network outputs on a batch [B].

Names follow the paper: Q1, Q2 the twin critics, pi the policy, alpha the temperature.
Each returns a scalar to minimise; the caller decides which parameters it differentiates.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def soft_q_target(reward: jax.Array, discount: jax.Array, next_q1: jax.Array,
                  next_q2: jax.Array, next_log_prob: jax.Array,
                  alpha: jax.Array) -> jax.Array:
  """y = r + discount (min(Q1', Q2')(s', a') - alpha log pi(a'|s')), a' ~ pi(s').

  `discount` is gamma times the environment's discount (0 where the episode terminated;
  a truncated episode keeps it and bootstraps). Q1', Q2' are the target critics'.
  """
  soft_value = jnp.minimum(next_q1, next_q2) - alpha * next_log_prob
  return reward + discount * soft_value


def twin_q_loss(q1: jax.Array, q2: jax.Array, target: jax.Array) -> jax.Array:
  """Mean over the batch of 0.5 (Q1(s, a) - y)^2 + 0.5 (Q2(s, a) - y)^2; y is constant."""
  target = jax.lax.stop_gradient(target)
  return jnp.mean(0.5 * jnp.square(q1 - target) + 0.5 * jnp.square(q2 - target))


def soft_policy_loss(log_prob: jax.Array, q1: jax.Array, q2: jax.Array,
                     alpha: jax.Array) -> jax.Array:
  """Mean of alpha log pi(a|s) - min(Q1, Q2)(s, a), a ~ pi(s) reparameterised (eq. 7)."""
  return jnp.mean(alpha * log_prob - jnp.minimum(q1, q2))


def temperature_loss(log_alpha: jax.Array, log_prob: jax.Array,
                     target_entropy: float) -> jax.Array:
  """Mean of -log(alpha) (log pi(a|s) + target entropy), a ~ pi(s) (eq. 18, in log alpha
  as in the authors' softlearning code): alpha grows while the policy's entropy is below
  the target, and shrinks while it is above."""
  return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy))
