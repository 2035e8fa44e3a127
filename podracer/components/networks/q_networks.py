"""The Q networks: DQN's and PQN's `q_network` (Q-values [B, num_actions] from a torso,
optionally a dueling head) and R2D2's `recurrent_q` (torso, LSTM, dueling head)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import haiku as hk

from podracer import registry
from podracer.components.networks.cores import LSTMCore, recurrent, torso_core_head
from podracer.components.networks.heads import DuelingHead
from podracer.components.networks.torsos import (ATARI_TORSOS, MLP, W_INITS, check_activation,
                                                 check_image_torso, dense_init,
                                                 num_discrete_actions)
from podracer.types import EnvSpec


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
  check_activation(activation)
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
    return torso_core_head(make_torso(), LSTMCore(lstm_size, name="core"),
                            DuelingHead(num_actions, head_hidden_sizes, name="head",
                                        w_init=w_init))

  return recurrent(forward, RecurrentQNetwork)
