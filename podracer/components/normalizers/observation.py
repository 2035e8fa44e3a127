"""Observation normalisation: running statistics of the observations the learner sees
(Welford's mean and variance, merged as Chan et al. merge them), observations normalised
and clipped with them, (o - mean) / sqrt(var + eps) within +-clip.

The statistics are learner state that travels with the parameters: `wrap(network)` puts
them in the network's parameters (`{"network": ..., STATISTICS: ...}`) and normalises
before the network sees an observation, so every place that applies the parameters
(actors of any runtime, with the statistics of the parameters' version; evaluation,
videos, `podracer.play`; checkpoints and their resume) normalises as the learner did. No
gradient reaches them (`stop_gradient`); the agent sets them from its batches with
`update` (all replicas' batches: one set of statistics per run, on every device and
process).
"""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.errors import ConfigError
from podracer.registry.ranges import Positive
from podracer.types import EnvSpec, PyTree, replica_sum

STATISTICS = "observation_statistics"  # Their key in the wrapped network's parameters.
NETWORK = "network"  # The wrapped network's own parameters' key.
_APPLIED = ("apply", "step", "unroll")  # Network functions of (params, observation, ...).


class RunningStatistics(NamedTuple):
  """Per-feature statistics of every float leaf of the observation: `count` rows seen,
  their `mean` and `m2` (the sum of squared deviations: variance = m2 / count)."""
  count: jax.Array
  mean: PyTree
  m2: PyTree


def _is_float(spec: Any) -> bool:
  return np.issubdtype(np.dtype(spec.dtype), np.floating)


def merge(stats: RunningStatistics, count: jax.Array, mean: PyTree,
          m2: PyTree) -> RunningStatistics:
  """The statistics of both sets of rows (Chan, Golub and LeVeque's pairwise update)."""
  total = stats.count + count
  weight = count / jnp.maximum(total, 1.0)
  delta = jax.tree.map(lambda a, b: b - a, stats.mean, mean)
  new_mean = jax.tree.map(lambda a, d: a + d * weight, stats.mean, delta)
  new_m2 = jax.tree.map(lambda a, b, d: a + b + jnp.square(d) * stats.count * weight,
                        stats.m2, m2, delta)
  return RunningStatistics(total, new_mean, new_m2)


def batch_statistics(rows: PyTree) -> RunningStatistics:
  """The statistics of [N, ...] rows of every replica of the learner, merged: each
  replica's mean and squared deviations, then their sum over replicas (one set per run)."""
  count = jnp.asarray(jax.tree.leaves(rows)[0].shape[0], jnp.float32)
  total = replica_sum(count)
  mean = jax.tree.map(lambda x: replica_sum(jnp.sum(x, 0) / total), rows)
  m2 = jax.tree.map(lambda x, m: replica_sum(jnp.sum(jnp.square(x - m), 0)), rows, mean)
  return RunningStatistics(total, mean, m2)


@registry.normalizers.register("running_mean_std")
class ObservationNormalizer:
  """Normalises every float leaf of the observation with running statistics (module
  docstring); other leaves (an action mask, integer features) pass as they are."""


  def __init__(self, spec: EnvSpec, clip: Annotated[float, Positive] = 10.0,
               eps: Annotated[float, Positive] = 1e-8):
    self.spec = spec
    self.clip, self.eps = clip, eps
    self.floats = jax.tree.map(_is_float, spec.observation)
    if not any(jax.tree.leaves(self.floats)):
      dtypes = sorted({np.dtype(s.dtype).name for s in jax.tree.leaves(spec.observation)})
      raise ConfigError(
          "Normalizer 'running_mean_std' (`observation_normalizer`) normalises floating "
          f"observations, but the environment's are {', '.join(dtypes)}: integer or "
          "boolean observations (pixels, board planes, indices) have no running mean to "
          "take; remove the `observation_normalizer` section.")

  def _floats(self, observation: PyTree) -> PyTree:
    return jax.tree.map(lambda f, x: x if f else None, self.floats, observation)

  def init(self) -> RunningStatistics:
    zeros = jax.tree.map(lambda f, s: jnp.zeros(s.shape, jnp.float32) if f else None,
                         self.floats, self.spec.observation)
    return RunningStatistics(jnp.zeros((), jnp.float32), zeros, zeros)

  def update(self, stats: RunningStatistics, observation: PyTree) -> RunningStatistics:
    """The statistics with [N, ...] more observations (of every replica) merged in."""
    rows = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), self._floats(observation))
    new = batch_statistics(rows)
    return merge(stats, new.count, new.mean, new.m2)

  def normalize(self, stats: RunningStatistics, observation: PyTree) -> PyTree:
    """Each float leaf as (o - mean) / sqrt(var + eps) within +-clip; var 1 before any
    row is seen (the observation then passes centred on 0, unscaled)."""
    stats = jax.lax.stop_gradient(stats)
    seen = stats.count > 0

    def one(is_float, x, mean, m2):
      if not is_float:
        return x
      var = jnp.where(seen, m2 / jnp.maximum(stats.count, 1.0), 1.0)
      z = (jnp.asarray(x, jnp.float32) - mean) / jnp.sqrt(var + self.eps)
      return jnp.clip(z, -self.clip, self.clip)

    return jax.tree.map(one, self.floats, observation, stats.mean, stats.m2,
                        is_leaf=lambda x: x is None)

  def wrap(self, network: Any) -> Any:
    """The network with the statistics in its parameters and its observations normalised:
    an hk.Transformed or a NamedTuple of pure functions (a recurrent network's)."""
    def init(key, observation, *args):
      return {NETWORK: network.init(key, observation, *args), STATISTICS: self.init()}

    def applied(fn):
      def call(params, observation, *args, **kwargs):
        return fn(params[NETWORK], self.normalize(params[STATISTICS], observation),
                  *args, **kwargs)
      return call

    fields = {name: applied(getattr(network, name)) for name in _APPLIED
              if name in network._fields}
    return network._replace(init=init, **fields)

  def updated(self, params: PyTree, observation: PyTree) -> PyTree:
    """The wrapped network's parameters with [N, ...] observations merged into its
    statistics (what an agent calls with its learner's batch)."""
    return {**params, STATISTICS: self.update(params[STATISTICS], observation)}
