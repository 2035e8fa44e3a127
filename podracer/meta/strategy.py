"""podracer.meta's search strategy: evosax's OpenES over theta, where it starts and how
wide it searches each parameter, and the fitness it is told of a diverged member."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.errors import ConfigError, NonFiniteError
from podracer.meta.config import MetaConfig

# Scalar log scales, searched widely.
WIDE_KEYS = ("log_clip", "log_value_clip", "log_alpha", "log_beta")


def search_std(meta: MetaConfig, theta: Dict[str, jax.Array]) -> Dict[str, jax.Array]:
  """The search distribution's std per parameter: `sigma_clip` on the scalar log scales
  (the clip scales c and c_v; DPO's log alpha and log beta), `sigma` on the drift network's
  weights."""
  return {k: jnp.full(jnp.shape(v), meta.sigma_clip if k in WIDE_KEYS else meta.sigma,
                      jnp.float32) for k, v in theta.items()}


def initial_theta(meta: MetaConfig) -> Dict[str, jax.Array]:
  """Where the search starts: PPO (a zero drift) or DPO at its constants."""
  from podracer.components.losses import dpo, zero_drift  # pylint: disable=import-outside-toplevel
  return (dpo.dpo_theta() if meta.objective == "dpo"
          else zero_drift(meta.hidden, meta.value_clip, meta.lifetime))


class Strategy:
  """evosax's OpenES over theta (antithetic; Adam on the mean), minimizing -fitness."""

  def __init__(self, meta: MetaConfig, theta: Dict[str, jax.Array]):
    try:
      from evosax import algorithms as evosax  # pylint: disable=import-outside-toplevel
      import optax  # pylint: disable=import-outside-toplevel
    except ImportError:
      raise ConfigError("podracer.meta needs evosax (pip install -e \".[meta]\"; the default "
                        "lane has it, the reverb lane's JAX is too old for it).") from None
    self.es = evosax.Open_ES(
        population_size=meta.population, solution=theta, use_antithetic_sampling=True,
        optimizer=optax.adam(meta.learning_rate))
    # A std per parameter, flattened as evosax flattens theta (its ravel of the tree).
    std = self.es._ravel_solution(search_std(meta, theta))  # pylint: disable=protected-access
    self.es.std_schedule = optax.constant_schedule(std)
    if meta.steps_in_std:  # Adam moves every coordinate about learning_rate a step, its
      # signal or not: in units of each one's std, noise moves a narrow one little.
      relative = std / jnp.max(std)
      self.es.optimizer = optax.chain(self.es.optimizer,
                                      optax.stateless(lambda step, _: step * relative))
    self.params = self.es.default_params
    self.theta = theta

  def init(self, key) -> Any:
    return self.es.init(key, self.theta, self.params)

  def ask(self, key, state) -> Tuple[Any, Any]:
    return self.es.ask(key, state, self.params)

  def tell(self, key, thetas, fitness, state) -> Any:
    state, _ = self.es.tell(key, thetas, -fitness, state, self.params)
    return state

  def mean(self, state) -> Dict[str, jax.Array]:
    return self.es.get_mean(state)


def worst_where_nonfinite(fitness: np.ndarray, finite: np.ndarray,
                          generation: int) -> np.ndarray:
  """The fitness the strategy is told: a member whose training ended with non-finite
  parameters (or fitness) ranks below every other. Every member so: NonFiniteError."""
  finite = finite & np.isfinite(fitness)
  if not finite.any():
    raise NonFiniteError(
        f"podracer.meta: every one of the {fitness.size} members of generation "
        f"{generation} ended its training with non-finite parameters or fitness: the "
        "objectives the strategy proposes diverge (lower `meta.sigma`, or the config's "
        "learning rate).")
  worst = fitness[finite].min() - 1.0
  return np.where(finite, fitness, worst)
