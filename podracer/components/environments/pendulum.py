"""Pendulum-v1 in JAX, step for step the dynamics of Gymnasium's `PendulumEnv`.

Swing a pendulum up and hold it upright with a bounded torque. Gymnasium computes in
float64 and we in float32, so trajectories agree to float32 precision. As in Gymnasium
(and EnvPool's `Pendulum-v1`) the episode never terminates: it is truncated after
`max_episode_steps`, so its last step keeps discount 1 and agents bootstrap through it.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import Environment, restart, transition
from podracer.types import ArraySpec, EnvSpec, TimeStep


class PendulumState(NamedTuple):
  theta: jax.Array      # float32 []: angle, 0 is upright
  theta_dot: jax.Array  # float32 []
  t: jax.Array          # int32 []: steps taken in this episode


def angle_normalize(x: jax.Array) -> jax.Array:
  """The angle in [-pi, pi)."""
  return ((x + math.pi) % (2 * math.pi)) - math.pi


@registry.environments.register("pendulum")
class Pendulum(Environment):
  """Gymnasium's Pendulum-v1: action [1] torque in [-2, 2]; observation [cos, sin, thetadot];
  reward -(theta^2 + 0.1 thetadot^2 + 0.001 torque^2), theta normalised to [-pi, pi)."""

  max_speed = 8.0
  max_torque = 2.0
  dt = 0.05
  m = 1.0
  l = 1.0

  def __init__(self, max_episode_steps: int = 200, g: float = 10.0):
    if max_episode_steps < 1:
      raise ValueError(f"max_episode_steps must be at least 1, got {max_episode_steps}.")
    self.max_episode_steps = int(max_episode_steps)
    self.g = float(g)

  def reset(self, key: jax.Array) -> Tuple[PendulumState, TimeStep]:
    high = jnp.array([math.pi, 1.0], jnp.float32)
    theta, theta_dot = jax.random.uniform(key, (2,), jnp.float32, minval=-high, maxval=high)
    state = PendulumState(theta, theta_dot, jnp.zeros((), jnp.int32))
    return state, restart(self._observation(state))

  def step(self, state: PendulumState, action: jax.Array) -> Tuple[PendulumState, TimeStep]:
    u = jnp.clip(jnp.reshape(action, ()), -self.max_torque, self.max_torque)
    th, thdot = state.theta, state.theta_dot
    costs = angle_normalize(th) ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
    new_thdot = thdot + (3 * self.g / (2 * self.l) * jnp.sin(th)
                         + 3.0 / (self.m * self.l ** 2) * u) * self.dt
    new_thdot = jnp.clip(new_thdot, -self.max_speed, self.max_speed)
    # Semi-implicit Euler: the angle moves with the new velocity.
    state = PendulumState(theta=th + new_thdot * self.dt, theta_dot=new_thdot, t=state.t + 1)
    return state, transition(self._observation(state), -costs, terminated=False,
                             truncated=state.t >= self.max_episode_steps)

  def spec(self) -> EnvSpec:
    return EnvSpec(
        observation=ArraySpec((3,), np.float32, "observation", minimum=(-1.0, -1.0, -8.0),
                              maximum=(1.0, 1.0, 8.0)),
        action=ArraySpec((1,), np.float32, "action", minimum=-self.max_torque,
                         maximum=self.max_torque))

  def _observation(self, state: PendulumState) -> jax.Array:
    return jnp.stack([jnp.cos(state.theta), jnp.sin(state.theta),
                      state.theta_dot]).astype(jnp.float32)
