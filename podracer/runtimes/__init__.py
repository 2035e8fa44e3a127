"""Runtimes turn an agent and an environment into a running experiment.

anakin: environment in JAX; acting and learning compiled into one replicated program.
"""

from podracer.runtimes.anakin import Anakin

__all__ = ["Anakin"]
