"""SAC: agent (registered as "sac") and configs."""

from agents.sac.agent import SAC

__all__ = ["SAC"]
