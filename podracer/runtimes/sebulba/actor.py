"""A Sebulba actor thread: steps its host environments, acts on its device, assembles
each [T+K, B] trajectory there (podracer/trajectories.py) and `put`s it into the run's
channel for experience (podracer/runtimes/host/channel.py): the learners' queue, or a
host replay.

While one thread steps its environments on the CPU, its device runs another thread's
inference, which is why each actor device runs several threads.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

import jax
import numpy as np

from podracer import trajectories
from podracer.agent import Agent
from podracer.errors import EnvironmentStepError
from podracer.logs.meters import episode_sums
from podracer.runtimes import door
from podracer.runtimes.host import threads
from podracer.runtimes.host.channel import Batch
from podracer.runtimes.host.params import ActorPlace, ParamsStore, PolicyLagBound
from podracer.types import PyTree, Trajectory


class Actor:
  """One actor thread's loop (`loop`), on one actor place (a device, or a group of them
  the parameters are split over: host/params.py) with its own environments.

  Its `num_envs` environments are `groups` fixed groups of num_envs/groups, each a host
  environment of its own and the same columns of every trajectory. With one group
  (`runtime.env_mode="sync"`) a step reads the action, steps and acts. With two
  ("async") the thread takes turns: receive group g's step, dispatch its inference, read
  its action and send it, then group 1-g, so each group's environments step on their own
  threads while the other group is received and acted on.
  """

  def __init__(self, agent: Agent, act: Callable[..., Any], env_factory: Callable[..., Any],
               place: ActorPlace, index: int, seed: int, num_envs: int,
               rollout_length: int, store: ParamsStore, channel: Any, restart: int = 0,
               lag_bound: Optional[PolicyLagBound] = None, producer: int = 0,
               fail_after_first_batch: bool = False, groups: int = 1):
    self.agent, self.act, self.place, self.store, self.channel = (
        agent, act, place, store, channel)
    self.num_envs, self.rollout_length, self.groups = num_envs, rollout_length, groups
    self.fail_after_first_batch = fail_after_first_batch
    self.env_factory, self.index, self.seed = env_factory, index, seed
    # A resumed run's actors (restart: the update it resumed at) draw new environments
    # and actions rather than repeat the first run's.
    self.restart = restart
    self.lag_bound = lag_bound
    self.tickets = None if lag_bound is None else lag_bound.tickets(producer)
    # The agent's scalars of its actors' state (R2D2's epsilon_mean), once a batch;
    # dropped after the first batch if it has none.
    self._actor_metrics = jax.jit(agent.actor_metrics)

  def _state_means(self, states: List[PyTree]) -> Dict[str, float]:
    """`agent.actor_metrics` of the groups' states, averaged (the groups are equal)."""
    if self._actor_metrics is None:
      return {}
    values = jax.device_get([self._actor_metrics(state) for state in states])
    if not values[0]:
      self._actor_metrics = None
      return {}
    return {k: float(np.mean([v[k] for v in values])) for k in values[0]}

  def loop(self, stop: threading.Event) -> None:
    # Built on the actor's own thread, so a failing environment fails that thread.
    envs = []
    try:
      for g in range(self.groups):  # Group g's seed is far from other threads' indices.
        envs.append(self.env_factory(num_envs=self.num_envs // self.groups, seed=(
            self.seed * 10_000 + self.index + 7_919 * self.restart + 5_003 * g) % 2**31))
      self._loop(envs, stop)
    finally:
      for env in envs:
        env.close()

  def _loop(self, envs: List[Any], stop: threading.Event) -> None:
    groups = _Groups(self, envs)
    earlier, queue_wait = None, 0.0
    while not stop.is_set():
      start = time.perf_counter()
      fetched = self._params(stop)
      if fetched is None:
        return
      params, version, ticket = fetched
      # Queue waits are reported with the next batch: this one is already handed over.
      times = dict(actor_wait_params=time.perf_counter() - start, actor_env=0.0,
                   actor_inference=0.0, actor_wait_queue=queue_wait)
      if not groups.pending:  # From here on every group has a step in flight.
        earlier = groups.start(params, times)
      rolled = groups.rollout(params, self.rollout_length, stop, times)
      if rolled is None:
        return
      stepped, episodes = rolled
      trajectory, earlier = trajectories.assemble_groups(
          earlier, stepped, groups.pending, self.agent.trajectory_overlap)
      times.update(self._state_means(groups.states))
      batch = Batch(None, version, self.num_envs * self.rollout_length, episodes, times)
      queue_wait = self._hand_over(trajectory, batch, ticket, stop)
      if queue_wait is None:
        return
      if self.fail_after_first_batch:
        # After its first batch, so the learner and the other actors are mid-run.
        raise threads.injected_failure("actor")

  def _params(self, stop: threading.Event):
    """(parameters, their version, this batch's ticket) to act with; None if the run
    stopped while waiting for them (with a lag bound: version >= ticket - max_lag)."""
    if self.lag_bound is None:
      return (*self.store.get(self.place), None)
    ticket = next(self.tickets)
    fresh = self.store.get(self.place, ticket - self.lag_bound.max_lag, stop)
    return None if fresh is None else (*fresh, ticket)

  def _hand_over(self, trajectory: Trajectory, batch: Batch, ticket: Optional[int],
                 stop: threading.Event) -> Optional[float]:
    """Puts the trajectory into the channel (in its ticket's turn, with a lag bound); the
    time it waited for the queue, or None if the run stopped."""
    if self.lag_bound is not None and not self.lag_bound.wait_turn(ticket, stop):
      return None
    queue_wait = self.channel.put(trajectory, batch, stop)
    if queue_wait is not None and self.lag_bound is not None:
      self.lag_bound.queued(ticket)
    return queue_wait


