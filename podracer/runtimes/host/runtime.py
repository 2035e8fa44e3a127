"""What every runtime with host environments and a learner thread shares (Sebulba, SEED):
the learner's state on the learner devices, the channel for experience (channel.py),
checkpoints, evaluation, and the main thread's supervision of the threads.

A subclass passes its arguments and the size of its trajectories to `HostRuntime`'s
constructor and says only how trajectories are produced: `_spawn_producers` (abstract)
starts the threads (Sebulba's actor threads, SEED's inference server) that `put` them
into the channel; `_poll` checks on anything outside the threads (SEED's worker
processes) while the run goes on, and `_stop_producers` stops it (both do nothing by
default).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import queue
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import jax
import numpy as np

from podracer.lifecycle import evaluation as evaluation_lib, preemption
from podracer import contracts, distributed
from podracer.agent import Agent
from podracer.errors import ConfigError
from podracer.components import shardings
from podracer.runtime import Runtime
from podracer.runtimes import model_axis
from podracer.runtimes.host import threads
from podracer.runtimes.host.channel import channel as channel_for
from podracer.runtimes.host.learner import Learner, Progress, StopVote, update_for
from podracer.runtimes.host.learners import WHOLE, LearnerMesh
from podracer.runtimes.host.params import (ParamsStore, PolicyLagBound, actor_places,
                                           first_replica)
from podracer.types import Trajectory, strip_weak_types


@dataclasses.dataclass(frozen=True)
class LearnerOptions:
  """The `runtime.*` keys of Sebulba's learner, which SEED shares (see each runtime's
  Options for what they mean there)."""
  rollout_length: int = 32
  updates_per_batch: int = 1
  queue_size: int = 2
  log_interval: float = 1.0
  max_policy_lag: Optional[int] = None
  inject_failure: str = ""

  def __post_init__(self):
    lag = self.max_policy_lag
    if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int) or lag < 0):
      raise ConfigError(f"`runtime.max_policy_lag` is a number of learner updates >= 0, or "
                        f"None for no bound; got {lag!r}.")


class HostRuntime(Runtime):
  """A learner thread fed through one channel for experience (`self.channel`) by
  producer threads.

  A subclass's constructor calls this one with its own arguments and
  `producers` (the threads or workers that put trajectories, each `batch_envs`
  environments wide: `runtime.{batch_key}`; `turns`: whether they can take turns with
  the learner at `max_policy_lag=0` with a host replay), and implements
  `_spawn_producers`; `_poll` and `_stop_producers` are optional."""

  environment_kind = "host"

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], topology: Any,
               options: Any, plan: Any, seed: int, *, producers: int, batch_envs: int,
               batch_key: str, turns: bool = True):
    """A topology without actor devices is refused, and the channel checks the sizes."""
    self.check_topology(topology)
    contracts.check_policy_lag(agent, options.max_policy_lag, type(self).__name__.lower())
    self.agent, self.spec = agent, agent.spec
    self.env_factory, self.topology, self.options, self.plan, self.seed = (
        env_factory, topology, options, plan, seed)
    self.producers = producers  # benchmarks/actors.py warms up two batches each.
    # The learner devices as a mesh of replicas, each over `topology.model` of them.
    self.learners = LearnerMesh(topology.learner_devices, topology.model, topology.rule)
    # Where the actors act: each actor device, or groups of `topology.actor_model`.
    self.actor_places = actor_places(topology.actor_devices, topology.actor_model,
                                     topology.actor_rule)
    self.channel = channel_for(
        agent, self.learners, self.spec, batch_envs=batch_envs,
        rollout_length=options.rollout_length, queue_size=options.queue_size,
        max_policy_lag=options.max_policy_lag, producers=producers, batch_key=batch_key,
        turns=turns)
    self.replay = self.channel.replay
    specs = self.learners.lay_out(self._init_replica)
    self._init_learner = self.learners.spmd(self._init_replica, (WHOLE,), specs)

  @classmethod
  def check_topology(cls, topology: Any) -> None:
    """Refuses a topology without actor devices (before anything counts them)."""
    if not hasattr(topology, "actor_devices"):
      raise ConfigError(f"{cls.__name__} needs a topology that splits actor and "
                        f"learner devices (`topology.name=actor_learner`).")

  @classmethod
  def environment_args(cls, seed: int):
    return dict(num_envs=1, seed=seed)  # One environment is enough to read the spec.

  def trajectory_spec(self, num_envs: int) -> Trajectory:
    """Shapes of a [T+K, num_envs, ...] trajectory, without running."""
    return self.channel.trajectory_spec(num_envs)

  def _init_replica(self, key):
    nets = self.agent.init_nets(key)
    return strip_weak_types((nets, self.agent.init_opt(nets), self.channel.init_experience()))

  def _start_learner(self) -> List[Any]:
    n = self.learners.replicas
    nets, opt, experience = self._init_learner(self.learners.put(
        np.stack([np.asarray(jax.random.PRNGKey(self.seed))] * n)))
    return [nets, opt, experience]

  def initial_store(self) -> ParamsStore:
    """A ParamsStore on the actor devices holding the learner's initial nets (version 0):
    what the producers act with before any update (a learner-free measurement's)."""
    store = ParamsStore(self.actor_places)
    store.push(first_replica(self._start_learner()[0]), version=0)
    return store

  @contextlib.contextmanager
  def producing(self, store: ParamsStore) -> Iterator[Tuple[threading.Event, Callable]]:
    """The producers alone, no learner: they act with `store`'s parameters and `put` into
    `self.channel` (opened anew) while the block runs. Yields (stop, poll): the event
    set when a thread fails or stops, and what the main thread calls every while; on
    exit the threads are shut down and the producers stopped."""
    self.channel.open()
    group = threads.ThreadGroup()
    try:
      self._spawn_producers(group, store, self.channel)
      yield group.stop, lambda: self._poll(group)
    finally:
      try:
        group.shutdown()
      finally:
        self._stop_producers()

  # -- what callers ask of a runtime (podracer/runtime.py) ---------------------------

  def checkpoints(self) -> bool:
    return True  # The learner's state and counters; producers start new episodes.

  def evaluates(self) -> bool:
    return True

  def final_nets(self, state: List[Any], run: int = 0) -> Any:
    """Replica 0's nets of the learner state `train` returned (one run: run 0)."""
    self._one_run(run, "the run")
    return first_replica(state[0])

  def saved_nets(self, checkpointer: Any, run: int = 0) -> Any:
    """Replica 0's nets in the latest checkpoint."""
    self._one_run(run, f"the checkpoint in {checkpointer.directory}")
    state = self._start_learner()
    saved, _ = checkpointer.restore(dict(learner=tuple(state),
                                         key=jax.random.PRNGKey(self.seed + 1)))
    return first_replica(self.learners.put(saved["learner"], self.learners.specs)[0])

  @staticmethod
  def _one_run(run: int, where: str) -> None:
    if run:
      raise ConfigError(f"--run={run}: {where} holds one run (run 0).")

  def environment_to_watch(self, seed: int = 0) -> Any:
    """One host environment of the run's kind, made to render (the caller closes it)."""
    return self.env_factory(num_envs=1, seed=seed, render_mode="rgb_array")

  def _restore(self, checkpointer: Any, state: List[Any], learner: Learner) -> None:
    """Puts the latest checkpoint's learner state, key and counters in place."""
    saved, _ = checkpointer.restore(dict(learner=tuple(state), key=learner.key))
    # Placed as `_init_learner` places it, one row on each learner replica.
    state[:] = self.learners.put(saved["learner"], self.learners.specs)
    learner.key = saved["key"]
    meta = checkpointer.meta()
    learner.progress = Progress(**{k: int(meta[k]) for k in ("env_steps", "updates",
                                                             "episodes", "records")})

  def _at_update(self, checkpointer: Any, state: List[Any], learner: Learner) -> bool:
    """After each update: saves if due (over several processes, agreed by all, and when
    a SIGTERM asked any of them to stop); returns whether the learner must stop here."""
    save, stop = checkpointer.decide()
    if save or stop:
      self._save(checkpointer, state, learner)
    return stop

  def _save(self, checkpointer: Any, state: List[Any], learner: Learner) -> None:
    self.channel.save(checkpointer)
    progress = learner.progress
    checkpointer.save(progress.updates, dict(learner=tuple(state), key=learner.key),
                      progress.records, **dataclasses.asdict(progress))

  # -- the run ---------------------------------------------------------------------

  def train(self, logger, checkpointer: Optional[Any] = None,
            evaluation: Optional[Any] = None) -> List[Any]:
    """Trains; returns the learner state [nets, opt, experience], each [L, ...].

    With a `checkpointer`, first resumes from its latest checkpoint (the learner's state
    and counters; producers start new episodes), then saves every interval (from the
    learner thread, between updates), at the end and when stopped. With an `evaluation`
    (podracer/lifecycle/evaluation.py), the learner thread evaluates between updates.
    """
    state = self._start_learner()
    self.channel.open(checkpointer)
    try:
      logger.describe(self._layout(state))
      self._train(logger, checkpointer, evaluation, state)
    finally:
      self.channel.close()
    return state

  def _layout(self, state: List[Any]) -> Dict[str, Any]:
    """The learners' mesh and bytes a device (model_axis.describe); with actors over
    groups of devices (`topology.actor_model` > 1), theirs too, measured from the
    parameters as an actor group holds them."""
    layout = model_axis.describe(self.learners.mesh, tuple(state[:2]))
    if self.topology.actor_model > 1:
      on_actors = self.actor_places[0].put_params(first_replica(state[0]))
      layout.update(actor_model=self.topology.actor_model,
                    actor_param_bytes_per_device=shardings.bytes_per_device(on_actors))
    return layout

  def _learner(self, store: ParamsStore, records: "queue.Queue", logger,
               state: List[Any], checkpointer: Optional[Any]) -> Learner:
    learners = self.learners
    update = update_for(self.agent, self.channel, learners, self.options.updates_per_batch)
    learner = Learner(self.channel, update, store, records, self.plan, learners.replicas,
                      self.options.log_interval, jax.random.PRNGKey(self.seed + 1),
                      Progress(records=len(logger.records)),
                      fail_after_first_update=self.options.inject_failure == "learner")
    if checkpointer is not None:
      if checkpointer.latest() is not None:
        self._restore(checkpointer, state, learner)
      learner.checkpoint = lambda: self._at_update(checkpointer, state, learner)
    # Over several processes the learners agree when to stop (StopVote), so that none
    # waits in a collective for a process that stopped an update earlier.
    if distributed.process_count() > 1 and logger.stop_at_return is not None:
      learner.stop_vote = StopVote(learners, lambda: logger.target_reached)
    return learner

  def _train(self, logger, checkpointer, evaluation, state) -> None:
    records: "queue.Queue[Dict[str, Any]]" = queue.Queue()
    store = ParamsStore(self.actor_places)
    learner = self._learner(store, records, logger, state, checkpointer)
    store.push(first_replica(state[0]), version=learner.progress.updates)
    group = threads.ThreadGroup()
    if evaluation is not None:
      learner.evaluate = HostEvaluator(self.agent, self.env_factory, evaluation,
                                       seed=self.seed * 10_000 + 9_999, stop=group.stop)
    save_at_end = checkpointer is not None
    stops_early = distributed.process_count() == 1
    lag = self.options.max_policy_lag
    try:
      self._spawn_producers(group, store, self.channel, restart=learner.progress.updates,
                            lag_bound=None if lag is None else PolicyLagBound(
                                lag, first_update=learner.progress.updates,
                                producers=self.producers))
      thread = group.spawn("learner", learner.loop, state, group.stop)
      while (not group.stop.is_set() and thread.is_alive()
             and not (stops_early and logger.target_reached)):
        group.stop.wait(threads.POLL)
        self._drain(records, logger)
        self._poll(group)
    except BaseException as e:  # A failure's state is not worth resuming from.
      save_at_end = save_at_end and isinstance(e, KeyboardInterrupt)
      raise
    finally:
      try:
        try:
          group.shutdown()
        finally:
          self._stop_producers()
        # Every thread has stopped, so the learner's state is whole (also after SIGTERM).
        if save_at_end:
          self._save(checkpointer, state, learner)
      finally:
        self._drain(records, logger)
        if learner.evaluate is not None:
          learner.evaluate.close()
    # A coordinated stop (several processes, SIGTERM): saved above, now stopped by it.
    preemption.raise_if_requested()

  @abc.abstractmethod
  def _spawn_producers(self, group: threads.ThreadGroup, store: ParamsStore, channel: Any,
                       restart: int = 0, lag_bound: Optional[PolicyLagBound] = None) -> None:
    """Starts, in `group`, the threads that act with `store`'s parameters and `put`
    trajectories into `channel` (channel.py); `restart`: the update a resumed run starts
    at (its producers draw new environments); `lag_bound`: the policy-lag bound to keep
    (None: unbounded, or no learner)."""

  def _poll(self, group: threads.ThreadGroup) -> None:
    """Called by the main thread every `threads.POLL` seconds while the run goes on."""
    del group

  def _stop_producers(self) -> None:
    """Called once every thread has stopped."""

  @staticmethod
  def _drain(records: "queue.Queue", logger) -> None:
    for record in threads.drain(records):
      logger.write(record, compile_step=record.pop("first", False))


def act_and_advance_key(act, params, actor_state, timestep, key):
  # Splitting the key inside the jitted call saves a dispatch per environment step.
  key, act_key = jax.random.split(key)
  out, actor_state = act(params, actor_state, timestep, act_key)
  return out, actor_state, key


class HostEvaluator:
  """`eval_return` for the learner thread (podracer/lifecycle/evaluation.py): the agent's evaluation
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
