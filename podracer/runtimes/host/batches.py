"""What a producer hands the learner: a `Batch` of one trajectory, and the two outputs
it goes through (`ToLearners`: split along B over the learner devices and queued;
`ToReplay`: inserted into a host replay), with the jitted assembly of a [T+K, B]
trajectory from the entries of a rollout. Sebulba's actor threads and SEED's inference
server produce; the learner (learner.py) consumes.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from podracer import trajectories
from podracer.agent import Agent
from podracer.errors import ReplayTimeout
from podracer.experience import HostReplay
from podracer.runtimes.host import threads
from podracer.runtimes.host.params import shard_over
from podracer.types import PyTree, Trajectory


class Batch(NamedTuple):
  """What an actor thread hands the learner for each trajectory."""
  shards: PyTree          # Trajectory [L, T+K, B/L] sharded over the learners; None
                          # when the trajectory went to a host replay instead
  params_version: int     # version of the parameters that acted
  env_steps: int
  episodes: np.ndarray    # metrics.episode_sums over the episodes that ended
  actor_times: Dict[str, float]
  oldest_version: Optional[int] = None  # SEED: entries' versions differ within a batch


def act_and_advance_key(act, params, actor_state, timestep, key):
  # Splitting the key inside the jitted call saves a dispatch per environment step.
  key, act_key = jax.random.split(key)
  out, actor_state = act(params, actor_state, timestep, act_key)
  return out, actor_state, key


def split_for_learners(num_learners: int, trajectory: Trajectory) -> Trajectory:
  """[T+K, B] -> [L, T+K, B/L]: learner i gets environments i*B/L to (i+1)*B/L - 1."""
  def split(x):
    x = x.reshape(x.shape[0], num_learners, -1, *x.shape[2:])
    return jnp.moveaxis(x, 1, 0)
  return jax.tree.map(split, trajectory)


def stack_and_split(num_learners: int, entries: List[Trajectory]) -> Trajectory:
  """T+K entries of [B, ...] -> a [L, T+K, B/L, ...] trajectory, one slice per learner."""
  return split_for_learners(num_learners, trajectories.stack(entries))


def join_groups(groups: List[PyTree]) -> PyTree:
  """One pytree per group of environments ([B/G, ...] leaves) -> one [B, ...] pytree."""
  if len(groups) == 1:
    return groups[0]
  return jax.tree.map(lambda *xs: jnp.concatenate(xs), *groups)


def _trajectory(earlier, stepped, pending) -> Trajectory:
  """earlier [K-1, B], T stepped entries per group, pending per group -> [T+K, B]."""
  entries = [join_groups(list(step)) for step in zip(*stepped)]
  return trajectories.assemble(earlier, trajectories.stack(entries), join_groups(pending))


# Module-level jits with static sizes: every run (and `run_actors` call) of a runtime
# reuses one compilation instead of compiling its own closure again mid-measurement.
@functools.partial(jax.jit, static_argnums=(0, 1))
def _assemble_split(num_learners: int, overlap: int, earlier, stepped, pending):
  """(earlier, stepped entries, pending), per group -> (the trajectory split over the
  learners, the next `earlier`)."""
  trajectory = _trajectory(earlier, stepped, pending)
  return split_for_learners(num_learners, trajectory), _next_earlier(trajectory, overlap)


@functools.partial(jax.jit, static_argnums=(0,))
def _assemble_items(agent: Agent, earlier, stepped, pending):
  """(earlier, stepped entries, pending), per group -> (the trajectory's replay items,
  the next `earlier`)."""
  trajectory = _trajectory(earlier, stepped, pending)
  return agent.replay_items(trajectory), _next_earlier(trajectory,
                                                       agent.trajectory_overlap)


@functools.partial(jax.jit, static_argnums=(1,))
def _first_earlier(pending: List[Trajectory], overlap: int) -> Trajectory:
  first = join_groups(pending)
  return trajectories.split_last(trajectories.first_entries(first, overlap))[0]


def _next_earlier(trajectory: Trajectory, overlap: int) -> Trajectory:
  return trajectories.split_last(trajectories.last_entries(trajectory, overlap))[0]


class ToLearners:
  """Splits each trajectory along B over the learner devices and queues the shards."""

  def __init__(self, learner_devices: List[jax.Device], batches: "queue.Queue",
               overlap: int):
    self.learners, self.batches = learner_devices, batches
    self.finish = functools.partial(_assemble_split, len(learner_devices), overlap)
    # A whole [T+K, B] trajectory (SEED's server assembles them) -> what `deliver` takes.
    self.prepare = jax.jit(functools.partial(split_for_learners, len(learner_devices)))

  def deliver(self, split: PyTree, batch: Batch, stop: threading.Event) -> Optional[float]:
    """Queues the batch; the seconds it waited for room, or None if the run stopped."""
    return _timed_put(self.batches, batch._replace(shards=shard_over(self.learners, split)),
                      stop)


class ToReplay:
  """Inserts each trajectory's replay items into a host replay; the learner's queue
  (unbounded, so it never holds an actor back) gets only the batch's statistics."""

  def __init__(self, agent: Agent, replay: HostReplay, batches: "queue.Queue"):
    self.replay, self.batches = replay, batches
    self.finish = functools.partial(_assemble_items, agent)
    self.prepare = jax.jit(agent.replay_items)
    self.streams = True  # `deliver` takes each stream's rows on their own (SEED).

  def deliver(self, items: PyTree, batch: Batch, stop: threading.Event,
              stream: Any = None) -> Optional[float]:
    """Inserts the items (their rows continue `stream`'s, by default the calling
    thread's), then queues the statistics; None if the run stopped."""
    start = time.perf_counter()
    items = jax.device_get(items)
    named = {} if stream is None else dict(stream=stream)
    # The rate limiter may hold inserts back for long: retry while the run goes on.
    while not stop.is_set():
      try:
        self.replay.insert(items, **named)
        break
      except ReplayTimeout:
        continue
    else:
      return None
    batch.actor_times["actor_wait_replay"] = time.perf_counter() - start
    return _timed_put(self.batches, batch, stop)


def _timed_put(q: "queue.Queue", batch: Batch, stop: threading.Event) -> Optional[float]:
  start = time.perf_counter()
  return time.perf_counter() - start if threads.put(q, batch, stop) else None
