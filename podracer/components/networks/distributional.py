"""Networks of categorical return distributions: logits over K atoms of a fixed support
(the support itself is the loss's, podracer/components/losses/categorical.py).

`CategoricalHead` turns features into logits [B, *shape, K]; `categorical_q_network` is
C51's (logits [B, A, K] from DQN's torsos) and `categorical_critic` D4PG's critic
(logits [B, K] of Z(s, a) from an MLP on the observation and the action).
"""

from __future__ import annotations

import math

from typing import Any, Optional, Sequence, Tuple

import haiku as hk
import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.networks.continuous import _check_sizes, action_bounds
from podracer.components.networks.q_networks import _q_torso
from podracer.components.networks.torsos import (MLP, activation_fn, check_image_torso,
                                                 dense_init, num_discrete_actions)
from podracer.types import EnvSpec


def _check_atoms(num_atoms: int, network: str) -> int:
  if isinstance(num_atoms, bool) or not isinstance(num_atoms, int) or num_atoms < 2:
    raise ValueError(f"Network '{network}' needs `num_atoms` an integer of at least 2, "
                     f"got {num_atoms!r}; it must match the loss's `num_atoms`.")
  return num_atoms


class CategoricalHead(hk.Module):
  """features [B, F] -> logits [B, *shape, num_atoms] of categorical distributions."""

  def __init__(self, shape: Tuple[int, ...], num_atoms: int,
               w_init: Optional[hk.initializers.Initializer] = None,
               name: Optional[str] = None):
    super().__init__(name=name)
    self._shape, self._num_atoms, self._w_init = tuple(shape), num_atoms, w_init

  def __call__(self, features: jax.Array) -> jax.Array:
    size = math.prod(self._shape)
    logits = hk.Linear(size * self._num_atoms, w_init=self._w_init, name="logits")(features)
    return logits.reshape(features.shape[0], *self._shape, self._num_atoms)


@registry.networks.register("categorical_q_network")
def categorical_q_network(spec: EnvSpec, torso: str = "mlp",
                          hidden_sizes: Sequence[int] = (64, 64), activation: str = "relu",
                          num_atoms: int = 51, channels_first: bool = True,
                          w_init: str = "orthogonal") -> hk.Transformed:
  """C51's network: a torso (`q_network`'s: 'mlp' of `hidden_sizes`, or 'nature' /
  'impala' / 'minatar' for images) and a linear layer giving logits [B, A, num_atoms],
  one distribution per action. `num_atoms` must be the loss's."""
  num_actions = num_discrete_actions(spec, "categorical_q_network")
  atoms = _check_atoms(num_atoms, "categorical_q_network")
  make_torso = _q_torso("categorical_q_network", torso, hidden_sizes, activation,
                        channels_first, w_init=w_init)
  if torso != "mlp":
    check_image_torso(spec, torso, "categorical_q_network")
  head_init = dense_init(w_init) if w_init != "orthogonal" else None

  def forward(observation):
    return CategoricalHead((num_actions,), atoms, head_init, name="head")(
        make_torso()(observation))

  return hk.without_apply_rng(hk.transform(forward))


def critic_inputs(observation: Any, action: jax.Array) -> jax.Array:
  """[observation, action] flattened per example, as float32 [B, F]; a dict observation
  (the Control Suite's position, velocity, ...) is its leaves in key order."""
  flat = lambda x: jnp.reshape(x, (x.shape[0], -1)).astype(jnp.float32)
  return jnp.concatenate([flat(x) for x in jax.tree.leaves(observation)] + [flat(action)],
                         axis=-1)


@registry.networks.register("categorical_critic")
def categorical_critic(spec: EnvSpec, hidden_sizes: Sequence[int] = (256, 256),
                       activation: str = "relu", num_atoms: int = 51) -> hk.Transformed:
  """D4PG's critic (Barth-Maron et al. 2018): an MLP on [observation, action] and a
  linear layer giving the logits [B, num_atoms] of Z(s, a). init(key, observation,
  action); apply(params, observation [B, ...], action [B, A]). `num_atoms` must be the
  loss's."""
  action_bounds(spec, "categorical_critic")
  sizes = _check_sizes(hidden_sizes, "categorical_critic")
  activation_fn(activation)
  atoms = _check_atoms(num_atoms, "categorical_critic")

  def forward(observation, action):
    features = MLP(sizes, activation, name="torso")(critic_inputs(observation, action))
    return CategoricalHead((), atoms, name="head")(features)

  return hk.without_apply_rng(hk.transform(forward))
