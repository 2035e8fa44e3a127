"""Anakin (Podracer paper, section 3.1): environment, acting and learning in one program.

Per replica, one update is: a `lax.scan` over `rollout_length` steps of acting in a
batch of JAX environments, then `agent.observe` and `agent.update`. `updates_per_call`
updates are scanned together, and the whole thing is `pmap`ped over the topology's
devices with the state donated, so the host only launches it and reads metrics.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.agent import Agent, first_entries
from podracer.components.environments.base import VectorEnv, VectorEnvState
from podracer.metrics import RateMeter, device_counts
from podracer.errors import ConfigError
from podracer.runtimes.compile_once import compile_once
from podracer.types import (REPLICA_AXIS, AgentState, EnvSpec, PyTree, Trajectory,
                            strip_weak_types)


class AnakinState(NamedTuple):
  agent: AgentState
  env: VectorEnvState
  # The last `agent.trajectory_overlap` entries [K, B, ...]; the newest was acted on but
  # not yet stepped. They open the next trajectory.
  pending: Trajectory
  key: jax.Array


class EpisodeTotals(NamedTuple):
  """Sums over the finished episodes of an update: summed again on the host."""
  count: jax.Array
  return_sum: jax.Array
  length_sum: jax.Array


@registry.runtimes.register("anakin")
class Anakin:
  """Compiles act-and-learn into one replicated program for JAX environments."""

  def __init__(self, env_factory: Callable[..., Any], topology: Any, seed: int,
               total_env_steps: int, num_envs_per_device: int = 4,
               rollout_length: int = 128, updates_per_call: int = 16):
    def refuse(kind, what):
      raise ConfigError(
          f"Anakin compiles the environment into its program, so it needs an environment "
          f"written in JAX; `env.name` selects a {kind} environment ({what}). Use "
          f"runtime.name=sebulba for it.")

    if getattr(env_factory, "kind", None) not in (None, "jax"):
      refuse(env_factory.kind, env_factory.section.name)
    env = env_factory()
    if getattr(env, "kind", "jax") != "jax":
      refuse(env.kind, type(env).__name__)
    if not hasattr(topology, "devices") or not hasattr(topology, "num_replicas"):
      raise ConfigError("Anakin needs a topology that replicates over devices "
                        "(`topology.name=replicate`).")
    self.env = VectorEnv(env, num_envs_per_device)
    self.topology = topology
    self.seed = seed
    self.num_envs_per_device = num_envs_per_device
    self.rollout_length = rollout_length
    self.updates_per_call = updates_per_call
    self.steps_per_update = topology.num_replicas * num_envs_per_device * rollout_length
    self.steps_per_call = self.steps_per_update * updates_per_call
    self.num_calls = max(1, math.ceil(total_env_steps / self.steps_per_call))
    self.num_updates = self.num_calls * updates_per_call
    self.agent: Optional[Agent] = None

  @property
  def spec(self) -> EnvSpec:
    return self.env.spec()

  # -- program ---------------------------------------------------------------------

  def setup(self, agent: Agent) -> None:
    if getattr(getattr(agent, "replay", None), "kind", None) == "host":
      raise ConfigError("Anakin keeps replay inside its compiled program: use "
                        "--config.replay.name=device, not a host replay such as Reverb.")
    self.agent = agent
    devices = self.topology.devices
    self._init = jax.pmap(self._init_replica, axis_name=REPLICA_AXIS, devices=devices)
    self._step = jax.pmap(compile_once(self._run_updates, "The Anakin step"),
                          axis_name=REPLICA_AXIS, devices=devices, donate_argnums=(0,))

  def init(self) -> AnakinState:
    """Replicated state: equal parameters, different environments on each replica."""
    key = jax.random.PRNGKey(self.seed)
    nets_key, run_key = jax.random.split(key)
    first = jax.process_index() * self.topology.num_devices
    replica_keys = np.stack([np.asarray(jax.random.fold_in(run_key, first + i))
                             for i in range(self.topology.num_devices)])
    nets_keys = np.stack([np.asarray(nets_key)] * self.topology.num_devices)
    return self._init(nets_keys, replica_keys)

  def _init_replica(self, nets_key, key) -> AnakinState:
    agent = self.agent
    env_key, actor_key, act_key, key = jax.random.split(key, 4)
    env_state, timestep = self.env.reset(env_key)
    actor_state = agent.init_actor(actor_key, self.num_envs_per_device)
    nets = agent.init_nets(nets_key)
    out, next_actor_state = agent.act(nets, actor_state, timestep, act_key)
    pending = first_entries(Trajectory(timestep, actor_state, out.action, out.extras),
                            agent.trajectory_overlap)
    length = self.rollout_length + agent.trajectory_overlap
    trajectory_spec = jax.eval_shape(
        lambda p: jax.tree.map(lambda x: jnp.zeros((length, *x.shape[1:]), x.dtype), p),
        pending)
    state = AnakinState(
        agent=AgentState(actor=next_actor_state, nets=nets, opt=agent.init_opt(nets),
                         experience=agent.init_experience(trajectory_spec)),
        env=env_state, pending=pending, key=key)
    return strip_weak_types(state)

  def _rollout(self, nets, env_state, pending: Trajectory, actor_state, key):
    """`rollout_length` env steps: a [T+K, B] trajectory and the new last K entries."""
    agent = self.agent
    overlap = pending.action.shape[0]
    earlier = jax.tree.map(lambda x: x[:-1], pending)
    pending = jax.tree.map(lambda x: x[-1], pending)

    def env_step(carry, step_key):
      env_state, pending, actor_state = carry
      env_state, timestep, stats = self.env.step(env_state, pending.action)
      out, next_actor_state = agent.act(nets, actor_state, timestep, step_key)
      next_pending = Trajectory(timestep, actor_state, out.action, out.extras)
      return (env_state, next_pending, next_actor_state), (pending, stats)

    # `pending.actor_state` is the state the pending action was chosen with; the actor
    # state after it is carried separately.
    (env_state, pending, actor_state), (entries, stats) = jax.lax.scan(
        env_step, (env_state, pending, actor_state),
        jax.random.split(key, self.rollout_length))
    trajectory = jax.tree.map(lambda e, xs, x: jnp.concatenate([e, xs, x[None]]),
                              earlier, entries, pending)
    pending = jax.tree.map(lambda x: x[-overlap:], trajectory)
    totals = EpisodeTotals(
        count=jnp.sum(stats.done.astype(jnp.float32)),
        return_sum=jnp.sum(jnp.where(stats.done, stats.episode_return, 0.0)),
        length_sum=jnp.sum(jnp.where(stats.done, stats.episode_length, 0)).astype(
            jnp.float32))
    return trajectory, env_state, pending, actor_state, totals

  def _update(self, state: AnakinState, _):
    agent = self.agent
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    trajectory, env_state, pending, actor_state, totals = self._rollout(
        state.agent.nets, state.env, state.pending, state.agent.actor, rollout_key)
    experience = agent.observe(state.agent.experience, trajectory)
    nets, opt, experience, metrics = agent.update(state.agent.nets, state.agent.opt,
                                                  experience, update_key)
    agent_state = AgentState(actor=actor_state, nets=nets, opt=opt, experience=experience)
    return AnakinState(agent_state, env_state, pending, key), (metrics, totals)

  def _run_updates(self, state: AnakinState):
    state, (metrics, totals) = jax.lax.scan(self._update, state, None,
                                            length=self.updates_per_call)
    # Episodes are summed over replicas here so the host reads one number per update.
    totals = jax.lax.psum(totals, REPLICA_AXIS)
    metrics = jax.lax.pmean(metrics, REPLICA_AXIS)
    return state, (metrics, totals)

  # -- host loop -------------------------------------------------------------------

  def step(self, state: AnakinState):
    """Runs `updates_per_call` updates on every replica; metrics as [U] numpy arrays."""
    state, (metrics, totals) = self._step(state)
    # Replicas agree after psum/pmean: read replica 0 only.
    metrics, totals = jax.device_get(jax.tree.map(lambda x: x[0], (metrics, totals)))
    return state, metrics, totals

  def run(self, logger, state: Optional[AnakinState] = None) -> AnakinState:
    state = self.init() if state is None else state
    replay = getattr(self.agent, "replay", None)
    counts = device_counts(replay, state.agent.experience)
    meter = RateMeter(*counts) if counts else None
    env_steps = 0
    for call in range(self.num_calls):
      start = time.perf_counter()
      state, metrics, totals = self.step(state)
      elapsed = time.perf_counter() - start
      env_steps += self.steps_per_call
      record: Dict[str, float] = {
          "env_steps": env_steps,
          "updates": (call + 1) * self.updates_per_call,
          "sps": self.steps_per_call / elapsed,
      }
      count = float(np.sum(totals.count))
      if count:
        record["episode_return"] = float(np.sum(totals.return_sum)) / count
        record["episode_length"] = float(np.sum(totals.length_sum)) / count
        record["episodes"] = count
      record.update({k: float(np.mean(v)) for k, v in metrics.items()})
      if meter:
        record.update(meter.rates(*device_counts(replay, state.agent.experience)))
      logger.write(record, compile_step=(call == 0))
      if logger.target_reached:
        break
    return state
