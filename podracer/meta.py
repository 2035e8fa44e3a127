"""Meta-learns a policy objective in one Anakin program (the Podracer paper's case study):

  python -m podracer.meta --config=agents/ppo/config.py:cartpole_anakin --workdir=DIR \
      [--config.meta.generations=30 --config.meta.population=16 ...] [--config.KEY=VALUE]

The objective is the `learned_policy` loss (podracer/components/losses/learned_policy.py):
PPO's surrogate minus a drift network's f_theta. An evolution strategy (evosax's OpenES,
antithetic) searches theta: each generation's `meta.population` members are full, short
PPO trainings (`meta.inner_env_steps` env steps each, the config's agent, environment
and settings), all of them in one compiled program (their environments, rollouts and
updates vmapped), and a member's fitness is its mean episode return over the last
`meta.fitness_fraction` of its training. The strategy's update runs on the host between
generations (one small jitted call: the generations' programs dominate).

DIR gets config.json, meta.jsonl (a record per generation: fitness best/mean/min of the
members, their episodes, inner env steps and env steps/s), meta_state.npz (the
strategy's state after the last generation: a relaunch into DIR resumes exactly) and
learned_objective.npz with learned_objective.json: the strategy's mean theta, which
`--config.loss=learned_policy --config.loss.path=DIR/learned_objective.npz` trains with
under Anakin, Sebulba or SEED. With `--config.meta.objective=dpo` the search is over
DPO's two constants instead (their log scales from the config's `loss.alpha` and
`loss.beta`, or the paper's 2 and 0.6): the records and learned_objective.json give the
`alpha` and `beta` found, to train with as `--config.loss=dpo --config.loss.alpha=...
--config.loss.beta=...`. With `--config.meta.lifetime=true` the drift also sees the
fraction of its training done (TA-LPO's lifetime conditioning; the loss's module
docstring). Bad input is one paragraph naming the key, exit 2. Ctrl-C or SIGTERM stops it
with exit 130 or 143, the state and the objective of the last whole generation saved.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import __version__
from podracer.config import runs as runs_lib
from podracer.errors import ConfigError, NonFiniteError
from podracer.lifecycle import preemption
from podracer.lifecycle import workdir as workdir_lib

META_FLAG = "--config.meta."
STATE_FILE = "meta_state.npz"
RECORDS_FILE = "meta.jsonl"
OBJECTIVE_FILE = "learned_objective.npz"
EXIT_CONFIG_ERROR = 2
# The meta keys 0.17.0 added, at what a meta-training before them ran with: one sigma for
# every parameter, no evaluation of the mean (resuming one takes these flags).
META_ADDED = {"meta.sigma_clip": 0.1, "meta.eval_every": 0, "meta.objective": "drift",
              "meta.drift_form": "squared",  # 0.19.0's first-order drift: squared before.
              "meta.tasks": "",
              "meta.value_clip": False,  # 0.20.0's c_v: none before.
              "meta.lifetime": False,  # 0.21.0's lifetime conditioning: none before.
              "meta.steps_in_std": False}  # 0.21.0's steps in each parameter's std.
# What `meta.objective` searches: the learned_policy loss's drift network and clip scale,
# or DPO's two constants (their log scales), DPO as a low-dimensional target.
OBJECTIVES = ("drift", "dpo")


@dataclasses.dataclass(frozen=True)
class MetaConfig:
  """The `meta.*` keys."""
  generations: int = 20
  population: int = 16            # ES members a generation (even: antithetic pairs)
  sigma: float = 0.01             # the search distribution's std over the drift's weights
                                  # (0.1 before 0.20.0: their noise drowned c_v's signal)
  sigma_clip: float = 1.0         # ... over c and c_v, the learned log clip scales (wide:
                                  # their gain lies most of a unit away, docs/meta.md)
  learning_rate: float = 0.05     # of Adam on the strategy's mean
  hidden: int = 16                # the drift network's hidden units
  inner_env_steps: int = 0        # each member's training; 0: the config's total_env_steps
  fitness_fraction: float = 0.2   # a member's fitness: its mean return over this last part
  member_seeds: int = 1           # trainings per member (their mean is its fitness)
  eval_every: int = 5             # generations between evaluations of the mean theta
                                  # (`mean_theta_fitness`, on held-out seeds); 0: none
  seed: int = 0
  objective: str = "drift"        # "drift" (learned_policy) or "dpo" (log alpha, log beta)
  drift_form: str = "first_order"  # the learned_policy drift's form: or "squared" (0.18)
  tasks: str = ""                 # more tasks each member trains on, ";"-separated configs
                                  # (each "path.py:NAME|--config.KEY=VALUE|..."): each
                                  # task's fitness divided by the start's (PPO's) there
  value_clip: bool = True         # theta scales the value loss's clip range too (c_v)
  lifetime: bool = False          # the drift also sees the fraction of training done
                                  # (TA-LPO's lifetime conditioning)
  steps_in_std: bool = True       # Adam's step on each parameter scaled by its std over
                                  # the widest (sigma / sigma_clip): a narrow drift weight
                                  # moves at its own width, not the clip scales' (before
                                  # 0.21.0 every coordinate stepped learning_rate)

  def task_list(self) -> List[str]:
    return [t.strip() for t in self.tasks.split(";") if t.strip()]

  @classmethod
  def from_args(cls, args: Dict[str, str]) -> "MetaConfig":
    """From `--config.meta.KEY=VALUE` flags, each parsed as its default's type."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, text in args.items():
      if key not in fields:
        raise ConfigError(f"Config key `meta.{key}` is not a meta key; they are: "
                          f"{', '.join(fields)}.")
      kind = type(fields[key].default)
      try:
        values[key] = (_boolean(text) if kind is bool else kind(float(text))
                       if kind is int and "e" in text.lower() else kind(text))
      except ValueError:
        raise ConfigError(f"Config key `meta.{key}` is {text!r}, not {kind.__name__}.") from None
    return cls(**values).checked()

  def checked(self) -> "MetaConfig":
    positive = dict(generations=self.generations, population=self.population,
                    sigma=self.sigma, sigma_clip=self.sigma_clip,
                    learning_rate=self.learning_rate, hidden=self.hidden,
                    member_seeds=self.member_seeds)
    for key, value in positive.items():
      if not value > 0:
        raise ConfigError(f"Config key `meta.{key}` is {value}; it must be positive.")
    if self.population % 2:
      raise ConfigError(f"Config key `meta.population` is {self.population}; antithetic "
                        "sampling needs an even number of members.")
    if not 0 < self.fitness_fraction <= 1:
      raise ConfigError(f"Config key `meta.fitness_fraction` is {self.fitness_fraction}; it "
                        "is the last part of a member's training its fitness averages, in "
                        "(0, 1].")
    if self.inner_env_steps < 0:
      raise ConfigError("Config key `meta.inner_env_steps` is negative.")
    if self.eval_every < 0:
      raise ConfigError("Config key `meta.eval_every` is negative (0: no evaluation).")
    from podracer.components.losses.learned_policy import DRIFT_FORMS  # pylint: disable=import-outside-toplevel
    if self.drift_form not in DRIFT_FORMS:
      raise ConfigError(f"Config key `meta.drift_form` is {self.drift_form!r}; it is one "
                        f"of {', '.join(DRIFT_FORMS)} (the learned_policy loss's drift).")
    if self.objective not in OBJECTIVES:
      raise ConfigError(f"Config key `meta.objective` is {self.objective!r}; it is one of "
                        f"{', '.join(OBJECTIVES)} (the learned drift network, or DPO's "
                        "alpha and beta).")
    if self.lifetime and self.objective == "dpo":
      raise ConfigError("Config key `meta.lifetime` conditions the learned drift network on "
                        "the training's progress; `meta.objective` is dpo, whose two "
                        "constants have none: set one or the other.")
    return self


