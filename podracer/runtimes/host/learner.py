"""Sebulba's learner thread: one loop over a source of batches.

A source says what each update learns from:
  FromQueue   the trajectories actors queued, already sharded over the learner devices:
              `observe` + `updates_per_batch` x `update`, over the learners' mesh.
  FromReplay  batches sampled from a host replay as fast as its rate limiter allows; the
              actors' queue brings only their statistics; new priorities go back. In
              turns (`in_turns`, Sebulba's `max_policy_lag=0`) each step waits for one
              trajectory's statistics (it is in the replay then) and takes the updates
              `samples_per_insert` allows: none while the replay fills.
The loop (`Learner.loop`) learns, pushes the new parameters to the actor devices, and
writes a metrics record through one `metrics.Window` every `log_interval` seconds.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import distributed, mesh as mesh_lib
from podracer.agent import Agent
from podracer.errors import ReplayTimeout
from podracer.experience import HostReplay, sample_for_replicas
from podracer.logs.meters import RateMeter, Window, device_counts, warming_up
from podracer.runtime import Plan
from podracer.runtimes.compile_once import compile_once
from podracer.runtimes.host import threads
from podracer.runtimes.host.batches import Batch
from podracer.runtimes.host.params import ParamsStore, checksum, first_replica
from podracer.runtimes.host.params import shard_over
from podracer.types import REPLICA_AXIS, PyTree, replica_mean

LearnerState = Tuple[PyTree, PyTree, PyTree]  # nets, opt, experience: [L, ...] each


WARM_UP_POLL = 0.01  # seconds between a warming-up learner's counts of the actors' steps


class Step(NamedTuple):
  inputs: Any           # what the source's `learn` takes; None: nothing yet, poll again
  batches: List[Batch]  # actor batches that arrived (env steps, episodes, lag, timings)


def _replica_mean_of_means(metrics):
  return replica_mean(jax.tree.map(jnp.mean, metrics))


class FromQueue:
  """Learns from each actor trajectory in turn (the experience is in-graph)."""

  in_turns = False  # Every trajectory is one update (Learner.loop: no turns to pass).

  def __init__(self, agent: Agent, learners: List[jax.Device], updates_per_batch: int,
               batches: "queue.Queue"):
    self.agent, self.batches = agent, batches
    self.updates_per_batch = updates_per_batch
    self.meter = RateMeter()  # Rates of a device replay on the learners, if any.
    self.mesh = mesh_lib.learner_mesh(learners)
    self._learn = mesh_lib.spmd(compile_once(self._learn_replica, "The Sebulba learner step"),
                                self.mesh, donate=True)

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

  def next(self, stop: threading.Event) -> Optional[Step]:
    batch = threads.get(self.batches, stop)
    return None if batch is None else Step(batch.shards, [batch])

  def learn(self, state: LearnerState, shards: Any, keys: np.ndarray):
    return self._learn(state, shards, mesh_lib.feed(self.mesh, keys))

  def extras(self, state: LearnerState) -> Dict[str, float]:
    counts = device_counts(self.agent.replay, state[2])
    return self.meter.rates(*counts) if counts else {}


class FromReplay:
  """Learns from batches sampled from a host replay, writing new priorities back."""

  def __init__(self, agent: Agent, replay: HostReplay, learners: List[jax.Device],
               batches: "queue.Queue", in_turns: bool = False):
    self.agent, self.replay, self.learners, self.batches = agent, replay, learners, batches
    self.in_turns = in_turns
    self.gradient_steps = 0  # this process's, since it started (`updates` counts turns)
    info = replay.info()
    self.meter = RateMeter(info["replay_inserts"], info["replay_samples"])
    self.warming_up = True  # until the replay first holds min_size items
    # Mean env steps since the sampled items were inserted, per batch since the last
    # record; from a replay that can tell (the host replay: `sampled_age`).
    self._ages: List[float] = []
    self.mesh = mesh_lib.learner_mesh(learners)
    self._learn = mesh_lib.spmd(compile_once(self._learn_replica,
                                             "The Sebulba replay learner step"),
                                self.mesh, donate=True)

  def _learn_replica(self, nets_opt, sample, key):
    nets, opt = nets_opt
    nets, opt, sample, metrics = self.agent.update(nets, opt, sample, key)
    return (nets, opt), sample.priorities, _replica_mean_of_means(metrics)

  def next(self, stop: threading.Event) -> Optional[Step]:
    if self.in_turns:
      return self._next_turn(stop)
    arrived = threads.drain(self.batches)
    if self._still_filling():
      # Count the actors' steps as they come (records, the step budget) rather than
      # wait out the replay's sampling timeout; often, for nothing but the learner holds
      # the actors to the budget while the replay fills (at 0.1 s, runs of a few
      # thousand env steps overshot by 80 %).
      stop.wait(WARM_UP_POLL)
      return Step(None, arrived + threads.drain(self.batches))
    try:
      return Step(self._sample(), arrived)
    except ReplayTimeout:
      return Step(None, arrived)

  def _still_filling(self) -> bool:
    """Whether the replay holds fewer than `min_size` items; asked of the replay only
    until it first holds them (a replay never shrinks below `min_size`)."""
    if self.warming_up:
      self.warming_up = self.replay.info()["replay_size"] < self.replay.min_size
    return self.warming_up

  def _sample(self) -> Tuple[PyTree, np.ndarray]:
    """A batch for every learner, sharded over them, and the replay's keys of its items."""
    n = len(self.learners)
    items, keys, probabilities, size = self.replay.sample_batch(self.replay.batch_size * n)
    sampled_age = getattr(self.replay, "sampled_age", None)
    age = None if sampled_age is None else sampled_age(keys)
    if age is not None:  # None: a replay that cannot tell (Reverb shared by processes)
      self._ages.append(age)
    sample = sample_for_replicas(items, probabilities, size, n)
    return shard_over(self.learners, sample), keys

  def _next_turn(self, stop: threading.Event) -> Optional[Step]:
    """The next trajectory's statistics and, as inputs, the number of updates the
    replay's rate allows now (the items are in the replay); None while it fills."""
    batch = threads.get(self.batches, stop)
    if batch is None:
      return None
    if self._still_filling():
      return Step(None, [batch])
    info = self.replay.info()
    allowed = self.replay.samples_per_insert * (info["replay_inserts"] - self.replay.min_size)
    per_update = self.replay.batch_size * len(self.learners)
    return Step(max(0, int((allowed - info["replay_samples"]) // per_update)), [batch])

  def learn(self, state: LearnerState, inputs: Any, keys: np.ndarray):
    """One update on a sample; in turns, `inputs` updates (metrics None for none), each
    on a batch sampled once the last one's priorities went back."""
    if not self.in_turns:
      return self._learn_sample(state, inputs, keys)
    metrics = None
    for i in range(inputs):
      update_keys = np.stack([np.asarray(jax.random.fold_in(k, i)) for k in keys])
      state, metrics = self._learn_sample(state, self._sample(), update_keys)
    return state, metrics

  def _learn_sample(self, state: LearnerState, inputs: Any, keys: np.ndarray):
    sample, replay_keys = inputs
    (nets, opt), priorities, metrics = self._learn(state[:2], sample,
                                                   mesh_lib.feed(self.mesh, keys))
    self.replay.write_priorities(replay_keys, mesh_lib.local(priorities).reshape(-1))
    self.gradient_steps += 1
    return (nets, opt, None), metrics

  def extras(self, state: Optional[LearnerState]) -> Dict[str, float]:
    del state
    info = self.replay.info()
    extras = dict(replay_size=info["replay_size"],
                  replay_fill=info["replay_size"] / max(self.replay.min_size, 1),
                  **self.meter.rates(info["replay_inserts"], info["replay_samples"]))
    if "replay_bytes" in info:  # Memory the replay holds (the host replay reports it).
      extras["replay_bytes"] = info["replay_bytes"]
    if self._ages:
      extras["sampled_age"] = float(np.mean(self._ages))
      self._ages.clear()
    if self.in_turns:  # `updates` counts turns, some of which take no gradient step.
      extras["gradient_steps"] = self.gradient_steps
    return extras


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

  def __init__(self, learners: List[jax.Device], target_reached: Callable[[], bool]):
    self.target_reached, self.num_learners = target_reached, len(learners)
    self.mesh = mesh_lib.learner_mesh(learners)
    self._max = mesh_lib.spmd(lambda x: jax.lax.pmax(x, REPLICA_AXIS), self.mesh)

  def __call__(self) -> bool:
    vote = distributed.is_main() and self.target_reached()
    votes = mesh_lib.feed(self.mesh, np.full(self.num_learners, vote, np.int32))
    return bool(mesh_lib.local(self._max(votes))[0])


class Learner:
  """The learner thread's loop: learn from the source until the actors have taken the
  plan's env steps, push parameters after every update, write metrics records, and call
  `checkpoint` (if given) after each update: it saves when its interval is due.

  With several processes, every update takes one batch on each process: env steps and
  steps/s count all of them (the processes step in lockstep), so each process makes the
  same number of updates and the learners' collectives match. Episode statistics are
  this process's. The last record carries `params_checksum`, to compare processes, and
  a `stop_vote` (StopVote) ends every process after the same update.
  """

  MEANS = ("learner_update_time", "learner_wait_time", "policy_lag")

  def __init__(self, source: Any, store: ParamsStore, records: "queue.Queue", plan: Plan,
               num_learners: int, log_interval: float, key: jax.Array,
               progress: Optional[Progress] = None,
               checkpoint: Optional[Callable[[], bool]] = None,
               evaluate: Optional[Any] = None, fail_after_first_update: bool = False):
    self.source, self.store, self.records, self.plan = source, store, records, plan
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
      step = self.source.next(stop)
      waited += time.perf_counter() - start
      if step is None:
        return
      self._count(step.batches, window, processes)
      if step.inputs is None:  # A host replay still filling: say so every log_interval.
        if self.source.in_turns:  # The actors wait for this turn.
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
    """One update (the source's `learn`): `state` in place, the new parameters pushed."""
    key, learn_key = jax.random.split(self.key)
    # One key per learner of all processes; this process's learners take theirs.
    learn_keys = np.stack([np.asarray(k) for k in jax.random.split(
        learn_key, self.num_learners * processes)[first_learner:][:self.num_learners]])
    start = time.perf_counter()
    new_state, metrics = self.source.learn(tuple(state), inputs, learn_keys)
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
                            replay_min_size=self.source.replay.min_size)

  def _put_record(self, window: Window, state: Optional[List[Any]], **fields: Any) -> Window:
    """Puts the window's record (with the source's extras and `fields` that are not None)
    for the runtime to log; returns a new window. `state` None: before the first update."""
    progress = self.progress
    record = window.record(progress.env_steps, progress.updates * self.plan.updates_per_round)
    record["queue_depth"] = self.source.batches.qsize()
    record.update(self.source.extras(None if state is None else tuple(state)))
    record.update({k: v for k, v in fields.items() if v is not None})
    if state is not None:  # A device replay's warm-up (a host replay's has no updates).
      record.update(warming_up(record, getattr(self.source.agent, "replay", None)))
    self.records.put(record)
    progress.records += 1
    return Window(self.MEANS)
