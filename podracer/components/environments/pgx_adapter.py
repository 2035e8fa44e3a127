"""Pgx's two-player board games as one player's environment (`pip install -e ".[pgx]"`).

The agent plays one seat, drawn for each episode, against a uniformly random legal
opponent (`opponent="random"`); an episode is one game and its reward the agent's result
(+1 win, -1 loss, 0 draw for tic-tac-toe and connect four). The observation is Pgx's, from
the agent's side, with the legal actions as its `action_mask`. Self-play, where both seats
are the learning agent, is a runtime's matter, not this adapter's.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.agent import random_legal
from podracer.components.environments.base import (Environment, observation_spec, restart,
                                                   transition)
from podracer.components.environments.suites import api_of, require
from podracer.types import (ACTION_MASK, DiscreteSpec, EnvSpec, PyTree, TimeStep,
                            strip_weak_types)


class PgxState(NamedTuple):
  game: PyTree        # pgx.State
  seat: jax.Array     # the player id the agent plays
  key: jax.Array


@registry.environments.register("pgx")
class Pgx(Environment):
  """`pgx.make(env_id)` against a random opponent, the agent's seat drawn per game."""

  def __init__(self, env_id: str = "tic_tac_toe", opponent: str = "random"):
    pgx = require("pgx", f"pgx {env_id}", "pgx")
    if opponent != "random":
      raise ValueError(f"Pgx's opponent {opponent!r} is not offered; options: random.")
    self.env_id = env_id
    with api_of("pgx", f"pgx {env_id}"):
      self._env = pgx.make(env_id)
      if self._env.num_players != 2:
        raise ValueError(f"Pgx game {env_id!r} has {self._env.num_players} players; "
                         "this adapter plays two-player games.")
      self._obs = observation_spec(self)

  def _observe(self, game) -> dict:
    return {"observation": game.observation, ACTION_MASK: game.legal_action_mask}

  def _opponent(self, game, seat: jax.Array, key: jax.Array):
    """The opponent's move where it is to play (and the game goes on)."""
    move = (game.current_player != seat) & ~(game.terminated | game.truncated)
    opponent_key, step_key = jax.random.split(key)
    moved = self._env.step(game, random_legal(opponent_key, game.legal_action_mask), step_key)
    return jax.tree.map(lambda a, b: jnp.where(move, a, b), moved, game)

  def reset(self, key: jax.Array) -> Tuple[PgxState, TimeStep]:
    key, init_key, seat_key, move_key = jax.random.split(key, 4)
    game = self._env.init(init_key)
    seat = jax.random.bernoulli(seat_key).astype(game.current_player.dtype)
    game = self._opponent(game, seat, move_key)
    return PgxState(game, seat, key), restart(strip_weak_types(self._observe(game)))

  def step(self, state: PgxState, action: jax.Array) -> Tuple[PgxState, TimeStep]:
    key, step_key, move_key = jax.random.split(state.key, 3)
    moved = self._env.step(state.game, action.astype(jnp.int32), step_key)
    game = self._opponent(moved, state.seat, move_key)
    # Pgx gives a step's rewards at the step that ends the game: the agent's or the reply's.
    reward = jnp.where(moved.terminated, moved.rewards[state.seat], game.rewards[state.seat])
    timestep = transition(strip_weak_types(self._observe(game)), reward,
                          terminated=game.terminated, truncated=game.truncated)
    return PgxState(game, state.seat, key), timestep

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=self._obs, action=DiscreteSpec(int(self._env.num_actions)))

  def __repr__(self) -> str:
    return f"Pgx({self.env_id!r})"
