"""The categorical distribution over discrete actions, parameterised by logits: what
every discrete actor-critic agent acted with before distributions were components."""

from __future__ import annotations

from typing import Optional, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.distributions.base import ActionDistribution
from podracer.errors import ConfigError
from podracer.types import DiscreteSpec, EnvSpec


def categorical_log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
  """log softmax(logits)[action] [...] for logits [..., A] and int actions [...]."""
  log_probs = jax.nn.log_softmax(logits)
  return jnp.take_along_axis(log_probs, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array) -> jax.Array:
  """-sum_a pi(a) log pi(a) [...] for logits [..., A]."""
  log_probs = jax.nn.log_softmax(logits)
  return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


@registry.distributions.register("categorical")
class Categorical(ActionDistribution):
  """Softmax over the logits [..., A]; the mode is the argmax (illegal actions, at
  `podracer.agent.ILLEGAL` in masked logits, are never sampled nor the mode)."""

  name = "categorical"
  kind = "discrete"

  def __init__(self, spec: Optional[EnvSpec] = None):
    if spec is not None and not isinstance(spec.action, DiscreteSpec):
      raise ConfigError(
          "Distribution 'categorical' (`distribution.name`) takes discrete actions, but the "
          f"environment's actions are continuous of shape {list(spec.action.shape)}: set "
          "`--config.distribution.name=tanh_normal` or `normal`, with "
          "`--config.network.name=gaussian_actor_critic`.")
    self.num_actions = None if spec is None else spec.action.num_values

  def num_params(self) -> int:
    return self.num_actions

  def sample(self, params, key) -> Tuple[jax.Array, jax.Array]:
    action = jax.random.categorical(key, params).astype(jnp.int32)
    return action, action

  def log_prob(self, params, raw):
    return categorical_log_prob(params, raw)

  def entropy(self, params, key=None):
    del key  # Closed form.
    return categorical_entropy(params)

  def mode(self, params):
    return jnp.argmax(params, axis=-1).astype(jnp.int32)


CATEGORICAL = Categorical()  # For logits handed to a loss as they are (`as_policy`).
