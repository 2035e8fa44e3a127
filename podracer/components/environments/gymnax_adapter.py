"""Any gymnax environment as a podracer `Environment` (gymnax is in the default install
lane: `pip install -e ".[jax-envs]"`; gymnax 1.x needs jax >= 0.6, so the reverb lane,
which pins jax 0.4.34, has none).

gymnax's `step` resets by itself; we call `step_env` instead and leave resets to
`VectorEnv`. gymnax 1.x's `step_env` reports termination only, and its `step` adds the
time limit (`is_truncated`: `max_steps_in_episode` steps): a terminated episode ends
with LAST and discount 0, one cut by the time limit with LAST and discount 1 (a
termination on the last allowed step is a termination). Older gymnax (no
`is_truncated`) reported the time limit as `done` with discount 0, as if the episode
had terminated; there an episode that ends at the limit is called truncated. The step's
key is the one gymnax's own `step(key, ...)` gives `step_env`, so the adapter's
transitions are gymnax's for the same keys.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import (Environment, observation_spec, restart,
                                                   transition, upscale)
from podracer.errors import require
from podracer.types import (ArraySpec, DiscreteSpec, EnvSpec, PyTree, TimeStep,
                            bounds, strip_weak_types)


class GymnaxState(NamedTuple):
  env_state: PyTree  # gymnax's own state
  key: jax.Array     # for gymnax's stochastic transitions


def minatar_palette(channels: int) -> np.ndarray:
  """gymnax's MinAtar colours, uint8 [channels + 1, 3]: black, then seaborn's cubehelix."""
  import seaborn  # pylint: disable=import-outside-toplevel  # gymnax's own dependency
  colours = [(0.0, 0.0, 0.0)] + list(seaborn.color_palette("cubehelix", channels))
  return np.round(np.asarray(colours) * 255).astype(np.uint8)


@registry.environments.register("gymnax")
class Gymnax(Environment):
  """`gymnax.make(env_id, **env_kwargs)`, with `env_params` overriding its default params."""

  def __init__(self, env_id: str = "CartPole-v1", env_kwargs: Optional[Mapping] = None,
               env_params: Optional[Mapping] = None):
    gymnax = require(
        "gymnax", f"The 'gymnax' environment ({env_id})",
        "the default install lane has it (pip install -e \".[jax-envs]\", or pip install "
        "gymnax); the reverb lane has none: gymnax 1.x needs jax >= 0.6 and that lane "
        "pins 0.4.34")
    self.env_id = env_id
    self._env, params = gymnax.make(env_id, **dict(env_kwargs or {}))
    self._params = params.replace(**env_params) if env_params else params
    self._obs = observation_spec(self)

  def reset(self, key: jax.Array) -> Tuple[GymnaxState, TimeStep]:
    key, reset_key = jax.random.split(key)
    obs, env_state = self._env.reset_env(reset_key, self._params)
    return GymnaxState(strip_weak_types(env_state), key), restart(strip_weak_types(obs))

  def step(self, state: GymnaxState, action: jax.Array) -> Tuple[GymnaxState, TimeStep]:
    key, gymnax_key = jax.random.split(state.key)
    step_key, _ = jax.random.split(gymnax_key)  # As gymnax's `step(gymnax_key, ...)`.
    obs, env_state, reward, done, info = self._env.step_env(
        step_key, state.env_state, action, self._params)
    done = jnp.asarray(done, jnp.bool_)
    if hasattr(self._env, "is_truncated"):  # gymnax 1.x: `done` is termination alone.
      terminated = done
      time_up = jnp.asarray(self._env.is_truncated(env_state, self._params), jnp.bool_)
    else:                                   # older: `done` includes the time limit
      discount = jnp.where(done, 0.0, 1.0)
      if isinstance(info, Mapping) and "discount" in info:
        discount = info["discount"]
      time_up = jnp.asarray(self._time_up(env_state), jnp.bool_)
      terminated = done & (jnp.asarray(discount) == 0) & ~time_up
    timestep = transition(strip_weak_types(obs), reward, terminated=terminated,
                          truncated=(done | time_up) & ~terminated)
    return GymnaxState(strip_weak_types(env_state), key), timestep

  def _time_up(self, env_state: PyTree) -> Any:
    time = getattr(env_state, "time", None)
    limit = getattr(self._params, "max_steps_in_episode", None)
    return (time >= limit) if time is not None and limit is not None else False

  def render(self, state: GymnaxState) -> jax.Array:
    """A MinAtar game's grid as gymnax's own visualizer colours it (a cubehelix colour
    for each channel, the highest present, black where none), 20 pixels a cell."""
    if not self.env_id.endswith("-MinAtar"):
      raise NotImplementedError(f"podracer draws gymnax's MinAtar games, not {self.env_id}")
    grid = self._env.get_obs(state.env_state, self._params)
    channels = grid.shape[-1]
    palette = jnp.asarray(minatar_palette(channels))
    which = jnp.max(grid * jnp.arange(1, channels + 1), axis=-1).astype(jnp.int32)
    return upscale(palette[which], 20)

  def spec(self) -> EnvSpec:
    space = self._env.action_space(self._params)
    if hasattr(space, "n"):
      action = DiscreteSpec(int(space.n))
    else:
      minimum, maximum = bounds(getattr(space, "low", None), getattr(space, "high", None))
      action = ArraySpec(tuple(space.shape), jnp.dtype(space.dtype), "action", minimum,
                         maximum)
    return EnvSpec(observation=self._obs, action=action)

  def __repr__(self) -> str:
    return f"Gymnax({self.env_id!r})"
