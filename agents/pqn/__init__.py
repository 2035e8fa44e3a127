"""PQN: agent (registered as "pqn") and configs."""

from agents.pqn.agent import PQN

__all__ = ["PQN"]
