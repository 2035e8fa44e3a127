"""The actor-to-learner data path of a host runtime (Sebulba, SEED), chosen once at build.

The write side (what producers hand their trajectories to) and the read side (what the
learner learns from) are declared as one unit, as Acme's replay tables, adders and
dataset iterators are:

  QueuePath   trajectories split over the learner devices and queued, at most
              `queue_size` in flight (`ToLearners`), learned in turn (`FromQueue`).
  ReplayPath  replay items inserted into a host replay (`ToReplay`), batches sampled
              from it (`FromReplay`); the queue only carries the actors' statistics.
              With `max_policy_lag=0` (Sebulba) acting and learning take turns: each
              trajectory is inserted, then the learner takes the updates its
              `samples_per_insert` allows, then the next trajectory is acted with the
              new parameters, so the run is the same every time.

Every check (divisibility, memory in flight, processes, policy lag) runs in the
constructor, so a bad config fails at build time, before any thread starts.
"""

from __future__ import annotations

import os
import queue
from typing import Any, List, Optional, Tuple

import jax

from podracer import distributed, trajectories
from podracer.agent import Agent, item_spec
from podracer.errors import ConfigError
from podracer.experience import HostReplay, host_replay
from podracer.lifecycle.memory import check_device_fits, tree_bytes
from podracer.runtimes.host.batches import ToLearners, ToReplay
from podracer.runtimes.host.learner import FromQueue, FromReplay
from podracer.types import PyTree, Trajectory

REPLAY_DIR = "reverb"  # A checkpointed host replay's own files, in the checkpoints' folder.


class QueuePath:
  """Producers -> a bounded queue of trajectories sharded over the learners -> learner."""

  replay = None

  def __init__(self, agent: Agent, learners: List[jax.Device], spec: Any, *,
               batch_envs: int, rollout_length: int, queue_size: int,
               updates_per_batch: int, producers: int, batch_key: str):
    self.agent, self.learners, self.spec = agent, learners, spec
    self.batch_envs, self.rollout_length = batch_envs, rollout_length
    self.queue_size, self.updates_per_batch = queue_size, updates_per_batch
    if batch_envs % len(learners):
      raise ConfigError(f"`runtime.{batch_key}` ({batch_envs}) must divide evenly over "
                        f"the {len(learners)} learner devices.")
    # In flight: the queue's, one being assembled per producer, one being learned.
    in_flight = queue_size + producers + 1
    check_device_fits(
        f"{in_flight} trajectories in flight", in_flight * tree_bytes(
            self.trajectory_spec(batch_envs)) // len(learners),
        ["runtime.queue_size", f"runtime.{batch_key}", "runtime.rollout_length"], learners)

  def trajectory_spec(self, num_envs: int) -> Trajectory:
    return trajectories.trajectory_spec(self.agent, self.spec, num_envs, self.rollout_length)

  def init_experience(self) -> PyTree:
    """One learner replica's experience: room for its slice of every trajectory."""
    shard = self.batch_envs // len(self.learners)
    return self.agent.init_experience(self.trajectory_spec(shard))

  def open(self, checkpointer: Optional[Any] = None) -> Tuple[ToLearners, FromQueue]:
    """A fresh queue and its two ends: (the producers' output, the learner's source)."""
    del checkpointer  # The queue holds nothing worth keeping.
    batches: "queue.Queue" = queue.Queue(maxsize=self.queue_size)
    return (ToLearners(self.learners, batches, self.agent.trajectory_overlap),
            FromQueue(self.agent, self.learners, self.updates_per_batch, batches))

  def save(self, checkpointer: Any) -> None:
    del checkpointer

  def close(self) -> None:
    pass


class ReplayPath:
  """Producers -> a host replay (Reverb, or podracer's own host replay) -> learner."""

  def __init__(self, agent: Agent, learners: List[jax.Device], spec: Any,
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
    needed = spi * items + self.replay.batch_size * len(self.learners)
    if buffer is not None and needed > buffer:
      raise ConfigError(
          f"`runtime.max_policy_lag=0` with a host replay needs `replay.error_buffer` >= "
          f"samples_per_insert x items per trajectory + a learner batch = {needed:g} "
          f"(it is {buffer:g}); raise it with --config.replay.error_buffer={needed:g}.")

  def trajectory_spec(self, num_envs: int) -> Trajectory:
    return trajectories.trajectory_spec(self.agent, self.spec, num_envs, self.rollout_length)

  def init_experience(self) -> None:
    return None  # The replay holds the experience, off the learner devices.

  def open(self, checkpointer: Optional[Any] = None) -> Tuple[ToReplay, FromReplay]:
    """Starts the replay (from its checkpoint, if any); (the output, the source)."""
    if checkpointer is not None and getattr(self.replay, "checkpointed", False):
      self.replay.use_checkpoint_dir(os.path.join(checkpointer.directory, REPLAY_DIR))
    spec = self.trajectory_spec(self.batch_envs)
    try:
      # Items that are whole trajectories repeat their stream's last `overlap` entries.
      self.replay.start(item_spec(self.agent, spec), overlap=self.agent.trajectory_overlap)
    except ImportError as e:  # Reverb lives in its own install lane.
      raise ConfigError(f"{e} Or use --config.replay.name=device.") from e
    # The queue carries only statistics, and must never block a producer.
    batches: "queue.Queue" = queue.Queue()
    return (ToReplay(self.agent, self.replay, batches),
            FromReplay(self.agent, self.replay, self.learners, batches, self.in_turns))

  def save(self, checkpointer: Any) -> None:
    if getattr(self.replay, "checkpointed", False):  # Reverb: through its client.
      self.replay.checkpoint(keep=checkpointer.keep)

  def close(self) -> None:
    self.replay.close()


def data_path(agent: Agent, learners: List[jax.Device], spec: Any, *, batch_envs: int,
              rollout_length: int, queue_size: int, updates_per_batch: int,
              max_policy_lag: Optional[int], producers: int, batch_key: str,
              turns: bool = True) -> Any:
  """The agent's path: a host replay's if it has one, else the learners' queue.
  `batch_envs` environments make one trajectory (`runtime.{batch_key}`), `producers`
  threads assemble them; `turns`: whether they take turns with the learner at lag 0
  with a host replay (Sebulba's actor threads; not SEED's streams)."""
  replay = host_replay(agent)
  if replay is not None:
    return ReplayPath(agent, learners, spec, replay, batch_envs=batch_envs,
                      rollout_length=rollout_length, max_policy_lag=max_policy_lag,
                      turns=turns)
  return QueuePath(agent, learners, spec, batch_envs=batch_envs,
                   rollout_length=rollout_length, queue_size=queue_size,
                   updates_per_batch=updates_per_batch, producers=producers,
                   batch_key=batch_key)
