"""The functional interface of environments written in JAX, and its batched, auto-resetting form.

An `Environment` is pure: `reset(key)` and `step(state, action)` return a new state and a
`TimeStep` for one environment, so the runtime can `vmap`, `scan` and compile it.
`VectorEnv` is what runtimes use: a batch of environments that reset themselves on the
step after LAST (dm_env's and EnvPool's convention) and report true episode statistics.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.types import (ArraySpec, EnvSpec, EpisodeStats, PyTree, StepType, TimeStep, action_mask,
                            empty_masks)


class Environment(abc.ABC):
  """One environment as pure functions of an explicit state."""

  # Runtimes check this: Anakin compiles `jax` environments into its program, Sebulba
  # steps `host` environments (EnvPool, Gymnasium, dm_env) on the CPU.
  kind = "jax"

  @abc.abstractmethod
  def reset(self, key: jax.Array) -> Tuple[PyTree, TimeStep]:
    """A new episode: its state and FIRST timestep (reward 0, discount 1)."""

  @abc.abstractmethod
  def step(self, state: PyTree, action: jax.Array) -> Tuple[PyTree, TimeStep]:
    """One transition from a non-terminal state: a MID or LAST timestep."""

  @abc.abstractmethod
  def spec(self) -> EnvSpec:
    """Observation and action specs of a single environment."""

  def evaluation_env(self) -> "Environment":
    """The environment evaluation plays (`eval_interval`): this one, unless it says
    otherwise (a self-play game is evaluated against a fixed opponent)."""
    return self


def observation_spec(env: Environment) -> PyTree:
  """The ArraySpecs of an environment's observations, from an abstract reset (traced,
  not computed): what the JAX adapters' `spec()` gives."""
  shapes = jax.eval_shape(lambda k: env.reset(k)[1].observation, jax.random.PRNGKey(0))
  return jax.tree.map(lambda s: ArraySpec(tuple(s.shape), s.dtype, "observation"), shapes)


def upscale(image: jax.Array, scale: int) -> jax.Array:
  """An image [H, W, C] with each pixel a `scale` x `scale` block."""
  return jnp.repeat(jnp.repeat(image, scale, axis=0), scale, axis=1)


def as_frame(image: jax.Array) -> jax.Array:
  """A rendered image as a video frame: uint8 [H, W, 3] (floats in [0, 1] or [0, 255])."""
  if image.dtype == jnp.uint8:
    return image
  image = image.astype(jnp.float32)
  scale = jnp.where(jnp.max(image) <= 1.0, 255.0, 1.0)
  return jnp.clip(image * scale, 0, 255).astype(jnp.uint8)


def restart(observation: PyTree) -> TimeStep:
  return TimeStep(jnp.int32(StepType.FIRST), jnp.float32(0.0), jnp.float32(1.0), observation)


def transition(observation: PyTree, reward, *, terminated, truncated) -> TimeStep:
  """A MID or LAST timestep; `terminated` zeroes the discount, `truncated` does not."""
  terminated = jnp.asarray(terminated, jnp.bool_)
  last = terminated | jnp.asarray(truncated, jnp.bool_)
  return TimeStep(
      step_type=jnp.where(last, StepType.LAST, StepType.MID).astype(jnp.int32),
      reward=jnp.asarray(reward, jnp.float32),
      discount=jnp.where(terminated, 0.0, 1.0).astype(jnp.float32),
      observation=observation)


class VectorEnvState(NamedTuple):
  env_state: PyTree       # [B, ...]
  key: jax.Array          # [B] keys for the next reset
  timestep: TimeStep      # [B] the timestep last returned
  episode_return: jax.Array
  episode_length: jax.Array


class VectorEnv:
  """`num_envs` copies of a JAX environment, vmapped, with auto-reset and episode stats."""

  kind = "jax"

  def __init__(self, env: Environment, num_envs: int):
    if getattr(env, "kind", "jax") != "jax":
      raise TypeError(f"{type(env).__name__} is a {env.kind} environment; only JAX "
                      "environments can be compiled into a VectorEnv.")
    self.env = env
    self.num_envs = num_envs
    # A masked environment's steps are checked on the host as they are made (a callback
    # that only records): the first step that left an environment no legal action, said.
    self.problem: Optional[str] = None

  def spec(self) -> EnvSpec:
    return self.env.spec()

  def _check_masks(self, step_type: np.ndarray, mask: np.ndarray) -> None:
    """Records the first environment whose mask has no legal action at a step it acts
    on (any but LAST); [..., B] and [..., B, A] from any number of runs."""
    empty = empty_masks(step_type, mask)
    if self.problem is None and empty.any():
      where = np.unravel_index(int(np.argmax(empty)), empty.shape)
      run = f" of run {where[0]}" if len(where) > 1 else ""
      self.problem = (f"an action mask with no legal action from environment {where[-1]}"
                      f"{run} ({self.env!r}): its agent would have nothing to choose")

  def reset(self, key: jax.Array) -> Tuple[VectorEnvState, TimeStep]:
    """Starts `num_envs` episodes from `key`: the batch's state and FIRST timesteps [B]."""
    keys = jax.random.split(key, self.num_envs + 1)
    env_state, timestep = jax.vmap(self.env.reset)(keys[1:])
    zeros = jnp.zeros((self.num_envs,), jnp.float32)
    state = VectorEnvState(env_state, jax.random.split(keys[0], self.num_envs), timestep,
                           zeros, jnp.zeros((self.num_envs,), jnp.int32))
    return state, timestep

  def step(self, state: VectorEnvState,
           action: jax.Array) -> Tuple[VectorEnvState, TimeStep, EpisodeStats]:
    """Steps each environment with its action [B]; one whose last timestep was LAST
    starts a new episode instead (FIRST, reward 0, discount 1, its action ignored).
    Returns the new state, timesteps [B] and true episode statistics [B]."""
    state, timestep, stats = jax.vmap(self._step_one)(state, action)
    mask = action_mask(timestep.observation)
    if mask is not None:
      jax.debug.callback(self._check_masks, timestep.step_type, mask)
    return state, timestep, stats

  def _step_one(self, state: VectorEnvState, action):
    reset_key, next_key = jax.random.split(state.key)
    stepped_state, stepped = self.env.step(state.env_state, action)
    reset_state, restarted = self.env.reset(reset_key)
    was_last = state.timestep.step_type == StepType.LAST
    # Selecting between both branches is what a vmapped `cond` does anyway.
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(was_last, x, y), a, b)
    env_state = pick(reset_state, stepped_state)
    timestep = pick(restarted, stepped)
    key = pick(next_key, state.key)
    episode_return = jnp.where(was_last, 0.0, state.episode_return + timestep.reward)
    episode_length = jnp.where(was_last, 0, state.episode_length + 1)
    stats = EpisodeStats(done=timestep.step_type == StepType.LAST,
                         episode_return=episode_return, episode_length=episode_length)
    return VectorEnvState(env_state, key, timestep, episode_return, episode_length), \
        timestep, stats
