"""The Sebulba runtime: builds the parts (actor.py, learner.py, params.py, threads.py)
for one agent and runs them as threads until the plan's env steps are taken."""

from __future__ import annotations

import dataclasses
import functools
import queue
import time
from typing import Any, Callable, Dict, List, Optional

import jax
import numpy as np

from podracer import distributed, registry, trajectories
from podracer.agent import Agent, item_spec
from podracer.errors import ConfigError
from podracer.experience import host_replay
from podracer.runtime import Plan, Runtime, plan_calls
from podracer.runtimes.sebulba import threads
from podracer.runtimes.sebulba.actor import Actor, Batch, ToLearners, ToReplay
from podracer.runtimes.sebulba.actor import act_and_advance_key
from podracer.runtimes.sebulba.learner import FromQueue, FromReplay, Learner
from podracer.runtimes.sebulba.params import ParamsStore, first_replica
from podracer.types import REPLICA_AXIS, Trajectory, strip_weak_types


@dataclasses.dataclass(frozen=True)
class SebulbaOptions:
  """`runtime.*`: `num_envs_per_actor` environments per actor thread (divisible by the
  number of learner devices unless a host replay takes the trajectories),
  `actor_threads_per_device`, `rollout_length` steps per trajectory, `updates_per_batch`
  learner updates per trajectory, `queue_size` trajectories in flight, `log_interval`
  seconds between metrics records, and `inject_failure` ('actor' or 'learner': that
  thread raises once the run is under way, to test that failures stop the run)."""
  num_envs_per_actor: int = 16
  actor_threads_per_device: int = 2
  rollout_length: int = 32
  updates_per_batch: int = 1
  queue_size: int = 2
  log_interval: float = 1.0
  inject_failure: str = ""

  def __post_init__(self):
    if self.inject_failure not in ("", "actor", "learner"):
      raise ConfigError("`runtime.inject_failure` is '', 'actor' or 'learner'.")

  def plan(self, topology: Any, total_env_steps: int) -> Plan:
    del topology  # Every batch is one actor thread's trajectory, whatever the devices...
    # ...on each process: an update over several takes one batch from each (learner.py).
    return plan_calls(self.num_envs_per_actor * self.rollout_length
                      * distributed.process_count(), self.updates_per_batch, total_env_steps)


