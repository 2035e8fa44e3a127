"""Torsos: observation [B, ...] -> features [B, F].

Initialisation follows PureJaxRL/CleanRL (orthogonal weights with scale sqrt(2), zero
biases), since their PPO hyperparameters were tuned with it.
"""

from __future__ import annotations

import numbers
from typing import Callable, Optional, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from podracer.components.networks.conv import Conv2D
from podracer.components.networks.initializers import Orthogonal
from podracer.types import ArraySpec, EnvSpec, PyTree, observation_features

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "swish": jax.nn.swish}


def activation_fn(name: str) -> Callable[[jax.Array], jax.Array]:
  try:
    return ACTIVATIONS[name]
  except KeyError:
    raise ValueError(f"Unknown activation {name!r}; options: "
                     f"{', '.join(sorted(ACTIVATIONS))}.") from None


def _orthogonal(scale: float = np.sqrt(2)) -> hk.initializers.Initializer:
  return Orthogonal(scale=scale)


# Dense layers' weight initializers by name (`w_init` of the MLP and of `q_network`):
# "orthogonal" (scale sqrt 2, podracer's default, after CleanRL's PPO), or "lecun_normal",
# a truncated normal of variance 1 / fan_in: flax's `nn.Dense` default, so PureJaxRL's
# and CleanRL's JAX Q networks. They differ most where a layer widens: CartPole's 4 inputs
# into 120 units start 4x smaller under "orthogonal" (a unit's weights have norm about
# sqrt(2 * 4 / 120) against 1). "lecun_uniform" (variance 1 / fan_in, uniform) is Brax's
# networks' (`brax.training.networks.MLP`).
W_INITS = ("orthogonal", "lecun_normal", "lecun_uniform")


def dense_init(name: str) -> hk.initializers.Initializer:
  """The initializer a `w_init` name gives (`W_INITS`)."""
  if name == "orthogonal":
    return _orthogonal()
  if name == "lecun_normal":
    return hk.initializers.VarianceScaling(1.0, "fan_in", "truncated_normal")
  if name == "lecun_uniform":
    return hk.initializers.VarianceScaling(1.0, "fan_in", "uniform")
  raise ValueError(f"Unknown w_init {name!r}; options: {', '.join(W_INITS)}.")


def preprocess_image(x: jax.Array, channels_first: bool) -> jax.Array:
  """[B, C, H, W] or [B, H, W, C] pixels -> float32 [B, H, W, C]; uint8 scaled to [0, 1].
  An observation with an action mask gives its image ({"pixels": x, "action_mask": m})."""
  x = observation_features(x)
  if not hasattr(x, "ndim"):
    raise ValueError("Image torsos take one image per observation, got a structured "
                     f"observation with entries {sorted(x)}.")
  if x.ndim != 4:
    raise ValueError(f"Image torsos take a batch of images [B, H, W, C] or [B, C, H, W], "
                     f"got shape {x.shape}.")
  # Frames stay uint8 until here: 4x less to move from the host than float32.
  if x.dtype == jnp.uint8:
    x = x.astype(jnp.float32) / 255.0
  else:
    x = x.astype(jnp.float32)
  if channels_first:
    x = jnp.transpose(x, (0, 2, 3, 1))
  return x


class MLP(hk.Module):
  """Flattens the observation and applies dense layers, each followed by the activation."""

  def __init__(self, hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
               layer_norm: bool = False, name: Optional[str] = None,
               w_init: str = "orthogonal"):
    super().__init__(name=name)
    self._hidden_sizes = tuple(hidden_sizes)
    self._activation = activation_fn(activation)
    self._layer_norm = layer_norm
    self._w_init = w_init

  def __call__(self, x: PyTree) -> jax.Array:
    x = flat_features(x)
    for i, size in enumerate(self._hidden_sizes):
      x = hk.Linear(size, w_init=dense_init(self._w_init), name=f"linear_{i}")(x)
      x = self._activation(normalized(x, self._layer_norm, f"layer_norm_{i}"))
    return x


def flat_features(observation: PyTree) -> jax.Array:
  """A batch of observations [B, ...], or a tree of them (dicts: Jumanji's, Craftax's),
  as float32 [B, F]: every leaf but the action mask flattened, concatenated in the
  tree's order."""
  leaves = jax.tree.leaves(observation_features(observation))
  flat = [jnp.reshape(x, (x.shape[0], -1)).astype(jnp.float32) for x in leaves]
  return flat[0] if len(flat) == 1 else jnp.concatenate(flat, axis=-1)