def _boolean(text: str) -> bool:
  if text.strip().lower() not in ("true", "false", "1", "0"):
    raise ValueError(text)
  return text.strip().lower() in ("true", "1")


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


def objective_about(meta: MetaConfig, theta: Dict[str, jax.Array],
                    loss: Any) -> Dict[str, Any]:
  """learned_objective.json: the form and how to train with it."""
  from podracer.components.losses import dpo  # pylint: disable=import-outside-toplevel
  from podracer.components.losses.learned_policy import objective_form  # pylint: disable=import-outside-toplevel
  about = dict(hidden=meta.hidden, generations=meta.generations, agent="ppo",
               version=__version__, meta=dataclasses.asdict(meta))
  if meta.objective != "dpo":
    return dict(about, loss="learned_policy",
                form=objective_form(meta.drift_form, meta.value_clip, meta.lifetime))
  found = loss.with_drift(theta)
  return dict(about, loss="dpo", form=dpo.DPO_FORM, alpha=float(found.alpha),
              beta=float(found.beta))


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


def save_state(workdir: str, state: Any, generation: int) -> None:
  """The strategy's state after `generation` generations, written whole or not at all."""
  leaves = [np.asarray(x) for x in jax.tree.leaves(state)]
  tmp = os.path.join(workdir, STATE_FILE + ".tmp.npz")
  np.savez(tmp, generation=np.int64(generation), **{f"leaf_{i}": x for i, x in enumerate(leaves)})
  os.replace(tmp, os.path.join(workdir, STATE_FILE))


