"""D4PG (Barth-Maron et al. 2018): a deterministic actor, a distributional critic, n-step
targets, prioritized replay and exploration noise per actor."""

from agents.d4pg.agent import D4PG

__all__ = ["D4PG"]
