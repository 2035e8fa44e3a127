"""bsuite's Catch in JAX: move a paddle along the bottom row to catch a falling ball.

An episode lasts `rows - 1` steps; only its last step is rewarded (+1 caught, -1 missed).
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import Environment, restart, transition
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

  def _observation(self, state: CatchState) -> jax.Array:
    board = jnp.zeros((self.rows, self.columns), jnp.float32)
    board = board.at[state.ball_y, state.ball_x].set(1.0)
    return board.at[self.rows - 1, state.paddle_x].set(1.0)
