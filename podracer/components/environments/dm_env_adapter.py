"""Any `dm_env.Environment` as a `HostEnvironment`: the slow fallback, one env at a time.

`factory` names a callable ("module:callable") that returns one dm_env environment; it
gets the section's other keys (`env_kwargs`), and `seed` too when it has a parameter of
that name (docs/environments.md). dm_env already
has our convention (the step after LAST starts a new episode and ignores its action);
we call `reset()` there ourselves, so environments that leave it out work as well.
`CatchDmEnv` below is a small example, e.g. `factory=
"podracer.components.environments.dm_env_adapter:CatchDmEnv"`.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, List, Tuple, Union

import dm_env
from dm_env import specs
import jax
import numpy as np

from podracer import registry
from podracer.components.environments.host import (EpisodeTracker, HostEnvironment,
                                                   env_seeds, float32_observation_spec,
                                                   host_timestep)
from podracer.types import (ArraySpec, DiscreteSpec, EnvSpec, EpisodeStats, StepType,
                            TimeStep, bounds)


def resolve_factory(factory: Union[str, Callable[..., Any]]) -> Callable[..., Any]:
  """"package.module:attr" (or a callable itself) -> the callable."""
  if callable(factory):
    return factory
  module_name, sep, attr = str(factory).partition(":")
  if not sep or not module_name or not attr:
    raise ValueError(f"dm_env factory {factory!r} must read 'package.module:callable'.")
  try:
    target = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f"Cannot import module '{module_name}' of dm_env factory "
                     f"{factory!r}: {e}") from e
  for part in attr.split("."):
    if not hasattr(target, part):
      raise ValueError(f"Module '{module_name}' has no '{attr}' (dm_env factory "
                       f"{factory!r}).")
    target = getattr(target, part)
  if not callable(target):
    raise ValueError(f"dm_env factory {factory!r} is not callable.")
  return target


def _takes_seed(fn: Callable[..., Any]) -> bool:
  try:
    return "seed" in inspect.signature(fn).parameters
  except (TypeError, ValueError):
    return False


@registry.environments.register("dm_env")
class DmEnv(HostEnvironment):
  """`num_envs` dm_env environments from `factory(**env_kwargs)`, stepped in turn."""

  def __init__(self, factory: Union[str, Callable[..., Any]], num_envs: int, seed: int = 0,
               clip_actions: bool = False, **env_kwargs: Any):
    super().__init__(num_envs, seed, clip_actions)
    make = resolve_factory(factory)
    self.factory = factory
    seeds = env_seeds(self.seed, self.num_envs)
    if _takes_seed(make):
      self._envs = [make(seed=int(s), **env_kwargs) for s in seeds]
    else:
      self._envs = [make(**env_kwargs) for _ in seeds]
    for env in self._envs:
      if not isinstance(env, dm_env.Environment):
        raise TypeError(f"dm_env factory {factory!r} returned a {type(env).__name__}, "
                        "not a dm_env.Environment.")
    self._tracker = EpisodeTracker(self.num_envs)
    self._last = np.zeros(self.num_envs, np.bool_)
    self._started = False

  def spec(self) -> EnvSpec:
    env = self._envs[0]
    observation = jax.tree.map(
        lambda s: ArraySpec(tuple(s.shape), np.dtype(s.dtype), s.name or "observation"),
        env.observation_spec())
    action = env.action_spec()
    if isinstance(action, specs.DiscreteArray):
      action = DiscreteSpec(int(action.num_values))
    elif isinstance(action, specs.Array):
      minimum, maximum = bounds(getattr(action, "minimum", None),
                                getattr(action, "maximum", None))
      action = ArraySpec(tuple(action.shape), np.dtype(action.dtype), "action", minimum,
                         maximum)
    else:
      raise NotImplementedError(f"dm_env action spec {action!r} is not a single array; "
                                "podracer agents take one discrete or continuous action.")
    return EnvSpec(observation=float32_observation_spec(observation, repr(self)),
                   action=action)

  def reset(self) -> Tuple[TimeStep, EpisodeStats]:
    timestep = self._batch([env.reset() for env in self._envs])
    self._last = np.zeros(self.num_envs, np.bool_)
    self._started = True
    return timestep, self._tracker.reset()

  def step(self, action: np.ndarray) -> Tuple[TimeStep, EpisodeStats]:
    if not self._started:
      raise RuntimeError("Call reset() before the first step() of a dm_env environment.")
    action = self._check_action(action)
    steps = [env.reset() if last else env.step(a)
             for env, a, last in zip(self._envs, action, self._last)]
    timestep = self._batch(steps)
    self._last = timestep.step_type == StepType.LAST
    return timestep, self._tracker.update(timestep.step_type, timestep.reward, self._last)

  def _batch(self, steps: List[dm_env.TimeStep]) -> TimeStep:
    # dm_env leaves reward and discount None at FIRST steps.
    return host_timestep(
        step_type=[int(s.step_type) for s in steps],
        reward=[0.0 if s.reward is None else s.reward for s in steps],
        discount=[1.0 if s.discount is None else s.discount for s in steps],
        observation=jax.tree.map(lambda *xs: np.stack(xs), *[s.observation for s in steps]))

  def close(self) -> None:
    envs, self._envs = getattr(self, "_envs", []), []
    for env in envs:
      env.close()

  def __repr__(self) -> str:
    return f"DmEnv({self.factory!r}, num_envs={self.num_envs})"


class CatchDmEnv(dm_env.Environment):
  """bsuite's Catch in numpy, as a dm_env environment (see `catch.Catch` for the rules).

  Actions: 0 moves the paddle left, 1 keeps it, 2 moves it right. An episode lasts
  `rows - 1` steps and ends with reward +1 (caught) or -1 (missed), discount 0.
  """

  def __init__(self, rows: int = 10, columns: int = 5, seed: int = 0):
    if rows < 2 or columns < 1:
      raise ValueError(f"CatchDmEnv needs rows >= 2 and columns >= 1, got rows={rows}, "
                       f"columns={columns}.")
    self.rows, self.columns = int(rows), int(columns)
    self._rng = np.random.default_rng(seed)
    self._ball_x = self._ball_y = self._paddle_x = 0
    self._needs_reset = True

  def reset(self) -> dm_env.TimeStep:
    self._ball_x = int(self._rng.integers(self.columns))
    self._ball_y = 0
    self._paddle_x = self.columns // 2
    self._needs_reset = False
    return dm_env.restart(self._observation())

  def step(self, action) -> dm_env.TimeStep:
    if self._needs_reset:
      return self.reset()
    self._ball_y += 1
    self._paddle_x = int(np.clip(self._paddle_x + int(action) - 1, 0, self.columns - 1))
    if self._ball_y == self.rows - 1:
      self._needs_reset = True
      reward = 1.0 if self._ball_x == self._paddle_x else -1.0
      return dm_env.termination(reward, self._observation())
    return dm_env.transition(0.0, self._observation())

  def observation_spec(self) -> specs.Array:
    return specs.Array((self.rows, self.columns), np.float32, "board")

  def action_spec(self) -> specs.DiscreteArray:
    return specs.DiscreteArray(3, name="action")

  def _observation(self) -> np.ndarray:
    board = np.zeros((self.rows, self.columns), np.float32)
    board[self._ball_y, self._ball_x] = 1.0
    board[self.rows - 1, self._paddle_x] = 1.0
    return board
