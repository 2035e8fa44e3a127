"""Gymnasium environments as a `HostEnvironment`, each in its own subprocess by default.

Gymnasium >= 1.0 vector environments reset in NEXT_STEP mode: the step after
`terminated` or `truncated` returns the reset observation (reward 0) and ignores its
action, which is our FIRST step. `terminated` becomes LAST with discount 0, `truncated`
LAST with discount 1.

Subprocesses are started with `spawn` (a forked copy of a process running JAX's threads
can deadlock) and hide every accelerator before they build their environment, so N
environment workers never grab, or start a runtime on, the GPU or TPU that the learner
uses. As with any `spawn`, a script that builds this environment must guard its entry
point with `if __name__ == "__main__":`.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, List, Tuple

import numpy as np

from podracer import registry
from podracer.errors import EnvironmentWorkerError, require
from podracer.components.environments.host import (EpisodeTracker, HostEnvironment,
                                                   env_seeds, float32_observation_spec,
                                                   host_timestep)
from podracer.types import (ArraySpec, DiscreteSpec, EnvSpec, EpisodeStats, StepType,
                            TimeStep, bounds)

# What an environment subprocess sets before it builds its environment.
SUBPROCESS_ENV = {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}


def env_factory(env_id: str, env_kwargs: dict, parent_pid: int):
  """A picklable `gymnasium.make` that hides accelerators when run in a subprocess."""
  env_vars = dict(SUBPROCESS_ENV)

  # Nested, so cloudpickle (which Gymnasium uses) sends it by value: a worker then imports
  # gymnasium and its environment only, not podracer and JAX.
  def make():
    import os  # pylint: disable=g-import-not-at-top,reimported,redefined-outer-name
    import sys  # pylint: disable=g-import-not-at-top,reimported,redefined-outer-name
    # Gymnasium also calls this once in the parent, to read the spaces: leave that alone.
    if os.getpid() != parent_pid:
      import signal  # pylint: disable=g-import-not-at-top
      # The parent owns a worker's lifetime and closes it. A signal sent to the whole
      # process group (Ctrl-C in a terminal, SLURM's SIGTERM to every process of a job)
      # would otherwise kill workers mid-message, each printing EOFError/BrokenPipeError
      # tracebacks while the parent is still shutting down cleanly.
      signal.signal(signal.SIGINT, signal.SIG_IGN)
      signal.signal(signal.SIGTERM, signal.SIG_IGN)
      os.environ.update(env_vars)
      # A spawned worker re-imports the parent's main module, which may import JAX, and
      # JAX reads JAX_PLATFORMS on import; no backend has started, so the flag still works.
      jax = sys.modules.get("jax")
      if jax is not None:
        jax.config.update("jax_platforms", env_vars["JAX_PLATFORMS"])
    import gymnasium  # pylint: disable=g-import-not-at-top
    return gymnasium.make(env_id, **env_kwargs)

  return make


@registry.environments.register("gymnasium")
class Gymnasium(HostEnvironment):
  """`num_envs` copies of `gymnasium.make(env_id, **env_kwargs)`.

  `env_id` is a registered id ("CartPole-v1", "module:Env-v0") or a Gymnasium EnvSpec.

  `asynchronous=True` steps them in parallel subprocesses (AsyncVectorEnv, started with
  `mp_context`); `False` steps them one after another in this process (SyncVectorEnv),
  which is cheaper for fast environments.
  """

  def __init__(self, env_id: str, num_envs: int, seed: int = 0, asynchronous: bool = True,
               mp_context: str = "spawn", clip_actions: bool = False, **env_kwargs: Any):
    super().__init__(num_envs, seed, clip_actions)
    gymnasium = require("gymnasium", f"The 'gymnasium' environment ({env_id})",
                        "pip install gymnasium")
    self.env_id = env_id
    self.asynchronous = bool(asynchronous)
    fns = [env_factory(env_id, dict(env_kwargs), os.getpid())] * self.num_envs
    kwargs = {}
    mode = getattr(gymnasium.vector, "AutoresetMode", None)
    if mode is not None:  # Gymnasium 1.0 has no option: NEXT_STEP is its only mode.
      kwargs["autoreset_mode"] = mode.NEXT_STEP
    if self.asynchronous:
      self._env = gymnasium.vector.AsyncVectorEnv(fns, context=mp_context, **kwargs)
    else:
      self._env = gymnasium.vector.SyncVectorEnv(fns, **kwargs)
    if mode is not None and self._env.metadata.get("autoreset_mode") != mode.NEXT_STEP:
      self.close()
      raise RuntimeError(f"Gymnasium built a vector env for {env_id} that does not reset "
                         "in NEXT_STEP mode, which podracer's step convention needs.")
    self._spec = EnvSpec(observation=float32_observation_spec(
        _observation_spec(self._env.single_observation_space), f"Gymnasium's {env_id}"),
                         action=_action_spec(self._env.single_action_space))
    space = self._env.single_action_space
    self._action_offset = int(getattr(space, "start", 0)) if hasattr(space, "n") else 0
    self._tracker = EpisodeTracker(self.num_envs)
    self._last = np.zeros(self.num_envs, np.bool_)
    self._seeded = False
    self._started = False

  def spec(self) -> EnvSpec:
    return self._spec

  def reset(self) -> Tuple[TimeStep, EpisodeStats]:
    # Seed once: seeding every reset would replay the same episodes.
    seed = None if self._seeded else [int(s) for s in env_seeds(self.seed, self.num_envs)]
    observation, _ = self._call(self._env.reset, seed=seed)
    self._seeded = self._started = True
    self._last = np.zeros(self.num_envs, np.bool_)
    n = self.num_envs
    timestep = host_timestep(np.full(n, StepType.FIRST), np.zeros(n), np.ones(n),
                             observation)
    return timestep, self._tracker.reset()

  def step(self, action: np.ndarray) -> Tuple[TimeStep, EpisodeStats]:
    if not self._started:
      raise RuntimeError("Call reset() before the first step() of a Gymnasium environment.")
    action = self._check_action(action)
    if self._action_offset:
      action = action + self._action_offset
    observation, reward, terminated, truncated, _ = self._call(self._env.step, action)
    first = self._last
    last = ~first & (np.asarray(terminated, bool) | np.asarray(truncated, bool))
    step_type = np.where(first, StepType.FIRST, np.where(last, StepType.LAST, StepType.MID))
    reward = np.where(first, 0.0, reward)
    discount = np.where(last & np.asarray(terminated, bool), 0.0, 1.0)
    self._last = last
    timestep = host_timestep(step_type, reward, discount, observation)
    return timestep, self._tracker.update(step_type, reward, last)

  def _call(self, method, *args, **kwargs):
    try:
      return method(*args, **kwargs)
    except (EOFError, OSError) as e:  # A broken pipe: a worker process has gone.
      if not self.asynchronous:
        raise
      dead = _dead_workers(self._env)
      if not dead:
        raise
      raise EnvironmentWorkerError(
          f"{self!r}: {'; '.join(dead)} (seen as {type(e).__name__}: {e}).") from e

  def close(self) -> None:
    env, self._env = getattr(self, "_env", None), None
    if env is None:
      return
    if not self.asynchronous or not _dead_workers(env, wait=0.0):
      env.close()
      return
    # A dead worker's pipe is broken, so a graceful close would raise a second error on
    # top of the one that reported the death: stop the other workers instead, with
    # SIGKILL since they ignore SIGTERM (see `env_factory`) and hold nothing to save.
    for process in env.processes:
      if process.is_alive():
        process.kill()
    for process in env.processes:
      process.join(timeout=5.0)
    for pipe in env.parent_pipes:
      if pipe is not None:
        pipe.close()
    env.closed = True  # Nothing is left to close; keeps Gymnasium's __del__ quiet.

  def __repr__(self) -> str:
    return (f"Gymnasium({self.env_id!r}, num_envs={self.num_envs}, "
            f"asynchronous={self.asynchronous})")


def _dead_workers(env, wait: float = 1.0) -> List[str]:
  """'worker I of N (pid P) exit code/signal[, its error]' for each dead worker.

  A worker's pipe breaks a moment before the process can be reaped, so this waits up to
  `wait` seconds for a death to show.
  """
  processes = getattr(env, "processes", [])
  deadline = time.monotonic() + wait
  while all(p.is_alive() for p in processes) and time.monotonic() < deadline:
    time.sleep(0.02)
  errors = {}
  try:
    while True:  # What workers that raised reported before they exited.
      index, exc_type, value, _ = env.error_queue.get_nowait()
      errors[index] = f"{getattr(exc_type, '__name__', exc_type)}: {value}"
  except Exception:  # pylint: disable=broad-except -- queue.Empty, or a broken queue.
    pass
  dead = []
  for i, process in enumerate(processes):
    if process.is_alive():
      continue
    code = process.exitcode
    how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
           else f"exited with code {code}")
    line = f"environment worker {i} of {len(processes)} (pid {process.pid}) {how}"
    if i in errors:
      line += f" after raising {errors[i]}"
    dead.append(line)
  return dead


def _observation_spec(space, name: str = "observation") -> Any:
  from gymnasium import spaces  # pylint: disable=g-import-not-at-top
  if isinstance(space, spaces.Dict):
    return {k: _observation_spec(s, k) for k, s in space.spaces.items()}
  if isinstance(space, spaces.Tuple):
    return tuple(_observation_spec(s, f"{name}_{i}") for i, s in enumerate(space.spaces))
  if space.shape is None:
    raise NotImplementedError(f"Gymnasium observation space {space} has no fixed shape.")
  return ArraySpec(tuple(space.shape), np.dtype(space.dtype), name)


def _action_spec(space) -> Any:
  from gymnasium import spaces  # pylint: disable=g-import-not-at-top
  if isinstance(space, spaces.Discrete):
    return DiscreteSpec(int(space.n))
  if isinstance(space, spaces.Box):
    minimum, maximum = bounds(space.low, space.high)
    return ArraySpec(tuple(space.shape), np.dtype(space.dtype), "action", minimum, maximum)
  raise NotImplementedError(f"Gymnasium action space {space} is neither Discrete nor "
                            "Box; podracer agents take one discrete or continuous action.")
