"""Pgx's two-player board games (`pip install -e ".[pgx]"`), against an opponent or in
self-play.

  opponent="random"  the agent plays one seat, drawn for each game, against a uniformly
                     random legal opponent; an episode is one game and its reward the
                     agent's result (+1 win, -1 loss, 0 draw in tic-tac-toe and connect
                     four).
  opponent="mcts"    the same against pure Monte-Carlo tree search: mctx's PUCT over the
                     true game with a uniform prior over legal moves, each new leaf valued
                     by one random playout, `opponent_simulations` simulations a move, the
                     most visited move played (the fixed baseline of docs/agents.md).
  opponent="self"    self-play: the agent plays both seats. Each timestep is the player to
                     move's, its reward the mover's result, and its discount -1 where the
                     turn passes (`EnvSpec.zero_sum`: negamax targets for every agent).

The observation is Pgx's, from the side of the player to move, with its legal actions as
the `action_mask`. Games may start after up to `opening_moves` uniformly random moves
(drawn per game; none that ends it): a self-playing agent then meets positions other
than its own line of play. Evaluation (`eval_interval`) plays `eval_opponent` (random or
mcts) from the empty board and a seat drawn per game, whatever the training opponent.

`simulator=True` lends the game itself to an agent that searches it (AlphaZero): each
observation carries the game's state (`SIMULATOR_STATE`) and `spec().simulator` steps it,
the mover's reward and the turn's discount (-1, 0 at the end) whatever the opponent.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.agent import random_legal
from podracer.components.environments.base import (Environment, observation_spec, restart,
                                                   transition)
from podracer.components.environments.suites import api_of, require
from podracer.types import (ACTION_MASK, ILLEGAL, SIMULATOR_STATE, DiscreteSpec, EnvSpec,
                            PyTree, TimeStep, strip_weak_types)

OPPONENTS = ("random", "mcts", "self")


class PgxState(NamedTuple):
  game: PyTree        # pgx.State
  seat: jax.Array     # the player id the agent plays (-1 in self-play: both)
  key: jax.Array


def turn_discount(after: PyTree, mover: jax.Array) -> jax.Array:
  """Self-play's discount into `after`, a move of `mover`'s: 0 where the game ended, -1
  where the other player moves next, 1 where `mover` moves again."""
  turn = jnp.where(after.current_player == mover, 1.0, -1.0)
  return jnp.where(after.terminated, 0.0, turn)


def playout_value(game_step: Callable, game: PyTree, key: jax.Array) -> jax.Array:
  """The result, for the player to move in `game`, of one game played on from it with
  uniformly random legal moves (0 if `game` has ended)."""
  player = game.current_player

  def going(carry):
    return ~(carry[0].terminated | carry[0].truncated)

  def move(carry):
    game, key = carry
    key, action_key, step_key = jax.random.split(key, 3)
    return game_step(game, random_legal(action_key, game.legal_action_mask), step_key), key

  end, _ = jax.lax.while_loop(going, move, (game, key))
  return jnp.where(game.terminated | game.truncated, 0.0, end.rewards[player])


def mcts_move(game_step: Callable, game: PyTree, key: jax.Array,
              num_simulations: int) -> jax.Array:
  """Pure MCTS's move (int32) in one game: `mctx.muzero_policy` over the true game, a
  uniform prior over legal moves, each new leaf valued by `playout_value`, the most
  visited move (no root noise)."""
  import mctx  # pylint: disable=import-outside-toplevel

  def prior(games):
    return jnp.where(games.legal_action_mask, 0.0, ILLEGAL)

  def recurrent(params, key, action, games):
    del params
    keys = jax.random.split(key, (2, action.shape[0]))
    after = jax.vmap(game_step)(games, action, keys[0])
    mover = games.current_player
    reward = jnp.take_along_axis(after.rewards, mover[:, None], axis=1)[:, 0]
    return mctx.RecurrentFnOutput(
        reward=reward, discount=turn_discount(after, mover),
        prior_logits=prior(after),
        value=jax.vmap(playout_value, in_axes=(None, 0, 0))(game_step, after, keys[1])
    ), after

  root_key, search_key = jax.random.split(key)
  games = jax.tree.map(lambda x: x[None], game)
  root = mctx.RootFnOutput(prior_logits=prior(games), embedding=games,
                           value=playout_value(game_step, game, root_key)[None])
  out = mctx.muzero_policy(None, search_key, root, recurrent, num_simulations,
                           invalid_actions=~games.legal_action_mask,
                           dirichlet_fraction=0.0, temperature=0.0)
  return out.action[0].astype(jnp.int32)


@registry.environments.register("pgx")
class Pgx(Environment):
  """`pgx.make(env_id)` against an `opponent` (random, mcts) or in self-play (self)."""

  def __init__(self, env_id: str = "tic_tac_toe", opponent: str = "random",
               eval_opponent: str = "random", opponent_simulations: int = 64,
               opening_moves: int = 0, simulator: bool = False):
    pgx = require("pgx", f"pgx {env_id}", "pgx")
    for key, value, options in (("opponent", opponent, OPPONENTS),
                                ("eval_opponent", eval_opponent, OPPONENTS[:2])):
      if value not in options:
        raise ValueError(f"`env.{key}={value}` is not offered for Pgx; options: "
                         f"{', '.join(options)}.")
    for key, value, low in (("opponent_simulations", opponent_simulations, 1),
                            ("opening_moves", opening_moves, 0)):
      if not isinstance(value, int) or value < low:
        raise ValueError(f"`env.{key}` must be an integer >= {low}, got {value!r}.")
    self.env_id, self.opponent, self.eval_opponent = env_id, opponent, eval_opponent
    self.opponent_simulations, self.opening_moves = opponent_simulations, opening_moves
    self.simulator = bool(simulator)
    with api_of("pgx", f"pgx {env_id}"):
      self._env = pgx.make(env_id)
      if self._env.num_players != 2:
        raise ValueError(f"Pgx game {env_id!r} has {self._env.num_players} players; "
                         "this adapter plays two-player games.")
      self._obs = observation_spec(self)

  def _observe(self, game) -> dict:
    observed = {"observation": game.observation, ACTION_MASK: game.legal_action_mask}
    if self.simulator:
      observed[SIMULATOR_STATE] = game
    return observed

  def simulate(self, game, action: jax.Array, key: jax.Array):
    """`EnvSpec.simulator`: the game after the player to move plays `action`, that
    player's reward, the turn's discount and the observation of the player to move."""
    mover = game.current_player
    after = strip_weak_types(self._env.step(game, action.astype(jnp.int32), key))
    return after, after.rewards[mover], turn_discount(after, mover), self._observe(after)

  def _step_game(self, game, action, key):
    return self._env.step(game, action, key)

  def _opponent_move(self, game, key: jax.Array) -> jax.Array:
    if self.opponent == "mcts":
      return mcts_move(self._step_game, game, key, self.opponent_simulations)
    return random_legal(key, game.legal_action_mask)

  def _opponent(self, game, seat: jax.Array, key: jax.Array):
    """The opponent's move where it is to play (and the game goes on)."""
    move = (game.current_player != seat) & ~(game.terminated | game.truncated)
    opponent_key, step_key = jax.random.split(key)
    return jax.lax.cond(
        move, lambda: self._env.step(game, self._opponent_move(game, opponent_key), step_key),
        lambda: game)

  def _opening(self, game, key: jax.Array):
    """Up to `opening_moves` uniformly random moves (how many drawn per game), each
    skipped if it would end the game: self-play then meets positions its own play
    would not reach (a deterministic policy's self-play repeats one game)."""
    count_key, key = jax.random.split(key)
    count = jax.random.randint(count_key, (), 0, self.opening_moves + 1)

    def move(game, xs):
      i, key = xs
      action_key, step_key = jax.random.split(key)
      moved = self._env.step(game, random_legal(action_key, game.legal_action_mask), step_key)
      keep = (i < count) & ~(moved.terminated | moved.truncated)
      return jax.tree.map(lambda a, b: jnp.where(keep, a, b), moved, game), None
    steps = (jnp.arange(self.opening_moves), jax.random.split(key, self.opening_moves))
    return jax.lax.scan(move, game, steps)[0]

  def reset(self, key: jax.Array) -> Tuple[PgxState, TimeStep]:
    key, init_key, seat_key, move_key = jax.random.split(key, 4)
    game = self._env.init(init_key)
    if self.opening_moves:
      game = self._opening(game, jax.random.fold_in(init_key, 1))
    if self.opponent == "self":
      seat = jnp.full_like(game.current_player, -1)
    else:
      seat = jax.random.bernoulli(seat_key).astype(game.current_player.dtype)
      game = self._opponent(game, seat, move_key)
    return PgxState(game, seat, key), restart(strip_weak_types(self._observe(game)))

  def step(self, state: PgxState, action: jax.Array) -> Tuple[PgxState, TimeStep]:
    if self.opponent == "self":
      return self._self_play_step(state, action)
    key, step_key, move_key = jax.random.split(state.key, 3)
    moved = self._env.step(state.game, action.astype(jnp.int32), step_key)
    game = self._opponent(moved, state.seat, move_key)
    # Pgx gives a step's rewards at the step that ends the game: the agent's or the reply's.
    reward = jnp.where(moved.terminated, moved.rewards[state.seat], game.rewards[state.seat])
    timestep = transition(strip_weak_types(self._observe(game)), reward,
                          terminated=game.terminated, truncated=game.truncated)
    return PgxState(game, state.seat, key), timestep

  def _self_play_step(self, state: PgxState, action: jax.Array):
    """The mover's move: its reward, and discount -1 where the other player moves next."""
    key, step_key = jax.random.split(state.key)
    mover = state.game.current_player
    game = self._env.step(state.game, action.astype(jnp.int32), step_key)
    timestep = transition(strip_weak_types(self._observe(game)), game.rewards[mover],
                          terminated=game.terminated, truncated=game.truncated)
    timestep = timestep._replace(discount=turn_discount(game, mover))
    return PgxState(game, state.seat, key), timestep

  def render(self, state: PgxState) -> jax.Array:
    """The board, uint8 [24 rows, 24 columns, 3] a cell: player 0's stones red, player
    1's yellow (whoever the agent is), on blue. Games whose observation is a board of two
    stone planes, the mover's and the other's (tic-tac-toe, connect four, othello...)."""
    board = state.game.observation
    if board.ndim != 3 or board.shape[-1] != 2:
      raise NotImplementedError(f"podracer draws Pgx games whose observation is a board "
                                f"of two stone planes; {self.env_id}'s is {board.shape}")
    mover = state.game.current_player
    first = jnp.where(mover == 0, board[..., 0], board[..., 1])   # player 0's stones
    second = jnp.where(mover == 0, board[..., 1], board[..., 0])
    cell = jnp.arange(24) - 11.5
    disc = (cell[:, None] ** 2 + cell[None, :] ** 2) <= 100.0        # radius 10 of 24
    colours = jnp.array([[20, 60, 160], [220, 40, 40], [240, 210, 40]], jnp.uint8)
    which = jnp.where(first, 1, jnp.where(second, 2, 0))              # [rows, cols]
    cells = jnp.where(disc[None, None, :, :, None], colours[which][:, :, None, None],
                      colours[0])                                     # [r, c, 24, 24, 3]
    rows, cols = which.shape
    return cells.transpose(0, 2, 1, 3, 4).reshape(rows * 24, cols * 24, 3)

  def evaluation_env(self) -> "Pgx":
    """Against `eval_opponent`, from a seat drawn per game."""
    if self.opponent == self.eval_opponent and not self.opening_moves:
      return self
    return Pgx(self.env_id, opponent=self.eval_opponent,  # From the empty board.
               opponent_simulations=self.opponent_simulations, simulator=self.simulator)

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=self._obs, action=DiscreteSpec(int(self._env.num_actions)),
                   zero_sum=self.opponent == "self",
                   simulator=self.simulate if self.simulator else None)

  def __repr__(self) -> str:
    return f"Pgx({self.env_id!r}, opponent={self.opponent!r})"
