"""SEED (seed-rl-notes.md): environment-only worker processes, central batched inference.

  workers  (podracer/worker.py) processes of this or other hosts, each stepping one host
           environment; one message per step to the server (podracer/distributed/transport.py).
  session  (session.py) one connected worker: its handshake, its seat of slots, its
           steps; the lobby where sessions join and leave. Sessions never call the
           server: it makes them and calls them.
  server   (server.py) one inference thread per actor device: batches the workers'
           steps into one `agent.act` (inference.py), keeps every environment's actor
           state in a slot, assembles each worker's trajectories (seats.py) and `put`s
           learner batches into the host runtimes' channel for experience
           (host/channel.py).
  learner  the host runtimes' (host/learner.py), with its checkpoints and evaluation
           (host/runtime.py).
  main     supervises: drops silent workers, restarts local ones (workers.py), stops
           the run when none is left.
"""

from podracer.runtimes.seed.runtime import Seed, SeedOptions

__all__ = ["Seed", "SeedOptions"]
