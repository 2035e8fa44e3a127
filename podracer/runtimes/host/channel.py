"""The one channel for experience of a host runtime (Sebulba, SEED): producers `put` whole
[T+K, B] trajectories into it, the learner `get`s what it learns from next. It is chosen
once, at build, in one of two forms, each declaring both ends as one unit (as Acme's
replay tables, adders and dataset iterators are):

  TrajectoryQueue   each trajectory split along B over the learner devices
                    (`mesh.split_batch`, learners.LearnerMesh) and queued, at most
                    `queue_size` in flight; the learner gets them in turn.
  TrajectoryReplay  each trajectory's replay items inserted into a host replay; the
                    learner gets batches sampled from it, and the queue carries only the
                    producers' statistics. With `max_policy_lag=0` (Sebulba) acting and
                    learning take turns: each trajectory is inserted, then the learner
                    takes the updates its `samples_per_insert` allows, then the next
                    trajectory is acted with the new parameters, so the run is the same
                    every time.

Every check (divisibility, memory in flight, processes, policy lag) runs in the
constructor, so a bad config fails at build time, before any thread starts.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import jax
import numpy as np

from podracer import distributed, mesh as mesh_lib, trajectories
from podracer.agent import Agent, item_spec
from podracer.errors import ConfigError, ReplayTimeout
from podracer.experience import HostReplay, host_replay, sample_for_replicas
from podracer.lifecycle.memory import check_device_fits, tree_bytes
from podracer.logs.meters import RateMeter
from podracer.runtimes.host import threads
from podracer.runtimes.host.learners import LearnerMesh
from podracer.types import PyTree, Trajectory

REPLAY_DIR = "reverb"  # A checkpointed host replay's own files, in the checkpoints' folder.
WARM_UP_POLL = 0.01  # seconds between a warming-up learner's counts of the actors' steps


class Batch(NamedTuple):
  """What a producer hands the learner with each trajectory: its statistics."""
  shards: PyTree          # Trajectory [R, T+K, B/R] sharded over the R learner replicas (the
                          # queue fills it in); None when it went to a host replay
  params_version: int     # version of the parameters that acted
  env_steps: int
  episodes: np.ndarray    # metrics.episode_sums over the episodes that ended
  actor_times: Dict[str, float]
  oldest_version: Optional[int] = None  # SEED: entries' versions differ within a batch


class Step(NamedTuple):
  """What the learner gets from the channel."""
  inputs: Any           # what the learner's update takes; None: nothing yet, poll again
  batches: List[Batch]  # producer batches that arrived (env steps, episodes, lag, timings)


class TrajectoryQueue:
  """Producers -> a bounded queue of trajectories sharded over the learners -> learner."""

  replay = None
  in_turns = False  # Every trajectory is one update: no turns to pass.

  def __init__(self, agent: Agent, learners: LearnerMesh, spec: Any, *,
               batch_envs: int, rollout_length: int, queue_size: int, producers: int,
               batch_key: str):
    self.agent, self.learners, self.spec = agent, learners, spec
    self.batch_envs, self.rollout_length, self.queue_size = (
        batch_envs, rollout_length, queue_size)
    if batch_envs % learners.replicas:
      raise ConfigError(f"`runtime.{batch_key}` ({batch_envs}) must divide evenly over "
                        f"the {learners.replicas} learner replicas.")
    # In flight: the queue's, one being assembled per producer, one being learned.
    in_flight = queue_size + producers + 1
    check_device_fits(
        f"{in_flight} trajectories in flight", in_flight * tree_bytes(
            self.trajectory_spec(batch_envs)) // learners.replicas,
        ["runtime.queue_size", f"runtime.{batch_key}", "runtime.rollout_length"],
        learners.devices)
    self._split = jax.jit(functools.partial(mesh_lib.split_batch, learners.replicas))
    self._batches: "queue.Queue[Batch]" = queue.Queue(maxsize=queue_size)

  def trajectory_spec(self, num_envs: int) -> Trajectory:
    return trajectories.trajectory_spec(self.agent, self.spec, num_envs, self.rollout_length)

  def init_experience(self) -> PyTree:
    """One learner replica's experience: room for its slice of every trajectory."""
    shard = self.batch_envs // self.learners.replicas
    return self.agent.init_experience(self.trajectory_spec(shard))

  def open(self, checkpointer: Optional[Any] = None) -> None:
    """An empty queue for a new run."""
    del checkpointer  # The queue holds nothing worth keeping.
    self._batches = queue.Queue(maxsize=self.queue_size)

  def takes_streams(self) -> bool:
    """Whether `put` keeps each producer stream's rows apart (a replay's items continue
    their stream's): no, a trajectory is learned whole."""
    return False

  def put(self, trajectory: Trajectory, batch: Batch, stop: threading.Event,
          stream: Any = None) -> Optional[float]:
    """Splits the [T+K, B] trajectory over the learner replicas and queues it with the
    batch; the seconds it waited for room, or None if the run stopped first."""
    del stream
    shards = self.learners.put(self._split(trajectory))
    return _timed_put(self._batches, batch._replace(shards=shards), stop)

  def get(self, stop: threading.Event) -> Optional[Step]:
    """The next trajectory, sharded, with its batch; None if the run stopped first."""
    batch = threads.get(self._batches, stop)
    return None if batch is None else Step(batch.shards, [batch])

  def depth(self) -> int:
    return self._batches.qsize()

  def extras(self) -> Dict[str, float]:
    return {}

  def save(self, checkpointer: Any) -> None:
    del checkpointer

  def close(self) -> None:
    pass