@registry.runtimes.register("sebulba")
class Sebulba(Runtime):
  """Actor threads on actor devices feed a learner replicated over learner devices."""

  Options = SebulbaOptions
  environment_kind = "host"

  @classmethod
  def environment_args(cls, seed: int):
    return dict(num_envs=1, seed=seed)  # One environment is enough to read the spec.

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], topology: Any,
               options: SebulbaOptions, plan: Plan, seed: int):
    if not hasattr(topology, "actor_devices"):
      raise ConfigError("Sebulba needs a topology that splits actor and learner devices "
                        "(`topology.name=actor_learner`).")
    self.agent, self.spec = agent, agent.spec
    self.env_factory, self.topology, self.options, self.plan, self.seed = (
        env_factory, topology, options, plan, seed)
    self.num_actor_threads = len(topology.actor_devices) * options.actor_threads_per_device
    # A host replay (Reverb) takes the actors' trajectories instead of the learner queue.
    self.replay = host_replay(agent)
    learners = topology.learner_devices
    if self.replay is not None and distributed.process_count() > 1:
      # Sampling may time out on one process and not another: their updates would differ.
      raise ConfigError("Sebulba with a host replay runs in one process; over several "
                        "processes use an agent that learns from the actors' queue.")
    if self.replay is None and options.num_envs_per_actor % len(learners):
      raise ConfigError(
          f"`runtime.num_envs_per_actor` ({options.num_envs_per_actor}) must divide evenly "
          f"over the {len(learners)} learner devices.")
    self._init_learner = jax.pmap(self._init_replica, axis_name=REPLICA_AXIS,
                                  devices=distributed.pmap_devices(learners))
    self._act = jax.jit(functools.partial(act_and_advance_key, agent.act))

  def trajectory_spec(self, num_envs: int) -> Trajectory:
    """Shapes of one actor thread's trajectory [T+K, num_envs, ...], without running."""
    return trajectories.trajectory_spec(self.agent, self.spec, num_envs,
                                        self.options.rollout_length)

  def _init_replica(self, key):
    nets = self.agent.init_nets(key)
    experience = None
    if self.replay is None:  # Each learner replica holds its slice of every trajectory.
      shard = self.options.num_envs_per_actor // len(self.topology.learner_devices)
      experience = self.agent.init_experience(self.trajectory_spec(shard))
    return strip_weak_types((nets, self.agent.init_opt(nets), experience))

  def _start_learner(self, store: ParamsStore) -> List[Any]:
    n = len(self.topology.learner_devices)
    nets, opt, experience = self._init_learner(
        np.stack([np.asarray(jax.random.PRNGKey(self.seed))] * n))
    store.push(first_replica(nets), version=0)
    return [nets, opt, experience]

  # -- threads ---------------------------------------------------------------------

  def run(self, logger) -> List[Any]:
    """Trains; returns the learner state [nets, opt, experience], each [L, ...]."""
    options, learners = self.options, self.topology.learner_devices
    # With a host replay the queue only carries statistics, and must never block actors.
    batches: "queue.Queue[Batch]" = queue.Queue(
        maxsize=0 if self.replay is not None else options.queue_size)
    records: "queue.Queue[Dict[str, Any]]" = queue.Queue()
    store = ParamsStore(self.topology.actor_devices)
    state = self._start_learner(store)
    if self.replay is not None:
      self._start_replay()
      source: Any = FromReplay(self.agent, self.replay, learners, batches)
      output: Any = ToReplay(self.agent, self.replay, batches)
    else:
      source = FromQueue(self.agent, learners, options.updates_per_batch, batches)
      output = ToLearners(learners, batches, self.agent.trajectory_overlap)
    learner = Learner(source, store, records, self.plan, self.seed, len(learners),
                      options.log_interval, options.inject_failure == "learner")
    group = threads.ThreadGroup()
    # Processes would reach `stop_at_return` at different updates and leave the others
    # waiting in a collective: over several processes the run takes all its env steps.
    stops_early = distributed.process_count() == 1
    try:
      self._spawn_actors(group, store, output)
      thread = group.spawn("learner", learner.run, state, group.stop)
      while (not group.stop.is_set() and thread.is_alive()
             and not (stops_early and logger.target_reached)):
        group.stop.wait(threads.POLL)
        self._drain(records, logger)
    finally:
      try:
        group.shutdown()
      finally:
        self._drain(records, logger)
        if self.replay is not None:
          self.replay.close()
    return state

  def _start_replay(self) -> None:
    spec = self.trajectory_spec(self.options.num_envs_per_actor)
    try:
      self.replay.start(item_spec(self.agent, spec))
    except ImportError as e:  # Reverb lives in its own install lane.
      raise ConfigError(f"{e} Or use --config.replay.name=device.") from e

  def run_actors(self, seconds: float, warmup_batches: Optional[int] = None) -> float:
    """Env steps/s of the actor threads alone: initial parameters, no learner.

    Batches are taken off the queue and dropped. The first `warmup_batches` (default:
    two per thread, which covers compilation) are not counted.
    """
    if self.replay is not None:
      raise ConfigError("run_actors measures actors that feed the learner queue; with a "
                        "host replay their pace is the replay's rate limiter's.")
    batches: "queue.Queue[Batch]" = queue.Queue(maxsize=self.options.queue_size)
    store = ParamsStore(self.topology.actor_devices)
    self._start_learner(store)
    group = threads.ThreadGroup()
    warmup = 2 * self.num_actor_threads if warmup_batches is None else warmup_batches
    seen, steps, start = 0, 0, None
    try:
      self._spawn_actors(group, store, ToLearners(
          self.topology.learner_devices, batches, self.agent.trajectory_overlap))
      while not group.stop.is_set():
        batch = threads.get(batches, group.stop)
        if batch is None:
          break
        seen += 1
        if seen == warmup + 1:
          start = time.perf_counter()
        elif seen > warmup + 1:
          steps += batch.env_steps
          if time.perf_counter() - start >= seconds:
            break
    finally:
      group.shutdown()
    return steps / (time.perf_counter() - start) if start is not None else 0.0

  def _spawn_actors(self, group: threads.ThreadGroup, store: ParamsStore,
                    output: Any) -> None:
    options = self.options
    for j, device in enumerate(self.topology.actor_devices):
      for i in range(options.actor_threads_per_device):
        # Distinct environments and keys on every thread of every process.
        index = i + j * 1000 + distributed.process_index() * 100_000
        actor = Actor(self.agent, self._act, self.env_factory, device, index, self.seed,
                      options.num_envs_per_actor, options.rollout_length, store, output,
                      fail_after_first_batch=options.inject_failure == "actor" and index == 0)
        group.spawn(f"actor-{device.id}-{i}", actor.run, group.stop)

  @staticmethod
  def _drain(records: "queue.Queue", logger) -> None:
    for record in threads.drain(records):
      logger.write(record, compile_step=record.pop("first", False))