def normalized(x: jax.Array, layer_norm: bool, name: str) -> jax.Array:
  """LayerNorm over the features (the last axis; a conv map's channels), with a learned
  scale and offset, where `layer_norm`; `x` otherwise. After a layer, before its
  activation, as PQN puts it (Gallici et al. 2025: it stands in for a target network)."""
  if not layer_norm:
    return x
  return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name=name)(x)


class _ConvTorso(hk.Module):
  """Convolutions, then a dense layer of `hidden_size` (layer-normed if `layer_norm`);
  `channels_first` frames are moved to channels last first."""

  def __init__(self, channels_first: bool, hidden_size: int, layer_norm: bool = False,
               name: Optional[str] = None):
    super().__init__(name=name)
    self._channels_first = channels_first
    self._hidden_size = hidden_size
    self._layer_norm = layer_norm


class NatureCNN(_ConvTorso):
  """The DQN Nature torso (Mnih et al. 2015): three VALID convs and a dense 512, all relu.

  84x84 inputs give 7x7x64 conv features; anything from 36x36 up works.
  """

  def __init__(self, channels_first: bool = True, hidden_size: int = 512,
               layer_norm: bool = False, name: Optional[str] = None):
    super().__init__(channels_first, hidden_size, layer_norm, name)

  def features(self, x: jax.Array) -> jax.Array:
    """The last conv layer's map [B, h, w, 64], before the dense layer (MuZero's
    representation; Haiku names its parameters under `~features`)."""
    return _nature_features(self, x)

  def __call__(self, x: jax.Array) -> jax.Array:
    return _dense_relu(self, _nature_features(self, x))


def _dense_relu(module: hk.Module, x: jax.Array) -> jax.Array:
  """A conv torso's flattened map -> its dense layer (normalized where asked), relu."""
  x = jnp.reshape(x, (x.shape[0], -1))
  x = hk.Linear(module._hidden_size, w_init=_orthogonal(), name="linear")(x)  # pylint: disable=protected-access
  return jax.nn.relu(normalized(x, module._layer_norm, "layer_norm"))  # pylint: disable=protected-access


def max_pool_same(x: jax.Array, window: int, stride: int) -> jax.Array:
  """`hk.max_pool` over H and W of [B, H, W, C] with SAME padding, as a max of slices.

  Same values as `hk.max_pool`, but its gradient is elementwise selects instead of
  XLA's select-and-scatter, which is several times slower on CPU (where Sebulba
  learners run in tests).
  """
  _, h, w, _ = x.shape
  out_h, out_w = -(-h // stride), -(-w // stride)
  pad_h = max((out_h - 1) * stride + window - h, 0)
  pad_w = max((out_w - 1) * stride + window - w, 0)
  x = jnp.pad(x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2),
                  (0, 0)), constant_values=-jnp.inf)
  out = None
  for i in range(window):
    for j in range(window):
      piece = x[:, i:i + stride * (out_h - 1) + 1:stride, j:j + stride * (out_w - 1) + 1:stride]
      out = piece if out is None else jnp.maximum(out, piece)
  return out


class ImpalaResNet(hk.Module):
  """The IMPALA deep torso (Espeholt et al. 2018).

  Each section: conv 3x3, max-pool 3x3 stride 2, `blocks` (two) residual blocks
  (relu, conv, relu, conv, + input); then relu, flatten and a dense layer with relu.
  84x84 inputs leave 11x11 after the three pools. One block a section is TF-Replicator's
  9-layer ResNet (encoders.py).
  """

  def __init__(self, channels: Sequence[int] = (16, 32, 32), channels_first: bool = True,
               hidden_size: int = 256, layer_norm: bool = False, name: Optional[str] = None,
               blocks: int = 2):
    super().__init__(name=name)
    self._blocks = int(blocks)
    self._channels = tuple(channels)
    self._channels_first = channels_first
    self._hidden_size = hidden_size
    self._layer_norm = layer_norm

  def features(self, x: jax.Array) -> jax.Array:
    """The last section's map [B, h, w, channels[-1]], before the final relu and dense
    (MuZero's representation; Haiku names its parameters under `~features`)."""
    return _impala_features(self, x)

  def __call__(self, x: jax.Array) -> jax.Array:
    return _dense_relu(self, jax.nn.relu(_impala_features(self, x)))


