"""Batches of environments stepped on the CPU from Python: what the Sebulba runtime steps.

A `HostEnvironment` holds `num_envs` environments and follows the same convention as
`VectorEnv`, in numpy instead of JAX: `reset()` returns FIRST timesteps, every `step`
returns a `TimeStep` of [B] arrays (step_type int32, reward float32, discount float32,
observation [B, ...] in the environment's dtype, but float64 as float32: devices run
float32, and EnvPool's MuJoCo tasks and many Gymnasium ones give float64) and
`EpisodeStats`. After a LAST step
the next step returns FIRST, with reward 0 and discount 1, and ignores its action.
A terminated episode ends with discount 0, a truncated one (time limit) with discount 1.

Episode statistics are true episode totals: for Atari with reward clipping and episodic
life they sum the unclipped rewards over the whole game, not over one life.

`send(action)` then `recv()` is `step(action)` split in two, for Sebulba's asynchronous
actors (`runtime.env_mode="async"`): an environment with `supports_async` steps between
the two calls on threads of its own, so the caller can act on another batch meanwhile.
Others keep the action and step inside `recv`, which is what the synchronous actors use.

Each Sebulba actor thread builds its own instance with its own `seed`; the adapters derive
distinct per-environment seeds from it with `env_seeds`, so consecutive actor seeds do
not share environments (EnvPool and Gymnasium would otherwise seed env i with seed + i).
"""

from __future__ import annotations

import abc
import dataclasses
import sys
from typing import Any, Tuple

import jax
import numpy as np

from podracer.types import (ArraySpec, EnvSpec, EpisodeStats, PyTree, StepType, TimeStep,
                            bound_arrays)


class HostEnvironment(abc.ABC):
  """`num_envs` CPU environments behind one batched, auto-resetting interface."""

  # Runtimes check this: Sebulba steps `host` environments, Anakin compiles `jax` ones.
  kind = "host"
  # Whether `send` returns at once and the environments step on threads of their own.
  supports_async = False

  def __init__(self, num_envs: int, seed: int = 0, clip_actions: bool = False):
    if int(num_envs) < 1:
      raise ValueError(f"num_envs must be at least 1, got {num_envs}.")
    self.num_envs = int(num_envs)
    self.seed = int(seed)
    # Opt in: continuous actions clipped to the spec's bounds before the environment
    # sees them (an agent of one's own that does not bound its actions).
    self.clip_actions = bool(clip_actions)
    self._bounds = None

  @abc.abstractmethod
  def spec(self) -> EnvSpec:
    """Observation and action specs of a single environment."""

  @abc.abstractmethod
  def reset(self) -> Tuple[TimeStep, EpisodeStats]:
    """Starts a new episode in every environment: all FIRST, statistics zero."""

  @abc.abstractmethod
  def step(self, action: np.ndarray) -> Tuple[TimeStep, EpisodeStats]:
    """Steps every environment with `action` ([B] discrete, or [B, ...] continuous, in
    the spec's bounds); see the module docstring."""

  def send(self, action: np.ndarray) -> None:
    """Starts `step(action)`; `recv` returns its result. Here the step waits for `recv`."""
    self._sent = action

  def recv(self) -> Tuple[TimeStep, EpisodeStats]:
    """The result of the last `send`."""
    action, self._sent = self._sent, None
    return self.step(action)

  def close(self) -> None:
    """Releases threads, subprocesses and simulators; safe to call twice."""

  def __enter__(self) -> "HostEnvironment":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def _check_action(self, action) -> np.ndarray:
    action = np.asarray(action)
    if action.ndim == 0 or action.shape[0] != self.num_envs:
      raise ValueError(f"{type(self).__name__} steps {self.num_envs} environments and "
                       f"needs one action each, got an action of shape {action.shape}.")
    if self.clip_actions:
      action = np.clip(action, *self._action_bounds())
    return action

  def _action_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
    """(minimum, maximum) of a continuous action spec, for `clip_actions`."""
    if self._bounds is None:
      action = self.spec().action
      if not isinstance(action, ArraySpec) or action.minimum is None:
        raise ValueError(f"{type(self).__name__}: `clip_actions` clips continuous actions "
                         f"to their bounds; this environment's actions are {action!r}.")
      self._bounds = bound_arrays(action)
    return self._bounds


def env_seeds(seed: int, num_envs: int) -> np.ndarray:
  """Distinct int32 seeds for `num_envs` environments, decorrelated across `seed`s."""
  state = np.random.SeedSequence(int(seed) % 2**64).generate_state(num_envs, np.uint32)
  return (state % np.uint32(2**31 - 1)).astype(np.int64)


def host_timestep(step_type, reward, discount, observation: PyTree) -> TimeStep:
  """A numpy `TimeStep` with the dtypes every runtime expects (float64 observations as
  float32, as `float32_observation_spec` declares them)."""
  return TimeStep(step_type=np.asarray(step_type, np.int32),
                  reward=np.asarray(reward, np.float32),
                  discount=np.asarray(discount, np.float32),
                  observation=jax.tree.map(_float32, observation))


def _float32(x: Any) -> Any:
  x = np.asarray(x)
  return x.astype(np.float32) if x.dtype == np.float64 else x


_SAID_FLOAT64: set = set()


def float32_observation_spec(observation: PyTree, source: str = "a host environment"
                             ) -> PyTree:
  """An observation spec with float64 leaves declared float32, where they enter; says so
  once a process for each `source` that gives float64 observations."""
  found = []
  def one(spec):
    if isinstance(spec, ArraySpec) and np.dtype(spec.dtype) == np.float64:
      found.append(spec)
      return dataclasses.replace(spec, dtype=np.dtype(np.float32))
    return spec
  cast = jax.tree.map(one, observation)
  if found and source not in _SAID_FLOAT64:
    _SAID_FLOAT64.add(source)
    sys.stderr.write(f"note: {source} gives float64 observations; podracer casts them to "
                     "float32 where they enter (docs/environments.md).\n")
  return cast


def episode_stats(done, episode_return, episode_length) -> EpisodeStats:
  """`EpisodeStats` from numpy arrays: bool, float32 and int32 [B]."""
  return EpisodeStats(done=np.asarray(done, np.bool_),
                      episode_return=np.asarray(episode_return, np.float32),
                      episode_length=np.asarray(episode_length, np.int32))


class EpisodeTracker:
  """Running episode totals with `VectorEnv`'s semantics, for host environments.

  `update` takes, per environment, the step type, the true (unclipped) reward and whether
  the true episode ended at this step (a LAST step that is not just a lost life). Totals
  restart on the step after a true end; FIRST steps add nothing, since their action was
  ignored, so a game played over several lives has the length and return of the game.
  """

  def __init__(self, num_envs: int):
    self.num_envs = num_envs
    self.reset()

  def reset(self) -> EpisodeStats:
    self._return = np.zeros(self.num_envs, np.float64)
    self._length = np.zeros(self.num_envs, np.int64)
    self._ended = np.zeros(self.num_envs, np.bool_)
    return episode_stats(self._ended, self._return, self._length)

  def update(self, step_type, reward, done) -> EpisodeStats:
    counted = np.asarray(step_type) != StepType.FIRST
    self._return = np.where(self._ended, 0.0, self._return) + np.where(counted, reward, 0.0)
    self._length = np.where(self._ended, 0, self._length) + counted
    self._ended = np.asarray(done, np.bool_)
    return episode_stats(self._ended, self._return, self._length)
