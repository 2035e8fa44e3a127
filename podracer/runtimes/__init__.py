"""Runtimes turn an agent and an environment into a running experiment.

Each implements `podracer.runtime.Runtime`:
anakin.py: environment in JAX; acting and learning compiled into one replicated program;
  many_runs.py its many runs (sweeps, schedules, PBT's step), population.py PBT's
  exploit/explore.
host/: what the runtimes with host environments share (the learner thread, data paths,
  checkpoints, supervision).
sebulba/: environments on the CPU; actor threads on actor devices, learner on the rest.
seed/: environments in worker processes; central batched inference; the host learner.
compile_once.py: the guard that fails a step traced twice; door.py: host steps checked
  before a device sees them.
"""

from podracer.runtimes.anakin import Anakin
from podracer.runtimes.sebulba import Sebulba
from podracer.runtimes.seed import Seed

__all__ = ["Anakin", "Sebulba", "Seed"]
