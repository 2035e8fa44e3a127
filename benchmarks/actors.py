"""Env steps/s of a host runtime's producers alone, no learner (Sebulba's actor threads,
SEED's server and workers): what benchmarks/sebulba.py, seed.py and scorecard.py print
as "actors alone" / "no learner".

  from benchmarks.actors import run_actors
  run_actors(builder.build(config).runtime, seconds=5.0)
"""

from __future__ import annotations

import time
from typing import Any, Optional

from podracer.errors import ConfigError


def run_actors(runtime: Any, seconds: float, warmup_batches: Optional[int] = None) -> float:
  """Env steps/s of `runtime`'s producers acting with the initial parameters, their
  trajectories taken from the channel and dropped. The first `warmup_batches` (default:
  two per producer, which covers compilation) are not counted."""
  if runtime.replay is not None:
    raise ConfigError("run_actors measures actors that feed the learner queue; with a "
                      "host replay their pace is the replay's rate limiter's.")
  warmup = 2 * runtime.producers if warmup_batches is None else warmup_batches
  seen, steps, start = 0, 0, None
  with runtime.producing(runtime.initial_store()) as (stop, poll):
    while not stop.is_set():
      step = runtime.channel.get(stop)
      if step is None:
        break
      seen += 1
      if seen == warmup + 1:
        start = time.perf_counter()
      elif seen > warmup + 1:
        steps += step.batches[0].env_steps
        if time.perf_counter() - start >= seconds:
          break
      poll()
  return steps / (time.perf_counter() - start) if start is not None else 0.0
