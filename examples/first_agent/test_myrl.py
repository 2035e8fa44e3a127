"""myrl's components tested alone: `python -m pytest test_myrl.py` (pytest comes with
podracer's `testing` extra)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import myrl  # noqa: F401  # Registers a2c and chain.
from podracer import check_environment, registry, testing
from podracer.components.losses import PolicyGradientBatch


def test_chain_keeps_its_contract_and_pays_at_the_far_end():
  env = myrl.chain.Chain(length=4, max_steps=10)
  check_environment(env)  # reset, step and spec() agree
  always_right = lambda timestep, key: jnp.ones(2, jnp.int32)
  timesteps, stats = testing.rollout(env, num_envs=2, num_steps=7, policy=always_right)
  # Three steps right reach the end (LAST, reward 1); the next step is the reset (FIRST).
  assert np.asarray(timesteps.reward[:, 0]).tolist() == [0, 0, 0, 1, 0, 0, 0, 1]
  assert np.asarray(stats.done[:, 0]).tolist() == [0, 0, 1, 0, 0, 0, 1]


def test_a2c_loss_is_the_policy_gradient_value_and_entropy_terms():
  loss = registry.losses.get("a2c")(value_coef=0.5, entropy_coef=0.0)
  batch = PolicyGradientBatch(
      observation=None, action=jnp.array([0, 1]), behaviour_log_prob=None,
      behaviour_value=None, advantage=jnp.array([2.0, -1.0]),
      value_target=jnp.array([1.0, 0.0]), mask=jnp.array([1.0, 1.0]))
  logits = jnp.zeros((2, 2))  # log pi(a|s) = log 0.5 for both actions
  total, metrics = loss(logits, jnp.array([0.0, 0.0]), batch)
  assert metrics["policy_loss"] == pytest.approx(-np.log(0.5) * (2.0 - 1.0) / 2)
  assert metrics["value_loss"] == pytest.approx(0.5 * (1.0 + 0.0) / 2)
  assert total == pytest.approx(metrics["policy_loss"] + 0.5 * metrics["value_loss"])


def test_one_a2c_update_changes_the_parameters():
  from myrl import configs
  config = configs.cartpole_anakin()
  config.runtime.updates_per_call = 1
  before, after, metrics = testing.one_update(config)
  assert np.isfinite(metrics["loss"]).all()
  pairs = zip(jax.tree.leaves(before), jax.tree.leaves(after))
  assert all(not np.allclose(a, b) for a, b in pairs)  # one gradient step moved them all
