"""The actor-critic networks: a policy's logits and a value from one observation
(`mlp_actor_critic`, `mlp_shared_actor_critic`, `atari_actor_critic`) or through an LSTM
(`recurrent_actor_critic`).

`apply(params, observation [B, ...])` returns a `PolicyValueOutput` (logits
[B, num_actions], value [B]); `init(key, observation)` takes a sample batch.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

import haiku as hk

from podracer import registry
from podracer.components.networks.cores import LSTMCore, recurrent, torso_core_head
from podracer.components.networks.heads import PolicyValueHead
from podracer.components.networks.torsos import (ATARI_TORSOS, MLP, check_activation,
                                                 check_image_torso, num_discrete_actions)
from podracer.types import EnvSpec


def _mlp_actor_critic(spec: EnvSpec, network: str, hidden_sizes: Sequence[int],
                      activation: str, shared: bool) -> hk.Transformed:
  """MLP torsos for the policy and the value: one for both (`shared`) or one each."""
  num_actions = num_discrete_actions(spec, network)
  check_activation(activation)

  def forward(observation):
    if shared:
      features = MLP(hidden_sizes, activation, name="torso")(observation)
      return PolicyValueHead(num_actions, name="head")(features)
    actor = MLP(hidden_sizes, activation, name="actor_torso")(observation)
    critic = MLP(hidden_sizes, activation, name="critic_torso")(observation)
    return PolicyValueHead(num_actions, name="head")(actor, critic)

  return hk.without_apply_rng(hk.transform(forward))


@registry.networks.register("mlp_actor_critic")
def mlp_actor_critic(spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64),
                     activation: str = "tanh") -> hk.Transformed:
  """Separate actor and critic MLPs, as in PureJaxRL's PPO network."""
  return _mlp_actor_critic(spec, "mlp_actor_critic", hidden_sizes, activation, shared=False)


@registry.networks.register("mlp_shared_actor_critic")
def mlp_shared_actor_critic(spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64),
                            activation: str = "tanh") -> hk.Transformed:
  """One MLP torso feeding both the policy and the value layer."""
  return _mlp_actor_critic(spec, "mlp_shared_actor_critic", hidden_sizes, activation,
                           shared=True)


@registry.networks.register("atari_actor_critic")
def atari_actor_critic(spec: EnvSpec, torso: str = "impala", channels_first: bool = True,
                       channels: Optional[Sequence[int]] = None,
                       hidden_size: Optional[int] = None) -> hk.Transformed:
  """A conv torso ('impala' or 'nature') shared by the policy and the value layer.

  `channels_first` matches EnvPool's stacked frames [B, C, H, W]; set it to False for
  [B, H, W, C] observations. `channels` (the ResNet sections' widths, 'impala' only) and
  `hidden_size` default to the papers' values.
  """
  num_actions = num_discrete_actions(spec, "atari_actor_critic")
  check_image_torso(spec, torso, "atari_actor_critic")
  torso_kwargs: Dict[str, Any] = dict(channels_first=channels_first)
  if channels is not None:
    if torso != "impala":
      raise ValueError("`channels` sets the widths of the 'impala' torso's sections; the "
                       f"'{torso}' torso has fixed widths.")
    torso_kwargs["channels"] = tuple(channels)
  if hidden_size is not None:
    torso_kwargs["hidden_size"] = hidden_size
  torso_cls = ATARI_TORSOS[torso]

  def forward(observation):
    features = torso_cls(name="torso", **torso_kwargs)(observation)
    return PolicyValueHead(num_actions, name="head")(features)

  return hk.without_apply_rng(hk.transform(forward))


class RecurrentActorCritic(NamedTuple):
  """A torso -> LSTM -> policy and value network, as pure functions of (params, ...):
  what recurrent PPO acts and learns with (`recurrent_actor_critic`).

  init(key, observation [B, ...]) -> params
  initial_state(batch_size) -> LSTM state
  step(params, observation [B, ...], state, reset [B]) -> (PolicyValueOutput [B], state)
  unroll(params, observation [T, B, ...], state, reset [T, B]) -> (output [T, B], state)
  `reset` is true at the first step of an episode: the state restarts there.
  """
  init: Callable[..., Any]
  initial_state: Callable[[int], Any]
  step: Callable[..., Any]
  unroll: Callable[..., Any]


@registry.networks.register("recurrent_actor_critic")
def recurrent_actor_critic(spec: EnvSpec, hidden_sizes: Sequence[int] = (64,),
                           activation: str = "tanh",
                           lstm_size: int = 64) -> RecurrentActorCritic:
  """An MLP torso, an LSTM core (its state reset at episode starts) and one layer each
  for the policy and the value: PPO with memory (POPGym's and PureJaxRL's recurrent
  baselines' shape)."""
  num_actions = num_discrete_actions(spec, "recurrent_actor_critic")
  check_activation(activation)

  def forward():
    return torso_core_head(MLP(hidden_sizes, activation, name="torso"),
                            LSTMCore(lstm_size, name="core"),
                            PolicyValueHead(num_actions, name="head"))

  return recurrent(forward, RecurrentActorCritic)
