"""MuZero with mctx's search: agent (registered as "muzero") and configs."""

from agents.muzero.agent import MuZero

__all__ = ["MuZero"]
