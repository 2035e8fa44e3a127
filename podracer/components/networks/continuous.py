"""Networks for continuous actions: a tanh-squashed Gaussian policy and a twin Q critic.

The policy samples u ~ N(mean, std) and acts a = c + s tanh(u), where c and s are the
centre and half-width of the action bounds, so every action is within them. Its
log-probability follows by the change of variables (Haarnoja et al. 2018, appendix C):

    log pi(a|s) = log N(u; mean, std) - sum_i log(s_i (1 - tanh(u_i)^2)).
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.networks.torsos import MLP, activation_fn
from podracer.types import ArraySpec, EnvSpec, bound_arrays


class GaussianOutput(NamedTuple):
  mean: jax.Array     # float32 [B, A]: the Gaussian's mean, before tanh
  log_std: jax.Array  # float32 [B, A]


class SquashedGaussianHead(hk.Module):
  """features [B, F] -> the pre-tanh Gaussian's mean and log standard deviation [B, A].

  log_std is squashed smoothly into [log_std_min, log_std_max] (as in SpinningUp and
  CleanRL) rather than clipped, so its gradient never vanishes at a bound.
  """

  def __init__(self, action_size: int, log_std_min: float = -5.0, log_std_max: float = 2.0,
               name: Optional[str] = None):
    super().__init__(name=name)
    self._action_size = action_size
    self._log_std_min, self._log_std_max = log_std_min, log_std_max

  def __call__(self, features: jax.Array) -> GaussianOutput:
    mean = hk.Linear(self._action_size, name="mean")(features)
    log_std = jnp.tanh(hk.Linear(self._action_size, name="log_std")(features))
    log_std = self._log_std_min + 0.5 * (self._log_std_max - self._log_std_min) * (log_std + 1)
    return GaussianOutput(mean, log_std)


def squashed_gaussian_sample(output: GaussianOutput, key: jax.Array, minimum: jax.Array,
                             maximum: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """A reparameterised action [B, A] within [minimum, maximum] and its log-probability [B]."""
  std = jnp.exp(output.log_std)
  noise = jax.random.normal(key, output.mean.shape, output.mean.dtype)
  u = output.mean + std * noise
  gaussian = -0.5 * jnp.square(noise) - output.log_std - 0.5 * math.log(2 * math.pi)
  # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|.
  log_det_tanh = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))
  centre, half_width = (maximum + minimum) / 2, (maximum - minimum) / 2
  log_prob = jnp.sum(gaussian - log_det_tanh - jnp.log(half_width), axis=-1)
  return centre + half_width * jnp.tanh(u), log_prob


def squashed_gaussian_mode(output: GaussianOutput, minimum: jax.Array,
                           maximum: jax.Array) -> jax.Array:
  """The deterministic action c + s tanh(mean), e.g. for evaluation."""
  centre, half_width = (maximum + minimum) / 2, (maximum - minimum) / 2
  return centre + half_width * jnp.tanh(output.mean)


_BOUNDS_FIX = ("Give the environment's action spec finite bounds and clip the actions it "
               "is given, as examples/point_mass does; only PPO, recurrent PPO and "
               "IMPALA take unbounded actions, with `--config.distribution.name=normal` "
               "(docs/agents.md's bounds table).")


def action_bounds(spec: EnvSpec, network: str) -> Tuple[np.ndarray, np.ndarray]:
  """float32 (minimum, maximum) of the action's shape, or a ValueError saying the network
  needs bounded continuous actions."""
  action = getattr(spec, "action", None)
  if (not isinstance(action, ArraySpec) or not np.issubdtype(np.dtype(action.dtype),
                                                              np.floating)
      or action.minimum is None or action.maximum is None):
    raise ValueError(f"Network '{network}' needs a bounded continuous action spec (a float "
                     f"ArraySpec with minimum and maximum), got action spec {action!r}. {_BOUNDS_FIX}")
  low, high = bound_arrays(action)
  if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
    raise ValueError(f"Network '{network}' needs finite action bounds with minimum < "
                     f"maximum, got {action.minimum!r} and {action.maximum!r}. {_BOUNDS_FIX}")
  return low, high


class GaussianPolicyNetwork(NamedTuple):
  """A squashed Gaussian policy, as pure functions of (params, ...).

  init(key, observation [B, ...]) -> params
  apply(params, observation) -> GaussianOutput (mean, log_std [B, A], before tanh)
  sample(params, observation, key) -> (action [B, A] within the bounds, log_prob [B])
  mode(params, observation) -> the deterministic action [B, A]
  """
  init: Callable[..., hk.Params]
  apply: Callable[..., GaussianOutput]
  sample: Callable[..., Tuple[jax.Array, jax.Array]]
  mode: Callable[..., jax.Array]
  minimum: np.ndarray  # [A] the action bounds it acts within
  maximum: np.ndarray


def _check_sizes(hidden_sizes: Sequence[int], network: str) -> Tuple[int, ...]:
  sizes = tuple(hidden_sizes)
  if not sizes or not all(isinstance(s, numbers.Integral) and s > 0 for s in sizes):
    raise ValueError(f"Network '{network}' needs `hidden_sizes` of positive integers, got "
                     f"{hidden_sizes!r}.")
  return sizes


@registry.networks.register("gaussian_policy")
def gaussian_policy(spec: EnvSpec, hidden_sizes: Sequence[int] = (256, 256),
                    activation: str = "relu", log_std_min: float = -5.0,
                    log_std_max: float = 2.0) -> GaussianPolicyNetwork:
  """SAC's actor: an MLP torso and a tanh-squashed Gaussian head within the action bounds."""
  minimum, maximum = action_bounds(spec, "gaussian_policy")
  sizes = _check_sizes(hidden_sizes, "gaussian_policy")
  activation_fn(activation)  # Fail when building, not when first traced.
  if not log_std_min < log_std_max:
    raise ValueError(f"`log_std_min` ({log_std_min}) must be < `log_std_max` "
                     f"({log_std_max}).")
  action_size = int(np.prod(spec.action.shape))

  def forward(observation):
    features = MLP(sizes, activation, name="torso")(observation)
    output = SquashedGaussianHead(action_size, log_std_min, log_std_max,
                                  name="head")(features)
    shape = (-1, *spec.action.shape)
    return GaussianOutput(output.mean.reshape(shape), output.log_std.reshape(shape))

  net = hk.without_apply_rng(hk.transform(forward))
  low, high = jnp.asarray(minimum), jnp.asarray(maximum)

  def sample(params, observation, key):
    output = net.apply(params, observation)
    # Flat [B, A]: the log-probability sums over every action dimension.
    flat = lambda x: x.reshape(x.shape[0], -1)
    action, log_prob = squashed_gaussian_sample(
        GaussianOutput(flat(output.mean), flat(output.log_std)), key, low.reshape(-1),
        high.reshape(-1))
    return action.reshape(output.mean.shape), log_prob

  def mode(params, observation):
    return squashed_gaussian_mode(net.apply(params, observation), low, high)

  return GaussianPolicyNetwork(init=net.init, apply=net.apply, sample=sample, mode=mode,
                               minimum=minimum, maximum=maximum)


