"""Assembles registered components into a runnable experiment from one ConfigDict.

A config has `seed`, `total_env_steps` (optionally `stop_at_return`, to end the run once
the mean episode return reaches it) and one section per component, each naming a
registered component and giving its keyword arguments:

    env.name        -> registry.environments      runtime.name  -> registry.runtimes
    network.name    -> registry.networks          topology.name -> registry.topologies
    loss.name       -> registry.losses            agent.name    -> registry.agents
    optimizer.name  -> registry.optimizers        replay.name   -> registry.replay

The agent's constructor says which components it needs (its `network`, `loss`,
`optimizer`, `replay` parameters, or roles of the first three such as `actor_network`,
`critic_optimizer`); only those sections are built, each from the section of the same
name. A top-level key that neither the agent nor the run uses is refused
(podracer/config/compose.py says which keys are used, and how a new run key is declared).
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Dict, Mapping, Optional, TextIO, Tuple

import jax
import numpy as np

from podracer import contracts, distributed, registry
from podracer.lifecycle import checkpoint, evaluation, guards, video
from podracer.config import compose, runs as runs_lib
from podracer.registry import imports
from podracer.errors import ConfigError, DiskError
from podracer.components import loggers as loggers_lib
from podracer.logs.base import Video
from podracer.logs.metrics import DEFAULT_LOGGERS, LOG_KEYS, MetricsLogger
from podracer.runtime import Plan
from podracer.types import ACTION_MASK, action_mask
from podracer.runtimes import population as population_lib

REQUIRED_KEYS = ("seed", "total_env_steps", "env", "runtime", "topology", "agent")


def register_builtin_components() -> None:
  """Imports the modules whose import registers podracer's own components and runtimes.

  The library knows no agents: `podracer.launch` (the application) registers the
  built-in ones, and a config's own module registers any other.
  """
  import podracer.components  # noqa: F401
  import podracer.runtimes  # noqa: F401


class Experiment:
  """A built run: `run()` trains and returns a summary of the metrics."""

  def __init__(self, config: Any, runtime: Any, agent: Any, plan: Plan,
               runs: Optional[runs_lib.Runs] = None):
    self.config, self.runtime, self.agent, self.plan = config, runtime, agent, plan
    self.runs = runs

  def run(self, workdir: Optional[str] = None, stream: Optional[TextIO] = sys.stdout,
          print_interval: float = 1.0, checkpoints_in: Optional[str] = None
          ) -> Dict[str, Any]:
    """Trains, writing records into `workdir` (none: printed only) and checkpoints into
    `checkpoints_in` (default: `workdir`; processes other than 0 of a run over several
    write no records but their part of every checkpoint)."""
    self.checkpointer = checkpointer = checkpoint.for_run(self.config, self.runtime,
                                                          checkpoints_in or workdir)
    resumed = checkpointer.num_records() if checkpointer else None
    # Kept so that a launcher can still report a run that a signal stopped.
    taking_part = dict(num_processes=distributed.process_count(),
                       num_devices=distributed.devices_taking_part(self.runtime.topology))
    try:
      self.logger = logger = MetricsLogger(
          workdir, stream=stream, print_interval=print_interval,
          total_env_steps=self.plan.total_env_steps,
          stop_at_return=self.config.get("stop_at_return"), resume_records=resumed,
          context=taking_part, rates_per_env_step=getattr(self.agent, "rates_per_env_step", None),
          runs=self.runs, loggers=_loggers(self.config, workdir, self.runs),
          **_log_options(self.config))
    except BaseException:  # A logger that cannot start (a missing package): nothing ran.
      if checkpointer:
        checkpointer.close()
      raise
    rounded = self._rounded_budget()
    if rounded and stream:
      stream.write(rounded + "\n")
    if self.runs and stream:
      stream.write(self._describe_runs())
    watched = guards.NonFiniteWatch(logger, self.config.get("nan_policy", "stop"))
    # What the runtime's `run` takes of checkpoints and evaluation, when asked for.
    extras = dict(checkpointer=checkpointer,
                  evaluation=evaluation.for_run(self.config, self.runtime))
    try:
      final = self.runtime.run(watched, **{k: v for k, v in extras.items() if v is not None})
      if self.config.get("eval_video") and workdir and distributed.process_index() == 0:
        self._record_video(final, workdir, logger, stream)
    except DiskError:
      logger.disk_failed = True  # The disk is full or failing: write nothing more.
      raise
    finally:
      logger.close(title=_title(self.config, self.runs))
      if checkpointer:
        checkpointer.close()
    summary = logger.summary()
    if rounded:
      summary.update(requested_env_steps=self.config.total_env_steps,
                     planned_env_steps=self.plan.total_env_steps)
    return dict(summary, records=logger.records)

  def _record_video(self, state: Any, workdir: str, logger: Any,
                    stream: Optional[TextIO]) -> None:
    """`eval_video` episodes of run 0's evaluation policy: WORKDIR/videos/final.mp4 (or
    .gif), and into TensorBoard and W&B where they log."""
    if hasattr(self.runtime, "saved_state"):  # Anakin: each run's rows of the mesh.
      nets = self.runtime.per_run(state.agent.nets)
      if self.runs:
        nets = jax.tree.map(lambda x: x[0], nets)
    else:                                     # Sebulba, SEED: the learners' state.
      nets = self.runtime.final_nets(state)
    env = video.watchable_env(self.runtime, self.config.runtime.name, "Config key "
                              "`eval_video`", seed=self.config.seed)
    frames = video.record_run(self.agent, env, nets, jax.random.PRNGKey(self.config.seed),
                              self.config.eval_video)
    path = video.write(os.path.join(workdir, "videos", "final"), frames)
    gif = video.encode(frames, "gif")
    logger.write_video("eval_video", Video(path, gif, frames.shape), self.plan.total_env_steps)
    if stream:
      stream.write(f"wrote {path} ({len(frames)} frames, {self.config.eval_video} "
                   "episodes of the evaluation policy)\n")

  def _describe_runs(self) -> str:
    """What the start of the output says of many runs, a population or a schedule."""
    lines = [runs_lib.describe(self.runs)]
    population = getattr(self.runtime, "population", None)
    if population:
      lines.append(population_lib.describe(population, list(self.runs.swept)))
    schedule = getattr(self.runtime, "schedule", None)
    if schedule:
      lines.append(population_lib.describe_schedule(schedule))
    return "".join(line + "\n" for line in lines)

  def _rounded_budget(self) -> Optional[str]:
    """What to say when the plan's whole calls round `total_env_steps` up; else None."""
    requested, planned = self.config.total_env_steps, self.plan.total_env_steps
    if planned == requested:
      return None
    return (f"total_env_steps={requested:,} runs {planned:,} env steps: a run takes whole "
            f"calls (Anakin) or learner batches (Sebulba) of {self.plan.env_steps_per_round:,} "
            f"env steps, {self.plan.num_rounds:,} here; fewer environments, a shorter "
            f"rollout or fewer updates per call make the steps finer.")


