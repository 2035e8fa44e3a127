"""What the JAX suites' adapters share: importing the suite, or saying which extra has it.

Each suite is an optional extra (`pip install -e ".[craftax]"`, ...; the default lane
installs them all, the reverb lane none: they need current JAX). An adapter imports its
suite when it is built, so a missing one is a clear `MissingPackage` naming the extra,
and a suite whose API moved is named with the version podracer was tested with.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any, Iterator

from podracer.components.environments.base import transition
from podracer import errors
from podracer.errors import MissingPackage
from podracer.types import PyTree, StepType, TimeStep

# The suites' versions podracer's tests and figures used (requirements/default.txt).
TESTED = {"craftax": "1.6.1", "jaxtari": "0.2.0", "jumanji": "1.1.2",
          "navix": "0.7.4", "pgx": "2.6.0",
          "xminigrid": "0.9.3"}


def require(module: str, env_name: str, extra: str) -> ModuleType:
  """`import module`, or a MissingPackage naming the extra that installs it."""
  return errors.require(
      module, f"The '{env_name}' environment",
      f"pip install -e \".[{extra}]\" (or pip install {module}=={TESTED[module]}, the "
      f"version podracer is tested with); the default install lane has it, the reverb "
      f"lane (jax 0.4.34) cannot")


@contextlib.contextmanager
def api_of(module: str, env_name: str) -> Iterator[None]:
  """Turns an error from a suite's API (a renamed function, a changed signature) into a
  MissingPackage naming the installed and the tested versions."""
  try:
    yield
  except (AttributeError, TypeError) as e:
    installed = getattr(importlib.import_module(module), "__version__", "unknown")
    raise MissingPackage(
        f"The '{env_name}' environment could not use {module} {installed}'s API ({e}); "
        f"podracer supports {module}=={TESTED[module]}: pip install "
        f"{module}=={TESTED[module]}.") from e


def dm_env_step(timestep: Any, observation: PyTree) -> TimeStep:
  """A suite's dm_env-like step (step type, reward, discount 0 where it terminated) as
  podracer's: a LAST step with discount 0 terminated, any other LAST one truncated."""
  last = timestep.step_type == StepType.LAST
  terminated = last & (timestep.discount == 0)
  return transition(observation, timestep.reward, terminated=terminated,
                    truncated=last & ~terminated)
