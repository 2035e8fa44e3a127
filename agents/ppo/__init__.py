"""PPO: agent (registered as "ppo") and configs."""

from agents.ppo.agent import PPO

__all__ = ["PPO"]
