"""Heads: features [B, F] -> what an agent needs (policy logits and values, Q-values)."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import haiku as hk
import jax
import jax.numpy as jnp

from podracer.components.networks.initializers import Orthogonal
from podracer.components.networks.torsos import dense_init


class PolicyValueOutput(NamedTuple):
  logits: jax.Array  # float32 [B, num_actions]
  value: jax.Array   # float32 [B]


class PolicyValueHead(hk.Module):
  """Linear policy logits and a linear state value.

  The policy layer starts at orthogonal scale 0.01 so the initial policy is close to
  uniform (maximal exploration); the value layer at scale 1.0, as in PureJaxRL/CleanRL.
  """

  def __init__(self, num_actions: int, name: Optional[str] = None):
    super().__init__(name=name)
    self._num_actions = num_actions

  def __call__(self, features: jax.Array,
               value_features: Optional[jax.Array] = None) -> PolicyValueOutput:
    """`value_features` feeds the value layer when the critic has its own torso."""
    if value_features is None:
      value_features = features
    logits = hk.Linear(self._num_actions, w_init=Orthogonal(0.01),
                       name="policy")(features)
    value = hk.Linear(1, w_init=Orthogonal(1.0), name="value")(value_features)
    return PolicyValueOutput(logits=logits, value=jnp.squeeze(value, axis=-1))


class DuelingHead(hk.Module):
  """Q = V + A - mean_a(A) (Wang et al. 2016), as used by R2D2.

  Subtracting the mean advantage makes V and A identifiable: mean_a(Q) = V.
  """

  def __init__(self, num_actions: int, hidden_sizes: Sequence[int] = (512,),
               name: Optional[str] = None, w_init: str = "orthogonal"):
    super().__init__(name=name)
    # Built here, not in a method, so `__call__` and `streams` share parameters.
    self._value = hk.nets.MLP([*hidden_sizes, 1], w_init=dense_init(w_init),
                              name="value_stream")
    self._advantage = hk.nets.MLP([*hidden_sizes, num_actions], w_init=dense_init(w_init),
                                  name="advantage_stream")

  def streams(self, features: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """The value [B] and advantages [B, num_actions] before they are combined."""
    value = jnp.squeeze(self._value(features), axis=-1)
    return value, self._advantage(features)

  def __call__(self, features: jax.Array) -> jax.Array:
    """Q-values [B, num_actions]."""
    value, advantages = self.streams(features)
    advantages = advantages - jnp.mean(advantages, axis=-1, keepdims=True)
    return value[:, None] + advantages
