"""IMPALA: agent (registered as "impala") and configs."""

from agents.impala.agent import IMPALA

__all__ = ["IMPALA"]
