"""A task whose legal actions change every step: what checks that an agent honours masks.

Each step offers `num_actions` actions of which a random subset (each action with
probability `legal_fraction`, never none) is legal, given as the observation's
`action_mask` beside a vector that says nothing of it. A legal action earns +1, an
illegal one -1 (and is otherwise a no-op), and an episode lasts `episode_length` steps:
an agent that honours the mask scores exactly `episode_length` in every episode, one
that ignores it about `episode_length * (2 * legal_fraction - 1)`. `empty_mask_prob`
(JAX only; 0 by default) leaves a step's mask empty with that probability: a fault, to
check that a run stops on it, naming the environment.

`MaskedBandit` is the JAX environment (Anakin); `MaskedBanditDmEnv` the same task in
numpy as a dm_env environment, for Sebulba and SEED
(`env.name=dm_env env.factory=podracer.components.environments.masked:MaskedBanditDmEnv`).
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Tuple

import dm_env
from dm_env import specs
import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments.base import Environment, restart, transition
from podracer.types import ACTION_MASK, ArraySpec, DiscreteSpec, EnvSpec, TimeStep


def _check(num_actions: int, episode_length: int, legal_fraction: float) -> None:
  if num_actions < 2 or episode_length < 1 or not 0.0 < legal_fraction <= 1.0:
    raise ValueError(f"A masked bandit needs num_actions >= 2, episode_length >= 1 and "
                     f"legal_fraction in (0, 1], got {num_actions}, {episode_length} and "
                     f"{legal_fraction}.")


class MaskedBanditState(NamedTuple):
  mask: jax.Array  # [A] bool: the actions legal now
  t: jax.Array     # steps taken in this episode
  key: jax.Array


@registry.environments.register("masked_bandit")
class MaskedBandit(Environment):
  """Random legal actions each step; +1 for a legal action, -1 for an illegal one."""

  def __init__(self, num_actions: int = 6, episode_length: int = 10,
               legal_fraction: float = 0.4, empty_mask_prob: float = 0.0):
    _check(num_actions, episode_length, legal_fraction)
    self.num_actions = num_actions
    self.episode_length = episode_length
    self.legal_fraction = legal_fraction
    self.empty_mask_prob = empty_mask_prob

  def _draw(self, key: jax.Array) -> Tuple[jax.Array, jax.Array]:
    mask_key, one_key, noise_key, empty_key = jax.random.split(key, 4)
    mask = jax.random.bernoulli(mask_key, self.legal_fraction, (self.num_actions,))
    mask = mask.at[jax.random.randint(one_key, (), 0, self.num_actions)].set(True)
    if self.empty_mask_prob:
      mask = mask & ~jax.random.bernoulli(empty_key, self.empty_mask_prob)
    return mask, jax.random.normal(noise_key, (self.num_actions,), jnp.float32)

  def _observation(self, mask: jax.Array, noise: jax.Array) -> Dict[str, jax.Array]:
    return {"observation": noise, ACTION_MASK: mask}

  def reset(self, key: jax.Array) -> Tuple[MaskedBanditState, TimeStep]:
    key, draw_key = jax.random.split(key)
    mask, noise = self._draw(draw_key)
    return MaskedBanditState(mask, jnp.int32(0), key), restart(self._observation(mask, noise))

  def step(self, state: MaskedBanditState, action: jax.Array):
    key, draw_key = jax.random.split(state.key)
    reward = jnp.where(state.mask[action], 1.0, -1.0)
    mask, noise = self._draw(draw_key)
    t = state.t + 1
    timestep = transition(self._observation(mask, noise), reward,
                          terminated=t >= self.episode_length, truncated=False)
    return MaskedBanditState(mask, t, key), timestep

  def spec(self) -> EnvSpec:
    observation = {"observation": ArraySpec((self.num_actions,), jnp.float32, "observation"),
                   ACTION_MASK: ArraySpec((self.num_actions,), jnp.bool_, ACTION_MASK)}
    return EnvSpec(observation=observation, action=DiscreteSpec(self.num_actions))

  def __repr__(self) -> str:
    return f"MaskedBandit(num_actions={self.num_actions})"


class MaskedBanditDmEnv(dm_env.Environment):
  """`MaskedBandit`'s task in numpy, one environment, for the `dm_env` adapter."""

  def __init__(self, num_actions: int = 6, episode_length: int = 10,
               legal_fraction: float = 0.4, seed: int = 0):
    _check(num_actions, episode_length, legal_fraction)
    self.num_actions, self.episode_length = num_actions, episode_length
    self.legal_fraction = legal_fraction
    self._rng = np.random.default_rng(seed)
    self._mask = np.ones(num_actions, np.bool_)
    self._t = 0
    self._needs_reset = True  # dm_env: step() on a fresh environment, or after LAST, resets.

  def _observation(self) -> Dict[str, np.ndarray]:
    self._mask = self._rng.random(self.num_actions) < self.legal_fraction
    self._mask[self._rng.integers(self.num_actions)] = True
    noise = self._rng.standard_normal(self.num_actions).astype(np.float32)
    return {"observation": noise, ACTION_MASK: self._mask.copy()}

  def reset(self) -> dm_env.TimeStep:
    self._t, self._needs_reset = 0, False
    return dm_env.restart(self._observation())

  def step(self, action: Any) -> dm_env.TimeStep:
    if self._needs_reset:
      return self.reset()
    reward = 1.0 if self._mask[int(action)] else -1.0
    self._t += 1
    if self._t >= self.episode_length:
      self._needs_reset = True
      return dm_env.termination(reward, self._observation())
    return dm_env.transition(reward, self._observation())

  def observation_spec(self) -> Dict[str, specs.Array]:
    return {"observation": specs.Array((self.num_actions,), np.float32, "observation"),
            ACTION_MASK: specs.Array((self.num_actions,), np.bool_, ACTION_MASK)}

  def action_spec(self) -> specs.DiscreteArray:
    return specs.DiscreteArray(self.num_actions, name="action")
