"""Navix's MiniGrid environments in JAX (`pip install -e ".[navix]"`), and XLand-MiniGrid's
(`pip install -e ".[xminigrid]"`): grid worlds seen partially, small enough to solve on a
CPU. Both step without their auto-reset (`VectorEnv` resets); a goal reached terminates
(discount 0), the step limit truncates (discount 1).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.environments.base import (Environment, as_frame, observation_spec,
                                                   restart, transition, upscale)
from podracer.components.environments.suites import api_of, dm_env_step, require
from podracer.types import DiscreteSpec, EnvSpec, PyTree, TimeStep, strip_weak_types


class NavixState(NamedTuple):
  timestep: PyTree  # navix's Timestep: its state, time and last observation


@registry.environments.register("navix")
class Navix(Environment):
  """`navix.make(env_id, **env_kwargs)`, e.g. "Navix-Empty-5x5-v0"."""

  def __init__(self, env_id: str = "Navix-Empty-5x5-v0", env_kwargs: Optional[dict] = None):
    navix = require("navix", f"navix {env_id}", "navix")
    self.env_id = env_id
    with api_of("navix", f"navix {env_id}"):
      self._env = navix.make(env_id, **dict(env_kwargs or {}))
      self._num_actions = int(self._env.action_space.maximum) + 1
      self._obs = observation_spec(self)

  def reset(self, key: jax.Array) -> Tuple[NavixState, TimeStep]:
    timestep = strip_weak_types(self._env.reset(key))
    return NavixState(timestep), restart(timestep.observation)

  def step(self, state: NavixState, action: jax.Array) -> Tuple[NavixState, TimeStep]:
    step = self._env._step  # pylint: disable=protected-access  # Without auto-reset.
    timestep = strip_weak_types(step(state.timestep, action.astype(jnp.int32)))
    # Navix's step types: 0 transition, 1 truncation, 2 termination.
    out = transition(strip_weak_types(timestep.observation), timestep.reward,
                     terminated=timestep.step_type == 2, truncated=timestep.step_type == 1)
    return NavixState(timestep), out

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=self._obs, action=DiscreteSpec(self._num_actions))

  def render(self, state: NavixState) -> jax.Array:
    """The whole grid as Navix draws it (`navix.observations.rgb`)."""
    from navix import observations  # pylint: disable=import-outside-toplevel
    return upscale(as_frame(observations.rgb(state.timestep.state)), 4)

  def __repr__(self) -> str:
    return f"Navix({self.env_id!r})"


class XLandState(NamedTuple):
  timestep: PyTree


@registry.environments.register("xminigrid")
class XLandMiniGrid(Environment):
  """`xminigrid.make(env_id)`, e.g. "MiniGrid-Empty-5x5" or an XLand-MiniGrid task;
  `env_params` override its parameters (e.g. max_steps)."""

  def __init__(self, env_id: str = "MiniGrid-Empty-5x5", env_params: Optional[dict] = None):
    xminigrid = require("xminigrid", f"xminigrid {env_id}", "xminigrid")
    self.env_id = env_id
    with api_of("xminigrid", f"xminigrid {env_id}"):
      self._env, params = xminigrid.make(env_id)
      self._params = params.replace(**env_params) if env_params else params
      self._num_actions = int(self._env.num_actions(self._params))
      self._obs = observation_spec(self)

  def reset(self, key: jax.Array) -> Tuple[XLandState, TimeStep]:
    timestep = strip_weak_types(self._env.reset(self._params, key))
    return XLandState(timestep), restart(timestep.observation)

  def step(self, state: XLandState, action: jax.Array) -> Tuple[XLandState, TimeStep]:
    timestep = strip_weak_types(
        self._env.step(self._params, state.timestep, action.astype(jnp.int32)))
    return XLandState(timestep), dm_env_step(timestep, timestep.observation)

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=self._obs, action=DiscreteSpec(self._num_actions))

  def __repr__(self) -> str:
    return f"XLandMiniGrid({self.env_id!r})"