class EnvironmentFactory:
  """Builds `config.env`; the runtime adds its own arguments (Sebulba: num_envs, seed).

  `kind` is the registered environment's declared kind ('jax' or 'host'), or None for a
  factory function that does not declare one, so a runtime can refuse an environment it
  cannot run before building it with arguments it does not take; `supports_async`,
  whether its environments step between `send` and `recv` (host.py).
  """

  def __init__(self, section: Any):
    self.section = section
    name = section.get("name") if hasattr(section, "get") else None
    factory = registry.environments.get(name, key="env.name") if name else None
    self.kind: Optional[str] = getattr(factory, "kind", None)
    self.supports_async: bool = getattr(factory, "supports_async", False)

  def __call__(self, **runtime_kwargs: Any) -> Any:
    return registry.build(registry.environments, self.section, key="env", **runtime_kwargs)


def _log_options(config: Any) -> Dict[str, Any]:
  """The `log` section's keys (metrics.LOG_KEYS) as MetricsLogger arguments; its logger
  names and their sections (`log.<name>`) are checked here and built by `_loggers`."""
  log = config.get("log") or {}
  unknown = sorted(set(log) - set(LOG_KEYS) - set(registry.loggers.names()))
  if unknown:
    raise ConfigError(f"Config key(s) {', '.join(f'`log.{k}`' for k in unknown)} are not "
                      f"read; the `log` section takes: {', '.join(LOG_KEYS)}, and a "
                      f"section of options per logger ({', '.join(registry.loggers)}).")
  names, options = _logger_sections(log)
  for name in set(names) | set(options):  # a section of an unused logger is checked too
    loggers_lib.check_options(name, options.get(name, {}))
  return {k: v for k, v in dict(log).items()
          if k in LOG_KEYS and k != "loggers" and v is not None}