class TrajectoryReplay:
  """Producers -> a host replay (Reverb, or podracer's own host replay) -> learner."""

  def __init__(self, agent: Agent, learners: LearnerMesh, spec: Any,
               replay: HostReplay, *, batch_envs: int, rollout_length: int,
               max_policy_lag: Optional[int], turns: bool):
    self.agent, self.learners, self.spec, self.replay = agent, learners, spec, replay
    self.batch_envs, self.rollout_length = batch_envs, rollout_length
    if distributed.process_count() > 1:
      # Sampling may time out on one process and not another: their updates would differ.
      raise ConfigError("A host replay runs in one process; over several processes use "
                        "an agent that learns from the actors' queue.")
    self.in_turns = max_policy_lag is not None
    if self.in_turns:
      self._check_turns(max_policy_lag, turns)
    self._items = jax.jit(agent.replay_items)
    # The queue carries only statistics, and must never block a producer.
    self._batches: "queue.Queue[Batch]" = queue.Queue()
    self.warming_up = True  # until the replay first holds min_size items
    # Mean env steps since the sampled items were inserted, per batch since the last
    # record; from a replay that can tell (the host replay: `sampled_age`).
    self._ages: List[float] = []
    self.meter = RateMeter()

  def _check_turns(self, max_policy_lag: int, turns: bool) -> None:
    """With a host replay the only lag bound is 0: acting and learning take turns."""
    if max_policy_lag != 0 or not turns:
      takes = "0 (acting and learning take turns) or None" if turns else "None"
      raise ConfigError(
          f"`runtime.max_policy_lag` with a host replay: the learner samples from the "
          f"replay rather than learning from each trajectory once, so the lag is "
          f"{takes} here; got {max_policy_lag!r}. Set --config.runtime.max_policy_lag="
          f"{'0 or None' if turns else 'None'}.")
    spi = getattr(self.replay, "samples_per_insert", None)
    buffer = getattr(self.replay, "error_buffer", None)
    if spi is None:
      raise ConfigError("`runtime.max_policy_lag=0` with a host replay takes as many "
                        "updates per trajectory as `replay.samples_per_insert` allows; "
                        "set it (for example --config.replay.samples_per_insert=1.0).")
    # Inserting the next trajectory must fit the rate limiter's slack on top of the
    # part of a batch the learner left, or the actors and the learner wait on each other.
    items = jax.tree.leaves(jax.eval_shape(self.agent.replay_items,
                                           self.trajectory_spec(self.batch_envs)))[0].shape[0]
    needed = spi * items + self.replay.batch_size * self.learners.replicas
    if buffer is not None and needed > buffer:
      raise ConfigError(
          f"`runtime.max_policy_lag=0` with a host replay needs `replay.error_buffer` >= "
          f"samples_per_insert x items per trajectory + a learner batch = {needed:g} "
          f"(it is {buffer:g}); raise it with --config.replay.error_buffer={needed:g}.")

  def trajectory_spec(self, num_envs: int) -> Trajectory:
    return trajectories.trajectory_spec(self.agent, self.spec, num_envs, self.rollout_length)

  def init_experience(self) -> None:
    return None  # The replay holds the experience, off the learner devices.

  def open(self, checkpointer: Optional[Any] = None) -> None:
    """Starts the replay (from its checkpoint, if any) for a new run."""
    if checkpointer is not None and getattr(self.replay, "checkpointed", False):
      self.replay.use_checkpoint_dir(os.path.join(checkpointer.directory, REPLAY_DIR))
    spec = self.trajectory_spec(self.batch_envs)
    try:
      # Items that are whole trajectories repeat their stream's last `overlap` entries.
      self.replay.start(item_spec(self.agent, spec), overlap=self.agent.trajectory_overlap)
    except ImportError as e:  # Reverb lives in its own install lane.
      raise ConfigError(f"{e} Or use --config.replay.name=device.") from e
    self._batches, self.warming_up, self._ages = queue.Queue(), True, []
    info = self.replay.info()
    self.meter = RateMeter(info["replay_inserts"], info["replay_samples"])

  def takes_streams(self) -> bool:
    """Whether `put` keeps each producer stream's rows apart: yes, a replay's items
    continue their stream's (SEED's workers each put their own)."""
    return True

  def put(self, trajectory: Trajectory, batch: Batch, stop: threading.Event,
          stream: Any = None) -> Optional[float]:
    """Inserts the trajectory's replay items (their rows continue `stream`'s, by default
    the calling thread's), then queues the batch's statistics; the seconds the queue
    took, or None if the run stopped first."""
    start = time.perf_counter()
    items = jax.device_get(self._items(trajectory))
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
    return _timed_put(self._batches, batch, stop)

  def get(self, stop: threading.Event) -> Optional[Step]:
    """A sampled batch with the statistics that arrived; in turns, the next trajectory's
    statistics with the number of updates the replay's rate allows now. Inputs None
    while the replay fills (or a sample timed out); None if the run stopped."""
    if self.in_turns:
      return self._next_turn(stop)
    arrived = threads.drain(self._batches)
    if self._still_filling():
      # Count the actors' steps as they come (records, the step budget) rather than
      # wait out the replay's sampling timeout; often, for nothing but the learner holds
      # the actors to the budget while the replay fills (at 0.1 s, runs of a few
      # thousand env steps overshot by 80 %).
      stop.wait(WARM_UP_POLL)
      return Step(None, arrived + threads.drain(self._batches))
    try:
      return Step(self.sample(), arrived)
    except ReplayTimeout:
      return Step(None, arrived)

  def _still_filling(self) -> bool:
    """Whether the replay holds fewer than `min_size` items; asked of the replay only
    until it first holds them (a replay never shrinks below `min_size`)."""
    if self.warming_up:
      self.warming_up = self.replay.info()["replay_size"] < self.replay.min_size
    return self.warming_up

  def _next_turn(self, stop: threading.Event) -> Optional[Step]:
    batch = threads.get(self._batches, stop)
    if batch is None:
      return None
    if self._still_filling():
      return Step(None, [batch])
    info = self.replay.info()
    allowed = self.replay.samples_per_insert * (info["replay_inserts"] - self.replay.min_size)
    per_update = self.replay.batch_size * self.learners.replicas
    return Step(max(0, int((allowed - info["replay_samples"]) // per_update)), [batch])

  def sample(self) -> Tuple[PyTree, np.ndarray]:
    """A batch for every learner replica, sharded over them, and the replay's keys of its
    items."""
    n = self.learners.replicas
    items, keys, probabilities, size = self.replay.sample_batch(self.replay.batch_size * n)
    sampled_age = getattr(self.replay, "sampled_age", None)
    age = None if sampled_age is None else sampled_age(keys)
    if age is not None:  # None: a replay that cannot tell (Reverb shared by processes)
      self._ages.append(age)
    sample = sample_for_replicas(items, probabilities, size, n)
    return self.learners.put(sample), keys

  def write_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
    self.replay.write_priorities(keys, priorities)

  def depth(self) -> int:
    return self._batches.qsize()

  def extras(self) -> Dict[str, float]:
    info = self.replay.info()
    extras = dict(replay_size=info["replay_size"],
                  replay_fill=info["replay_size"] / max(self.replay.min_size, 1),
                  **self.meter.rates(info["replay_inserts"], info["replay_samples"]))
    if "replay_bytes" in info:  # Memory the replay holds (the host replay reports it).
      extras["replay_bytes"] = info["replay_bytes"]
    if self._ages:
      extras["sampled_age"] = float(np.mean(self._ages))
      self._ages.clear()
    return extras

  def save(self, checkpointer: Any) -> None:
    if getattr(self.replay, "checkpointed", False):  # Reverb: through its client.
      self.replay.checkpoint(keep=checkpointer.keep)

  def close(self) -> None:
    self.replay.close()


def channel(agent: Agent, learners: LearnerMesh, spec: Any, *, batch_envs: int,
            rollout_length: int, queue_size: int, max_policy_lag: Optional[int],
            producers: int, batch_key: str, turns: bool = True) -> Any:
  """The agent's channel: a host replay's if it has one, else the learners' queue.
  `batch_envs` environments make one trajectory (`runtime.{batch_key}`), `producers`
  threads put them; `turns`: whether they take turns with the learner at lag 0 with a
  host replay (Sebulba's actor threads; not SEED's streams)."""
  replay = host_replay(agent)
  if replay is not None:
    return TrajectoryReplay(agent, learners, spec, replay, batch_envs=batch_envs,
                            rollout_length=rollout_length, max_policy_lag=max_policy_lag,
                            turns=turns)
  return TrajectoryQueue(agent, learners, spec, batch_envs=batch_envs,
                         rollout_length=rollout_length, queue_size=queue_size,
                         producers=producers, batch_key=batch_key)


def _timed_put(q: "queue.Queue", batch: Batch, stop: threading.Event) -> Optional[float]:
  start = time.perf_counter()
  return time.perf_counter() - start if threads.put(q, batch, stop) else None
