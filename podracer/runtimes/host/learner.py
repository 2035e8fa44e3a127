"""Sebulba's and SEED's learner thread: one loop over what the channel (channel.py) gives.

The update says what the learner does with it:
  TrajectoryUpdate  each queued trajectory, already sharded over the learner devices:
                    `observe` + `updates_per_batch` x `update`, over the learners' mesh.
  SampleUpdate      batches sampled from a host replay as fast as its rate limiter
                    allows; new priorities go back. In turns (`in_turns`, Sebulba's
                    `max_policy_lag=0`) each step waits for one trajectory's statistics
                    (it is in the replay then) and takes the updates
                    `samples_per_insert` allows: none while the replay fills.
The loop (`Learner.loop`) learns, pushes the new parameters to the actor devices, and
writes a metrics record through one `metrics.Window` every `log_interval` seconds.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import distributed, mesh as mesh_lib
from podracer.agent import Agent
from podracer.logs.meters import RateMeter, Window, device_counts, warming_up
from podracer.runtime import Plan
from podracer.runtimes.compile_once import compile_once
from podracer.runtimes.host import threads
from podracer.runtimes.host.channel import Batch
from podracer.runtimes.host.learners import WHOLE, LearnerMesh
from podracer.runtimes.host.params import ParamsStore, checksum, first_replica
from podracer.types import REPLICA_AXIS, PyTree, replica_mean

LearnerState = Tuple[PyTree, PyTree, PyTree]  # nets, opt, experience: [R, ...] each


def _replica_mean_of_means(metrics):
  return replica_mean(jax.tree.map(jnp.mean, metrics))


class TrajectoryUpdate:
  """Learns from each queued trajectory in turn (the experience is in-graph): observe,
  then `updates_per_batch` updates, over the learners' mesh."""

  def __init__(self, agent: Agent, learners: LearnerMesh, updates_per_batch: int):
    self.agent, self.updates_per_batch = agent, updates_per_batch
    self.meter = RateMeter()  # Rates of a device replay on the learners, if any.
    self.mesh = learners.mesh
    self._learn = learners.spmd(
        compile_once(self._learn_replica, "The Sebulba learner step"),
        (learners.specs, WHOLE, WHOLE), (learners.specs, WHOLE), donate=True)

  def _learn_replica(self, state, trajectory, key):
    nets, opt, experience = state
    experience = self.agent.observe(experience, trajectory)

    def one_update(carry, update_key):
      nets, opt, experience = carry
      nets, opt, experience, metrics = self.agent.update(nets, opt, experience, update_key)
      return (nets, opt, experience), metrics

    state, metrics = jax.lax.scan(one_update, (nets, opt, experience),
                                  jax.random.split(key, self.updates_per_batch))
    return state, _replica_mean_of_means(metrics)

  def learn(self, state: LearnerState, shards: Any, keys: np.ndarray):
    return self._learn(state, shards, mesh_lib.feed(self.mesh, keys))

  def extras(self, state: Optional[LearnerState]) -> Dict[str, float]:
    counts = None if state is None else device_counts(self.agent.replay, state[2])
    return self.meter.rates(*counts) if counts else {}


class SampleUpdate:
  """Learns from batches sampled from the channel's host replay, writing new priorities
  back; in turns, as many updates as the channel's step allows."""

  def __init__(self, agent: Agent, channel: Any, learners: LearnerMesh):
    self.agent, self.channel = agent, channel
    self.gradient_steps = 0  # this process's, since it started (`updates` counts turns)
    self.mesh = learners.mesh
    nets_opt = learners.specs[:2]
    self._learn = learners.spmd(
        compile_once(self._learn_replica, "The Sebulba replay learner step"),
        (nets_opt, WHOLE, WHOLE), (nets_opt, WHOLE, WHOLE), donate=True)

  def _learn_replica(self, nets_opt, sample, key):
    nets, opt = nets_opt
    nets, opt, sample, metrics = self.agent.update(nets, opt, sample, key)
    return (nets, opt), sample.priorities, _replica_mean_of_means(metrics)

  def learn(self, state: LearnerState, inputs: Any, keys: np.ndarray):
    """One update on a sample; in turns, `inputs` updates (metrics None for none), each
    on a batch sampled once the last one's priorities went back."""
    if not self.channel.in_turns:
      return self._learn_sample(state, inputs, keys)
    metrics = None
    for i in range(inputs):
      update_keys = np.stack([np.asarray(jax.random.fold_in(k, i)) for k in keys])
      state, metrics = self._learn_sample(state, self.channel.sample(), update_keys)
    return state, metrics

  def _learn_sample(self, state: LearnerState, inputs: Any, keys: np.ndarray):
    sample, replay_keys = inputs
    (nets, opt), priorities, metrics = self._learn(state[:2], sample,
                                                   mesh_lib.feed(self.mesh, keys))
    self.channel.write_priorities(replay_keys, mesh_lib.local(priorities).reshape(-1))
    self.gradient_steps += 1
    return (nets, opt, None), metrics

  def extras(self, state: Optional[LearnerState]) -> Dict[str, float]:
    del state
    if self.channel.in_turns:  # `updates` counts turns, some of which take no gradient step.
      return dict(gradient_steps=self.gradient_steps)
    return {}


