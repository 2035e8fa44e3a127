"""The actor-critic networks: a policy's parameters and a value from one observation
(`mlp_actor_critic`, `mlp_shared_actor_critic`, `atari_actor_critic`: logits;
`gaussian_actor_critic`: a Gaussian's mean and scale) or through an LSTM
(`recurrent_actor_critic`).

`apply(params, observation [B, ...])` returns a `PolicyValueOutput` (`logits`: the
policy's parameters [B, P], what the agent's action distribution reads, P = num_actions
for a categorical, 2 x action size for a Gaussian; value [B]); `init(key, observation)`
takes a sample batch.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

import haiku as hk
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.networks.initializers import Orthogonal
from podracer.components.networks.cores import LSTMCore, recurrent, torso_core_head
from podracer.components.networks.heads import PolicyValueHead, PolicyValueOutput
from podracer.components.networks.torsos import (ATARI_TORSOS, MLP, W_INITS,
                                                 check_activation, check_image_torso,
                                                 dense_init, num_discrete_actions)
from podracer.errors import ConfigError
from podracer.types import ArraySpec, EnvSpec


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
  baselines' shape). Its policy layer gives logits for discrete actions, a Gaussian's
  mean and scale (2 x action size, the scale state-dependent) for continuous ones."""
  num_params = (2 * _continuous_size(spec, "recurrent_actor_critic")
                if isinstance(spec.action, ArraySpec)
                else num_discrete_actions(spec, "recurrent_actor_critic"))
  check_activation(activation)

  def forward():
    return torso_core_head(MLP(hidden_sizes, activation, name="torso"),
                            LSTMCore(lstm_size, name="core"),
                            PolicyValueHead(num_params, name="head"))

  return recurrent(forward, RecurrentActorCritic)


def _continuous_size(spec: EnvSpec, network: str) -> int:
  if not isinstance(spec.action, ArraySpec):
    raise ConfigError(
        f"Network '{network}' (`network.name`) gives a Gaussian's parameters for continuous "
        f"actions, but the environment has {spec.action.num_values} discrete actions: set "
        "`--config.network.name=mlp_actor_critic` (logits) and "
        "`--config.distribution.name=categorical`.")
  return int(np.prod(spec.action.shape))


@registry.networks.register("gaussian_actor_critic")
def gaussian_actor_critic(spec: EnvSpec, policy_sizes: Sequence[int] = (64, 64),
                          value_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
                          w_init: str = "orthogonal", state_dependent_std: bool = False,
                          init_scale: float = 0.0) -> hk.Transformed:
  """Separate policy and value MLPs for continuous actions: the policy gives a mean and a
  scale parameter per action dimension (`logits` [B, 2 A]: what `tanh_normal` and
  `normal` read), from its last layer (`state_dependent_std`, Brax's) or as a learned
  vector starting at `init_scale` (CleanRL's log-std). `w_init` "orthogonal" starts the
  mean's layer at scale 0.01 and the value's at 1 (CleanRL's); "lecun_uniform" every layer
  as Brax's networks do. The defaults are CleanRL's continuous PPO; Brax's are in PPO's
  `brax_anakin` config (4 x 32 policy, 5 x 256 value, swish, state-dependent scale)."""
  size = _continuous_size(spec, "gaussian_actor_critic")
  check_activation(activation)
  if w_init not in W_INITS:
    raise ConfigError(f"Network 'gaussian_actor_critic': `network.w_init` is {w_init!r}; "
                      f"options: {', '.join(W_INITS)}.")
  orthogonal = w_init == "orthogonal"
  mean_init = Orthogonal(0.01) if orthogonal else dense_init(w_init)
  value_init = Orthogonal(1.0) if orthogonal else dense_init(w_init)

  def forward(observation):
    actor = MLP(policy_sizes, activation, name="actor_torso", w_init=w_init)(observation)
    critic = MLP(value_sizes, activation, name="critic_torso", w_init=w_init)(observation)
    value = hk.Linear(1, w_init=value_init, name="value")(critic)[:, 0]
    if state_dependent_std:
      params = hk.Linear(2 * size, w_init=mean_init, name="policy")(actor)
      return PolicyValueOutput(logits=params, value=value)
    mean = hk.Linear(size, w_init=mean_init, name="policy")(actor)
    scale = hk.get_parameter("scale", (size,), init=hk.initializers.Constant(init_scale))
    scale = jnp.broadcast_to(scale, mean.shape).astype(mean.dtype)
    return PolicyValueOutput(logits=jnp.concatenate([mean, scale], -1), value=value)

  return hk.without_apply_rng(hk.transform(forward))
