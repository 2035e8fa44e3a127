"""TD3 (Fujimoto et al. 2018): twin critics, target policy smoothing, delayed actor and
target updates; DDPG with `policy_delay=1`, `target_noise=0` and one critic's minimum."""

from agents.td3.agent import TD3

__all__ = ["TD3"]
