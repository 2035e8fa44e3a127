"""The action distributions against TensorFlow Probability's (its JAX substrate, in the
default lane) to float32 rounding: log-probabilities with the tanh Jacobian, entropies,
modes and bounds; and how a wrong one is refused at build."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.components.distributions import (Categorical, ClippedNormal, Policy,
                                               TanhNormal, check_distribution)
from podracer.errors import ConfigError
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec

tfp = pytest.importorskip("tensorflow_probability.substrates.jax")
tfd, tfb = tfp.distributions, tfp.bijectors

OBS = ArraySpec((3,), np.float32)


def _spec(low=-2.0, high=2.0, shape=(2,)):
  return EnvSpec(OBS, ArraySpec(shape, np.float32, "action", low, high))


def _params(key, batch=64, size=2):
  return 1.5 * jax.random.normal(key, (batch, 2 * size))


def test_tanh_normal_log_prob_entropy_and_mode_are_tfps_squashed_normal():
  dist = TanhNormal(_spec(-2.0, 2.0), min_std=0.001)
  params = _params(jax.random.PRNGKey(0))
  action, raw = dist.sample(params, jax.random.PRNGKey(1))
  loc, scale = params[:, :2], jax.nn.softplus(params[:, 2:]) + 0.001
  # a = 2 tanh(u): the same bijection as TFP's Scale(2) after Tanh.
  squashed = tfd.TransformedDistribution(tfd.Normal(loc, scale),
                                         tfb.Chain([tfb.Scale(2.0), tfb.Tanh()]))
  chex.assert_trees_all_close(action, 2.0 * jnp.tanh(raw), atol=1e-6)
  assert (jnp.abs(action) <= 2.0).all()
  # Scored at the raw sample (no atanh): TFP's log-prob of the action, Jacobian included.
  safe = jnp.abs(raw) < 4.0  # Where float32 atanh of TFP's inverse is exact enough.
  want = jnp.sum(squashed.log_prob(action), -1)
  got = dist.log_prob(params, raw)
  chex.assert_trees_all_close(jnp.where(safe.all(-1), got, 0), jnp.where(safe.all(-1), want, 0),
                              atol=2e-4, rtol=1e-5)
  # The entropy's one-sample estimate: H(N) + log|da/du| at a sample from the key.
  key = jax.random.PRNGKey(2)
  u = loc + scale * jax.random.normal(key, loc.shape)
  jacobian = tfb.Chain([tfb.Scale(2.0), tfb.Tanh()]).forward_log_det_jacobian(u)
  want_entropy = jnp.sum(tfd.Normal(loc, scale).entropy() + jacobian, -1)
  chex.assert_trees_all_close(dist.entropy(params, key), want_entropy, atol=1e-5)
  chex.assert_trees_all_close(dist.mode(params), 2.0 * jnp.tanh(loc), atol=1e-6)


def test_tanh_normal_scores_saturated_samples_exactly_from_the_raw_sample():
  """Where tanh saturates in float32 (|u| > 9), the action is the bound and atanh cannot
  recover u; the raw sample keeps the log-probability finite and exact."""
  dist = TanhNormal(_spec(-1.0, 1.0, (1,)))
  params = jnp.array([[12.0, 0.0]])
  raw = jnp.array([[12.0]])
  got = dist.log_prob(params, raw)
  scale = jax.nn.softplus(0.0) + 0.001
  want = tfd.Normal(12.0, scale).log_prob(12.0) - tfb.Tanh().forward_log_det_jacobian(12.0)
  assert np.isfinite(got).all()
  np.testing.assert_allclose(got, [want], rtol=1e-5)


def test_clipped_normal_is_tfps_normal_and_clips_only_the_action():
  dist = ClippedNormal(_spec(-1.0, 1.0))
  params = _params(jax.random.PRNGKey(3))
  action, raw = dist.sample(params, jax.random.PRNGKey(4))
  mean, log_std = params[:, :2], params[:, 2:]
  normal = tfd.Normal(mean, jnp.exp(log_std))
  chex.assert_trees_all_close(action, jnp.clip(raw, -1, 1))
  assert (jnp.abs(raw) > 1).any()  # Some samples were clipped, and are scored unclipped.
  chex.assert_trees_all_close(dist.log_prob(params, raw), jnp.sum(normal.log_prob(raw), -1),
                              atol=1e-5, rtol=1e-5)
  chex.assert_trees_all_close(dist.entropy(params, None), jnp.sum(normal.entropy(), -1),
                              atol=1e-5)
  chex.assert_trees_all_close(dist.mode(params), jnp.clip(mean, -1, 1))


def test_categorical_is_tfps_categorical():
  dist = Categorical(EnvSpec(OBS, DiscreteSpec(5)))
  logits = _params(jax.random.PRNGKey(5), size=2)[:, :4].repeat(2, -1)[:, :5]
  action, raw = dist.sample(logits, jax.random.PRNGKey(6))
  assert action is raw and action.dtype == jnp.int32
  reference = tfd.Categorical(logits=logits)
  chex.assert_trees_all_close(dist.log_prob(logits, action), reference.log_prob(action),
                              atol=1e-5)
  chex.assert_trees_all_close(dist.entropy(logits), reference.entropy(), atol=1e-5)
  chex.assert_trees_all_equal(dist.mode(logits), jnp.argmax(logits, -1).astype(jnp.int32))


def test_a_policy_is_a_pytree_and_batches_over_time():
  dist = ClippedNormal(_spec())
  params = jnp.zeros((5, 3, 4))  # [T, B, 2A]
  policy = Policy(params, dist, jax.random.PRNGKey(0))
  leaves, treedef = jax.tree.flatten(policy)
  assert len(leaves) == 2 and jax.tree.unflatten(treedef, leaves).family is dist
  assert policy.log_prob(jnp.zeros((5, 3, 2))).shape == (5, 3)
  assert policy.map(lambda x: x[:-1]).entropy().shape == (4, 3)


def test_a_wrong_distribution_for_the_actions_is_one_paragraph_naming_the_fix():
  continuous, discrete = _spec(), EnvSpec(OBS, DiscreteSpec(3))
  with pytest.raises(ConfigError, match=r"'categorical'.*continuous.*distribution\.name="
                     r"tanh_normal"):
    Categorical(continuous)
  with pytest.raises(ConfigError, match=r"'tanh_normal'.*3 discrete actions.*categorical"):
    TanhNormal(discrete)
  with pytest.raises(ConfigError, match=r"is a continuous distribution, but the environment "
                     r"has 3 discrete actions"):
    check_distribution(ClippedNormal(continuous), discrete, "PPO")
  for low, high in ((-np.inf, 1.0), (0.0, np.inf)):
    with pytest.raises(ConfigError, match=r"'tanh_normal'.*finite action bounds.*"
                       r"distribution\.name=normal"):
      TanhNormal(_spec(low, high))
  with pytest.raises(ConfigError, match=r"'tanh_normal'.*minimum is not below its maximum"):
    TanhNormal(_spec(1.0, 1.0))
  with pytest.raises(ConfigError, match=r"'tanh_normal'.*has no bounds.*distribution\.name="
                     r"normal"):
    TanhNormal(EnvSpec(OBS, ArraySpec((2,), np.float32)))
  # `normal` is the unbounded Gaussian: no bounds, or infinite ones, and it does not clip.
  unbounded = ClippedNormal(EnvSpec(OBS, ArraySpec((2,), np.float32)))
  assert np.isneginf(unbounded.minimum).all() and np.isposinf(unbounded.maximum).all()
