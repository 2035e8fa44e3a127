"""MuZero with mctx's search, and AlphaZero searching the environment's own game: agents
(registered as "muzero" and "alphazero") and configs."""

from agents.muzero.agent import MuZero
from agents.muzero.alphazero import AlphaZero

__all__ = ["MuZero", "AlphaZero"]
