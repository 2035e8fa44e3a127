"""Anakin (Podracer paper, section 3.1): environment, acting and learning in one program.

Per replica, one update is: a `lax.scan` over `rollout_length` steps of acting in a
batch of JAX environments, then `agent.observe` and `agent.update`. `updates_per_call`
updates are scanned together, and the whole thing is `pmap`ped over the topology's
devices, so the host only launches it and reads metrics. The state is donated to each
call (updated in place) on accelerators and whenever it is large (see `_donates`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from podracer import distributed
from podracer import evaluation as evaluation_lib
from podracer import preemption, registry, trajectories
from podracer.agent import Agent
from podracer.components.environments.base import VectorEnv, VectorEnvState
from podracer.errors import ConfigError
from podracer.experience import host_replay
from podracer.memory import check_device_fits, tree_bytes
from podracer.metrics import RateMeter, Window, device_counts, episode_sums
from podracer.runtime import Plan, Runtime, plan_rounds
from podracer.runtimes.compile_once import compile_once
from podracer.types import (REPLICA_AXIS, AgentState, Trajectory, replica_mean,
                            strip_weak_types)


# Donating the state saves holding two copies of it at each call: that matters for a
# device replay and on accelerators. On XLA:CPU, donation slowed small programs by
# 30-40% (PPO CartPole at 4 envs, benchmarks/anakin.py, in the reference PPO as well),
# so a CPU state smaller than this is not donated.
DONATE_MIN_CPU_BYTES = 64 * 2**20


class AnakinState(NamedTuple):
  agent: AgentState
  env: VectorEnvState
  # The last `agent.trajectory_overlap` entries [K, B, ...]; the newest was acted on but
  # not yet stepped. They open the next trajectory.
  pending: Trajectory
  key: jax.Array


@dataclasses.dataclass(frozen=True)
class AnakinOptions:
  """`runtime.*`: environments per device, steps per update, updates per call."""
  num_envs_per_device: int = 4
  rollout_length: int = 128
  updates_per_call: int = 16

  def plan(self, topology: Any, total_env_steps: int) -> Plan:
    steps_per_update = topology.num_replicas * self.num_envs_per_device * self.rollout_length
    return plan_rounds(steps_per_update * self.updates_per_call, self.updates_per_call,
                      total_env_steps)


def warming_up(record: Dict[str, Any], replay: Any) -> Dict[str, Any]:
  """Fields of a record of a call that learned nothing while its replay held fewer than
  `replay.min_size` items: `learning_started: false` and the min size, as Sebulba's
  warm-up records say (the progress line reads `warming up replay N/M`)."""
  min_size = getattr(replay, "min_size", None)
  if (min_size and record.get("learning") == 0
      and record.get("replay_size", min_size) < min_size):
    return dict(learning_started=False, replay_min_size=min_size)
  return {}


@registry.runtimes.register("anakin")
class Anakin(Runtime):
  """Compiles act-and-learn into one replicated program for JAX environments."""

  Options = AnakinOptions
  environment_kind = "jax"

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], topology: Any,
               options: AnakinOptions, plan: Plan, seed: int):
    if not hasattr(topology, "devices") or not hasattr(topology, "num_replicas"):
      raise ConfigError("Anakin needs a topology that replicates over devices "
                        "(`topology.name=replicate`).")
    if host_replay(agent) is not None:
      raise ConfigError("Anakin keeps replay inside its compiled program: use "
                        "--config.replay.name=device, not a host replay such as Reverb.")
    self.agent = agent
    self.spec = agent.spec
    self.env = VectorEnv(env_factory(), options.num_envs_per_device)
    self.topology = topology
    self.seed = seed
    self.num_envs_per_device = options.num_envs_per_device
    self.rollout_length = options.rollout_length
    self.updates_per_call = options.updates_per_call
    self.plan = plan
    self.steps_per_call, self.num_calls = plan.env_steps_per_round, plan.num_rounds
    # With several processes the pmap spans every process's devices (distributed.py).
    self.pmap_devices = devices = distributed.pmap_devices(topology.devices)
    self._on_cpu = all(d.platform == "cpu" for d in devices)
    state_bytes = self._state_bytes()
    self._check_memory(state_bytes)
    self._init = jax.pmap(self._init_replica, axis_name=REPLICA_AXIS, devices=devices)
    self._step = jax.pmap(compile_once(self._run_updates, "The Anakin step"),
                          axis_name=REPLICA_AXIS, devices=devices,
                          donate_argnums=(0,) if self._donates(state_bytes) else ())

  # -- program ---------------------------------------------------------------------

  def _state_bytes(self) -> int:
    """Bytes of one replica's state, from its abstract shapes (nothing is allocated)."""
    key = jax.random.PRNGKey(0)
    return tree_bytes(jax.eval_shape(self._init_replica, key, key))

  def _check_memory(self, state_bytes: int) -> None:
    """One replica's state and the trajectory its update holds (twice: the rollout's
    entries and the trajectory they make) must fit each device; CPU devices share the
    host's memory, so there the replicas of this process add up."""
    trajectory = trajectories.trajectory_spec(
        self.agent, self.spec, self.num_envs_per_device, self.rollout_length)
    needed = state_bytes + 2 * tree_bytes(trajectory)
    local = [d for d in self.pmap_devices if d.process_index == jax.process_index()]
    if self._on_cpu:
      needed *= len(local)
    keys = ["runtime.num_envs_per_device", "runtime.rollout_length"]
    if getattr(self.agent, "replay", None) is not None:
      keys.append("replay.max_size")
    check_device_fits(
        f"Anakin's state and one update's trajectory ({self.num_envs_per_device:,} "
        f"environments x {self.rollout_length} steps per replica, {len(local)} "
        "replica(s) here)", needed, keys, local)

  def _donates(self, state_bytes: int) -> bool:
    return not self._on_cpu or state_bytes >= DONATE_MIN_CPU_BYTES

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
    pending = trajectories.first_entries(
        Trajectory(timestep, actor_state, out.action, out.extras), agent.trajectory_overlap)
    trajectory_spec = trajectories.trajectory_spec(
        agent, self.env.spec(), self.num_envs_per_device, self.rollout_length)
    state = AnakinState(
        agent=AgentState(actor=next_actor_state, nets=nets, opt=agent.init_opt(nets),
                         experience=agent.init_experience(trajectory_spec)),
        env=env_state, pending=pending, key=key)
    return strip_weak_types(state)

  def _rollout(self, nets, env_state, pending: Trajectory, actor_state, key):
    """`rollout_length` env steps: a [T+K, B] trajectory and the new last K entries."""
    agent = self.agent
    overlap = pending.action.shape[0]

    def env_step(carry, step_key):
      env_state, action, actor_state = carry
      env_state, timestep, stats = self.env.step(env_state, action)
      if self._on_cpu:
        # Without the barrier XLA:CPU fuses the auto-reset select into the first layer and
        # keeps the observation column-major, which moves that layer's dot off the fast
        # (YNN) kernels: 5-7% of a 4-env PPO CartPole program (benchmarks/anakin.py).
        timestep = jax.lax.optimization_barrier(timestep)
      out, next_actor_state = agent.act(nets, actor_state, timestep, step_key)
      # Each step emits the entry it makes and carries only what the next step needs:
      # XLA copies every value a loop both carries and emits (10% of a small program).
      entry = Trajectory(timestep, actor_state, out.action, out.extras)
      return (env_state, out.action, next_actor_state), (entry, stats)

    # `pending.actor_state` is the state the pending action was chosen with; the actor
    # state after it is carried separately.
    (env_state, _, actor_state), (new, stats) = jax.lax.scan(
        env_step, (env_state, pending.action[-1], actor_state),
        jax.random.split(key, self.rollout_length))
    trajectory = trajectories.extend(pending, new)
    pending = trajectories.last_entries(trajectory, overlap)
    return trajectory, env_state, pending, actor_state, episode_sums(stats, jnp)

  def _update(self, state: AnakinState, _):
    agent = self.agent
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    trajectory, env_state, pending, actor_state, episodes = self._rollout(
        state.agent.nets, state.env, state.pending, state.agent.actor, rollout_key)
    experience = agent.observe(state.agent.experience, trajectory)
    nets, opt, experience, metrics = agent.update(state.agent.nets, state.agent.opt,
                                                  experience, update_key)
    actor_metrics = getattr(agent, "actor_metrics", lambda _: {})  # R2D2: epsilon_mean
    metrics = {**metrics, **actor_metrics(actor_state)}
    agent_state = AgentState(actor=actor_state, nets=nets, opt=opt, experience=experience)
    return AnakinState(agent_state, env_state, pending, key), (metrics, episodes)

  def _run_updates(self, state: AnakinState):
    state, (metrics, episodes) = jax.lax.scan(self._update, state, None,
                                              length=self.updates_per_call)
    # Episodes are summed over replicas here so the host reads one number per update.
    episodes = jax.lax.psum(episodes, REPLICA_AXIS)
    metrics = replica_mean(metrics)
    return state, (metrics, episodes)

  # -- host loop -------------------------------------------------------------------

  def step(self, state: AnakinState):
    """Runs `updates_per_call` updates on every replica: the new state, the metrics as
    [U] numpy arrays and the episode sums [U, 3] (see `metrics.episode_sums`)."""
    state, (metrics, episodes) = self._step(state)
    # Replicas agree after psum/pmean: read replica 0 only.
    metrics, episodes = jax.device_get(jax.tree.map(lambda x: x[0], (metrics, episodes)))
    return state, metrics, episodes

  def _evaluator(self, evaluation: Any) -> Callable[[AnakinState, int], float]:
    """`eval_return` of replica 0's parameters, on a fresh batch of environments."""
    play = jax.jit(functools.partial(evaluation_lib.jax_return, self.agent,
                                     VectorEnv(self.env.env, evaluation.episodes)))
    return lambda state, env_steps: float(play(
        jax.tree.map(lambda x: x[0], state.agent.nets), evaluation.key(env_steps)))

  def _resume(self, state: AnakinState, checkpointer: Optional[Any]):
    """(state, first call): the latest checkpoint's, if any, else `state` and 0."""
    if checkpointer is None or checkpointer.latest() is None:
      return state, 0
    state, first_call = checkpointer.restore(state)
    # Placed as `init` places it (same axis name), so the step does not compile again.
    return jax.pmap(lambda s: s, axis_name=REPLICA_AXIS,
                    devices=self.pmap_devices)(state), first_call

  def run(self, logger, state: Optional[AnakinState] = None,
          checkpointer: Optional[Any] = None, evaluation: Optional[Any] = None
          ) -> AnakinState:
    """Runs the remaining calls; with a `checkpointer` (podracer/checkpoint.py), first
    resumes from its latest checkpoint and saves as it goes, at the end and when stopped;
    with an `evaluation` (podracer/evaluation.py), adds `eval_return` to records."""
    state = self.init() if state is None else state
    evaluate = self._evaluator(evaluation) if evaluation is not None else None
    state, first_call = self._resume(state, checkpointer)
    replay = self.agent.replay
    counts = device_counts(replay, state.agent.experience)
    meter = RateMeter(*counts) if counts else None
    done = first_call
    try:
      for call in range(first_call, self.num_calls):
        # The state may be donated to the step: SIGTERM waits for a whole call and its record.
        with preemption.deferred():
          window = Window()
          state, metrics, episodes = self.step(state)
          # Each column summed alone, in float32, as the program's totals are kept.
          window.add_steps(self.steps_per_call, np.ascontiguousarray(episodes.T).sum(axis=1))
          window.metrics = metrics
          env_steps = (call + 1) * self.steps_per_call
          record = window.record(env_steps=env_steps,
                                 updates=(call + 1) * self.updates_per_call)
          if evaluate and evaluation.due(env_steps - self.steps_per_call, env_steps):
            record["eval_return"] = evaluate(state, env_steps)
          if meter:
            record.update(meter.rates(*device_counts(replay, state.agent.experience)))
          record.update(warming_up(record, replay))
          logger.write(record, compile_step=(call == first_call))
          done = call + 1
          if checkpointer is not None:
            checkpointer.maybe_save(done, state, len(logger.records),
                                    env_steps=done * self.steps_per_call)
        if logger.target_reached:
          break
    except KeyboardInterrupt:
      # Ctrl-C is not deferred and may have cut a step short, leaving a donated state.
      if checkpointer is not None and not any(
          x.is_deleted() for x in jax.tree.leaves(state)):
        checkpointer.save(done, state, len(logger.records),
                          env_steps=done * self.steps_per_call)
      raise
    if checkpointer is not None:
      checkpointer.save(done, state, len(logger.records),
                        env_steps=done * self.steps_per_call)
    return state
