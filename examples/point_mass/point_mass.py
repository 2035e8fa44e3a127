"""A continuous environment of one's own, in JAX: a point mass pushed to a goal.

The point is at p in [-1, 1]^2 with velocity v; the action is a force f in [-1, 1]^2
(ArraySpec's `minimum` and `maximum`), and each step

  v <- (1 - damping) v + dt f,   p <- clip(p + dt v, -1, 1)

The observation [6] float32 is (p, v, goal - p); the reward is minus the distance to the
goal, plus 1 within `radius` of it. Episodes are cut after `max_episode_steps` by
truncation (discount 1: agents bootstrap through the cut). Register it, name it in a config
(`c.env = presets.section("point_mass")`), and import this module with the config's
`imports` or `--import` (examples/point_mass/configs.py does).
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments import Environment, restart, transition
from podracer.types import ArraySpec, EnvSpec, TimeStep


class PointMassState(NamedTuple):
  position: jax.Array  # float32 [2]
  velocity: jax.Array  # float32 [2]
  goal: jax.Array      # float32 [2]
  t: jax.Array         # int32 []: steps taken in this episode


@registry.environments.register("point_mass")
class PointMass(Environment):
  """A 2-D point mass reaching a goal: observation [6], force [2] in [-1, 1]."""

  def __init__(self, max_episode_steps: int = 200, dt: float = 0.1, damping: float = 0.1,
               radius: float = 0.05):
    if max_episode_steps < 1:
      raise ValueError(f"max_episode_steps must be at least 1, got {max_episode_steps}.")
    self.max_episode_steps, self.dt = int(max_episode_steps), float(dt)
    self.damping, self.radius = float(damping), float(radius)

  def reset(self, key: jax.Array) -> Tuple[PointMassState, TimeStep]:
    start, goal = jax.random.uniform(key, (2, 2), jnp.float32, minval=-0.8, maxval=0.8)
    state = PointMassState(start, jnp.zeros(2, jnp.float32), goal, jnp.zeros((), jnp.int32))
    return state, restart(observe(state))

  def step(self, state: PointMassState, action: jax.Array) -> Tuple[PointMassState, TimeStep]:
    force = jnp.clip(jnp.reshape(action, (2,)), -1.0, 1.0)  # An agent may send any float.
    velocity = (1.0 - self.damping) * state.velocity + self.dt * force
    position = jnp.clip(state.position + self.dt * velocity, -1.0, 1.0)
    state = PointMassState(position, velocity, state.goal, state.t + 1)
    distance = jnp.linalg.norm(state.goal - position)
    reward = -distance + jnp.where(distance < self.radius, 1.0, 0.0)
    return state, transition(observe(state), reward, terminated=False,
                             truncated=state.t >= self.max_episode_steps)

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=ArraySpec((6,), np.float32, "observation"),
                   action=ArraySpec((2,), np.float32, "action", minimum=-1.0, maximum=1.0))


def observe(state: PointMassState) -> jax.Array:
  """(position, velocity, goal - position): float32 [6]."""
  return jnp.concatenate([state.position, state.velocity,
                          state.goal - state.position]).astype(jnp.float32)


def pd_action(observation: jax.Array, kp: float = 10.0, kd: float = 3.0) -> jax.Array:
  """A scripted controller (the reference the learning test's bar comes from): a force
  toward the goal, damped by the velocity, clipped to the bounds."""
  velocity, to_goal = observation[..., 2:4], observation[..., 4:6]
  return jnp.clip(kp * to_goal - kd * velocity, -1.0, 1.0)