# The conv stacks, as plain functions of the module: called from `__call__` they create
# the parameters under the module's own name, as before `features` existed.
def _nature_features(module: NatureCNN, x: jax.Array) -> jax.Array:
  x = preprocess_image(x, module._channels_first)  # pylint: disable=protected-access
  for i, (channels, kernel, stride) in enumerate(((32, 8, 4), (64, 4, 2), (64, 3, 1))):
    x = Conv2D(channels, kernel, stride=stride, padding="VALID", w_init=_orthogonal(),
               name=f"conv_{i}")(x)
    x = jax.nn.relu(normalized(x, module._layer_norm, f"conv_{i}_layer_norm"))  # pylint: disable=protected-access
  return x


def _impala_features(module: ImpalaResNet, x: jax.Array) -> jax.Array:
  x = preprocess_image(x, module._channels_first)  # pylint: disable=protected-access
  conv = lambda c, name: Conv2D(c, 3, stride=1, padding="SAME", w_init=_orthogonal(),
                                name=name)
  for i, channels in enumerate(module._channels):  # pylint: disable=protected-access
    x = conv(channels, f"section_{i}_conv")(x)
    x = max_pool_same(x, window=3, stride=2)
    for j in range(module._blocks):  # pylint: disable=protected-access
      block = f"section_{i}_block_{j}"
      y = conv(channels, f"{block}_conv_0")(jax.nn.relu(x))
      y = conv(channels, f"{block}_conv_1")(jax.nn.relu(y))
      x = x + y
    x = normalized(x, module._layer_norm, f"section_{i}_layer_norm")  # pylint: disable=protected-access
  return x


class MinAtarCNN(_ConvTorso):
  """The MinAtar torso (Young & Tian 2019): one 3x3 conv of 16 channels (stride 1) on the
  [10, 10, C] frame, relu, and a dense 128 with relu: small frames need no striding.
  The conv here pads SAME (a [10, 10, 16] map, 1,600 features); the paper's network and
  purejaxql's pad VALID ([8, 8, 16], 1,024), about 35 % fewer multiply-adds
  (docs/agents.md, PQN's MinAtar table)."""

  def __init__(self, channels_first: bool = False, hidden_size: int = 128,
               layer_norm: bool = False, name: Optional[str] = None):
    super().__init__(channels_first, hidden_size, layer_norm, name)

  def features(self, x: jax.Array) -> jax.Array:
    """The conv layer's map [B, H, W, 16] (Haiku names it under `~features`)."""
    x = preprocess_image(x, self._channels_first)
    x = Conv2D(16, 3, stride=1, padding="SAME", w_init=_orthogonal(), name="conv")(x)
    return jax.nn.relu(normalized(x, self._layer_norm, "conv_layer_norm"))

  def __call__(self, x: jax.Array) -> jax.Array:
    return _dense_relu(self, self.features(x))


ATARI_TORSOS = {"impala": ImpalaResNet, "nature": NatureCNN, "minatar": MinAtarCNN}


def check_image_torso(spec, torso: str, network: str) -> None:
  """ValueErrors for a conv `torso` that is not one of ATARI_TORSOS, or an observation
  that is not an image of rank 3, naming `network`."""
  if torso not in ATARI_TORSOS:
    raise ValueError(f"Unknown torso {torso!r} for network '{network}'; options: "
                     f"{', '.join(sorted(ATARI_TORSOS))}.")
  observation = observation_features(getattr(spec, "observation", None))
  if isinstance(observation, ArraySpec) and len(observation.shape) != 3:
    raise ValueError(f"Network '{network}' needs image observations of rank 3 "
                     f"([C, H, W] or [H, W, C]), got shape {tuple(observation.shape)}.")


def num_discrete_actions(spec: EnvSpec, network: str) -> int:
  """The number of actions, or a ValueError saying the network needs discrete actions."""
  action = getattr(spec, "action", None)
  num_values = getattr(action, "num_values", None)
  if not isinstance(num_values, numbers.Integral) or num_values < 1:
    raise ValueError(f"Network '{network}' needs a discrete action spec (a DiscreteSpec "
                     f"with num_values >= 1), got action spec {action!r}.")
  return int(num_values)


def check_activation(activation: str) -> None:
  activation_fn(activation)  # Fail when building, not when first traced.