def load_state(workdir: str, like: Any) -> Tuple[Any, int]:
  """(state, generations done) from `workdir`, or (like, 0) without a saved one."""
  path = os.path.join(workdir, STATE_FILE)
  if not os.path.isfile(path):
    return like, 0
  leaves, treedef = jax.tree.flatten(like)
  with np.load(path) as saved:
    loaded = [jnp.asarray(saved[f"leaf_{i}"], dtype=jnp.asarray(x).dtype)
              for i, x in enumerate(leaves)]
    return jax.tree.unflatten(treedef, loaded), int(saved["generation"])


def save_objective(workdir: str, theta: Dict[str, jax.Array], about: Dict[str, Any]) -> str:
  path = os.path.join(workdir, OBJECTIVE_FILE)
  np.savez(path, **{k: np.asarray(v) for k, v in theta.items()})
  with open(os.path.splitext(path)[0] + ".json", "w", encoding="utf-8") as f:
    json.dump(about, f, indent=2, sort_keys=True)
  return path


def train(config: Any, meta: MetaConfig, workdir: str, stream=sys.stdout) -> Dict[str, Any]:
  """Runs (or resumes) the meta-training into `workdir`; returns its last record."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  os.makedirs(workdir, exist_ok=True)
  experiments = [builder.build(inner_config(c, meta))
                 for c in [config, *map(load_task, meta.task_list())]]
  for task in experiments:
    check_generation(task, meta)
  experiment = experiments[0]
  strategy = Strategy(meta, initial_theta(meta))
  root = jax.random.PRNGKey(meta.seed)
  init_key, root = jax.random.split(root)
  state, done = load_state(workdir, strategy.init(init_key))
  _write_config(workdir, config, meta)
  tasks = Tasks(experiments, meta, root)
  evaluate = tasks.evaluate if meta.eval_every else None
  inner_steps = sum(e.plan.env_steps_per_round * e.runtime.num_calls for e in experiments)
  stream.write(f"meta: {meta.population * meta.member_seeds} PPO trainings of "
               f"{inner_steps:,} env steps a generation in one program a task "
               f"({meta.population} members x {meta.member_seeds}, {len(experiments)} "
               f"task{'s' * (len(experiments) > 1)}), generations "
               f"{done + 1}-{meta.generations}\n" + tasks.describe())
  last = dict(state=state, generation=done, record={})
  try:
    for g in range(done, meta.generations):
      state, record = _one_generation(strategy, tasks, state, g, root, meta, inner_steps)
      record.update(_where(meta, experiment.agent.loss, strategy.mean(state)))
      if evaluate is not None and ((g + 1) % meta.eval_every == 0 or g + 1 == meta.generations):
        record.update(_evaluated(evaluate, strategy.mean(state), root, g + 1))
      with preemption.deferred():  # A SIGTERM waits: state, records, objective agree.
        save_state(workdir, state, g + 1)
        _append(workdir, record)
        last.update(state=state, generation=g + 1, record=record)
        stream.write(_progress(record) + "\n")
        stream.flush()
  finally:  # Also when stopped (Ctrl-C, SIGTERM): the mean theta of the last whole generation.
    theta = strategy.mean(last["state"])
    if last["generation"]:
      save_objective(workdir, theta, objective_about(meta, theta, experiment.agent.loss))
  return last["record"]


def load_task(text: str) -> Any:
  """One task of `meta.tasks`: a config file's flag value and its overrides, joined by
  "|" ("agents/ppo/config.py:catch_anakin|--config.env=gymnax|--config.env.env_id=..."),
  loaded as the launcher loads them (a section swap, then the key overrides)."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  from podracer.config import compose, files  # pylint: disable=import-outside-toplevel
  path, *overrides = [part.strip() for part in text.split("|")]
  bad = [o for o in overrides if not (o.startswith("--config.") and "=" in o)]
  if bad:
    raise ConfigError(f"Config key `meta.tasks`: in {text!r}, {bad[0]!r} is not a "
                      "--config.KEY=VALUE override (a task is a config and its overrides, "
                      "joined by \"|\").")
  try:
    config = files.load(path)
  except ConfigError as e:
    raise ConfigError(f"Config key `meta.tasks`: the task {text!r}: {e}") from None
  choices, rest = compose.section_choices(overrides)
  with config.unlocked():
    compose.choose(config, choices)
    compose.add_accepted(config, [compose.override_path(o) for o in rest])
  values = flags.FlagValues()
  # config_flags finds the overrides to define in sys.argv, when the flag is defined.
  saved, sys.argv = sys.argv, ["podracer.meta", *rest]
  try:
    flag = config_flags.DEFINE_config_dict("config", config, "A task.", flag_values=values)
    values(sys.argv)
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
    raise ConfigError(f"Config key `meta.tasks`: could not apply {' '.join(rest)} to the "
                      f"task {path!r}: {' '.join(str(e).split())}") from None
  finally:
    sys.argv = saved
  return flag.value


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


