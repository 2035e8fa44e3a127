"""MuZero's learned model (Schrittwieser et al. 2020): representation, dynamics, prediction.

`MuZeroNetwork` is a NamedTuple of pure functions of (params, ...), as `RecurrentQNetwork`:

  init(key, observation [B, ...]) -> params
  represent(params, observation [B, ...]) -> embedding [B, ...]
  dynamics(params, embedding, action [B]) -> (reward_logits [B, bins], next embedding)
  predict(params, embedding) -> (policy_logits [B, A], value_logits [B, bins])

Rewards and values are categorical over `num_bins` bins of the agent's support (the
agent's value transform turns them into scalars). Embeddings are min-max scaled to [0, 1]
per example after the representation and after each dynamics step (the paper's appendix
G), so the dynamics see inputs of one range however deep the search goes.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

import haiku as hk
import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.networks.conv import Conv2D
from podracer.components.networks.torsos import (ATARI_TORSOS, MLP, activation_fn,
                                                 check_image_torso, num_discrete_actions)
from podracer.types import EnvSpec


class MuZeroNetwork(NamedTuple):
  """MuZero's three functions and their initialiser (see the module docstring)."""
  init: Callable[..., Any]
  represent: Callable[..., Any]
  dynamics: Callable[..., Any]
  predict: Callable[..., Any]


def scale_to_unit(embedding: jax.Array) -> jax.Array:
  """Min-max scales each example's embedding (all axes but the first) to [0, 1]."""
  axes = tuple(range(1, embedding.ndim))
  low = jnp.min(embedding, axis=axes, keepdims=True)
  high = jnp.max(embedding, axis=axes, keepdims=True)
  return (embedding - low) / jnp.maximum(high - low, 1e-5)


def _check(spec: EnvSpec, num_bins: int, network: str) -> int:
  if num_bins < 3:
    raise ValueError(f"Network '{network}' needs `num_bins` >= 3 (a support of bins), got "
                     f"{num_bins}.")
  return num_discrete_actions(spec, network)


def _with_init(represent, dynamics, predict):
  """`hk.multi_transform`'s (init, apply functions): init runs all three, once each."""
  def init(observation):
    embedding = represent(observation)
    _, embedding = dynamics(embedding, jnp.zeros(embedding.shape[:1], jnp.int32))
    return predict(embedding)
  return init, (represent, dynamics, predict)


def _multi_transform(forward: Callable[[], Any]) -> MuZeroNetwork:
  transformed = hk.without_apply_rng(hk.multi_transform(forward))
  represent, dynamics, predict = transformed.apply
  return MuZeroNetwork(transformed.init, represent, dynamics, predict)


@registry.networks.register("muzero_mlp")
def muzero_mlp(spec: EnvSpec, num_bins: int = 51, embedding_size: int = 64,
               hidden_sizes: Sequence[int] = (64,), activation: str = "relu"
               ) -> MuZeroNetwork:
  """MLPs for vector observations: representation to an `embedding_size` vector; dynamics
  on [embedding, one-hot action] with a residual update of the embedding."""
  num_actions = _check(spec, num_bins, "muzero_mlp")
  act = activation_fn(activation)

  def forward():
    represent_torso = MLP(hidden_sizes, activation, name="represent_torso")
    represent_out = hk.Linear(embedding_size, name="represent_out")
    dynamics_torso = MLP(hidden_sizes, activation, name="dynamics_torso")
    dynamics_out = hk.Linear(embedding_size, name="dynamics_out")
    reward_head = hk.nets.MLP([*hidden_sizes, num_bins], activation=act, name="reward_head")
    policy_head = hk.nets.MLP([*hidden_sizes, num_actions], activation=act,
                              name="policy_head")
    value_head = hk.nets.MLP([*hidden_sizes, num_bins], activation=act, name="value_head")

    def represent(observation):
      return scale_to_unit(represent_out(represent_torso(observation)))

    def dynamics(embedding, action):
      inputs = jnp.concatenate([embedding, jax.nn.one_hot(action, num_actions)], axis=-1)
      features = dynamics_torso(inputs)
      return reward_head(features), scale_to_unit(embedding + dynamics_out(features))

    def predict(embedding):
      return policy_head(embedding), value_head(embedding)

    return _with_init(represent, dynamics, predict)

  return _multi_transform(forward)


class _ResidualBlock(hk.Module):
  """relu, conv 3x3, relu, conv 3x3, plus the input (the IMPALA torso's block)."""

  def __init__(self, channels: int, name: Optional[str] = None):
    super().__init__(name=name)
    self._channels = channels

  def __call__(self, x: jax.Array) -> jax.Array:
    y = Conv2D(self._channels, 3, stride=1, padding="SAME", name="conv_0")(jax.nn.relu(x))
    y = Conv2D(self._channels, 3, stride=1, padding="SAME", name="conv_1")(jax.nn.relu(y))
    return x + y


@registry.networks.register("muzero_resnet")
def muzero_resnet(spec: EnvSpec, num_bins: int = 601, torso: str = "impala",
                  channels_first: bool = True, channels: Sequence[int] = (16, 32, 32),
                  num_blocks: int = 1, head_hidden_size: int = 256) -> MuZeroNetwork:
  """For frames: the representation is a conv torso ('impala' or 'nature', podracer's
  `Conv2D`) without its dense layer, a [B, h, w, C] map; the dynamics take the action as
  one-hot planes beside it and apply `num_blocks` residual blocks; the heads are a dense
  layer on the flattened map."""
  num_actions = _check(spec, num_bins, "muzero_resnet")
  check_image_torso(spec, torso, "muzero_resnet")
  torso_kwargs = dict(channels_first=channels_first)
  if torso == "impala":
    torso_kwargs["channels"] = tuple(channels)

  def head(size, name):
    return hk.Sequential([lambda x: jnp.reshape(jax.nn.relu(x), (x.shape[0], -1)),
                          hk.Linear(head_hidden_size, name=f"{name}_hidden"), jax.nn.relu,
                          hk.Linear(size, name=f"{name}_out")], name=name)

  def forward():
    represent_torso = ATARI_TORSOS[torso](name="torso", **torso_kwargs)
    blocks = [_ResidualBlock(_width(torso, channels), name=f"dynamics_block_{i}")
              for i in range(num_blocks)]
    dynamics_in = Conv2D(_width(torso, channels), 3, stride=1, padding="SAME",
                         name="dynamics_in")
    reward_head, policy_head, value_head = (head(num_bins, "reward_head"),
                                            head(num_actions, "policy_head"),
                                            head(num_bins, "value_head"))

    def represent(observation):
      return scale_to_unit(represent_torso.features(observation))

    def dynamics(embedding, action):
      planes = jax.nn.one_hot(action, num_actions)[:, None, None, :]
      planes = jnp.broadcast_to(planes, (*embedding.shape[:3], num_actions))
      x = embedding + dynamics_in(jnp.concatenate([embedding, planes], axis=-1))
      for block in blocks:
        x = block(x)
      return reward_head(x), scale_to_unit(x)

    def predict(embedding):
      return policy_head(embedding), value_head(embedding)

    return _with_init(represent, dynamics, predict)

  return _multi_transform(forward)


def _width(torso: str, channels: Sequence[int]) -> int:
  """Channels of the representation's map: the last section's (impala) or 64 (nature)."""
  return tuple(channels)[-1] if torso == "impala" else 64
