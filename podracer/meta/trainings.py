"""podracer.meta's members: whole PPO trainings with a theta, all of a generation's in one
compiled program (`generation_program`), over every task (`Tasks`)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from podracer.errors import ConfigError
from podracer.meta.config import MetaConfig
from podracer.meta.strategy import initial_theta

def inner_config(config: Any, meta: MetaConfig) -> Any:
  """The config each member trains with: its loss the learned objective (PPO's
  coefficients kept), its budget `meta.inner_env_steps`."""
  from ml_collections import config_dict  # pylint: disable=import-outside-toplevel
  loss = config.get("loss")
  if config.agent.name != "ppo" or loss is None or loss.get("name") not in (
      "ppo", "learned_policy", "dpo"):
    raise ConfigError(f"podracer.meta learns PPO's policy objective; the config's agent is "
                      f"'{config.agent.name}' with loss "
                      f"'{loss.get('name') if loss else None}' (give a PPO config).")
  if config.runtime.name != "anakin" or config.get("num_runs", 1) != 1:
    raise ConfigError("podracer.meta runs its members as the runs of one Anakin program: "
                      "give a config with runtime.name=anakin and num_runs=1 (the members "
                      "are `meta.population`).")
  inner = config_dict.ConfigDict(config.to_dict())
  kept = {k: loss[k] for k in ("clip_epsilon", "value_coef", "entropy_coef", "clip_value",
                               "normalize_advantages") if k in loss}
  if meta.objective == "dpo":  # From the config's alpha and beta, or the paper's.
    constants = dict(alpha=loss.get("alpha", 2.0), beta=loss.get("beta", 0.6))
    inner.loss = config_dict.ConfigDict(dict(name="dpo", **constants, **kept))
  else:
    inner.loss = config_dict.ConfigDict(dict(name="learned_policy", path=None,
                                             hidden=meta.hidden,
                                             drift_form=meta.drift_form,
                                             lifetime=meta.lifetime, **kept))
  if meta.inner_env_steps:
    inner.total_env_steps = meta.inner_env_steps
  # A member is one replica: the plan's calls and env steps are one device's. The
  # members share the device the program runs on (vmapped).
  inner.topology.num_devices = 1
  return inner


def member_program(experiment: Any, fraction: float) -> Callable:
  """fitness(theta, nets_key, key) -> (mean return over the last `fraction` of a whole
  training with objective theta, its episodes ended, whether its parameters ended
  finite): one member, to vmap."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  runtime, config = experiment.runtime, experiment.config
  num_calls = runtime.num_calls
  last = max(1, int(round(fraction * num_calls)))

  def fitness(theta, nets_key, key):
    agent = builder.build_agent(config, runtime.spec, experiment.plan.num_updates)
    agent.loss = agent.loss.with_drift(theta)
    init, call = runtime.replica_program(agent)

    def one_call(state, _):
      state, (_, episodes) = call(state)
      return state, episodes[0]  # [U, 3] of the replica axis of one
    state, episodes = jax.lax.scan(one_call, init(nets_key, key), None, length=num_calls)
    tail = jnp.sum(episodes[-last:], axis=(0, 1))  # count, return sum, length sum
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x))
                                for x in jax.tree.leaves(state.agent.nets)]))
    return tail[1] / jnp.maximum(tail[0], 1.0), tail[0], finite
  return fitness


def check_generation(experiment: Any, meta: MetaConfig) -> None:
  """Before compiling: each member's budget is at least one update, and the members'
  states and trajectories fit the device (one ConfigError naming the keys)."""
  from podracer import trajectories  # pylint: disable=import-outside-toplevel
  from podracer.lifecycle.memory import (check_device_fits,  # pylint: disable=import-outside-toplevel
                                         tree_bytes)
  runtime = experiment.runtime
  per_update = runtime.num_envs_per_device * runtime.rollout_length
  budget = experiment.config.total_env_steps  # inner_config's: meta.inner_env_steps'.
  if budget < per_update:
    raise ConfigError(f"Config key `meta.inner_env_steps` is {budget:,}: less than one "
                      f"update of a member ({runtime.num_envs_per_device} environments x "
                      f"{runtime.rollout_length} steps = {per_update:,} env steps).")
  init, _ = runtime.replica_program(experiment.agent)
  key = jax.random.PRNGKey(0)
  state = jax.eval_shape(init, key, key)
  trajectory = trajectories.trajectory_spec(experiment.agent, runtime.spec,
                                            runtime.num_envs_per_device,
                                            runtime.rollout_length)
  trainings = meta.population * meta.member_seeds
  check_device_fits(
      f"podracer.meta's generation ({meta.population} members x {meta.member_seeds} "
      "trainings, each a state and the trajectory its update holds)",
      trainings * (tree_bytes(state) + 2 * tree_bytes(trajectory)),
      ["meta.population", "meta.member_seeds", "runtime.num_envs_per_device",
       "runtime.rollout_length"])


