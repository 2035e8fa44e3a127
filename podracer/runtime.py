"""The Runtime interface, and the plan of a run that the builder computes before any build.

A runtime runs one agent on one kind of environment over some devices. The builder
builds it in one straight line (podracer/builder.py):

  options = Runtime.Options(**config.runtime)          # its config section, checked
  plan    = options.plan(topology, total_env_steps)    # pure arithmetic: steps, updates
  spec    = Runtime.environment_spec(env_factory, seed)
  agent   = the agent, its optimizers sized by plan.num_updates
  runtime = Runtime(agent, env_factory, topology, options, plan, seed)
  runtime.train(logger, checkpointer=..., evaluation=...)   # what it says it takes

Callers ask a runtime what it can do by method, never by looking for attributes:
`checkpoints()` and `evaluates()` (does `train` take a checkpointer, an evaluation: by
default, read from the parameters of the `train` the runtime implements),
`final_nets(state, run)` and `saved_nets(checkpointer, run)` (the trained parameters, for
videos and `podracer.play`), `environment_to_watch(seed)`. What a runtime does not do
it answers with `NotSupported`, a ConfigError that names it (exit 2).
"""

from __future__ import annotations

import abc
import inspect
from typing import Any, Callable, ClassVar, Dict, NamedTuple, Optional, Protocol

from podracer import deprecation
from podracer.errors import ConfigError
from podracer.types import EnvSpec


class Plan(NamedTuple):
  """How a run divides its env steps into rounds, from the config, the topology and the
  number of processes. A round is the unit a runtime repeats, with the same env steps
  and agent updates each time: one compiled call under Anakin (every environment acts,
  then `updates_per_round` updates); one learner batch under Sebulba and SEED (the
  trajectories of one batch, then `updates_per_batch` updates)."""
  env_steps_per_round: int
  num_rounds: int
  updates_per_round: int

  @property
  def num_updates(self) -> int:
    return self.num_rounds * self.updates_per_round

  @property
  def total_env_steps(self) -> int:
    return self.num_rounds * self.env_steps_per_round