class _Groups:
  """An actor's environment groups: each one's host environment, actor state and key,
  and the step it has in flight (`pending`: the entry whose action was sent)."""

  def __init__(self, actor: Actor, envs: List[Any]):
    self.actor, self.envs, self.ids = actor, envs, range(len(envs))
    key = jax.random.PRNGKey(actor.seed * 7919 + 1 + actor.index)
    if actor.restart:
      key = jax.random.fold_in(key, actor.restart)
    key = jax.device_put(key, actor.place.data)
    key, init_key = jax.random.split(key)
    self.keys = [key] + [jax.random.fold_in(key, g) for g in self.ids[1:]]
    # One state for all environments, split: per-environment states (R2D2's epsilons)
    # then do not depend on the number of groups.
    state, n = actor.agent.init_actor(init_key, actor.num_envs), actor.num_envs // len(envs)
    self.states = [jax.device_put(jax.tree.map(lambda x, g=g: x[g * n:(g + 1) * n], state),
                                  actor.place.data) for g in self.ids]
    self.timesteps = [env.reset()[0] for env in envs]  # Its contract was checked at build.
    self.pending: List[Trajectory] = []

  def check(self, g: int, timestep: Any) -> None:
    """Stops the run, naming the environment, on a step no agent should learn from."""
    problem = door.timestep_problem(timestep)
    if problem:
      n = self.actor.num_envs // len(self.envs)
      raise EnvironmentStepError(
          f"actor {self.actor.index}'s environments {g * n}-{(g + 1) * n - 1} (group {g}) "
          f"stepped {problem} of the group: the run stops before it reaches the learner.")

  def act(self, params: PyTree, g: int, timestep: Any) -> Trajectory:
    """Dispatches group g's inference; the entry it will step with."""
    out, next_state, self.keys[g] = self.actor.act(params, self.states[g], timestep,
                                                   self.keys[g])
    entry = Trajectory(timestep, self.states[g], out.action, out.extras)
    self.states[g] = next_state
    return entry

  def send(self, g: int, times: Dict[str, float]) -> None:
    t0 = time.perf_counter()
    action = np.asarray(self.pending[g].action)  # Waits for this group's inference.
    times["actor_inference"] += time.perf_counter() - t0
    self.envs[g].send(action)

  def start(self, params: PyTree, times: Dict[str, float]) -> Any:
    """Acts on the first timesteps and sends the actions; the trajectory's first entries."""
    self.pending = [self.act(params, g, self.timesteps[g]) for g in self.ids]
    earlier = trajectories.opening(self.pending, self.actor.agent.trajectory_overlap)
    for g in self.ids:
      self.send(g, times)
    return earlier

  def rollout(self, params: PyTree, length: int, stop: threading.Event,
              times: Dict[str, float]):
    """`length` steps of every group, in turns: (each group's entries, episode sums);
    None if the run stopped."""
    stepped: List[List[Trajectory]] = [[] for _ in self.ids]
    episodes = np.zeros(3)
    for _ in range(length):
      for g in self.ids:
        if stop.is_set():
          return None
        t0 = time.perf_counter()
        timestep, stats = self.envs[g].recv()
        times["actor_env"] += time.perf_counter() - t0
        self.check(g, timestep)
        if np.any(stats.done):  # Host environments' stats are numpy arrays already.
          episodes += episode_sums(stats, np)
        stepped[g].append(self.pending[g])
        self.pending[g] = self.act(params, g, timestep)
        self.send(g, times)
    return stepped, episodes
