"""Errors a user can cause and fix: the launcher prints them as one paragraph, no traceback."""

import importlib
import importlib.util
import sys
import traceback
from types import ModuleType
from typing import Callable, Optional


def deepest_frame(error: BaseException, keep: Callable[[str], bool]
                  ) -> Optional[traceback.FrameSummary]:
  """The innermost frame of `error`'s traceback whose file name `keep` accepts (a user's
  config file, environment or module, for the paragraph that names its line), if any."""
  frames = [f for f in traceback.extract_tb(error.__traceback__) if keep(f.filename)]
  return frames[-1] if frames else None


class ConfigError(Exception):
  """The config (or a command-line override of it) cannot be built into a run."""


def minibatches_do_not_divide(total: int, minibatches: int, what: str,
                              change: str) -> ConfigError:
  """`agent.num_minibatches` does not split `total` examples (`what`, in words) evenly:
  the paragraph with the nearest divisors and what else to `change`."""
  fits = [n for n in range(1, min(total, 64) + 1) if total % n == 0]
  return ConfigError(
      f"`agent.num_minibatches` = {minibatches} minibatches of equal size do not divide "
      f"the {total} {what} each update learns from; choose a divisor of {total} (e.g. "
      f"{', '.join(map(str, fits[-4:]))}) or change {change}.")


class MissingPackage(ImportError):
  """A component needs a package this install lane lacks (gymnax or Brax in the reverb
  lane, EnvPool or Gymnasium left out); building it from a config is a ConfigError that
  names the config key."""


def require(module: str, who: str, install: str) -> ModuleType:
  """`import module` for `who` (an environment, a logger, videos), or a MissingPackage in
  one paragraph: who needs which package, and `install`, how to get it. Every optional
  package podracer imports is imported through this (or `suites.require`, its suites')."""
  try:
    return importlib.import_module(module)
  except ImportError as e:
    raise MissingPackage(f"{who} needs {module}, which is not installed here: {install} "
                         f"({e}).") from e


def load_on_first_use(module: str) -> ModuleType:
  """`module`, loaded on its first attribute read (the standard library's `LazyLoader`),
  for a package whose import costs a launch seconds it seldom needs: rlax imports distrax
  and TensorFlow Probability (about 0.5 s) for the few runs that use a distribution of
  theirs. Write `rlax = load_on_first_use("rlax")`, not `import rlax` (an `import`
  statement reads the module's `__spec__`, which loads it). A module already imported, or
  not installed, is imported as usual (a missing one raises ImportError here)."""
  if module in sys.modules:
    return sys.modules[module]
  spec = importlib.util.find_spec(module)
  if spec is None or spec.loader is None:
    return importlib.import_module(module)
  spec.loader = importlib.util.LazyLoader(spec.loader)
  lazy = importlib.util.module_from_spec(spec)
  sys.modules[module] = lazy
  spec.loader.exec_module(lazy)
  return lazy


class RecompilationError(RuntimeError):
  """A step that must compile once was traced again; the message says which inputs changed."""


class ThreadFailure(RuntimeError):
  """A runtime thread (actor, learner, ...) raised; the message holds its traceback.

  The launcher prints the message and exits with status 1 after every other thread and
  environment of the run was stopped.
  """


class NonFiniteError(RuntimeError):
  """A loss, metric or parameter became NaN or infinite (see podracer/lifecycle/guards.py).

  The launcher prints the message, which names the metrics and updates, and exits with
  status 1.
  """


class EnvironmentWorkerError(RuntimeError):
  """An environment worker process died; the message names it, its exit code or signal,
  and the exception it reported, if any."""


class EnvironmentStepError(RuntimeError):
  """An environment stepped what no agent should learn from (a non-finite reward or
  observation, a discount outside [0, 1], ...); the message names the environment, the
  field and the value (podracer/runtimes/door.py)."""


class ReplayTimeout(TimeoutError):
  """A replay call waited its timeout (rate limiter, too few items) on a live server.

  Runtimes retry it after checking whether the run is stopping.
  """


class ReplayUnavailableError(RuntimeError):
  """A replay server went away (stopped, killed, unreachable) or its replay was closed.

  The message names the server's address; runtimes stop the run instead of retrying.
  """


class DiskError(RuntimeError):
  """Writing one of the run's files failed because of its disk: full, over quota,
  read-only or failing (podracer/logs/disk.py). The message names what was being written,
  where, and the free space there; the launcher prints it and exits with status 1."""
