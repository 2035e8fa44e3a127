"""Registered networks: `factory(spec=EnvSpec, **config) -> hk.Transformed` (or a
NamedTuple of pure functions, for networks with more than one entry point).

The actor-critic networks' `apply(params, observation [B, ...])` returns a
`PolicyValueOutput` (logits [B, num_actions], value [B]); `init(key, observation)` takes a
sample batch. `q_network` is DQN's, `recurrent_q` R2D2's; `gaussian_policy` and `twin_q` (continuous.py) are
SAC's actor and critic; `muzero_mlp` and `muzero_resnet` (muzero.py) are MuZero's model.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

import haiku as hk
import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.networks.continuous import (GaussianOutput, GaussianPolicyNetwork,
                                                     SquashedGaussianHead, gaussian_policy,
                                                     squashed_gaussian_mode,
                                                     squashed_gaussian_sample, twin_q)
from podracer.components.networks.cores import LSTMCore
from podracer.components.networks.muzero import MuZeroNetwork, muzero_mlp, muzero_resnet
from podracer.components.networks.heads import DuelingHead, PolicyValueHead, PolicyValueOutput
from podracer.components.networks.torsos import (ACTIVATIONS, ATARI_TORSOS, MLP, W_INITS,
                                                 ImpalaResNet, NatureCNN, activation_fn,
                                                 check_image_torso, dense_init,
                                                 preprocess_image)
from podracer.types import EnvSpec


def num_discrete_actions(spec: EnvSpec, network: str) -> int:
  """The number of actions, or a ValueError saying the network needs discrete actions."""
  action = getattr(spec, "action", None)
  num_values = getattr(action, "num_values", None)
  if not isinstance(num_values, numbers.Integral) or num_values < 1:
    raise ValueError(f"Network '{network}' needs a discrete action spec (a DiscreteSpec "
                     f"with num_values >= 1), got action spec {action!r}.")
  return int(num_values)


def _check_activation(activation: str) -> None:
  activation_fn(activation)  # Fail when building, not when first traced.


@registry.networks.register("mlp_actor_critic")
def mlp_actor_critic(spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64),
                     activation: str = "tanh") -> hk.Transformed:
  """Separate actor and critic MLPs, as in PureJaxRL's PPO network."""
  num_actions = num_discrete_actions(spec, "mlp_actor_critic")
  _check_activation(activation)

  def forward(observation):
    actor = MLP(hidden_sizes, activation, name="actor_torso")(observation)
    critic = MLP(hidden_sizes, activation, name="critic_torso")(observation)
    return PolicyValueHead(num_actions, name="head")(actor, critic)

  return hk.without_apply_rng(hk.transform(forward))


@registry.networks.register("mlp_shared_actor_critic")
def mlp_shared_actor_critic(spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64),
                            activation: str = "tanh") -> hk.Transformed:
  """One MLP torso feeding both the policy and the value layer."""
  num_actions = num_discrete_actions(spec, "mlp_shared_actor_critic")
  _check_activation(activation)

  def forward(observation):
    features = MLP(hidden_sizes, activation, name="torso")(observation)
    return PolicyValueHead(num_actions, name="head")(features)

  return hk.without_apply_rng(hk.transform(forward))


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


class RecurrentQNetwork(NamedTuple):
  """A torso -> LSTM -> dueling Q network, as pure functions of (params, ...).

  init(key, observation [B, ...]) -> params
  initial_state(batch_size) -> LSTM state (no parameters involved)
  step(params, observation [B, ...], state, reset [B]) -> (q [B, A], state)
  unroll(params, observation [T, B, ...], state, reset [T, B]) -> (q [T, B, A], state)
  `reset` is true at the first step of an episode: the state restarts there.
  """
  init: Callable[..., Any]
  initial_state: Callable[[int], Any]
  step: Callable[..., Any]
  unroll: Callable[..., Any]


def _q_torso(network: str, torso: str, hidden_sizes: Sequence[int], activation: str,
             channels_first: bool, layer_norm: bool = False,
             w_init: str = "orthogonal") -> Callable[[], hk.Module]:
  """The torso a Q network names ('mlp', or 'impala' / 'nature' / 'minatar' for images),
  checked now and made inside the network's transform."""
  if torso != "mlp" and torso not in ATARI_TORSOS:
    raise ValueError(f"Unknown torso {torso!r} for network '{network}'; options: mlp, "
                     f"{', '.join(sorted(ATARI_TORSOS))}.")
  _check_activation(activation)
  if w_init not in W_INITS:
    raise ValueError(f"Unknown w_init {w_init!r} for network '{network}'; options: "
                     f"{', '.join(W_INITS)}.")
  if torso == "mlp":
    return lambda: MLP(hidden_sizes, activation, layer_norm=layer_norm, name="torso",
                       w_init=w_init)
  return lambda: ATARI_TORSOS[torso](channels_first=channels_first, layer_norm=layer_norm,
                                     name="torso")


