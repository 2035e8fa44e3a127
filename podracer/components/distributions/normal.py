"""Gaussian distributions over bounded continuous actions, parameterised by a mean and a
scale per action dimension (the network's policy output [..., 2 A]: mean, then scale):

- `tanh_normal` (Brax's PPO): u ~ N(mean, softplus(s) + min_std), acting
  a = c + h tanh(u) within the bounds [c - h, c + h]; the log-probability has the change
  of variables' Jacobian, log pi(a) = log N(u) - sum_i log(h_i (1 - tanh(u_i)^2)), and the
  entropy, which has no closed form, is estimated from one sample (as Brax does).
- `normal` (CleanRL's and PureJaxRL's continuous PPO): u ~ N(mean, exp(s)), acting
  clip(u, minimum, maximum); log-probability and entropy are the Gaussian's own. The one
  that takes actions without bounds (None or infinite): unclipped there.
"""

from __future__ import annotations

import math
from typing import Annotated, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.distributions.base import ActionDistribution
from podracer.errors import ConfigError
from podracer.registry.ranges import Positive
from podracer.types import ArraySpec, EnvSpec

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def normal_log_prob(x: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
  """log N(x; mean, exp(log_std)) per dimension."""
  return -0.5 * jnp.square((x - mean) / jnp.exp(log_std)) - log_std - _HALF_LOG_2PI


def tanh_log_det_jacobian(u: jax.Array) -> jax.Array:
  """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u)), stable for large |u|."""
  return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def continuous_bounds(spec: EnvSpec, distribution: str,
                      unbounded: bool = False) -> Tuple[np.ndarray, np.ndarray]:
  """float32 (minimum, maximum) of the action's shape, or a ConfigError naming the
  distribution: it needs continuous actions with bounds, no NaN, minimum < maximum, all
  finite unless `unbounded` (a missing bound is then -inf or +inf)."""
  action = spec.action
  if not isinstance(action, ArraySpec) or not np.issubdtype(np.dtype(action.dtype),
                                                             np.floating):
    raise ConfigError(
        f"Distribution '{distribution}' (`distribution.name`) takes continuous actions, but "
        f"the environment has {getattr(action, 'num_values', '?')} discrete actions: set "
        "`--config.distribution.name=categorical` (and a network of logits, e.g. "
        "`--config.network.name=mlp_actor_critic`).")
  given = (-np.inf if action.minimum is None else action.minimum,
           np.inf if action.maximum is None else action.maximum)
  low, high = (np.broadcast_to(np.asarray(b, np.float32), action.shape) for b in given)
  got = f"got minimum {action.minimum!r} and maximum {action.maximum!r}"
  if np.isnan(low).any() or np.isnan(high).any():
    raise ConfigError(
        f"Distribution '{distribution}' (`distribution.name`): the environment's action "
        f"bounds have a NaN ({got}); give numbers, or None for no bound.")
  if not np.all(low < high):
    raise ConfigError(
        f"Distribution '{distribution}' (`distribution.name`): the environment's action "
        f"minimum is not below its maximum everywhere ({got}); fix the environment's spec.")
  if not unbounded and not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
    what = ("has no bounds" if action.minimum is None and action.maximum is None else
            f"has infinite or missing bounds ({got})")
    raise ConfigError(
        f"Distribution '{distribution}' (`distribution.name`) squashes its samples with "
        f"tanh onto finite action bounds, but the environment's action spec {what}: set "
        "`--config.distribution.name=normal` (a Gaussian clipped only where a bound is "
        "finite), or give the environment finite bounds. SAC's and TD3's tanh policies "
        "need finite bounds (docs/agents.md, \"Continuous actions\").")
  return low, high


class _Gaussian(ActionDistribution):
  """What both Gaussians share: the bounds, the split of the parameters, the shapes."""

  kind = "continuous"
  transforms_samples = True

  unbounded = False  # Whether it acts on actions with infinite or no bounds.

  def __init__(self, spec: EnvSpec):
    self.minimum, self.maximum = continuous_bounds(spec, self.name, self.unbounded)
    self.shape = tuple(spec.action.shape)
    self.size = int(np.prod(self.shape))

  def num_params(self) -> int:
    return 2 * self.size

  def _split(self, params: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """params [..., 2 A] -> (mean, scale parameter), each [..., *action shape]."""
    lead = params.shape[:-1]
    mean, scale = jnp.split(params.astype(jnp.float32), 2, axis=-1)
    return mean.reshape(*lead, *self.shape), scale.reshape(*lead, *self.shape)

  def _sum(self, x: jax.Array) -> jax.Array:
    """Sums over the action's dimensions: [..., *shape] -> [...]."""
    return jnp.sum(x, axis=tuple(range(x.ndim - len(self.shape), x.ndim)))


@registry.distributions.register("tanh_normal")
class TanhNormal(_Gaussian):
  """Brax's `NormalTanhDistribution`: a normal squashed by tanh onto the bounds, its
  scale softplus(s) + `min_std`. Sampled actions are within the bounds; the raw
  (pre-tanh) sample is kept for the log-probability."""

  name = "tanh_normal"

  def __init__(self, spec: EnvSpec, min_std: Annotated[float, Positive] = 0.001):
    super().__init__(spec)
    self.min_std = min_std
    self._centre = jnp.asarray((self.maximum + self.minimum) / 2)
    self._half_width = jnp.asarray((self.maximum - self.minimum) / 2)

  def _loc_log_std(self, params):
    mean, scale = self._split(params)
    return mean, jnp.log(jax.nn.softplus(scale) + self.min_std)

  def squash(self, u: jax.Array) -> jax.Array:
    return self._centre + self._half_width * jnp.tanh(u)

  def sample(self, params, key):
    mean, log_std = self._loc_log_std(params)
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
    return self.squash(u), u

  def log_prob(self, params, raw):
    mean, log_std = self._loc_log_std(params)
    return self._sum(normal_log_prob(raw, mean, log_std) - tanh_log_det_jacobian(raw)
                     - jnp.log(self._half_width))

  def entropy(self, params, key: Optional[jax.Array]):
    """H(N) + E[log |da/du|], the expectation from one sample of `key` (Brax's estimate)."""
    if key is None:
      raise ValueError("tanh_normal's entropy is a one-sample estimate: it needs a key.")
    mean, log_std = self._loc_log_std(params)
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
    gaussian = 0.5 + _HALF_LOG_2PI + log_std
    return self._sum(gaussian + tanh_log_det_jacobian(u) + jnp.log(self._half_width))

  def mode(self, params):
    return self.squash(self._split(params)[0])


@registry.distributions.register("normal")
class ClippedNormal(_Gaussian):
  """A diagonal normal whose scale parameter is its log standard deviation (CleanRL's
  and PureJaxRL's continuous PPO, there a learned vector: the network's
  `state_dependent_std=False`); the environment gets the sample clipped to the bounds,
  the loss scores the unclipped sample. Actions without bounds (None, or infinite on a
  side) are not clipped there: the unbounded Gaussian."""

  name = "normal"
  unbounded = True

  def sample(self, params, key):
    mean, log_std = self._split(params)
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
    return jnp.clip(u, self.minimum, self.maximum), u

  def log_prob(self, params, raw):
    mean, log_std = self._split(params)
    return self._sum(normal_log_prob(raw, mean, log_std))

  def entropy(self, params, key=None):
    del key  # Closed form.
    return self._sum(0.5 + _HALF_LOG_2PI + self._split(params)[1])

  def mode(self, params):
    return jnp.clip(self._split(params)[0], self.minimum, self.maximum)
