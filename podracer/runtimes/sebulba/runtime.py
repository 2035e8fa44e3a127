"""The Sebulba runtime: actor threads (actor.py) step host environments and act on the
actor devices; the learner thread (learner.py) learns on the learner devices, fed through
the data path (paths.py) chosen at build; host.py runs and supervises them."""

from __future__ import annotations

import dataclasses
import functools
import queue
import time
from typing import Any, Callable, Optional

import jax

from podracer import distributed, registry
from podracer.agent import Agent
from podracer.errors import ConfigError
from podracer.runtime import Plan, plan_calls
from podracer.runtimes.sebulba import threads
from podracer.runtimes.sebulba.actor import Actor, Batch, ToLearners
from podracer.runtimes.sebulba.actor import act_and_advance_key
from podracer.runtimes.sebulba.host import HostEvaluator, HostRuntime
from podracer.runtimes.sebulba.params import ParamsStore, PolicyLagBound, first_replica
from podracer.runtimes.sebulba.paths import REPLAY_DIR, data_path

__all__ = ["Sebulba", "SebulbaOptions", "HostEvaluator", "REPLAY_DIR"]


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
class Sebulba(HostRuntime):
  """Actor threads on actor devices feed a learner replicated over learner devices."""

  Options = SebulbaOptions

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], topology: Any,
               options: SebulbaOptions, plan: Plan, seed: int):
    self._keep(agent, env_factory, topology, options, plan, seed)
    self.num_actor_threads = len(topology.actor_devices) * options.actor_threads_per_device
    if options.env_mode == "async" and not getattr(env_factory, "supports_async", False):
      name = getattr(getattr(env_factory, "section", None), "name", None) or "this one"
      raise ConfigError(
          f"`runtime.env_mode=async` steps environments between `send` and `recv` on their "
          f"own threads, which the environment '{name}' does not support (EnvPool does: "
          f"env.name=envpool); set --config.runtime.env_mode=sync.")
    self._use_path(data_path(
        agent, topology.learner_devices, self.spec, batch_envs=options.num_envs_per_actor,
        rollout_length=options.rollout_length, queue_size=options.queue_size,
        updates_per_batch=options.updates_per_batch, max_policy_lag=options.max_policy_lag,
        producers=self.num_actor_threads, batch_key="num_envs_per_actor"))
    self._act = jax.jit(functools.partial(act_and_advance_key, agent.act))

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
      self._spawn_producers(group, store, ToLearners(
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

  def _spawn_producers(self, group: threads.ThreadGroup, store: ParamsStore,
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
