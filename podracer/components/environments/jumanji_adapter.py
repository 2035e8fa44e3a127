"""Jumanji's environments (InstaDeep) as podracer `Environment`s (`pip install -e ".[jumanji]"`).

Jumanji already speaks dm_env: its TimeStep has the step type, reward and discount (0 when
an episode terminates, 1 when its time limit cuts it) we keep. Observations are Jumanji's
NamedTuples as dicts (Snake: grid, step_count, action_mask; Knapsack: weights, values,
packed_items, action_mask): the networks' torsos flatten every entry but the mask, and the
agents honour the mask. Environments with one discrete action only (Snake, Knapsack, TSP,
Minesweeper's flattened board...); multi-discrete ones are refused.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.environments.base import Environment, observation_spec, restart
from podracer.components.environments.suites import api_of, dm_env_step, require
from podracer.types import (ACTION_MASK, DiscreteSpec, EnvSpec, PyTree, TimeStep,
                            strip_weak_types)


class JumanjiState(NamedTuple):
  env_state: PyTree


def as_dict(observation: Any, exclude: Sequence[str] = ()) -> Any:
  """A Jumanji observation NamedTuple as a dict of its fields, but those `exclude`d.

  A mask with no legal action (Snake's when the snake is trapped: every move kills it,
  and the episode ends at the next step whatever it is) becomes all legal: podracer
  stops a run on an empty mask, which from other environments is a bug."""
  if not hasattr(observation, "_asdict"):
    return observation
  fields = {k: v for k, v in observation._asdict().items() if k not in exclude}
  if ACTION_MASK in fields:
    mask = fields[ACTION_MASK]
    fields[ACTION_MASK] = mask | ~jnp.any(mask, axis=-1, keepdims=True)
  return fields


@registry.environments.register("jumanji")
class Jumanji(Environment):
  """`jumanji.make(env_id, **env_kwargs)`; `exclude` drops observation fields (e.g.
  Snake's raw `step_count`, which counts to the time limit)."""

  def __init__(self, env_id: str = "Snake-v1", env_kwargs: Any = None,
               exclude: Sequence[str] = ()):
    jumanji = require("jumanji", f"jumanji {env_id}", "jumanji")
    self.env_id, self.exclude = env_id, tuple(exclude)
    with api_of("jumanji", f"jumanji {env_id}"):
      self._env = jumanji.make(env_id, **dict(env_kwargs or {}))
      action = self._env.action_spec
      if not hasattr(action, "num_values") or jnp.ndim(action.num_values):
        raise ValueError(f"Jumanji environment {env_id!r} has action spec {action}; "
                         "podracer's agents take one discrete action (Snake-v1, "
                         "Knapsack-v1, TSP-v1, ...).")
      self._num_actions = int(action.num_values)
      self._obs = observation_spec(self)

  def reset(self, key: jax.Array) -> Tuple[JumanjiState, TimeStep]:
    env_state, timestep = self._env.reset(key)
    observation = as_dict(timestep.observation, self.exclude)
    return JumanjiState(env_state), restart(strip_weak_types(observation))

  def step(self, state: JumanjiState, action: jax.Array) -> Tuple[JumanjiState, TimeStep]:
    env_state, timestep = self._env.step(state.env_state, action.astype(jnp.int32))
    observation = strip_weak_types(as_dict(timestep.observation, self.exclude))
    return JumanjiState(env_state), dm_env_step(timestep, observation)

  def spec(self) -> EnvSpec:
    return EnvSpec(observation=self._obs, action=DiscreteSpec(self._num_actions))

  def __repr__(self) -> str:
    return f"Jumanji({self.env_id!r})"
