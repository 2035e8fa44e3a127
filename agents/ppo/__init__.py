"""PPO: agents (registered as "ppo" and, with an LSTM, "ppo_recurrent") and configs."""

from agents.ppo.agent import PPO
from agents.ppo.recurrent import RecurrentPPO

__all__ = ["PPO", "RecurrentPPO"]
