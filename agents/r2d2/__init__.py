"""R2D2: agent (registered as "r2d2") and configs."""

from agents.r2d2.agent import R2D2

__all__ = ["R2D2"]
