"""Normalizers (see `registry.normalizers`): what an agent's learner sees, normalised.
observation.py: `running_mean_std` (running statistics carried in the parameters);
rewards.py: `reward_scale` and `return_std` (the rewards the learner sees)."""

from podracer.components.normalizers.observation import (NETWORK, STATISTICS,
                                                         ObservationNormalizer,
                                                         RunningStatistics,
                                                         batch_statistics, merge)
from podracer.components.normalizers.rewards import (RETURN, RewardNormalizer,
                                                     RewardScale, ReturnStd)

__all__ = ["NETWORK", "RETURN", "ReturnStd", "STATISTICS", "ObservationNormalizer",
           "RewardNormalizer", "RewardScale", "RunningStatistics", "batch_statistics",
           "merge"]