def _where(meta: MetaConfig, loss: Any, theta: Dict[str, jax.Array]) -> Dict[str, float]:
  """Where the search's mean is, in the loss's own terms: DPO's alpha and beta, or the
  drift's clip scale c (PPO's clip range times exp(c))."""
  if meta.objective == "dpo":
    found = loss.with_drift(theta)
    return dict(alpha=float(found.alpha), beta=float(found.beta))
  return {k: float(theta[k][0]) for k in ("log_clip", "log_value_clip") if k in theta}


def _env_label(env: Any) -> str:
  """The environment's name, and its task's where the source has several."""
  task = next((env[k] for k in ("env_id", "task_id", "env_name") if k in env), None)
  return str(env.name) + (f"_{task}" if task else "")


def _one_generation(strategy, generation, state, g, root, meta, inner_steps):
  key = jax.random.fold_in(root, g)
  ask_key, run_key, tell_key = jax.random.split(key, 3)
  start = time.perf_counter()
  thetas, state = strategy.ask(ask_key, state)
  fitness, episodes, finite, per_task = generation(thetas, run_key)
  finite = finite & np.isfinite(fitness)
  told = worst_where_nonfinite(fitness, finite, g + 1)
  state = strategy.tell(tell_key, thetas, jnp.asarray(told), state)
  fitness = fitness[finite]  # The records' figures are the finite members'.
  jax.block_until_ready(state)
  wall = time.perf_counter() - start
  trainings = meta.population * meta.member_seeds
  return state, dict(generation=g + 1, fitness_best=float(fitness.max()),
                     fitness_mean=float(fitness.mean()), fitness_min=float(fitness.min()),
                     episodes=int(np.asarray(episodes).sum()),
                     nonfinite=int(np.sum(~finite)),
                     inner_env_steps=trainings * inner_steps,
                     sps=trainings * inner_steps / wall, wall_s=wall, **per_task)


def _evaluated(evaluate: Callable, theta: Any, root: jax.Array, generation: int):
  """The record's `mean_theta_fitness`: the mean theta's fitness over held-out seeds (a
  key stream the members' never draw from)."""
  value, finite = jax.device_get(evaluate(theta, jax.random.fold_in(
      jax.random.fold_in(root, 2**31 - 1), generation)))
  return dict(mean_theta_fitness=float(value) if finite else None)


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


