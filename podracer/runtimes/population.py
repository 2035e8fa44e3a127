"""Population-based training (Jaderberg et al. 2017) inside one compiled Anakin program.

The runs of a program (`num_runs` x `sweep`, podracer/config/runs.py) are the population's
members. Every `population.interval` updates, inside the program and with no host round
trip of parameters, each member's fitness (its mean episode return since the last such
step) ranks it; each of the bottom `truncation` fraction copies a member drawn uniformly
from the top fraction (**exploit**: its parameters, optimizer state and hyperparameter
values; its environments, actors, replay and keys stay its own) and then moves the values
it copied (**explore**): each swept key multiplied by one of `perturb_factors`, clipped
to the key's bounds (`perturb`), or drawn anew from the sweep's values (`resample`).

The hyperparameters a member reads are the swept keys' values, traced in the program as
a sweep's are: they live in the state (`PopulationState.hparams`), so a copy changes a
learning rate without compiling again.

    --config.sweep.optimizer.learning_rate=1e-4,3e-4,1e-3,3e-3 --config.num_runs=2
    --config.population.kind=pbt --config.population.interval=64

Collectives name the mesh's `runs` axis: the members spread over devices (one device
row per run group, `topology.runs`) all see the whole population's fitness.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

# The config's part, importable from here as before (docs/api.md lists these names here).
from podracer.config.population import (  # noqa: F401
    FITNESS, Population, Schedule, from_config, load_schedule)

class PopulationState(NamedTuple):
  """One member's part of the state: its hyperparameter values, its fitness so far (the
  sum of `population.fitness`'s measure over the episodes that ended since the last
  exploit step, and their count), the
  member it copied at the last step (itself if it did not) and whether the last call
  replaced it for non-finite parameters (1.0) or not (0.0)."""
  hparams: Dict[str, jax.Array]
  score_sum: jax.Array
  episodes: jax.Array
  parent: jax.Array
  replaced: Any = 0.0


def init_state(hparams: Dict[str, Any]) -> PopulationState:
  """A member's state at the start: the values it was given, no episodes yet."""
  return PopulationState(hparams=dict(hparams), score_sum=jnp.float32(0.0),
                         episodes=jnp.float32(0.0), parent=jnp.int32(-1),
                         replaced=jnp.float32(0.0))


def accumulate(state: PopulationState, episodes: jax.Array,
               measure: str = "episode_return") -> PopulationState:
  """Adds a call's episode sums ([U, 3]: count, return sum, length sum per update;
  `metrics.episode_sums`): their count, and the sum of `measure` (a key of FITNESS)."""
  column, sign = FITNESS[measure]
  return state._replace(score_sum=state.score_sum + sign * jnp.sum(episodes[:, column]),
                        episodes=state.episodes + jnp.sum(episodes[:, 0]))


def fitness(score_sum: jax.Array, episodes: jax.Array) -> jax.Array:
  """The mean of the fitness measure over the episodes since the last step; -inf for a
  member none of whose episodes ended (it ranks last)."""
  return jnp.where(episodes > 0, score_sum / jnp.maximum(episodes, 1.0), -jnp.inf)


def parents(population: Population, fit: jax.Array, key: jax.Array,
            broken: Optional[jax.Array] = None, due: Any = True) -> jax.Array:
  """[N] the member each member continues from: when `due`, the bottom `copies` by
  fitness each a uniformly drawn one of the top `copies`; at any call, a `broken` member
  (non-finite parameters) one of the top too; the others themselves. A broken member
  ranks last; ties rank by index."""
  n, k = fit.shape[0], population.copies
  if broken is not None:
    fit = jnp.where(broken, -jnp.inf, fit)
  order = jnp.argsort(-fit, stable=True)  # best first
  top, bottom = order[:k], order[n - k:]
  drawn = top[jax.random.randint(key, (k,), 0, k)]
  own = jnp.arange(n)
  out = jnp.where(due, own.at[bottom].set(drawn), own)
  if broken is not None:
    out = jnp.where(broken, top[jax.random.randint(jax.random.fold_in(key, 1), (n,), 0, k)],
                    out)
  return out


def explore(population: Population, hparams: Dict[str, jax.Array], copied: jax.Array,
            key: jax.Array) -> Dict[str, jax.Array]:
  """The values [N] of each key after explore: moved where `copied`, kept elsewhere."""
  out = {}
  for i, (name, values) in enumerate(sorted(hparams.items())):
    key_i = jax.random.fold_in(key, i)
    n = values.shape[0]
    if population.explore == "perturb":
      factors = jnp.asarray(population.perturb_factors, jnp.float32)
      moved = values.astype(jnp.float32) * factors[jax.random.randint(key_i, (n,), 0,
                                                                       len(factors))]
      low, high = population.bounds[name]
      moved = jnp.clip(moved, low, high)
    else:
      choices = jnp.asarray(population.choices[name], jnp.float32)
      moved = choices[jax.random.randint(key_i, (n,), 0, len(choices))]
    if population.integer[name]:
      moved = jnp.round(moved)
    out[name] = jnp.where(copied, moved.astype(values.dtype), values)
  return out


def exploit_explore(population: Population, members: Any, pop: PopulationState,
                    key: jax.Array, axis_name: Optional[str], broken: Optional[jax.Array] = None,
                    due: Any = True) -> Tuple[Any, PopulationState]:
  """One PBT step on this device's members ([M, ...] leaves of `members`, the trees the
  copies take, and of `pop`); with `axis_name`, the members of every device on that mesh
  axis, in its order, are the population (gathered, then each device takes its own).
  `broken` [M]: members with non-finite parameters, replaced from the top even when the
  step is not `due` (then only they copy, and the fitness windows go on)."""
  gather = ((lambda x: jax.lax.all_gather(x, axis_name, tiled=True)) if axis_name
            else (lambda x: x))
  local = pop.score_sum.shape[0]
  first = (jax.lax.axis_index(axis_name) * local) if axis_name else 0
  mine = first + jnp.arange(local)
  if broken is None:
    broken = jnp.zeros(local, bool)
  every = jax.tree.map(gather, (pop.score_sum, pop.episodes, pop.hparams, broken))
  source = parents(population, fitness(every[0], every[1]), jax.random.fold_in(key, 0),
                   every[3], due)
  copied = source != jnp.arange(source.shape[0])
  hparams = explore(population, jax.tree.map(lambda v: v[source], every[2]), copied,
                    jax.random.fold_in(key, 1))
  taken = source[mine]
  members = jax.tree.map(lambda x: gather(x)[taken], members)
  zero = jnp.zeros_like(pop.score_sum)
  keep = lambda new, old: jnp.where(due, new, old)
  # Replaced: broken, and given a finite member's parameters (not so if all are broken).
  replaced = every[3][mine] & ~every[3][taken]
  new_pop = PopulationState(hparams={k: v[mine] for k, v in hparams.items()},
                            score_sum=keep(zero, pop.score_sum),
                            episodes=keep(zero, pop.episodes),
                            parent=jnp.where(due | replaced, taken, pop.parent).astype(jnp.int32),
                            replaced=replaced.astype(jnp.float32))
  return members, new_pop


def as_numpy(hparams: Dict[str, Any]) -> Dict[str, np.ndarray]:
  return {k: np.asarray(v) for k, v in hparams.items()}


