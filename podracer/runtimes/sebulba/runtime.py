"""The Sebulba runtime: actor threads (actor.py) step host environments and act on the
actor devices; the learner thread (host/learner.py) learns on the learner devices, fed
through the channel for experience (host/channel.py) chosen at build; host/runtime.py
runs and supervises them."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional

import jax

from podracer import distributed, registry
from podracer.agent import Agent
from podracer.errors import ConfigError
from podracer.runtime import Plan, plan_rounds
from podracer.runtimes.host import threads
from podracer.runtimes.sebulba.actor import Actor
from podracer.runtimes.host.channel import REPLAY_DIR
from podracer.runtimes.host.runtime import (HostEvaluator, HostRuntime, LearnerOptions,
                                            act_and_advance_key)
from podracer.runtimes.host.params import ParamsStore, PolicyLagBound

__all__ = ["Sebulba", "SebulbaOptions", "HostEvaluator", "REPLAY_DIR"]


@dataclasses.dataclass(frozen=True)
class SebulbaOptions(LearnerOptions):
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
  env_mode: str = "sync"

  def __post_init__(self):
    super().__post_init__()
    if self.env_mode not in ("sync", "async"):
      raise ConfigError(f"`runtime.env_mode` is 'sync' or 'async', got {self.env_mode!r}.")
    envs = self.num_envs_per_actor
    if self.env_mode == "async" and isinstance(envs, int) and envs % 2:
      raise ConfigError(f"`runtime.env_mode=async` splits each actor thread's "
                        f"`runtime.num_envs_per_actor` environments into two halves, so it "
                        f"must be even, got {envs}; set --config.runtime.num_envs_per_actor="
                        f"{envs + 1} or --config.runtime.env_mode=sync.")
    if self.inject_failure not in ("", "actor", "learner"):
      raise ConfigError("`runtime.inject_failure` is '', 'actor' or 'learner'.")

  def plan(self, topology: Any, total_env_steps: int) -> Plan:
    del topology  # Every batch is one actor thread's trajectory, whatever the devices...
    # ...on each process: an update over several takes one batch from each (learner.py).
    return plan_rounds(self.num_envs_per_actor * self.rollout_length
                      * distributed.process_count(), self.updates_per_batch, total_env_steps)


@registry.runtimes.register("sebulba")
class Sebulba(HostRuntime):
  """Actor threads on actor devices feed a learner replicated over learner devices."""

  Options = SebulbaOptions

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], topology: Any,
               options: SebulbaOptions, plan: Plan, seed: int):
    self.check_topology(topology)
    places = len(topology.actor_devices) // topology.actor_model  # actor_model: a group's
    self.num_actor_threads = places * options.actor_threads_per_device
    super().__init__(agent, env_factory, topology, options, plan, seed,
                     producers=self.num_actor_threads,
                     batch_envs=options.num_envs_per_actor, batch_key="num_envs_per_actor")
    if options.env_mode == "async" and not getattr(env_factory, "supports_async", False):
      name = getattr(getattr(env_factory, "section", None), "name", None) or "this one"
      raise ConfigError(
          f"`runtime.env_mode=async` steps environments between `send` and `recv` on their "
          f"own threads, which the environment '{name}' does not support (EnvPool does: "
          f"env.name=envpool); set --config.runtime.env_mode=sync.")
    self._act = jax.jit(functools.partial(act_and_advance_key, agent.act))

  def _spawn_producers(self, group: threads.ThreadGroup, store: ParamsStore,
                       channel: Any, restart: int = 0,
                       lag_bound: Optional[PolicyLagBound] = None) -> None:
    options = self.options
    for j, place in enumerate(self.actor_places):
      for i in range(options.actor_threads_per_device):
        # Distinct environments and keys on every thread of every process.
        index = i + j * 1000 + distributed.process_index() * 100_000
        actor = Actor(self.agent, self._act, self.env_factory, place, index, self.seed,
                      options.num_envs_per_actor, options.rollout_length, store, channel,
                      restart=restart, lag_bound=lag_bound,
                      producer=j * options.actor_threads_per_device + i,
                      fail_after_first_batch=options.inject_failure == "actor" and index == 0,
                      groups=2 if options.env_mode == "async" else 1)
        group.spawn(f"actor-{place.name}-{i}", actor.loop, group.stop)
