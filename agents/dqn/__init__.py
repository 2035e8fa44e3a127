"""DQN: agent (registered as "dqn") and configs."""

from agents.dqn.agent import DQN

__all__ = ["DQN"]
