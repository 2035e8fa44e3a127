"""CartPole-v1 in JAX, step for step the dynamics of Gymnasium's `CartPoleEnv`.

Gymnasium integrates in float64 and we in float32, so trajectories agree to float32
precision, not bit for bit; the rules (reward 1 on every step including the one that
fails, truncation after `max_episode_steps`) are the same.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import Environment, restart, transition
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec, TimeStep


class CartPoleState(NamedTuple):
  x: jax.Array          # float32 []
  x_dot: jax.Array      # float32 []
  theta: jax.Array      # float32 []
  theta_dot: jax.Array  # float32 []
  t: jax.Array          # int32 []: steps taken in this episode


@registry.environments.register("cartpole")
class CartPole(Environment):
  """Gymnasium's CartPole-v1: push the cart left (0) or right (1) to keep the pole up."""

  gravity = 9.8
  masscart = 1.0
  masspole = 0.1
  total_mass = masspole + masscart
  length = 0.5  # Half the pole's length.
  polemass_length = masspole * length
  force_mag = 10.0
  tau = 0.02
  theta_threshold_radians = 12 * 2 * math.pi / 360
  x_threshold = 2.4

  def __init__(self, max_episode_steps: int = 500):
    if max_episode_steps < 1:
      raise ValueError(f"max_episode_steps must be at least 1, got {max_episode_steps}.")
    self.max_episode_steps = int(max_episode_steps)

  def reset(self, key: jax.Array) -> Tuple[CartPoleState, TimeStep]:
    x, x_dot, theta, theta_dot = jax.random.uniform(
        key, (4,), jnp.float32, minval=-0.05, maxval=0.05)
    state = CartPoleState(x, x_dot, theta, theta_dot, jnp.zeros((), jnp.int32))
    return state, restart(self._observation(state))

  def step(self, state: CartPoleState, action: jax.Array) -> Tuple[CartPoleState, TimeStep]:
    force = jnp.where(action == 1, self.force_mag, -self.force_mag).astype(jnp.float32)
    costheta = jnp.cos(state.theta)
    sintheta = jnp.sin(state.theta)
    temp = (force + self.polemass_length * state.theta_dot ** 2 * sintheta) / self.total_mass
    thetaacc = (self.gravity * sintheta - costheta * temp) / (
        self.length * (4.0 / 3.0 - self.masspole * costheta ** 2 / self.total_mass))
    xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
    # Explicit Euler: positions move with the old velocities.
    state = CartPoleState(
        x=state.x + self.tau * state.x_dot,
        x_dot=state.x_dot + self.tau * xacc,
        theta=state.theta + self.tau * state.theta_dot,
        theta_dot=state.theta_dot + self.tau * thetaacc,
        t=state.t + 1)
    terminated = ((state.x < -self.x_threshold) | (state.x > self.x_threshold)
                  | (state.theta < -self.theta_threshold_radians)
                  | (state.theta > self.theta_threshold_radians))
    truncated = state.t >= self.max_episode_steps
    return state, transition(self._observation(state), 1.0, terminated=terminated,
                             truncated=truncated)

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=ArraySpec((4,), np.float32, "observation"),
                   action=DiscreteSpec(2))

  def render(self, state: CartPoleState) -> jax.Array:
    """A 120 x 240 picture as Gymnasium draws it: the track, the cart, the pole."""
    height, width = 120, 240
    scale = width / (2 * self.x_threshold)
    ys, xs = jnp.mgrid[0:height, 0:width].astype(jnp.float32)
    cart_x, cart_y = width / 2 + state.x * scale, 90.0
    cart = (jnp.abs(xs - cart_x) <= 12) & (jnp.abs(ys - cart_y) <= 6)
    tip_x = cart_x + jnp.sin(state.theta) * 2 * self.length * scale
    tip_y = cart_y - jnp.cos(state.theta) * 2 * self.length * scale
    # Distance from each pixel to the pole's segment.
    dx, dy = tip_x - cart_x, tip_y - cart_y
    u = jnp.clip(((xs - cart_x) * dx + (ys - cart_y) * dy) / (dx * dx + dy * dy), 0.0, 1.0)
    pole = jnp.hypot(xs - cart_x - u * dx, ys - cart_y - u * dy) <= 2.5
    image = jnp.full((height, width, 3), 255, jnp.uint8)
    image = jnp.where((jnp.abs(ys - cart_y - 6) < 1)[..., None], jnp.uint8(0), image)
    image = jnp.where(cart[..., None], jnp.uint8(0), image)
    return jnp.where(pole[..., None], jnp.array([202, 152, 101], jnp.uint8), image)

  def _observation(self, state: CartPoleState) -> jax.Array:
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(jnp.float32)