def plan_rounds(env_steps_per_round: int, updates_per_round: int,
                total_env_steps: int) -> Plan:
  """Whole rounds that cover `total_env_steps` (at least one)."""
  num_rounds = max(1, -(-total_env_steps // env_steps_per_round))
  return Plan(env_steps_per_round, num_rounds, updates_per_round)


# What a runtime that runs environments of one kind says of an environment of the other
# ({name} is the runtime's class name, {kind} the environment's, {what} its name).
REFUSALS = {
    "jax": ("{name} compiles the environment into its program, so it needs an "
            "environment written in JAX; `env.name` selects a {kind} environment ({what}). "
            "Use runtime.name=sebulba for it."),
    "host": ("{name} steps environments on the CPU; `env.name` selects a JAX "
             "environment ({what}). Use an EnvPool, Gymnasium or dm_env environment, or "
             "runtime.name=anakin."),
}


class NotSupported(ConfigError):
  """A runtime's answer for what it does not do (be watched, be played, save): the
  runtime and the method named, so that a caller can say why in one paragraph."""

  def __init__(self, runtime: Any, method: str, what: str):
    super().__init__(f"runtime {type(runtime).__name__} {what} (its Runtime.{method} is "
                     "not implemented; podracer/runtime.py says what each method returns).")


class RuntimeOptions(Protocol):
  """A runtime's config section (`runtime.*` keys other than `name`)."""

  def plan(self, topology: Any, total_env_steps: int) -> Plan: ...


class Runtime(abc.ABC):
  """What the builder and launcher need of a runtime (Anakin, Sebulba, yours).

  A subclass declares its `Options` (a dataclass of its `runtime.*` keys, with `plan`)
  and the `environment_kind` it runs ('jax' or 'host'); REFUSALS says why an environment
  of the other kind cannot run there.
  """
  Options: ClassVar[type]
  environment_kind: ClassVar[str]
  # Whether it trains many runs in one program (`num_runs`, `sweep`, `population`):
  # Anakin. The builder builds those with its `for_runs()` class.
  supports_runs: ClassVar[bool] = False

  @classmethod
  def for_runs(cls) -> type:
    """The class that trains many runs of this runtime in one program (asked only where
    `supports_runs`, and only for a config that asks for many runs): built with `runs`,
    `agent_for`, and `population` and `schedule` where given, besides the six arguments
    of one run. By default the class itself (before 0.22 a runtime took them in its own
    constructor); Anakin's is AnakinRuns."""
    return cls

  @classmethod
  def environment_args(cls, seed: int) -> Dict[str, Any]:
    """What the runtime passes the environment factory besides the config section."""
    del seed
    return {}

  @classmethod
  def environment_spec(cls, env_factory: Callable[..., Any], seed: int) -> EnvSpec:
    """The spec of one environment, built to read it and check its contract
    (podracer/contracts.py); ConfigError for the other kind or a broken contract.

    A registered environment declares its kind, so it is refused before it is built
    (with arguments it may not take); a plain factory function is checked once built.
    """
    declared = getattr(env_factory, "kind", None)
    if declared not in (None, cls.environment_kind):
      raise cls.refuse(declared, env_factory.section.name)
    env = env_factory(**cls.environment_args(seed))
    built = getattr(env, "kind", "jax")
    if built != cls.environment_kind:
      raise cls.refuse(built, type(env).__name__)
    from podracer import contracts  # Imports JAX.
    name = getattr(getattr(env_factory, "section", None), "name", type(env).__name__)
    try:
      if built == "jax":
        contracts.check_environment(env, f"environment '{name}'")
      else:  # A host environment is checked on a real first reset, here before any thread.
        contracts.check_host_timestep(env, env.reset()[0], f"environment '{name}'")
      return env.spec()
    finally:
      if hasattr(env, "close"):
        env.close()

  @classmethod
  def refuse(cls, kind: str, what: str) -> ConfigError:
    return ConfigError(REFUSALS[cls.environment_kind].format(name=cls.__name__, kind=kind,
                                                             what=what))

  @abc.abstractmethod
  def __init__(self, agent: Any, env_factory: Callable[..., Any], topology: Any,
               options: Any, plan: Plan, seed: int):
    """Builds everything the run needs for `agent`; ConfigError if it cannot run."""

  def train(self, logger: Any, checkpointer: Optional[Any] = None,
            evaluation: Optional[Any] = None) -> Any:
    """Trains, writing records to `logger`, until the plan is done or its target is
    reached; returns the final state. Given a `checkpointer` (only if `checkpoints()`),
    first resumes from its latest checkpoint and saves as it goes; given an `evaluation`
    (only if `evaluates()`), adds `eval_return` to its records."""
    if _overrides(self, "run"):  # A runtime of before 0.17, which named it `run`.
      deprecation.warn_once("Runtime.run", deprecation.renamed_message(
          "Runtime.run", "Runtime.train", "0.17.0"))
      extras = dict(checkpointer=checkpointer, evaluation=evaluation)
      return self.run(logger, **{k: v for k, v in extras.items() if v is not None})
    raise NotImplementedError(f"{type(self).__name__} implements no Runtime.train.")

  def run(self, logger: Any, **extras: Any) -> Any:
    """Deprecated (0.17.0): `train`."""
    deprecation.warn_once("Runtime.run", deprecation.renamed_message(
        "Runtime.run", "Runtime.train", "0.17.0"))
    return self.train(logger, **extras)

  def checkpoints(self) -> bool:
    """Whether `train` takes a checkpointer: saves its state and resumes from it. By
    default, what the runtime's own `train` declares (a `checkpointer` parameter), or a
    runtime of before 0.17 its `run`; a runtime may answer for itself."""
    return "checkpointer" in _training_parameters(self)

  def evaluates(self) -> bool:
    """Whether `train` takes an evaluation (podracer/lifecycle/evaluation.py): by
    default, whether its own `train` (before 0.17: `run`) has an `evaluation` parameter."""
    return "evaluation" in _training_parameters(self)

  def final_nets(self, state: Any, run: int = 0) -> Any:
    """Run `run`'s trained parameters (host arrays, one replica's) in the state `train`
    returned: what `eval_video` watches."""
    raise NotSupported(self, "final_nets", "does not say what its final parameters are, so "
                       "its run cannot be watched")

  def saved_nets(self, checkpointer: Any, run: int = 0) -> Any:
    """Run `run`'s parameters in the latest checkpoint (`podracer.play`); a ConfigError
    for a run the checkpoint does not hold."""
    raise NotSupported(self, "saved_nets", "cannot read its parameters back from a "
                       "checkpoint, so a saved run cannot be played")

  def environment_to_watch(self, seed: int = 0) -> Any:
    """One environment of the run's task to watch the agent in: a JAX environment, or a
    host environment made to render (`render_mode="rgb_array"`; the caller closes it)."""
    del seed
    raise NotSupported(self, "environment_to_watch", "has no environment to watch")


def _overrides(runtime: Runtime, name: str) -> bool:
  return getattr(type(runtime), name) is not getattr(Runtime, name)


def _training_parameters(runtime: Runtime):
  """The parameters of the training the runtime implements: its `train`, else (a runtime
  of before 0.17) its `run`; none if it implements neither."""
  for name in ("train", "run"):
    if _overrides(runtime, name):
      return inspect.signature(getattr(runtime, name)).parameters
  return {}