def _progress(record: Dict[str, Any]) -> str:
  # 4 significant figures: a return (238.6) or, over several tasks, a ratio (1.018).
  return (f"generation {record['generation']}: fitness best {record['fitness_best']:.4g} "
          f"mean {record['fitness_mean']:.4g} min {record['fitness_min']:.4g}, "
          + (f"{record['nonfinite']} non-finite, " if record.get("nonfinite") else "")
          + (f"mean theta {record['mean_theta_fitness']:.4g}, "
             if record.get("mean_theta_fitness") is not None else "")
          + (f"alpha {record['alpha']:.3g} beta {record['beta']:.3g}, "
             if "alpha" in record else "")
          + (f"c {record['log_clip']:.2f}, " if "log_clip" in record else "")
          + (f"c_v {record['log_value_clip']:.2f}, " if "log_value_clip" in record else "")
          + f"{record['sps']:,.0f} inner env steps/s")


def _append(workdir: str, record: Dict[str, Any]) -> None:
  with open(os.path.join(workdir, RECORDS_FILE), "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\n")


def _write_config(workdir: str, config: Any, meta: MetaConfig) -> None:
  """config.json: the config and the meta keys; a resume with other ones is refused (but
  for `meta.generations`: a resume may go on for more)."""
  path = os.path.join(workdir, "config.json")
  written = dict(json.loads(config.to_json_best_effort()), meta=dataclasses.asdict(meta))
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      before = json.load(f)
    flat = lambda c: dict(runs_lib.flatten(c), **{"meta.generations": None})
    old, new = flat(before), flat(written)
    # A key a later version added (workdir.ADDED_KEYS, META_ADDED) is, where absent, at
    # the value that version's run had.
    added = {**workdir_lib.ADDED_KEYS, **META_ADDED}
    old = {**{k: v for k, v in added.items() if k not in old}, **old}
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if changed:
      raise ConfigError(f"{workdir} holds a meta-training with other settings ("
                        f"{', '.join(changed)} differ): give another --workdir.")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(written, f, indent=2, sort_keys=True)


def _stopped(interrupt: KeyboardInterrupt, workdir: str) -> str:
  """What a stop kept: the generations done and the objective saved after the last one."""
  path = os.path.join(workdir, STATE_FILE)
  done = 0
  if os.path.isfile(path):
    with np.load(path) as saved:
      done = int(saved["generation"])
  kept = (f"{workdir}/{STATE_FILE} keeps {done} generation{'s' * (done != 1)} and "
          f"{OBJECTIVE_FILE} the mean theta after the last; relaunch with the same flags "
          "to resume." if done else "no generation had finished, nothing was saved.")
  return f"podracer.meta: stopped by {preemption.stopped_by(interrupt)}; {kept}\n"


def main(argv: Optional[List[str]] = None) -> int:
  """`python -m podracer.meta`: the config's flags as the launcher takes them, and
  `--config.meta.KEY=VALUE`."""
  argv = list(sys.argv if argv is None else argv)
  meta_args, rest = runs_lib.sweep_args(argv[1:], META_FLAG)
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  values = flags.FlagValues()
  config_flag = config_flags.DEFINE_config_file("config", None, "PPO Anakin config.",
                                                flag_values=values)
  workdir = flags.DEFINE_string("workdir", None, "Where the meta-training goes.",
                                flag_values=values)
  saved, sys.argv = sys.argv, [argv[0], *rest]  # config_flags reads overrides from it.
  try:
    values(sys.argv)
    if not workdir.value or config_flag.value is None:
      raise ConfigError("podracer.meta needs --config=path/to/config.py:NAME and "
                        "--workdir=DIR.")
    from podracer import launch  # pylint: disable=import-outside-toplevel
    launch.register_components_and_agents()
    preemption.handle_sigint()
    preemption.handle_sigterm()
    train(config_flag.value, MetaConfig.from_args(meta_args), workdir.value)
  except KeyboardInterrupt as interrupt:
    sys.stderr.write(_stopped(interrupt, workdir.value))
    return preemption.exit_status(interrupt)
  except (ConfigError, flags.Error) as e:
    sys.stderr.write("\n".join(textwrap.wrap(f"Config error: {e}", 88,
                                             break_long_words=False)) + "\n")
    return EXIT_CONFIG_ERROR
  except NonFiniteError as e:
    sys.stderr.write("\n".join(textwrap.wrap(str(e), 88, break_long_words=False)) + "\n")
    return 1
  finally:
    sys.argv = saved
  return 0


if __name__ == "__main__":
  sys.exit(main())
