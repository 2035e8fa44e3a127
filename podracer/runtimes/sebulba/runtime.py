"""The Sebulba runtime: builds the parts (actor.py, learner.py, params.py, threads.py)
for one agent and runs them as threads until the plan's env steps are taken."""

from __future__ import annotations

import dataclasses
import functools
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import jax
import numpy as np

from podracer import evaluation as evaluation_lib
from podracer import distributed, registry, trajectories
from podracer.agent import Agent, item_spec
from podracer.errors import ConfigError
from podracer.experience import host_replay
from podracer.memory import check_device_fits, tree_bytes
from podracer.runtime import Plan, Runtime, plan_calls
from podracer.runtimes.sebulba import threads
from podracer.runtimes.sebulba.actor import Actor, Batch, ToLearners, ToReplay
from podracer.runtimes.sebulba.actor import act_and_advance_key
from podracer.runtimes.sebulba.learner import (FromQueue, FromReplay, Learner, Progress,
                                              StopVote)
from podracer.runtimes.sebulba.params import ParamsStore, PolicyLagBound, first_replica
from podracer.types import REPLICA_AXIS, Trajectory, strip_weak_types


REPLAY_DIR = "reverb"  # A checkpointed host replay's own files, in the checkpoints' folder.


@dataclasses.dataclass(frozen=True)
class SebulbaOptions:
  """`runtime.*`: `num_envs_per_actor` environments per actor thread (divisible by the
  number of learner devices unless a host replay takes the trajectories),
  `actor_threads_per_device`, `rollout_length` steps per trajectory, `updates_per_batch`
  learner updates per trajectory, `queue_size` trajectories in flight, `log_interval`
  seconds between metrics records, `max_policy_lag` (None: unbounded; else actors act
  with parameters at most that many learner updates older than the update that learns
  from their trajectory, see params.PolicyLagBound), `env_mode` ('sync': each actor
  thread steps its environments, then acts; 'async': two halves, each stepping while the
  other's inference runs, see actor.Actor; needs an environment with `supports_async`),
  and `inject_failure` ('actor' or 'learner': that thread raises once the run is under
  way, to test that failures stop the run)."""
  num_envs_per_actor: int = 16
  actor_threads_per_device: int = 2
  rollout_length: int = 32
  updates_per_batch: int = 1
  queue_size: int = 2
  log_interval: float = 1.0
  max_policy_lag: Optional[int] = None
  env_mode: str = "sync"
  inject_failure: str = ""

  def __post_init__(self):
    if self.env_mode not in ("sync", "async"):
      raise ConfigError(f"`runtime.env_mode` is 'sync' or 'async', got {self.env_mode!r}.")
    envs = self.num_envs_per_actor
    if self.env_mode == "async" and isinstance(envs, int) and envs % 2:
      raise ConfigError(f"`runtime.env_mode=async` splits each actor thread's "
                        f"`runtime.num_envs_per_actor` environments into two halves, so it "
                        f"must be even, got {envs}; set --config.runtime.num_envs_per_actor="
                        f"{envs + 1} or --config.runtime.env_mode=sync.")
    lag = self.max_policy_lag
    if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int) or lag < 0):
      raise ConfigError(f"`runtime.max_policy_lag` is a number of learner updates >= 0, or "
                        f"None for no bound; got {lag!r}.")
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
    if options.env_mode == "async" and not getattr(env_factory, "supports_async", False):
      name = getattr(getattr(env_factory, "section", None), "name", None) or "this one"
      raise ConfigError(
          f"`runtime.env_mode=async` steps environments between `send` and `recv` on their "
          f"own threads, which the environment '{name}' does not support (EnvPool does: "
          f"env.name=envpool); set --config.runtime.env_mode=sync.")
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

  def _start_learner(self) -> List[Any]:
    n = len(self.topology.learner_devices)
    nets, opt, experience = self._init_learner(
        np.stack([np.asarray(jax.random.PRNGKey(self.seed))] * n))
    return [nets, opt, experience]

  # -- checkpoints (podracer/checkpoint.py) ----------------------------------------

  def _restore(self, checkpointer: Any, state: List[Any], learner: Learner) -> None:
    """Puts the latest checkpoint's learner state, key and counters in place."""
    saved, _ = checkpointer.restore(dict(learner=tuple(state), key=learner.key))
    # Placed as `_init_learner` places it, sharded over the learner devices.
    state[:] = jax.pmap(lambda s: s, axis_name=REPLICA_AXIS,
                        devices=self.topology.learner_devices)(saved["learner"])
    learner.key = saved["key"]
    meta = checkpointer.meta()
    learner.progress = Progress(**{k: int(meta[k]) for k in ("env_steps", "updates",
                                                             "episodes", "records")})

  def _save(self, checkpointer: Any, state: List[Any], learner: Learner) -> None:
    if getattr(self.replay, "checkpointed", False):  # Reverb: through its client.
      self.replay.checkpoint(keep=checkpointer.keep)
    progress = learner.progress
    checkpointer.save(progress.updates, dict(learner=tuple(state), key=learner.key),
                      progress.records, **dataclasses.asdict(progress))

  # -- threads ---------------------------------------------------------------------

  def _evaluator(self, evaluation: Any, stop: threading.Event) -> "HostEvaluator":
    return HostEvaluator(self.agent, self.env_factory, evaluation,
                         seed=self.seed * 10_000 + 9_999, stop=stop)

  def run(self, logger, checkpointer: Optional[Any] = None,
          evaluation: Optional[Any] = None) -> List[Any]:
    """Trains; returns the learner state [nets, opt, experience], each [L, ...].

    With a `checkpointer`, first resumes from its latest checkpoint (the learner's state
    and counters; the actors start new episodes), then saves every interval (from the
    learner thread, between updates), at the end and when stopped. With an `evaluation`
    (podracer/evaluation.py), the learner thread evaluates between updates.
    """
    options, learners = self.options, self.topology.learner_devices
    if options.max_policy_lag is not None and self.replay is not None:
      raise ConfigError("`runtime.max_policy_lag` bounds the lag of trajectories handed to "
                        "the learner, but with a host replay the learner samples from the "
                        "replay; set --config.runtime.max_policy_lag=None.")
    # With a host replay the queue only carries statistics, and must never block actors.
    batches: "queue.Queue[Batch]" = queue.Queue(
        maxsize=0 if self.replay is not None else options.queue_size)
    records: "queue.Queue[Dict[str, Any]]" = queue.Queue()
    store = ParamsStore(self.topology.actor_devices)
    if self.replay is None:  # In flight: the queue's, one per actor thread, one learning.
      in_flight = options.queue_size + self.num_actor_threads + 1
      check_device_fits(
          f"Sebulba's {in_flight} trajectories in flight", in_flight * tree_bytes(
              self.trajectory_spec(options.num_envs_per_actor)) // len(learners),
          ["runtime.queue_size", "runtime.num_envs_per_actor", "runtime.rollout_length"],
          learners)
    state = self._start_learner()
    if self.replay is not None:
      if checkpointer is not None and getattr(self.replay, "checkpointed", False):
        self.replay.use_checkpoint_dir(os.path.join(checkpointer.directory, REPLAY_DIR))
      self._start_replay()
      source: Any = FromReplay(self.agent, self.replay, learners, batches)
      output: Any = ToReplay(self.agent, self.replay, batches)
    else:
      source = FromQueue(self.agent, learners, options.updates_per_batch, batches)
      output = ToLearners(learners, batches, self.agent.trajectory_overlap)
    learner = Learner(source, store, records, self.plan, len(learners),
                      options.log_interval, jax.random.PRNGKey(self.seed + 1),
                      Progress(records=len(logger.records)),
                      fail_after_first_update=options.inject_failure == "learner")
    if checkpointer is not None:
      if checkpointer.latest() is not None:
        self._restore(checkpointer, state, learner)

      def checkpoint_if_due():
        if checkpointer.due():
          self._save(checkpointer, state, learner)
      learner.checkpoint = checkpoint_if_due
    store.push(first_replica(state[0]), version=learner.progress.updates)
    group = threads.ThreadGroup()
    if evaluation is not None:
      learner.evaluate = self._evaluator(evaluation, group.stop)
    save_at_end = checkpointer is not None
    # Over several processes the learners agree when to stop (StopVote), so that none
    # waits in a collective for a process that stopped an update earlier.
    stops_early = distributed.process_count() == 1
    if not stops_early and logger.stop_at_return is not None:
      learner.stop_vote = StopVote(learners, lambda: logger.target_reached)
    try:
      lag_bound = None if options.max_policy_lag is None else PolicyLagBound(
          options.max_policy_lag, first_update=learner.progress.updates)
      self._spawn_actors(group, store, output, restart=learner.progress.updates,
                         lag_bound=lag_bound)
      thread = group.spawn("learner", learner.run, state, group.stop)
      while (not group.stop.is_set() and thread.is_alive()
             and not (stops_early and logger.target_reached)):
        group.stop.wait(threads.POLL)
        self._drain(records, logger)
    except BaseException as e:  # A failure's state is not worth resuming from.
      save_at_end = save_at_end and isinstance(e, KeyboardInterrupt)
      raise
    finally:
      try:
        group.shutdown()
        # Every thread has stopped, so the learner's state is whole (also after SIGTERM).
        if save_at_end:
          self._save(checkpointer, state, learner)
      finally:
        self._drain(records, logger)
        if learner.evaluate is not None:
          learner.evaluate.close()
        if self.replay is not None:
          self.replay.close()
    return state

  def _start_replay(self) -> None:
    spec = self.trajectory_spec(self.options.num_envs_per_actor)
    try:
      # Items that are whole trajectories repeat their stream's last `overlap` entries.
      self.replay.start(item_spec(self.agent, spec), overlap=self.agent.trajectory_overlap)
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
    store.push(first_replica(self._start_learner()[0]), version=0)
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
                    output: Any, restart: int = 0,
                    lag_bound: Optional[PolicyLagBound] = None) -> None:
    options = self.options
    for j, device in enumerate(self.topology.actor_devices):
      for i in range(options.actor_threads_per_device):
        # Distinct environments and keys on every thread of every process.
        index = i + j * 1000 + distributed.process_index() * 100_000
        actor = Actor(self.agent, self._act, self.env_factory, device, index, self.seed,
                      options.num_envs_per_actor, options.rollout_length, store, output,
                      restart=restart, lag_bound=lag_bound,
                      fail_after_first_batch=options.inject_failure == "actor" and index == 0,
                      groups=2 if options.env_mode == "async" else 1)
        group.spawn(f"actor-{device.id}-{i}", actor.run, group.stop)

  @staticmethod
  def _drain(records: "queue.Queue", logger) -> None:
    for record in threads.drain(records):
      logger.write(record, compile_step=record.pop("first", False))


class HostEvaluator:
  """`eval_return` for the learner thread (podracer/evaluation.py): the agent's evaluation
  policy on a host environment of `evaluation.episodes` environments, built on first use."""

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], evaluation: Any,
               seed: int, stop: threading.Event):
    self.agent, self.env_factory, self.evaluation, self.seed, self.stop = (
        agent, env_factory, evaluation, seed, stop)
    self._act = jax.jit(functools.partial(act_and_advance_key, agent.eval_act))
    self._env = None

  def __call__(self, nets: Any, env_steps_before: int, env_steps: int) -> Optional[float]:
    """Replica 0's `eval_return` if an evaluation is due, else None."""
    if not self.evaluation.due(env_steps_before, env_steps):
      return None
    if self._env is None:
      self._env = self.env_factory(num_envs=self.evaluation.episodes, seed=self.seed)
    return evaluation_lib.host_return(self._act, self.agent.init_eval_actor, self._env,
                                      first_replica(nets), self.evaluation.key(env_steps),
                                      self.stop)

  def close(self) -> None:
    if self._env is not None:
      self._env.close()