def _logger_sections(log: Any) -> Tuple[Tuple[str, ...], Dict[str, Dict[str, Any]]]:
  """(the logger names `log.loggers` gives, {name: its `log.<name>` options set})."""
  names = log.get("loggers") or DEFAULT_LOGGERS
  if isinstance(names, str):
    names = (names,)
  options = {name: {k: v for k, v in dict(log[name]).items() if v is not None}
             for name in registry.loggers.names() if name in log and log[name]}
  return tuple(names), options


def _loggers(config: Any, workdir: Optional[str], runs: Optional[runs_lib.Runs]):
  """What builds the run's loggers once its workdir and kept records are known."""
  names, options = _logger_sections(config.get("log") or {})
  run = dict(workdir=workdir, num_runs=runs.num_runs if runs else None,
             config=config.to_dict() if hasattr(config, "to_dict") else dict(config))
  return lambda resumed: loggers_lib.build_loggers(names, options, resumed=resumed, **run)


def _title(config: Any, runs: Optional[runs_lib.Runs] = None) -> str:
  seeds = f"seed {config.seed}"
  if runs:  # The swept values are in the legend.
    seeds = f"{runs.num_runs} runs, seeds {min(runs.seeds)}-{max(runs.seeds)}"
  return f"{config.agent.name} on {config.env.name} ({config.runtime.name}, {seeds})"


def _check_required(config: Any) -> None:
  for key in REQUIRED_KEYS:
    if key not in config:
      raise ConfigError(f"Config key `{key}` is missing; every config needs "
                        f"{', '.join(f'`{k}`' for k in REQUIRED_KEYS)}.")
  if not isinstance(config.seed, int):
    raise ConfigError(f"Config key `seed` must be an integer, got {config.seed!r}.")
  if not isinstance(config.total_env_steps, int) or config.total_env_steps <= 0:
    raise ConfigError(f"Config key `total_env_steps` must be a positive integer, got "
                      f"{config.total_env_steps!r}.")
  target = config.get("stop_at_return")
  if target is not None and not isinstance(target, (int, float)):
    raise ConfigError(f"Config key `stop_at_return` must be a number, got {target!r}.")


def _declares(reg: Any, section: Any, parameter: str) -> bool:
  """Whether the component a section names takes `parameter`."""
  try:
    component = reg.get(section.get("name"), key=f"{reg.kind}.name")
    return parameter in inspect.signature(component).parameters
  except (AttributeError, TypeError, ValueError):
    return False  # registry.build reports a malformed section.


def _optimizer_steps(factory: Any, agent_kwargs: Dict[str, Any], param: str,
                     total_updates: int) -> int:
  """Optimizer steps of the run for `param`: an int per update, or one per role."""
  per_update = factory.gradient_steps_per_update(**_with_defaults(factory, agent_kwargs))
  if isinstance(per_update, Mapping):
    per_update = per_update[param]
  steps = total_updates * per_update
  limit = np.iinfo(np.int32).max  # Optimizer counts and schedules are int32 in the program.
  if steps > limit:
    raise ConfigError(f"total_env_steps gives {steps:,} optimizer steps for {param} "
                      f"({total_updates:,} updates x {per_update}), more than an int32 "
                      f"schedule can count ({limit:,}); lower total_env_steps.")
  return steps


def _with_defaults(factory: Any, agent_kwargs: Dict[str, Any]) -> Dict[str, Any]:
  """The `agent` section's keys, each key it leaves out at the constructor's default: so
  `gradient_steps_per_update` needs no defaults of its own."""
  try:
    params = inspect.signature(factory).parameters.values()
  except (TypeError, ValueError):
    return dict(agent_kwargs)
  defaults = {p.name: p.default for p in params if p.default is not p.empty}
  return {**defaults, **agent_kwargs}


