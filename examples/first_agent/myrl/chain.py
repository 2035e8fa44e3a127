"""Chain: walk right along `length` states to the reward at the far end (a JAX task)."""

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.environments import Environment, restart, transition
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec


@registry.environments.register("chain")
class Chain(Environment):
  """Action 1 steps right, 0 left; reaching the last state pays 1 and ends the episode,
  which is cut after `max_steps` (the shortest path takes length - 1)."""

  def __init__(self, length: int = 10, max_steps: int = 100):
    self.length, self.max_steps = length, max_steps

  def reset(self, key):
    del key  # Always starts at the left end.
    return (jnp.int32(0), jnp.int32(0)), restart(self._observe(jnp.int32(0)))

  def step(self, state, action):
    position, steps = state
    position = jnp.clip(position + jnp.where(action == 1, 1, -1), 0, self.length - 1)
    arrived = position == self.length - 1
    return (position, steps + 1), transition(
        self._observe(position), jnp.where(arrived, 1.0, 0.0), terminated=arrived,
        truncated=steps + 1 >= self.max_steps)

  def spec(self):
    return EnvSpec(ArraySpec((self.length,), np.float32), DiscreteSpec(2))

  def _observe(self, position):
    return jax.nn.one_hot(position, self.length, dtype=jnp.float32)