def update_for(agent: Agent, channel: Any, learners: LearnerMesh,
               updates_per_batch: int) -> Any:
  """The learner's update for the channel's form: on queued trajectories, or on samples
  of its host replay."""
  if channel.replay is None:
    return TrajectoryUpdate(agent, learners, updates_per_batch)
  return SampleUpdate(agent, channel, learners)


@dataclasses.dataclass
class Progress:
  """The learner's counters: what a checkpoint keeps beside the state (checkpoint.py)."""
  env_steps: int = 0   # taken by the actors and counted by the learner
  updates: int = 0     # learner steps (the parameters' version)
  episodes: int = 0    # finished
  records: int = 0     # metrics records put (those of the run it resumed included)


class StopVote:
  """Over several processes, whether process 0 has reached `stop_at_return`, agreed in
  one collective after every update: each process's logger sees its own episodes, and
  stopping at different updates would leave the others waiting in the learners'
  collectives. Process 0's vote decides, since its records are the run's metrics."""

  def __init__(self, learners: LearnerMesh, target_reached: Callable[[], bool]):
    self.target_reached, self.num_learners = target_reached, learners.replicas
    self.mesh = learners.mesh
    self._max = learners.spmd(lambda x: jax.lax.pmax(x, REPLICA_AXIS), (WHOLE,), WHOLE)

  def __call__(self) -> bool:
    vote = distributed.is_main() and self.target_reached()
    votes = mesh_lib.feed(self.mesh, np.full(self.num_learners, vote, np.int32))
    return bool(mesh_lib.local(self._max(votes))[0])


