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
import sys
from typing import Any, Dict, Mapping, Optional

import numpy as np

from podracer import contracts, registry
from podracer.config import compose, population as population_config, runs as runs_lib
from podracer.errors import ConfigError
from podracer.experiment import Experiment, log_options
from podracer.lifecycle import guards, video
from podracer.registry import imports
from podracer.types import ACTION_MASK, DiscreteSpec, action_mask

REQUIRED_KEYS = ("seed", "total_env_steps", "env", "runtime", "topology", "agent")


def register_builtin_components() -> None:
  """Imports the modules whose import registers podracer's own components and runtimes.

  The library knows no agents: `podracer.launch` (the application) registers the
  built-in ones, and a config's own module registers any other.
  """
  import podracer.components  # noqa: F401  # pylint: disable=import-outside-toplevel
  import podracer.runtimes  # noqa: F401  # pylint: disable=import-outside-toplevel


class EnvironmentFactory:
  """Builds `config.env`; the runtime adds its own arguments (Sebulba: num_envs, seed).

  `kind` is the registered environment's declared kind ('jax' or 'host'), or None for a
  factory function that does not declare one, so a runtime can refuse an environment it
  cannot run before building it with arguments it does not take; `supports_async`,
  whether its environments step between `send` and `recv`
  (components/environments/host.py).
  """

  def __init__(self, section: Any):
    self.section = section
    name = section.get("name") if hasattr(section, "get") else None
    factory = registry.environments.get(name, key="env.name") if name else None
    self.kind: Optional[str] = getattr(factory, "kind", None)
    self.supports_async: bool = getattr(factory, "supports_async", False)

  def __call__(self, **runtime_kwargs: Any) -> Any:
    return registry.build(registry.environments, self.section, key="env", **runtime_kwargs)


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
    params = registry.parameters(factory).values()
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
  params = registry.parameters(factory)
  _check_distribution_section(config, params, spec)
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
    if reg is registry.networks or (reg in (registry.distributions, registry.normalizers)
                                    and _declares(reg, config[name], "spec")):
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
  contracts.check_objectives(agent)
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


def _check_distribution_section(config: Any, params: Any, spec: Any) -> None:
  """An agent acting through a `distribution` section (the actor-critic kit's) on
  continuous actions needs a continuous one: said before any other section is built
  (the network's error would not name the fix)."""
  if "distribution" not in params or isinstance(spec.action, DiscreteSpec):
    return
  section = config.get("distribution")
  name = section.get("name") if section is not None else None
  if name not in (None, "categorical"):
    return
  raise ConfigError(
      f"Agent '{config.agent.name}' acts through its `distribution` section "
      f"('categorical'{', the default' if name is None else ''}), but environment "
      f"'{config.env.name}' (`env.name`) has continuous actions of shape "
      f"{list(spec.action.shape)}: add a Gaussian, `distribution.name` tanh_normal "
      "(Brax's) or normal (CleanRL's), with a network that gives its parameters "
      "(`network.name` gaussian_actor_critic); PPO's pendulum_anakin and brax_anakin "
      "configs have both.")


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

  One straight line for one run: the plan from the config and topology, the
  environment's spec from its factory, the agent, then the runtime given the agent.
  Many runs of one program (`num_runs`, `sweep`, `population`, `schedule_from`) are
  built apart (`_build_runs`), only when the config asks for them. `agent` replaces the
  one `config.agent` describes (tests use it to run a variant).
  """
  register_builtin_components()
  imports.import_all(config.get(imports.CONFIG_KEY) or ())  # A user's own components.
  _check_required(config)
  if agent is None:
    compose.check_used(config)
  log_options(config)
  topology = registry.build(registry.topologies, config.topology, key="topology")
  runtime_cls = registry.runtimes.get(_name(config.runtime, "runtime"), key="runtime.name")
  options = registry.build(registry.runtimes, config.runtime, key="runtime",
                           factory=runtime_cls.Options)
  if runs_lib.asks_for_runs(config):
    return _build_runs(config, agent, topology, runtime_cls, options)
  plan = options.plan(topology, config.total_env_steps)
  env_factory = EnvironmentFactory(config.env)
  if agent is None:
    spec = runtime_cls.environment_spec(env_factory, config.seed)
    agent = build_agent(config, spec, plan.num_updates)
  runtime = runtime_cls(_guarded(config, agent), env_factory, topology, options, plan,
                        config.seed)
  _check_video(config, runtime)
  return Experiment(config, runtime, agent, plan)


def _build_runs(config: Any, agent: Any, topology: Any, runtime_cls: Any,
               options: Any) -> Experiment:
  """Many runs in one program: the runs `num_runs`, `sweep` or `schedule_from` ask for
  (checked against the runtime), laid on the mesh, PBT over them where `population`
  asks, each run's agent from its swept values; the runtime's `for_runs()` class."""
  many = population_config.many_runs(config, config.runtime.name, runtime_cls.supports_runs)
  runs = many.runs
  if hasattr(topology, "arrange"):  # The mesh's runs x data split (podracer/mesh.py).
    topology.arrange(runs.num_runs if runs else 1)
  plan = options.plan(topology, config.total_env_steps)
  many = population_config.with_population(many, config, plan.updates_per_round,
                                           plan.num_updates)
  env_factory = EnvironmentFactory(config.env)
  spec = runtime_cls.environment_spec(env_factory, config.seed)
  if agent is None:
    agent = build_agent(config, spec, plan.num_updates)
  nan_policy = config.get("nan_policy", "stop")
  extras = dict(runs=runs, agent_for=_agent_for(config, runs, spec, plan.num_updates,
                                                nan_policy))
  extras.update({k: v for k, v in (("population", many.population),
                                   ("schedule", many.schedule)) if v})
  runtime = runtime_cls.for_runs()(_guarded(config, agent), env_factory, topology,
                                   options, plan, config.seed, **extras)
  _check_video(config, runtime)
  return Experiment(config, runtime, agent, plan, many=many)


def _guarded(config: Any, agent: Any) -> guards.GuardedAgent:
  """The runtime steps a guarded agent; the experiment shows the agent as built."""
  return guards.GuardedAgent(agent, config.get("nan_policy", "stop"))


def _check_video(config: Any, runtime: Any) -> None:
  """`eval_video` is recorded at the end of the run: can it be?"""
  if config.get("eval_video"):
    watched = video.watchable_env(runtime, "Config key `eval_video`")
    if getattr(watched, "kind", None) != "jax":
      watched.close()  # A host environment made only to check it renders.


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
