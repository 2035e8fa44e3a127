"""Reward normalisation, as the learner sees rewards (the episode returns it reports stay
the environment's): a constant scale (Brax's `reward_scaling`). The interface leaves room
for normalisers with learner state (the running deviation of the discounted return,
CleanRL's `NormalizeReward`: not written yet)."""

from __future__ import annotations

from typing import Annotated, Dict, Tuple

import jax

from podracer import registry
from podracer.registry.ranges import Positive
from podracer.types import Trajectory


class RewardNormalizer:
  """The interface: `__call__(trajectory)` -> (the trajectory with the rewards the
  learner sees, metrics)."""


  def __call__(self, trajectory: Trajectory) -> Tuple[Trajectory, Dict[str, jax.Array]]:
    raise NotImplementedError


def with_rewards(trajectory: Trajectory, reward: jax.Array) -> Trajectory:
  return trajectory._replace(timestep=trajectory.timestep._replace(reward=reward))


@registry.normalizers.register("reward_scale")
class RewardScale(RewardNormalizer):
  """Every reward times `scale`."""

  def __init__(self, scale: Annotated[float, Positive] = 1.0):
    self.scale = scale

  def __call__(self, trajectory):
    return with_rewards(trajectory, trajectory.timestep.reward * self.scale), {}
