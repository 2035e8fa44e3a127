"""Reward normalisation, as the learner sees rewards (the episode returns it reports stay
the environment's):

- `reward_scale`: every reward times a constant (Brax's `reward_scaling`);
- `return_std`: every reward divided by the running standard deviation of the discounted
  return (CleanRL's and Gymnasium's `NormalizeReward`), then clipped. Each environment's
  discounted return G_t = r_t + gamma G_{t-1} (0 again at an episode's first step) is
  carried by its actor, in the actor state (`podracer.kits.ActorCriticAgent`), and kept
  with each step (`extras["discounted_return"]`); the learner merges the batch's returns,
  over every replica, into running statistics kept in its learner state (checkpointed and
  resumed with it), and divides the rewards by their deviation.

A normaliser with learner state says so by its methods: `init` (its state; None for
none), `track_returns` (whether actors carry discounted returns for it) and
`normalize(state, trajectory)`.
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.normalizers.observation import (RunningStatistics,
                                                         batch_statistics, merge)
from podracer.registry.ranges import Positive, Probability
from podracer.types import StepType, TimeStep, Trajectory

RETURN = "discounted_return"  # The actors' extras key for each step's discounted return.


class RewardNormalizer:
  """The interface: `normalize(state, trajectory)` -> (the trajectory with the rewards
  the learner sees, the new state, metrics). A stateless normaliser writes only
  `__call__(trajectory)` -> (trajectory, metrics), as in 0.18.0."""

  def init(self) -> Any:
    """The normaliser's learner state (None: it keeps none)."""
    return None

  def track_returns(self) -> bool:
    """Whether the actors carry each environment's discounted return for it
    (`discounted_return`), kept as `extras["discounted_return"]`."""
    return False

  def discounted_return(self, previous: jax.Array, timestep: TimeStep) -> jax.Array:
    """Each environment's discounted return [B] after `timestep` (0 at an episode's
    first step), given the one before it."""
    raise NotImplementedError(f"{type(self).__name__} carries no discounted return.")

  def normalize(self, state: Any, trajectory: Trajectory
                ) -> Tuple[Trajectory, Any, Dict[str, jax.Array]]:
    trajectory, metrics = self(trajectory)
    return trajectory, state, metrics

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


@registry.normalizers.register("return_std")
class ReturnStd(RewardNormalizer):
  """Rewards divided by sqrt(var(G) + eps), G the discounted return at `discount`, then
  clipped to +-`clip` (module docstring). The variance is 1 until a return is seen."""

  def __init__(self, discount: Annotated[float, Probability] = 0.99,
               clip: Annotated[float, Positive] = 10.0,
               eps: Annotated[float, Positive] = 1e-8):
    self.discount, self.clip, self.eps = discount, clip, eps

  def init(self) -> RunningStatistics:
    zero = jnp.zeros((), jnp.float32)
    return RunningStatistics(zero, zero, zero)

  def track_returns(self) -> bool:
    return True

  def discounted_return(self, previous, timestep):
    first = timestep.step_type == StepType.FIRST
    reward = jnp.asarray(timestep.reward, jnp.float32)
    return jnp.where(first, 0.0, reward + self.discount * previous)

  def normalize(self, state: RunningStatistics, trajectory: Trajectory):
    """Merges the returns of steps 1..T (step 0 is the last trajectory's last) into the
    statistics, then scales every reward by the merged deviation."""
    returns = trajectory.extras[RETURN][1:].reshape(-1)
    new = batch_statistics(returns)
    state = merge(state, new.count, new.mean, new.m2)
    var = jnp.where(state.count > 0, state.m2 / jnp.maximum(state.count, 1.0), 1.0)
    std = jnp.sqrt(var + self.eps)
    reward = jnp.clip(trajectory.timestep.reward / std, -self.clip, self.clip)
    return with_rewards(trajectory, reward), state, {"return_std": std}
