"""JAXtari's Atari 2600 games, reimplemented in JAX (`pip install -e ".[jaxtari]"`), as
podracer `Environment`s: Pong under Anakin with no emulator and no EnvPool.

Atari's usual protocol, from JAXtari's own `AtariWrapper` (sticky actions 0.25, up to 30
no-op starts, FIRE on reset, the 108,000-frame limit, which truncates) plus, here, the
frame skip (4 frames an agent step, rewards summed, none stepped after the game ends) and
the frame stack (the last 4), without JAXtari's auto-reset (`VectorEnv` resets). The
observation is either `objects`, the game's objects (position, size, ...) and scores as
JAXtari reports them, flattened and scaled by 1/255, [4, F] float32; or `pixels`, the
frame as JAXtari draws it in grayscale at 84 x 84, [4, 84, 84] uint8.

JAXtari draws its games with a sprite pack it downloads once, after asking whether you own
the original ROMs (`python -m jaxtari.install_sprites`; replacement sprites otherwise).
`sprites="podracer"` draws Pong with podracer's own flat shapes instead (JAXtari's
`ASSET_CONFIG`), so Pong needs no pack: what CI and an offline machine run.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import (Environment, observation_spec, restart,
                                                   transition)
from podracer.components.environments.suites import api_of, require
from podracer.errors import MissingPackage
from podracer.types import DiscreteSpec, EnvSpec, PyTree, TimeStep, strip_weak_types

OBSERVATIONS = ("objects", "pixels")
SPRITES = ("installed", "podracer")


class JAXtariState(NamedTuple):
  atari_state: PyTree  # JAXtari's AtariWrapper state (the game's state inside)
  frames: jax.Array    # the last `frame_stack` observations


def _rect(height: int, width: int, rgb) -> np.ndarray:
  sprite = np.zeros((height, width, 4), np.uint8)
  sprite[..., :3], sprite[..., 3] = rgb, 255
  return sprite


def pong_sprites(consts) -> tuple:
  """Pong drawn in flat shapes at JAXtari's sizes and colours: its `ASSET_CONFIG` with
  every asset given as data, so no sprite file is read. The score digits are bars."""
  digits = np.stack([_rect(10, 6, consts.SCORE_COLOR)] * 10)
  return (
      {"name": "background", "type": "background",
       "data": jnp.asarray(_rect(consts.HEIGHT, consts.WIDTH, consts.BACKGROUND_COLOR))},
      {"name": "player", "type": "single",
       "data": jnp.asarray(_rect(*consts.PLAYER_SIZE[::-1], consts.PLAYER_COLOR))},
      {"name": "enemy", "type": "single",
       "data": jnp.asarray(_rect(*consts.ENEMY_SIZE[::-1], consts.ENEMY_COLOR))},
      {"name": "ball", "type": "single",
       "data": jnp.asarray(_rect(*consts.BALL_SIZE[::-1], consts.BALL_COLOR))},
      {"name": "player_digits", "type": "digits", "data": jnp.asarray(digits)},
      {"name": "enemy_digits", "type": "digits", "data": jnp.asarray(digits)},
  )


@contextlib.contextmanager
def _no_prompt() -> Iterator[None]:
  """JAXtari asks on stdin whether to update an old sprite pack; a run cannot answer."""
  before = os.environ.get("JAXTARI_SKIP_SPRITE_UPDATE")
  os.environ["JAXTARI_SKIP_SPRITE_UPDATE"] = "1"
  try:
    yield
  finally:
    if before is None:
      os.environ.pop("JAXTARI_SKIP_SPRITE_UPDATE", None)
    else:
      os.environ["JAXTARI_SKIP_SPRITE_UPDATE"] = before


def make_game(game: str, sprites: str):
  """The JAXtari game, with its installed sprite pack or (Pong) podracer's drawings."""
  jaxtari = require("jaxtari", f"jaxtari {game}", "jaxtari")
  if sprites == "podracer":
    if game != "pong":
      raise ValueError(f"sprites='podracer' draws Pong only, not {game!r}: install "
                       "JAXtari's sprite pack (python -m jaxtari.install_sprites).")
    from jaxtari.games import jax_pong  # pylint: disable=import-outside-toplevel
    return jax_pong.JaxPong(
        jax_pong.PongConstants(ASSET_CONFIG=pong_sprites(jax_pong.PongConstants())))
  try:
    with _no_prompt():
      return jaxtari.make(game)
  except RuntimeError as e:
    if "SPRITES NOT INSTALLED" not in str(e):
      raise
    raise MissingPackage(
        f"The 'jaxtari' environment ({game}) needs JAXtari's sprite pack, which is not "
        "installed here: run `python -m jaxtari.install_sprites` once (it asks whether you "
        "own the original Atari 2600 ROMs, and installs replacement sprites if you do "
        "not); for Pong, --config.env.sprites=podracer draws the game without a pack."
    ) from None


