"""Any Brax environment as a podracer `Environment` (Brax is in the default install lane:
`pip install -e ".[jax-envs]"`; Brax 0.14 needs current JAX, so the reverb lane, which
pins jax 0.4.34, has none).

Brax's own environments know nothing of time: its `EpisodeWrapper` counts steps and
ends an episode at `episode_length` (1,000 by default), and its `AutoResetWrapper`
restarts it. Here the adapter counts the steps and `VectorEnv` does the resets, as for
every JAX environment: an episode whose `done` fires ends with LAST and discount 0 (a
termination, also on the last allowed step, as Brax's wrapper calls it), one cut by the
limit with LAST and discount 1 (Brax's `truncation`). Actions are bounded by [-1, 1], what
Brax's own trainers (PPO, SAC) feed every task: some tasks rescale that range onto their
actuators' `ctrl_range` in `step` (`inverted_pendulum`: [-3, 3]), others take it as it is.
(Before 0.18 the spec declared `ctrl_range`, as Brax's Gym wrapper does: on
`inverted_pendulum` that let an agent push 3x harder than any Brax trainer can.)
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import (Environment, observation_spec, restart,
                                                   transition)
from podracer.errors import require
from podracer.types import (ArraySpec, EnvSpec, PyTree, TimeStep, bounds,
                            strip_weak_types)


class BraxState(NamedTuple):
  brax_state: PyTree  # Brax's `State` (pipeline state, observation, reward, done...)
  steps: jax.Array    # int32: steps taken in this episode


class StepLimited(Environment):
  """A JAX environment of Brax's protocol (`reset(key)` and `step(state, action)` giving
  a state with `obs`, `reward` and `done`; Brax's and MuJoCo Playground's), its steps
  counted and its episodes cut at `episode_length`, its actions bounded by [-1, 1].
  Subclasses set `_env`, `episode_length`, `_action` and `_obs` (`_bounded_spec`)."""

  _env: Any
  episode_length: int

  def _bounded_spec(self, action_size: int) -> None:
    ones = np.ones((action_size,), np.float32)
    self._action = ArraySpec((action_size,), np.dtype(np.float32), "action",
                             *bounds(-ones, ones))
    self._obs = observation_spec(self)

  def reset(self, key: jax.Array) -> Tuple[BraxState, TimeStep]:
    state = strip_weak_types(self._env.reset(key))
    return BraxState(state, jnp.int32(0)), restart(state.obs)

  def step(self, state: BraxState, action: jax.Array) -> Tuple[BraxState, TimeStep]:
    stepped = strip_weak_types(self._env.step(state.brax_state, action))
    steps = state.steps + 1
    terminated = stepped.done > 0
    timestep = transition(stepped.obs, stepped.reward, terminated=terminated,
                          truncated=(steps >= self.episode_length) & ~terminated)
    return BraxState(stepped, steps), timestep

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=self._obs, action=self._action)


@registry.environments.register("brax")
class Brax(StepLimited):
  """`brax.envs.get_environment(env_name, backend=backend, **env_kwargs)`, its episodes
  cut at `episode_length` steps."""

  def __init__(self, env_name: str = "inverted_pendulum", backend: str = "generalized",
               episode_length: int = 1000, env_kwargs: Optional[Mapping[str, Any]] = None):
    envs = require(
        "brax.envs", f"The 'brax' environment ({env_name})",
        "the default install lane has it (pip install -e \".[jax-envs]\", or pip install "
        "brax); the reverb lane has none: Brax 0.14 needs current JAX and that lane pins "
        "0.4.34")
    if episode_length < 1:
      raise ValueError(f"episode_length must be at least 1, got {episode_length}")
    self.env_name, self.episode_length = env_name, int(episode_length)
    known = sorted(getattr(envs, "_envs", {}))
    if known and env_name not in known:
      raise ValueError(f"Brax has no environment {env_name!r}; it has {', '.join(known)}")
    self._env = envs.get_environment(env_name, backend=backend, **dict(env_kwargs or {}))
    self._bounded_spec(self._env.action_size)

  def __repr__(self) -> str:
    return f"Brax({self.env_name!r})"
