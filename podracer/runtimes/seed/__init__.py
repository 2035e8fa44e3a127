"""SEED (seed-rl-notes.md): environment-only worker processes, central batched inference.

  workers  (podracer/worker.py) processes of this or other hosts, each stepping one host
           environment; one message per step to the server (podracer/distributed/transport.py).
  server   (server.py) one inference thread per actor device: batches the workers'
           steps into one `agent.act`, keeps every environment's actor state in a slot,
           assembles each worker's trajectories and hands learner batches to Sebulba's
           data path (sebulba/paths.py).
  learner  Sebulba's (sebulba/learner.py), with its checkpoints and evaluation
           (sebulba/host.py).
  main     supervises: drops silent workers, restarts local ones (workers.py), stops
           the run when none is left.
"""

from podracer.runtimes.seed.runtime import Seed, SeedOptions

__all__ = ["Seed", "SeedOptions"]