def generation_program(experiment: Any, meta: MetaConfig) -> Callable:
  """All members' trainings in one compiled program: (thetas [P, ...], key) ->
  (fitness [P], episodes [P], finite [P]); with `meta.member_seeds` S > 1, each member
  trains S times (S pairs of keys, the same for every member) and its fitness is their
  mean: a less noisy comparison of objectives at S times the cost."""
  fitness = member_program(experiment, meta.fitness_fraction)

  def generation(thetas, key):
    # Every member starts from the same network and environments' keys: the members
    # differ in their objective only (common random numbers: antithetic pairs compare
    # objectives, not draws).
    if meta.member_seeds == 1:
      nets_key, env_key = jax.random.split(key)
      return jax.vmap(fitness, in_axes=(0, None, None))(thetas, nets_key, env_key)
    keys = jax.random.split(key, (meta.member_seeds, 2))
    seeds = jax.vmap(fitness, in_axes=(None, 0, 0))
    values, episodes, finite = jax.vmap(seeds, in_axes=(0, None, None))(
        thetas, keys[:, 0], keys[:, 1])
    return values.mean(axis=1), episodes.sum(axis=1), finite.all(axis=1)
  return jax.jit(generation)


def evaluation_program(experiment: Any, meta: MetaConfig) -> Callable:
  """(theta, key) -> (mean fitness, finite) of `meta.population` trainings with the one
  objective theta, each with seeds of its own: what the search would save, measured."""
  fitness = member_program(experiment, meta.fitness_fraction)

  def evaluate(theta, key):
    keys = jax.random.split(key, (meta.population, 2))
    values, _, finite = jax.vmap(fitness, in_axes=(None, 0, 0))(theta, keys[:, 0],
                                                                 keys[:, 1])
    return values.mean(), finite.all()
  return jax.jit(evaluate)


class Tasks:
  """The generation's and the evaluation's programs over every task. With one task, a
  member's fitness is its return there; with several, the mean over tasks of its return
  divided by the start's (theta 0: PPO) return on that task at the same budget,
  measured once over `meta.population` trainings of held-out seeds (OPEN's rule: tasks
  of any scale weigh alike). Each task trains from keys of its own."""

  def __init__(self, experiments: List[Any], meta: MetaConfig, root: jax.Array):
    self.names = [f"{k}_{_env_label(e.config.env)}" for k, e in enumerate(experiments)]
    self.generations = [generation_program(e, meta) for e in experiments]
    self.evaluations = [evaluation_program(e, meta) for e in experiments]
    self.baselines = np.ones(len(experiments))
    if len(experiments) > 1:
      start, key = initial_theta(meta), jax.random.fold_in(root, 2**31 - 2)
      self.baselines = np.array([float(jax.device_get(e(start, key))[0])
                                 for e in self.evaluations])
      for name, baseline in zip(self.names, self.baselines):
        if not baseline > 0:
          raise ConfigError(
              f"Config key `meta.tasks`: on task {name} the start's return is {baseline:.4g} "
              "at this budget; a fitness divided by it needs it positive. Give tasks whose "
              "returns are positive there (or more `meta.inner_env_steps`).")

  def describe(self) -> str:
    if len(self.names) == 1:
      return ""
    return "tasks (the start's return, each task's fitness divided by it): " + ", ".join(
        f"{n} {b:.3g}" for n, b in zip(self.names, self.baselines)) + "\n"

  @staticmethod
  def _key(key: jax.Array, k: int) -> jax.Array:
    return key if k == 0 else jax.random.fold_in(key, k)  # One task: the keys of before.

  def __call__(self, thetas: Any, key: jax.Array):
    """(fitness [P], episodes [P], finite [P], the record's per-task figures) over every
    task."""
    runs = [jax.device_get(g(thetas, self._key(key, k)))
            for k, g in enumerate(self.generations)]
    fitness = np.mean([f / b for (f, _, _), b in zip(runs, self.baselines)], axis=0)
    means = [float(np.mean(f[np.isfinite(f)])) for f, _, _ in runs]
    return (fitness, np.sum([e for _, e, _ in runs], axis=0),
            np.all([f for _, _, f in runs], axis=0), self.record(means))

  def evaluate(self, theta: Any, key: jax.Array):
    """(the mean theta's fitness, finite), as a member's is taken."""
    runs = [jax.device_get(e(theta, self._key(key, k))) for k, e in enumerate(self.evaluations)]
    return (float(np.mean([v / b for (v, _), b in zip(runs, self.baselines)])),
            bool(np.all([f for _, f in runs])))

  def record(self, means: List[float]) -> Dict[str, Any]:
    """Per task, the members' mean return `means` (with several tasks)."""
    if len(self.names) == 1:
      return {}
    return {f"return_mean_{name}": m for name, m in zip(self.names, means)}


def _env_label(env: Any) -> str:
  """The environment's name, and its task's where the source has several."""
  task = next((env[k] for k in ("env_id", "task_id", "env_name") if k in env), None)
  return str(env.name) + (f"_{task}" if task else "")