@registry.networks.register("twin_q")
def twin_q(spec: EnvSpec, hidden_sizes: Sequence[int] = (256, 256),
           activation: str = "relu") -> hk.Transformed:
  """Two independent Q(s, a) MLPs on [observation, action] (clipped double Q, Fujimoto et
  al. 2018, as SAC uses it). init(key, observation, action); apply(params, observation
  [B, ...], action [B, A]) -> (q1 [B], q2 [B])."""
  action_bounds(spec, "twin_q")
  sizes = _check_sizes(hidden_sizes, "twin_q")
  activation_fn(activation)

  def forward(observation, action):
    flat = lambda x: jnp.reshape(x, (x.shape[0], -1)).astype(jnp.float32)
    inputs = jnp.concatenate([flat(observation), flat(action)], axis=-1)

    def q(name):
      features = MLP(sizes, activation, name=f"{name}_torso")(inputs)
      return jnp.squeeze(hk.Linear(1, name=f"{name}_value")(features), axis=-1)

    return q("q1"), q("q2")

  return hk.without_apply_rng(hk.transform(forward))


class DeterministicPolicyNetwork(NamedTuple):
  """A deterministic policy mu(s) within the action bounds, as pure functions of
  (params, ...): TD3's and DDPG's actor.

  init(key, observation [B, ...]) -> params
  apply(params, observation) -> the action [B, *action shape], c + h tanh(MLP(s))
  """
  init: Callable[..., hk.Params]
  apply: Callable[..., jax.Array]
  minimum: np.ndarray  # [A] the action bounds it acts within
  maximum: np.ndarray


@registry.networks.register("deterministic_policy")
def deterministic_policy(spec: EnvSpec, hidden_sizes: Sequence[int] = (256, 256),
                         activation: str = "relu") -> DeterministicPolicyNetwork:
  """TD3's actor (Fujimoto et al. 2018; CleanRL's `td3_continuous_action`): an MLP and a
  tanh output scaled onto the action bounds."""
  minimum, maximum = action_bounds(spec, "deterministic_policy")
  sizes = _check_sizes(hidden_sizes, "deterministic_policy")
  activation_fn(activation)
  size = int(np.prod(spec.action.shape))
  centre, half_width = (jnp.asarray((maximum + minimum) / 2),
                        jnp.asarray((maximum - minimum) / 2))

  def forward(observation):
    features = MLP(sizes, activation, name="torso")(observation)
    u = hk.Linear(size, name="action")(features).reshape(-1, *spec.action.shape)
    return centre + half_width * jnp.tanh(u)

  net = hk.without_apply_rng(hk.transform(forward))
  return DeterministicPolicyNetwork(init=net.init, apply=net.apply, minimum=minimum,
                                    maximum=maximum)
