"""Runtimes turn an agent and an environment into a running experiment.

Each implements `podracer.runtime.Runtime`:
anakin.py: environment in JAX; acting and learning compiled into one replicated program.
sebulba/: environments on the CPU; actor threads on actor devices, learner on the rest.
seed/: environments in worker processes; central batched inference; Sebulba's learner.
compile_once.py: the guard that fails a step traced twice (shared by both).
"""

from podracer.runtimes.anakin import Anakin
from podracer.runtimes.sebulba import Sebulba
from podracer.runtimes.seed import Seed

__all__ = ["Anakin", "Sebulba", "Seed"]
