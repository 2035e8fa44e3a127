"""bsuite's Catch in JAX: move a paddle along the bottom row to catch a falling ball.

An episode lasts `rows - 1` steps; only its last step is rewarded (+1 caught, -1 missed).
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import Environment, restart, transition, upscale
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec, TimeStep


class CatchState(NamedTuple):
  ball_x: jax.Array    # int32 []
  ball_y: jax.Array    # int32 []
  paddle_x: jax.Array  # int32 []; the paddle stays in the bottom row


@registry.environments.register("catch")
class Catch(Environment):
  """Actions: 0 moves the paddle left, 1 keeps it, 2 moves it right."""

  def __init__(self, rows: int = 10, columns: int = 5):
    if rows < 2 or columns < 1:
      raise ValueError(f"Catch needs rows >= 2 and columns >= 1, got rows={rows}, "
                       f"columns={columns}.")
    self.rows = int(rows)
    self.columns = int(columns)

  def reset(self, key: jax.Array) -> Tuple[CatchState, TimeStep]:
    state = CatchState(
        ball_x=jax.random.randint(key, (), 0, self.columns, dtype=jnp.int32),
        ball_y=jnp.zeros((), jnp.int32),
        paddle_x=jnp.full((), self.columns // 2, jnp.int32))
    return state, restart(self._observation(state))

  def step(self, state: CatchState, action: jax.Array) -> Tuple[CatchState, TimeStep]:
    dx = jnp.asarray(action, jnp.int32) - 1
    state = CatchState(
        ball_x=state.ball_x,
        ball_y=state.ball_y + 1,
        paddle_x=jnp.clip(state.paddle_x + dx, 0, self.columns - 1).astype(jnp.int32))
    terminated = state.ball_y == self.rows - 1
    caught = state.ball_x == state.paddle_x
    reward = jnp.where(terminated, jnp.where(caught, 1.0, -1.0), 0.0)
    return state, transition(self._observation(state), reward, terminated=terminated,
                             truncated=False)

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=ArraySpec((self.rows, self.columns), np.float32, "board"),
                   action=DiscreteSpec(3))

  def render(self, state: CatchState) -> jax.Array:
    """The board, 16 pixels a cell: the ball orange, the paddle white."""
    image = jnp.zeros((self.rows, self.columns, 3), jnp.uint8) + jnp.uint8(30)
    image = image.at[state.ball_y, state.ball_x].set(jnp.array([255, 140, 0], jnp.uint8))
    image = image.at[self.rows - 1, state.paddle_x].set(jnp.uint8(240))
    return upscale(image, 16)

  def _observation(self, state: CatchState) -> jax.Array:
    board = jnp.zeros((self.rows, self.columns), jnp.float32)
    board = board.at[state.ball_y, state.ball_x].set(1.0)
    return board.at[self.rows - 1, state.paddle_x].set(1.0)


class PixelCatchState(NamedTuple):
  catch: CatchState
  frames: jax.Array  # uint8 [stack, H, W], oldest first


@registry.environments.register("pixel_catch")
class PixelCatch(Environment):
  """Catch seen as Atari is: uint8 frames stacked channels-first, [stack, H, W].

  Each board cell becomes a `scale` x `scale` block of 0 or 255, and the last `stack`
  frames are stacked like EnvPool's Atari observations (the first frame of an episode
  fills the whole stack). It lets a pixel agent (conv torso, uint8 inputs, Atari
  optimizer settings) be tested for learning on a CPU in seconds, not hours.
  """

  def __init__(self, rows: int = 10, columns: int = 5, scale: int = 2, stack: int = 4):
    if scale < 1 or stack < 1:
      raise ValueError(f"PixelCatch needs scale >= 1 and stack >= 1, got scale={scale}, "
                       f"stack={stack}.")
    self.catch = Catch(rows, columns)
    self.scale = int(scale)
    self.stack = int(stack)

  def reset(self, key: jax.Array) -> Tuple[PixelCatchState, TimeStep]:
    state, timestep = self.catch.reset(key)
    frames = jnp.broadcast_to(self._render(timestep.observation),
                              (self.stack, *self._frame_shape))
    return PixelCatchState(state, frames), timestep._replace(observation=frames)

  def step(self, state: PixelCatchState, action: jax.Array) -> Tuple[PixelCatchState, TimeStep]:
    catch, timestep = self.catch.step(state.catch, action)
    frames = jnp.concatenate([state.frames[1:], self._render(timestep.observation)[None]])
    return PixelCatchState(catch, frames), timestep._replace(observation=frames)

  def render(self, state: PixelCatchState) -> jax.Array:
    return self.catch.render(state.catch)

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=ArraySpec((self.stack, *self._frame_shape), np.uint8, "frames"),
                   action=DiscreteSpec(3))

  @property
  def _frame_shape(self) -> Tuple[int, int]:
    return self.catch.rows * self.scale, self.catch.columns * self.scale

  def _render(self, board: jax.Array) -> jax.Array:
    pixels = jnp.repeat(jnp.repeat(board, self.scale, axis=0), self.scale, axis=1)
    return (pixels * 255).astype(jnp.uint8)
