"""A task only memory solves: POPGym's RepeatFirst (Morad et al. 2023).

Each step shows a random symbol of `num_symbols` (one-hot, with a flag that is 1 at the
episode's first step); the action must name the FIRST step's symbol, every step. A
right answer earns +1/length, a wrong one -1/length, over `length` steps: a policy that
remembers scores 1, a feed-forward one can be right at the first step only, then guesses
(about (1 + (length - 1) * (2 / num_symbols - 1)) / length: -0.31 for 4 symbols and 8
steps). `RepeatFirst` is the JAX environment (Anakin); `RepeatFirstDmEnv` the same task
for the dm_env adapter (Sebulba, SEED).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import dm_env
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import Environment, restart, transition
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec, TimeStep


def _check(num_symbols: int, length: int) -> None:
  if num_symbols < 2 or length < 2:
    raise ValueError(f"RepeatFirst needs num_symbols >= 2 and length >= 2, got "
                     f"{num_symbols} and {length}.")


class RepeatFirstState(NamedTuple):
  first: jax.Array  # int32: the symbol to repeat
  t: jax.Array
  key: jax.Array


@registry.environments.register("repeat_first")
class RepeatFirst(Environment):
  """Name the first step's symbol at every step (see the module's docstring)."""

  def __init__(self, num_symbols: int = 4, length: int = 8):
    _check(num_symbols, length)
    self.num_symbols, self.length = num_symbols, length

  def _observation(self, symbol: jax.Array, first: bool) -> jax.Array:
    return jnp.concatenate([jax.nn.one_hot(symbol, self.num_symbols),
                            jnp.full((1,), float(first))]).astype(jnp.float32)

  def reset(self, key: jax.Array) -> Tuple[RepeatFirstState, TimeStep]:
    key, symbol_key = jax.random.split(key)
    first = jax.random.randint(symbol_key, (), 0, self.num_symbols)
    return RepeatFirstState(first, jnp.int32(0), key), restart(self._observation(first, True))

  def step(self, state: RepeatFirstState, action: jax.Array):
    key, symbol_key = jax.random.split(state.key)
    reward = jnp.where(action == state.first, 1.0, -1.0) / self.length
    t = state.t + 1
    shown = jax.random.randint(symbol_key, (), 0, self.num_symbols)
    timestep = transition(self._observation(shown, False), reward,
                          terminated=t >= self.length, truncated=False)
    return RepeatFirstState(state.first, t, key), timestep

  def spec(self) -> EnvSpec:
    return EnvSpec(ArraySpec((self.num_symbols + 1,), np.float32, "observation"),
                   DiscreteSpec(self.num_symbols))

  def __repr__(self) -> str:
    return f"RepeatFirst(num_symbols={self.num_symbols}, length={self.length})"


class RepeatFirstDmEnv(dm_env.Environment):
  """`RepeatFirst`'s task in numpy, one environment, for the `dm_env` adapter."""

  def __init__(self, num_symbols: int = 4, length: int = 8, seed: int = 0):
    _check(num_symbols, length)
    self.num_symbols, self.length = num_symbols, length
    self._rng = np.random.default_rng(seed)
    self._first, self._t = 0, 0
    self._needs_reset = True  # dm_env: step() on a fresh environment, or after LAST, resets.

  def _observation(self, symbol: int, first: bool) -> np.ndarray:
    obs = np.zeros(self.num_symbols + 1, np.float32)
    obs[symbol], obs[-1] = 1.0, float(first)
    return obs

  def reset(self) -> dm_env.TimeStep:
    self._first, self._t = int(self._rng.integers(self.num_symbols)), 0
    self._needs_reset = False
    return dm_env.restart(self._observation(self._first, True))

  def step(self, action: Any) -> dm_env.TimeStep:
    if self._needs_reset:
      return self.reset()
    reward = (1.0 if int(action) == self._first else -1.0) / self.length
    self._t += 1
    obs = self._observation(int(self._rng.integers(self.num_symbols)), False)
    if self._t >= self.length:
      self._needs_reset = True
      return dm_env.termination(reward, obs)
    return dm_env.transition(reward, obs)

  def observation_spec(self) -> specs.Array:
    return specs.Array((self.num_symbols + 1,), np.float32, "observation")

  def action_spec(self) -> specs.DiscreteArray:
    return specs.DiscreteArray(self.num_symbols, name="action")