@registry.environments.register("jaxtari")
class JAXtari(Environment):
  """A JAXtari game, e.g. "pong"; `observation` is "objects" or "pixels"."""

  def __init__(self, game: str = "pong", observation: str = "objects",
               sprites: str = "installed", frame_skip: int = 4, frame_stack: int = 4,
               sticky_actions: float = 0.25, noop_max: int = 30,
               max_frames: int = 108_000):
    for key, value, allowed in (("observation", observation, OBSERVATIONS),
                                ("sprites", sprites, SPRITES)):
      if value not in allowed:
        raise ValueError(f"env.{key} must be one of {', '.join(allowed)}; got {value!r}.")
    self.game, self.observation = game, observation
    self.frame_skip, self.frame_stack = int(frame_skip), int(frame_stack)
    with api_of("jaxtari", f"jaxtari {game}"):
      self._game = make_game(game, sprites)  # Imports JAXtari, or names its extra.
      from jaxtari.wrappers import AtariWrapper  # pylint: disable=import-outside-toplevel
      self._env = AtariWrapper(self._game, sticky_actions=sticky_actions,
                               episodic_life=False, noop_max=noop_max,
                               max_frames_per_episode=max_frames)
      self._num_actions = int(self._game.action_space().n)
      # The game's own observation (a tree), as its reset gives it: step's scan carries one.
      self._game_obs = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))[0]
      self._obs = observation_spec(self)

  def _frame(self, obs: PyTree, atari_state: PyTree) -> jax.Array:
    if self.observation == "objects":
      flat = jnp.concatenate([jnp.ravel(x).astype(jnp.float32)
                              for x in jax.tree.leaves(obs)])
      return flat / 255.0
    rgb = self._game.render(atari_state.env_state).astype(jnp.float32)
    gray = rgb @ jnp.array([0.299, 0.587, 0.114], jnp.float32)
    small = jax.image.resize(gray, (84, 84), method="bilinear")
    return jnp.clip(jnp.round(small), 0, 255).astype(jnp.uint8)

  def reset(self, key: jax.Array) -> Tuple[JAXtariState, TimeStep]:
    obs, atari_state = self._env.reset(key)
    atari_state = strip_weak_types(atari_state)
    frame = self._frame(obs, atari_state)
    frames = jnp.stack([frame] * self.frame_stack)
    return JAXtariState(atari_state, frames), restart(frames)

  def step(self, state: JAXtariState, action: jax.Array) -> Tuple[JAXtariState, TimeStep]:
    def frame(carry, _):
      atari_state, obs, reward, terminated, truncated = carry
      over = terminated | truncated
      obs2, stepped, r, term, trunc, _ = self._env.step(atari_state, action)
      keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(over, b, a), new, old)
      return (keep(strip_weak_types(stepped), atari_state), keep(obs2, obs),
              reward + jnp.where(over, 0.0, jnp.asarray(r, jnp.float32)),
              terminated | (~over & term), truncated | (~over & trunc)), None

    first = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), self._game_obs)
    carry = (state.atari_state, first, jnp.float32(0.0), jnp.bool_(False), jnp.bool_(False))
    (atari_state, obs, reward, terminated, truncated), _ = jax.lax.scan(
        frame, carry, None, length=self.frame_skip)
    frames = jnp.concatenate([state.frames[1:], self._frame(obs, atari_state)[None]])
    timestep = transition(frames, reward, terminated=terminated,
                          truncated=truncated & ~terminated)
    return JAXtariState(atari_state, frames), timestep

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=self._obs, action=DiscreteSpec(self._num_actions))

  def render(self, state: JAXtariState) -> jax.Array:
    """The frame as JAXtari draws it: uint8 [210, 160, 3]."""
    return self._game.render(state.atari_state.env_state).astype(jnp.uint8)

  def __repr__(self) -> str:
    return f"JAXtari({self.game!r}, {self.observation})"