@registry.networks.register("q_network")
def q_network(spec: EnvSpec, torso: str = "mlp", hidden_sizes: Sequence[int] = (64, 64),
              activation: str = "relu", dueling: bool = False,
              head_hidden_sizes: Sequence[int] = (), channels_first: bool = True,
              layer_norm: bool = False, w_init: str = "orthogonal") -> hk.Transformed:
  """DQN's network: Q-values [B, num_actions] from a torso ('mlp' of `hidden_sizes`, or
  'nature' / 'impala' / 'minatar' for images) and a linear layer, or with `dueling` a
  dueling head (Wang et al. 2016) whose streams have `head_hidden_sizes` hidden layers.

  `layer_norm` puts a LayerNorm after each hidden layer of the torso (every dense layer
  of the MLP; every conv and the dense layer of a conv torso, an IMPALA section's
  output), before its activation: PQN's network (Gallici et al. 2025), where it stands
  in for a target network. It has no state (BatchNorm, which would, is not offered).

  `w_init` initializes the MLP torso's layers and the output layer (or the dueling
  head's): "orthogonal" (the torso and a dueling head at scale sqrt 2, a linear output
  layer Haiku's default) or "lecun_normal" (every layer; flax's default, so PureJaxRL's
  and CleanRL's DQN).
  """
  num_actions = num_discrete_actions(spec, "q_network")
  make_torso = _q_torso("q_network", torso, hidden_sizes, activation, channels_first,
                        layer_norm, w_init)
  head_init = dense_init(w_init) if w_init != "orthogonal" else None
  if torso != "mlp":
    check_image_torso(spec, torso, "q_network")

  def forward(observation):
    features = make_torso()(observation)
    if dueling:
      return DuelingHead(num_actions, head_hidden_sizes, name="head", w_init=w_init)(features)
    if head_hidden_sizes:
      features = MLP(head_hidden_sizes, activation, name="head_torso", w_init=w_init)(features)
    return hk.Linear(num_actions, w_init=head_init, name="head")(features)

  return hk.without_apply_rng(hk.transform(forward))


@registry.networks.register("recurrent_q")
def recurrent_q(spec: EnvSpec, torso: str = "mlp", hidden_sizes: Sequence[int] = (64,),
                activation: str = "relu", lstm_size: int = 64,
                head_hidden_sizes: Sequence[int] = (64,),
                channels_first: bool = True, w_init: str = "orthogonal") -> RecurrentQNetwork:
  """R2D2's network: a torso ('mlp', or 'impala' / 'nature' for images), an LSTM core
  and a dueling head (Kapturowski et al. 2019). `w_init` initializes the MLP torso and
  the head's layers (`q_network`'s; the LSTM keeps Haiku's init)."""
  num_actions = num_discrete_actions(spec, "recurrent_q")
  make_torso = _q_torso("recurrent_q", torso, hidden_sizes, activation, channels_first,
                        w_init=w_init)

  def forward():
    return _torso_core_head(make_torso(), LSTMCore(lstm_size, name="core"),
                            DuelingHead(num_actions, head_hidden_sizes, name="head",
                                        w_init=w_init))

  return _recurrent(forward, RecurrentQNetwork)


def _torso_core_head(torso: Callable[..., Any], core: LSTMCore, head: Callable[..., Any]):
  """(init, (step, unroll, initial_state)) of torso -> core -> head: one step of a batch
  [B, ...], or an unroll of [T, B, ...] (the torso and head over T * B at once)."""
  def step(observation, state, reset):
    features, state = core(torso(observation), state, reset)
    return head(features), state

  def unroll(observation, state, reset):
    t, b = reset.shape
    flat = jax.tree.map(lambda x: x.reshape(t * b, *x.shape[2:]), observation)
    outputs, state = core.unroll(torso(flat).reshape(t, b, -1), state, reset)
    out = head(outputs.reshape(t * b, -1))
    return jax.tree.map(lambda x: x.reshape(t, b, *x.shape[1:]), out), state

  def init(observation):
    batch = jax.tree.leaves(observation)[0].shape[0]
    return step(observation, core.initial_state(batch), jnp.zeros((batch,), bool))

  return init, (step, unroll, core.initial_state)


def _recurrent(forward: Callable[[], Any], make: Callable[..., Any]) -> Any:
  """`make(init, initial_state, step, unroll)` from a multi-transform's forward, which
  returns (init, (step, unroll, initial_state))."""
  transformed = hk.without_apply_rng(hk.multi_transform(forward))
  step_fn, unroll_fn, initial_state_fn = transformed.apply
  return make(init=transformed.init, initial_state=lambda batch: initial_state_fn({}, batch),
              step=step_fn, unroll=unroll_fn)


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
  _check_activation(activation)

  def forward():
    return _torso_core_head(MLP(hidden_sizes, activation, name="torso"),
                            LSTMCore(lstm_size, name="core"),
                            PolicyValueHead(num_actions, name="head"))

  return _recurrent(forward, RecurrentActorCritic)


__all__ = [
    "ACTIVATIONS", "ATARI_TORSOS", "DuelingHead", "GaussianOutput", "GaussianPolicyNetwork",
    "SquashedGaussianHead", "gaussian_policy", "squashed_gaussian_mode",
    "squashed_gaussian_sample", "twin_q", "ImpalaResNet", "LSTMCore", "MLP",
    "MuZeroNetwork", "NatureCNN", "PolicyValueHead", "PolicyValueOutput",
    "RecurrentActorCritic", "RecurrentQNetwork", "activation_fn", "recurrent_actor_critic",
    "atari_actor_critic", "mlp_actor_critic", "mlp_shared_actor_critic",
    "muzero_mlp", "muzero_resnet", "num_discrete_actions", "preprocess_image",
    "q_network", "recurrent_q",
]