class Learner:
  """The learner thread's loop: learn what the channel gives until the actors have taken the
  plan's env steps, push parameters after every update, write metrics records, and call
  `checkpoint` (if given) after each update: it saves when its interval is due.

  With several processes, every update takes one batch on each process: env steps and
  steps/s count all of them (the processes step in lockstep), so each process makes the
  same number of updates and the learners' collectives match. Episode statistics are
  this process's. The last record carries `params_checksum`, to compare processes, and
  a `stop_vote` (StopVote) ends every process after the same update.
  """

  MEANS = ("learner_update_time", "learner_wait_time", "policy_lag")

  def __init__(self, channel: Any, update: Any, store: ParamsStore, records: "queue.Queue",
               plan: Plan, num_learners: int, log_interval: float, key: jax.Array,
               progress: Optional[Progress] = None,
               checkpoint: Optional[Callable[[], bool]] = None,
               evaluate: Optional[Any] = None, fail_after_first_update: bool = False):
    self.channel, self.update = channel, update  # update_for(channel)
    self.store, self.records, self.plan = store, records, plan
    self.num_learners, self.log_interval = num_learners, log_interval
    self.key, self.progress = key, progress or Progress()
    self.checkpoint = checkpoint
    # `evaluate(nets [L, ...], env_steps_before, env_steps)`: an `eval_return` when due.
    self.evaluate = evaluate
    self.fail_after_first_update = fail_after_first_update
    self.stop_vote: Optional[StopVote] = None

  def loop(self, state: List[Any], stop: threading.Event) -> None:
    """Updates `state` ([nets, opt, experience]), `key` and `progress` in place, so the
    runtime can return and checkpoint them."""
    total, progress = self.plan.total_env_steps, self.progress
    first, waited, started = True, 0.0, progress.updates
    processes, first_learner = distributed.process_count(), distributed.process_index()
    first_learner *= self.num_learners
    evaluated_at = progress.env_steps
    window = Window(self.MEANS)
    while progress.env_steps < total:
      if stop.is_set():
        return
      start = time.perf_counter()
      step = self.channel.get(stop)
      waited += time.perf_counter() - start
      if step is None:
        return
      self._count(step.batches, window, processes)
      if step.inputs is None:  # A host replay still filling: say so every log_interval.
        if self.channel.in_turns:  # The actors wait for this turn.
          progress.updates += 1
          self.store.advance(progress.updates)
        ended = progress.env_steps >= total
        if ended or time.perf_counter() - window.start >= self.log_interval:
          window = self._warming_up(window)
        continue
      if self.fail_after_first_update and progress.updates == started + 1:
        raise threads.injected_failure("learner")
      self._learn(state, step.inputs, window, first_learner, processes)
      window.add_mean("learner_wait_time", waited)
      waited = 0.0
      if self.evaluate is not None:
        value = self.evaluate(state[0], evaluated_at, progress.env_steps)
        evaluated_at = progress.env_steps
        if value is not None:
          window.add_mean("eval_return", value)
      stopping = self.stop_vote is not None and self.stop_vote()
      last = stopping or progress.env_steps >= total
      if first or time.perf_counter() - window.start >= self.log_interval or last:
        checksummed = processes > 1 and last
        window = self._put_record(window, state, first=first, params_checksum=(
            checksum(first_replica(state[0])) if checksummed else None))
        first = False
      if self.checkpoint is not None and self.checkpoint():  # saved; a stop all agreed
        break
      if stopping:
        break
    stop.set()

  def _learn(self, state: List[Any], inputs: Any, window: Window, first_learner: int,
             processes: int) -> None:
    """One update (the update's `learn`): `state` in place, the new parameters pushed."""
    key, learn_key = jax.random.split(self.key)
    # One key per learner of all processes; this process's learners take theirs.
    learn_keys = np.stack([np.asarray(k) for k in jax.random.split(
        learn_key, self.num_learners * processes)[first_learner:][:self.num_learners]])
    start = time.perf_counter()
    new_state, metrics = self.update.learn(tuple(state), inputs, learn_keys)
    if metrics is None:  # A turn that took no gradient step: the same parameters.
      self.store.advance(self.progress.updates + 1)
    else:
      self.store.push(first_replica(new_state[0]), self.progress.updates + 1)
      window.add_metrics(jax.device_get(first_replica(metrics)))
    window.add_mean("learner_update_time", time.perf_counter() - start)
    state[:] = list(new_state)
    self.key, self.progress.updates = key, self.progress.updates + 1

  def _count(self, batches: List[Batch], window: Window, processes: int) -> None:
    """Counts the actor batches that arrived into the progress and the window."""
    progress = self.progress
    for batch in batches:
      progress.env_steps += batch.env_steps * processes
      progress.episodes += int(batch.episodes[0])
      window.add_steps(batch.env_steps * processes, batch.episodes)
      window.add_mean("policy_lag", progress.updates - batch.params_version)
      oldest = batch.params_version if batch.oldest_version is None else batch.oldest_version
      window.add_max("policy_lag_max", progress.updates - oldest)
      for k, v in batch.actor_times.items():
        window.add_mean(k, v)

  def _warming_up(self, window: Window) -> Window:
    """A record before the first update: what the actors did, how full the replay is."""
    return self._put_record(window, None, learning_started=False,
                            replay_min_size=self.channel.replay.min_size)

  def _put_record(self, window: Window, state: Optional[List[Any]], **fields: Any) -> Window:
    """Puts the window's record (with the channel's and the update's extras and `fields` that are not None)
    for the runtime to log; returns a new window. `state` None: before the first update."""
    progress = self.progress
    record = window.record(progress.env_steps, progress.updates * self.plan.updates_per_round)
    record["queue_depth"] = self.channel.depth()
    record.update(self.channel.extras())
    record.update(self.update.extras(None if state is None else tuple(state)))
    record.update({k: v for k, v in fields.items() if v is not None})
    if state is not None:  # A device replay's warm-up (a host replay's has no updates).
      record.update(warming_up(record, getattr(self.update.agent, "replay", None)))
    self.records.put(record)
    progress.records += 1
    return Window(self.MEANS)
