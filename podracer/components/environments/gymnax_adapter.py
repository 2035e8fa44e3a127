"""Any gymnax environment as a podracer `Environment` (needs `pip install gymnax`).

gymnax's `step` resets by itself and reports a time limit as `done` with discount 0, as
if the episode had terminated. We call `step_env` instead, leave resets to `VectorEnv`,
and call an episode that ends at `max_steps_in_episode` truncated (discount 1). An env
that fails exactly on its last allowed step is reported truncated too.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.environments.base import Environment, restart, transition
from podracer.types import (ArraySpec, DiscreteSpec, EnvSpec, PyTree, TimeStep,
                            bounds, strip_weak_types)


class GymnaxState(NamedTuple):
  env_state: PyTree  # gymnax's own state
  key: jax.Array     # for gymnax's stochastic transitions


@registry.environments.register("gymnax")
class Gymnax(Environment):
  """`gymnax.make(env_id, **env_kwargs)`, with `env_params` overriding its default params."""

  def __init__(self, env_id: str = "CartPole-v1", env_kwargs: Optional[Mapping] = None,
               env_params: Optional[Mapping] = None):
    try:
      import gymnax  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError(f"The 'gymnax' environment ({env_id}) needs gymnax: "
                        f"pip install gymnax ({e})") from e
    self.env_id = env_id
    self._env, params = gymnax.make(env_id, **dict(env_kwargs or {}))
    self._params = params.replace(**env_params) if env_params else params
    self._obs = jax.eval_shape(lambda k: self.reset(k)[1].observation,
                               jax.random.PRNGKey(0))

  def reset(self, key: jax.Array) -> Tuple[GymnaxState, TimeStep]:
    key, reset_key = jax.random.split(key)
    obs, env_state = self._env.reset_env(reset_key, self._params)
    return GymnaxState(strip_weak_types(env_state), key), restart(strip_weak_types(obs))

  def step(self, state: GymnaxState, action: jax.Array) -> Tuple[GymnaxState, TimeStep]:
    key, step_key = jax.random.split(state.key)
    obs, env_state, reward, done, info = self._env.step_env(
        step_key, state.env_state, action, self._params)
    done = jnp.asarray(done, jnp.bool_)
    discount = jnp.where(done, 0.0, 1.0)
    if isinstance(info, Mapping) and "discount" in info:
      discount = info["discount"]
    time = getattr(env_state, "time", None)
    limit = getattr(self._params, "max_steps_in_episode", None)
    time_up = (time >= limit) if time is not None and limit is not None else False
    terminated = done & (jnp.asarray(discount) == 0) & ~jnp.asarray(time_up, jnp.bool_)
    timestep = transition(strip_weak_types(obs), reward, terminated=terminated,
                          truncated=done & ~terminated)
    return GymnaxState(strip_weak_types(env_state), key), timestep

  def spec(self) -> EnvSpec:
    space = self._env.action_space(self._params)
    if hasattr(space, "n"):
      action = DiscreteSpec(int(space.n))
    else:
      minimum, maximum = bounds(getattr(space, "low", None), getattr(space, "high", None))
      action = ArraySpec(tuple(space.shape), jnp.dtype(space.dtype), "action", minimum,
                         maximum)
    obs = jax.tree.map(lambda s: ArraySpec(tuple(s.shape), s.dtype, "observation"),
                       self._obs)
    return EnvSpec(observation=obs, action=action)

  def __repr__(self) -> str:
    return f"Gymnax({self.env_id!r})"