def build_agent(config: Any, spec: Any, total_updates: int) -> Any:
  """The agent from `config.agent`, with the component sections its constructor names."""
  agent_kwargs = dict(config.agent)
  factory = registry.agents.get(agent_kwargs.pop("name", None), key="agent.name")
  _check_action_kind(config, factory, spec)
  _check_action_mask(config, factory, spec)
  params = inspect.signature(factory).parameters
  injected: Dict[str, Any] = {"spec": spec}
  if "total_updates" in params:  # Schedules over the run's updates (PQN's epsilon).
    injected["total_updates"] = total_updates
  for name, reg in compose.agent_sections(params).items():
    if name not in config:
      if params[name].default is None:  # Off without its section (a `meta_loss`).
        continue
      if params[name].default is not params[name].empty:  # Optional: the agent's default.
        sys.stderr.write(f"Warning: no `{name}` section; agent '{config.agent.name}' uses "
                         f"its default {name}.\n")
        continue
      raise ConfigError(f"Agent '{config.agent.name}' needs the section `{name}` in the "
                        f"config (`{name}.name` is one of: {', '.join(reg.names())}).")
    extra: Dict[str, Any] = {}
    if reg is registry.networks:
      extra["spec"] = spec
    if reg is registry.optimizers:
      extra["total_steps"] = _optimizer_steps(factory, agent_kwargs, name, total_updates)
    elif reg is registry.losses and _declares(reg, config[name], "total_steps"):
      # A loss with a schedule: the gradient steps of the optimizer of its role.
      extra["total_steps"] = _optimizer_steps(
          factory, agent_kwargs, compose.same_role(name, "optimizer"), total_updates)
    injected[name] = registry.build(reg, config[name], key=name, **extra)
  agent_section = dict(config.agent)
  agent = registry.build(registry.agents, agent_section, key="agent", **injected)
  network = config.get("network")
  contracts.check_network(agent, f"network '{network.name}'" if network else "the network")
  return agent


def _check_action_kind(config: Any, factory: Any, spec: Any) -> None:
  """The environment's actions must be of the kind the agent declares (`action_kind`)."""
  wanted = getattr(factory, "action_kind", None)
  if wanted is None:
    return
  discrete = hasattr(spec.action, "num_values")
  if wanted == ("discrete" if discrete else "continuous"):
    return
  has = (f"{spec.action.num_values} discrete actions" if discrete else
         f"continuous actions of shape {list(spec.action.shape)}")
  raise ConfigError(
      f"Agent '{config.agent.name}' takes {wanted} actions (its `action_kind`), but "
      f"environment '{config.env.name}' (`env.name`) has {has}; choose an environment with "
      f"{wanted} actions, or an agent for {'discrete' if discrete else 'continuous'} ones "
      f"(registered agents and their kinds: `python -m podracer.launch --list`).")


def _check_action_mask(config: Any, factory: Any, spec: Any) -> None:
  """A masked environment's agent must honour masks (`action_masks`), and the mask must
  be one bool per action."""
  mask = action_mask(getattr(spec, "observation", None))
  if mask is None:
    return
  where = f"environment '{config.env.name}' (`env.name`)"
  if not getattr(factory, "action_masks", False):
    raise ConfigError(
        f"Agent '{config.agent.name}' does not honour action masks (its `action_masks` "
        f"is False), but {where} gives one with each observation (`{ACTION_MASK}`): it "
        f"could take illegal actions. Choose an agent that honours them (PPO, IMPALA, "
        f"DQN, R2D2, PQN, MuZero), or set `action_masks = True` on an agent of yours that "
        f"applies `podracer.agent.legal` to its logits or Q-values.")
  num_actions = getattr(spec.action, "num_values", None)
  if tuple(mask.shape) != (num_actions,) or np.dtype(mask.dtype) != np.bool_:
    raise ConfigError(
        f"The action mask of {where} must be bool [{num_actions}] (one entry per "
        f"action), got {np.dtype(mask.dtype).name} {list(mask.shape)}.")


def build(config: Any, agent: Any = None) -> Experiment:
  """Looks every component of `config` up in the registries and wires them together.

  One straight line: the plan from the config and topology, the environment's spec from
  its factory, the agent, then the runtime given the agent. `agent` replaces the one
  `config.agent` describes (tests use it to run a variant).
  """
  register_builtin_components()
  imports.import_all(config.get(imports.CONFIG_KEY) or ())  # A user's own components.
  _check_required(config)
  if agent is None:
    compose.check_used(config)
  _log_options(config)
  topology = registry.build(registry.topologies, config.topology, key="topology")
  runtime_cls = registry.runtimes.get(_name(config.runtime, "runtime"), key="runtime.name")
  options = registry.build(registry.runtimes, config.runtime, key="runtime",
                           factory=runtime_cls.Options)
  runs, population, schedule = _population(config, runtime_cls, options)
  if hasattr(topology, "arrange"):  # The mesh's runs x data split (podracer/mesh.py).
    topology.arrange(runs.num_runs if runs else 1)
  plan = options.plan(topology, config.total_env_steps)
  population_lib.check_fits(population, plan.num_updates)
  env_factory = EnvironmentFactory(config.env)
  spec = runtime_cls.environment_spec(env_factory, config.seed) if agent is None or runs else None
  if agent is None:
    agent = build_agent(config, spec, plan.num_updates)
  # The runtime steps a guarded agent; the experiment shows the agent as built.
  nan_policy = config.get("nan_policy", "stop")
  guarded = guards.GuardedAgent(agent, nan_policy)
  many = {}
  if runs:
    many = dict(runs=runs, agent_for=_agent_for(config, runs, spec, plan.num_updates, nan_policy))
  if population:
    many["population"] = population
  if schedule:
    many["schedule"] = schedule
  runtime = runtime_cls(guarded, env_factory, topology, options, plan, config.seed, **many)
  if config.get("eval_video"):  # Recorded at the end of the run: can it be?
    watched = video.watchable_env(runtime, config.runtime.name, "Config key `eval_video`")
    if getattr(watched, "kind", None) != "jax":
      watched.close()  # A host environment made only to check it renders.
  return Experiment(config, runtime, agent, plan, runs)


def _population(config: Any, runtime_cls: Any, options: Any):
  """(runs, PBT over them or None, a replayed PBT schedule or None): `num_runs`, `sweep`,
  `population` and `schedule_from` (podracer/runtimes/population.py)."""
  supports = getattr(runtime_cls, "supports_runs", False)
  if config.get("schedule_from"):
    schedule = population_lib.load_schedule(config.schedule_from)
    return population_lib.schedule_runs(config, schedule, supports), None, schedule
  if not supports and (config.get("population") or {}).get("kind", "none") != "none":
    raise ConfigError(
        f"Config key `population.kind` asks for population-based training, but runtime "
        f"'{config.runtime.name}' runs one run per launch (its environments step on the "
        "host), so there is no population to compare inside one program. Use "
        "runtime.name=anakin with a JAX environment.")
  runs = _runs(config, runtime_cls)
  updates_per_call = getattr(options, "updates_per_call", None) if supports else None
  return runs, population_lib.from_config(config, runs, updates_per_call), None


def _runs(config: Any, runtime_cls: Any) -> Optional[runs_lib.Runs]:
  """`num_runs` and `sweep` (podracer/config/runs.py), for a runtime that runs many."""
  runs = runs_lib.from_config(config)
  if runs and not getattr(runtime_cls, "supports_runs", False):
    raise ConfigError(
        f"Config keys `num_runs` / `sweep` ask for {runs.num_runs} runs in one program, but "
        f"runtime '{config.runtime.name}' runs one: its environments are stepped on the "
        "host, per run, so runs would share nothing. Launch one process per seed or value "
        "(e.g. --config.seed=1, --config.seed=2), or use runtime.name=anakin with a JAX "
        "environment.")
  return runs


def _agent_for(config: Any, runs: runs_lib.Runs, spec: Any, total_updates: int,
               nan_policy: str):
  """`values -> the agent of a run with those swept values`; each value is first built
  concretely here, so a value out of range is refused naming its key before tracing."""
  for key, values in runs.swept.items():
    for value in sorted(set(values)):
      try:
        build_agent(runs_lib.with_values(config, {key: value}), spec, total_updates)
      except ConfigError as e:
        raise ConfigError(f"Config key `sweep.{key}` has the value {value!r}, which its "
                          f"component refuses: {e}") from None

  def agent_for(values: Dict[str, Any]) -> Any:
    built = build_agent(runs_lib.with_values(config, values), spec, total_updates)
    return guards.GuardedAgent(built, nan_policy)
  return agent_for


def _name(section: Any, key: str) -> Any:
  name = section.get("name") if hasattr(section, "get") else None
  if name is None:
    raise ConfigError(f"Config key `{key}.name` is missing: say which {key} to use.")
  return name
