"""Anakin (Podracer paper, section 3.1): environment, acting and learning in one program.

Per replica, one update is: a `lax.scan` over `rollout_length` steps of acting in a
batch of JAX environments, then `agent.observe` and `agent.update`. `updates_per_call`
updates are scanned together, and the whole thing is compiled once over the topology's
device mesh (podracer/mesh.py: `runs` x `data`, every device of every process), so the
host only launches it and reads metrics. The state is donated to each
call (updated in place) on accelerators and whenever it is large (see `_donates`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.lifecycle import evaluation as evaluation_lib, preemption
from podracer import mesh as mesh_lib, registry, trajectories
from podracer.agent import Agent
from podracer.components.environments.base import VectorEnv, VectorEnvState
from podracer.errors import ConfigError, EnvironmentStepError
from podracer.experience import host_replay
from podracer.lifecycle.memory import check_device_fits, tree_bytes
from podracer.logs.meters import RateMeter, Window, device_counts, episode_sums, warming_up
from podracer.runtime import Plan, Runtime, plan_rounds
from podracer.runtimes import model_axis
from podracer.runtimes.many_runs import ManyRunsOfAnakin
from podracer.runtimes.compile_once import compile_once
from podracer.types import (REPLICA_AXIS, AgentState, Trajectory, replica_mean,
                            replica_sum, strip_weak_types)


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
  # Population-based training's part (podracer/runtimes/population.py): each member's
  # hyperparameter values and fitness so far; None otherwise (no leaves: a checkpoint
  # without it is the same as before).
  population: Any = None


@dataclasses.dataclass(frozen=True)
class AnakinOptions:
  """`runtime.*`: environments per device, steps per update, updates per call; with
  `fixed_batch` (TF-Replicator's strong scaling) `num_envs_per_device` environments in
  all, split over the mesh's data devices (podracer/runtimes/model_axis.py)."""
  num_envs_per_device: int = 4
  rollout_length: int = 128
  updates_per_call: int = 16
  fixed_batch: bool = False

  def plan(self, topology: Any, total_env_steps: int) -> Plan:
    replicas = 1 if self.fixed_batch else topology.num_replicas
    steps_per_update = replicas * self.num_envs_per_device * self.rollout_length
    return plan_rounds(steps_per_update * self.updates_per_call, self.updates_per_call,
                      total_env_steps)


@registry.runtimes.register("anakin")
class Anakin(Runtime):
  """Compiles act-and-learn into one replicated program for JAX environments: one run
  (`AnakinRuns`, below, trains many in one program)."""

  Options = AnakinOptions
  environment_kind = "jax"

  supports_runs = True  # `num_runs`, `sweep`, `population`: `for_runs()`, AnakinRuns
  runs = None  # One run: no `num_runs` x `sweep` (AnakinRuns has them).
  num_runs = runs_per_device = 1
  _memory_keys: Tuple[str, ...] = ()  # Config keys that size the state besides one run's
  _vmapped = False  # Whether one run's program is vmapped (over runs)

  @classmethod
  def for_runs(cls) -> type:
    return AnakinRuns

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], topology: Any,
               options: AnakinOptions, plan: Plan, seed: int):
    if not hasattr(topology, "mesh") or not hasattr(topology, "num_replicas"):
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
    self.fixed_batch = options.fixed_batch
    self.plan = plan
    self.steps_per_call, self.num_calls = plan.env_steps_per_round, plan.num_rounds
    self.calls_done = 0  # Calls stepped (from the resumed one).
    # The mesh: a run's replicas on its `data` axis (many runs side by side on its `runs`
    # axis: podracer/runtimes/many_runs.py).
    # With `topology.model` = K > 1 a third axis: a replica over K devices, its state laid
    # by the sharding policy (podracer/runtimes/model_axis.py; None at K = 1).
    self.mesh = topology.mesh
    self.mesh_runs, self.mesh_data = self.mesh.devices.shape[:2]
    self.layout = model_axis.Layout.of(self)
    self._on_cpu = all(d.platform == "cpu" for d in self.mesh.devices.flat)
    state_bytes = self._state_bytes()
    self._check_memory(state_bytes)
    init, step = self._program()
    self._init, self._step = self._compile(init, step, self._donates(state_bytes))

  # -- program ---------------------------------------------------------------------

  def _program(self):
    """(init(nets_key, key), step(state)) of one replica, before `mesh.spmd`."""
    return self._init_replica, compile_once(self._run_updates, "The Anakin step")

  def _compile(self, init, step, donate: bool):
    """(init, step) compiled over the mesh: one row a device, or a replica's rows laid
    over its K devices."""
    if self.layout is not None:
      return self.layout.compile(init, step, donate)
    return mesh_lib.spmd(init, self.mesh), mesh_lib.spmd(step, self.mesh, donate=donate)

  def _put(self, rows: Any) -> Any:
    """This process's rows of a call's inputs -> global arrays of the mesh."""
    return mesh_lib.put(self.mesh, rows) if self.layout is None else self.layout.put(rows)

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
    local = mesh_lib.local_devices_of(self.mesh)
    needed += (self.runs_per_device - 1) * 2 * tree_bytes(trajectory)
    if self._on_cpu:
      needed *= len(local)
    keys = ["runtime.num_envs_per_device", "runtime.rollout_length", *self._memory_keys]
    if getattr(self.agent, "replay", None) is not None:
      keys.append("replay.max_size")
    check_device_fits(
        f"Anakin's state and one update's trajectory ({self.num_envs_per_device:,} "
        f"environments x {self.rollout_length} steps per replica, {len(local)} "
        "replica(s) here)", needed, keys, local)

  def _donates(self, state_bytes: int) -> bool:
    return not self._on_cpu or state_bytes >= DONATE_MIN_CPU_BYTES

  def init(self) -> AnakinState:
    """Equal parameters, different environments on each replica of the run."""
    return self._init(*self._put(self._replica_keys(lambda _: 0)))

  def _place(self, state: AnakinState) -> AnakinState:
    """This process's rows of `state` (host arrays) laid out as the step's outputs are,
    so the step does not compile again."""
    if self.layout is not None:
      return self.layout.put(state, self.layout.specs)
    return mesh_lib.put(self.mesh, state)

  def _rows(self):
    """(run group, replica index) of each of this process's devices of the mesh."""
    here = self.layout.rows_here if self.layout is not None else self.topology.num_devices
    first = jax.process_index() * here
    return [divmod(first + i, self.mesh_data) for i in range(here)]

  def _replica_keys(self, run_of: Callable[[int], int]):
    """Per device: the parameters' key (the same on a run's replicas) and the replica's
    own key, from the seed of run `run_of(run group)` (the run's own seed)."""
    seeds = self._run_seeds()
    nets, replicas = [], []
    for group, replica in self._rows():
      nets_key, run_key = jax.random.split(jax.random.PRNGKey(seeds[run_of(group)]))
      nets.append(np.asarray(nets_key))
      replicas.append(np.asarray(jax.random.fold_in(run_key, replica)))
    return np.stack(nets), np.stack(replicas)

  def _run_seeds(self) -> Tuple[int, ...]:
    """Each run's seed (one run: the config's)."""
    return (self.seed,)

  def _init_replica(self, nets_key, key, agent: Optional[Agent] = None) -> AnakinState:
    agent = agent or self.agent
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

  def _rollout(self, agent, nets, env_state, pending: Trajectory, actor_state, key):
    """`rollout_length` env steps: a [T+K, B] trajectory and the new last K entries."""
    overlap = pending.action.shape[0]

    def env_step(carry, step_key):
      env_state, action, actor_state = carry
      env_state, timestep, stats = self.env.step(env_state, action)
      if self._on_cpu and not (self._vmapped or self.fixed_batch):  # (jax 0.4's vmap has
        # no rule for the barrier; a fixed batch's program is vmapped over its one replica)
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

  def _update(self, state: AnakinState, _, agent: Agent):
    key, rollout_key, update_key = jax.random.split(state.key, 3)
    trajectory, env_state, pending, actor_state, episodes = self._rollout(
        agent, state.agent.nets, state.env, state.pending, state.agent.actor, rollout_key)
    experience = agent.observe(state.agent.experience, trajectory)
    nets, opt, experience, metrics = agent.update(state.agent.nets, state.agent.opt,
                                                  experience, update_key)
    metrics = {**metrics, **agent.actor_metrics(actor_state)}  # R2D2: epsilon_mean
    agent_state = AgentState(actor=actor_state, nets=nets, opt=opt, experience=experience)
    state = state._replace(agent=agent_state, env=env_state, pending=pending, key=key)
    return state, (metrics, episodes)

  def _run_updates(self, state: AnakinState, agent: Optional[Agent] = None):
    update = functools.partial(self._update, agent=agent or self.agent)
    state, (metrics, episodes) = jax.lax.scan(update, state, None,
                                              length=self.updates_per_call)
    # Episodes are summed over replicas here so the host reads one number per update.
    episodes = replica_sum(episodes)
    metrics = replica_mean(metrics)
    return state, (metrics, episodes)

  def replica_program(self, agent: Agent):
    """(init(nets_key, key) -> state, call(state) -> (state, (metrics, episodes))): one
    replica of one run of `agent` (another build of this run's agent, e.g. with traced
    values of its own), on a replica axis of one, for a driver that composes its own
    program of whole trainings (`podracer.meta`: vmapped members, scanned calls)."""
    init = jax.vmap(lambda nets_key, key: self._init_replica(nets_key, key, agent),
                    axis_name=REPLICA_AXIS, in_axes=None, axis_size=1)
    call = jax.vmap(lambda state: self._run_updates(state, agent), axis_name=REPLICA_AXIS)
    return init, call

  # -- host loop -------------------------------------------------------------------

  def step(self, state: AnakinState):
    """Runs `updates_per_call` updates on every replica: the new state, the metrics as
    [U] numpy arrays and the episode sums [U, 3] (see `metrics.episode_sums`); with many
    runs, [R, U] and [R, U, 3]."""
    state, out = self._step(state, *self._call_inputs())
    self.calls_done += 1
    metrics, episodes = self.per_run(out)
    return state, metrics, episodes

  def _call_inputs(self) -> Tuple[Any, ...]:
    """What the next call takes besides the state: nothing, for one run."""
    return ()

  def hparams_now(self, state: AnakinState) -> Optional[Dict[str, np.ndarray]]:
    """Each run's current hyperparameter values, {key: [R]} (host arrays); None for one
    run (AnakinRuns: the swept, scheduled or PBT members' values)."""
    del state
    return None

  def per_run(self, rows: Any) -> Any:
    """Host arrays of the run from rows of the mesh: replica 0's row (a run's replicas
    agree after psum/pmean); with many runs, each run's [R, ...]."""
    return jax.tree.map(lambda x: x[0], mesh_lib.local(rows))

  def _evaluator(self, evaluation: Any) -> Callable[[AnakinState, int], Any]:
    """[the evaluation's record fields] (`eval_return`; `eval_win_rate` for a self-play
    game) for replica 0's parameters, on a fresh batch of the environment's
    `evaluation_env`; with many runs, each run's."""
    env, games = self._evaluation_env(evaluation)
    play = jax.jit(functools.partial(evaluation_lib.jax_results, self.agent, env,
                                     games=games))
    return lambda state, env_steps: [_plain(play(
        self.per_run(state.agent.nets), evaluation.key(env_steps)))]

  def _evaluation_env(self, evaluation: Any):
    """(a fresh VectorEnv of `evaluation.episodes` evaluation environments, whether the
    environment is a self-play game)."""
    env = VectorEnv(self.env.env.evaluation_env(), evaluation.episodes)
    return env, bool(self.agent.spec.zero_sum)

  def saved_state(self, checkpointer: Any) -> AnakinState:
    """The latest checkpoint's state, laid on this run's mesh."""
    return self._resume(self.init(), checkpointer)[0]

  # -- what callers ask of a runtime (podracer/runtime.py) ---------------------------

  def checkpoints(self) -> bool:
    return True  # Its whole state, for an exact resume.

  def evaluates(self) -> bool:
    return True

  def final_nets(self, state: AnakinState, run: int = 0) -> Any:
    """Run `run`'s nets (replica 0's) in `state`."""
    return self._run_of(self.per_run(state.agent.nets), run, "the run")

  def saved_nets(self, checkpointer: Any, run: int = 0) -> Any:
    """Run `run`'s nets in the latest checkpoint."""
    nets = self.per_run(self.saved_state(checkpointer).agent.nets)
    return self._run_of(nets, run, f"the checkpoint in {checkpointer.directory}")

  def _run_of(self, nets: Any, run: int, where: str) -> Any:
    if run:
      raise ConfigError(f"--run={run}: {where} holds one run (run 0).")
    return nets

  def environment_to_watch(self, seed: int = 0) -> Any:
    """The run's JAX environment (one; videos vmap nothing)."""
    del seed
    return self.env.env

  def _resume(self, state: AnakinState, checkpointer: Optional[Any]):
    """(state, first call): the latest checkpoint's, if any, else `state` and 0."""
    if checkpointer is None or checkpointer.latest() is None:
      return state, 0
    saved = checkpointer.meta().get("mesh")  # None: before 0.9.0, one run per mesh row
    # Its rows (runs x data) must be this mesh's; a replica's K devices may differ (the
    # checkpoint holds whole arrays, laid anew by this run's sharding policy).
    if saved is not None and tuple(saved[:2]) != self.mesh.devices.shape[:2]:
      raise ConfigError(
          f"The checkpoint in {checkpointer.directory} was saved on a mesh of runs={saved[0]} "
          f"x data={saved[1]} devices; this run's is runs={self.mesh_runs} x "
          f"data={self.mesh_data} (`topology.runs`, `topology.data`). A run resumes on the "
          f"mesh rows it had ({saved[0] * saved[1]}, each over topology.model devices): "
          f"relaunch with --config.topology.num_devices="
          f"{saved[0] * saved[1] * self.topology.model} (at topology.model="
          f"{self.topology.model}), or with --fresh to start over.")
    state, first_call = checkpointer.restore(state)
    return self._place(state), first_call

  def train(self, logger, checkpointer: Optional[Any] = None,
            evaluation: Optional[Any] = None, state: Optional[AnakinState] = None
            ) -> AnakinState:
    """Runs the remaining calls; with a `checkpointer` (podracer/lifecycle/checkpoint.py), first
    resumes from its latest checkpoint and saves as it goes, at the end and when stopped;
    with an `evaluation` (podracer/lifecycle/evaluation.py), adds `eval_return` to records."""
    state = self.init() if state is None else state
    evaluate = self._evaluator(evaluation) if evaluation is not None else None
    state, first_call = self._resume(state, checkpointer)
    logger.describe(model_axis.describe(self.mesh, (state.agent.nets, state.agent.opt)))
    self.calls_done = first_call
    records = _CallRecords(self, evaluate, evaluation, state)
    done = first_call
    try:
      for call in range(first_call, self.num_calls):
        # The state may be donated to the step: SIGTERM waits for a whole call and its record.
        with preemption.deferred():
          started = time.perf_counter()
          state, metrics, episodes = self.step(state)
          records.write(logger, call, started, state, metrics, episodes,
                        compile_step=(call == first_call))
          if self.env.problem:  # Its steps' host checks ran before their records came.
            raise EnvironmentStepError(f"Anakin's environments stepped {self.env.problem}.")
          done = call + 1
          # Over several processes all agree here whether to save and stop (SIGTERM).
          if checkpointer is not None and checkpointer.maybe_save(
              done, state, len(logger.records), **self._counters(done)):
            raise preemption.Terminated()
        if logger.target_reached:
          break
    except KeyboardInterrupt:
      # Ctrl-C is not deferred and may have cut a step short, leaving a donated state.
      if checkpointer is not None and not any(
          x.is_deleted() for x in jax.tree.leaves(state)):
        checkpointer.save(done, state, len(logger.records), **self._counters(done))
      raise
    if checkpointer is not None:
      checkpointer.save(done, state, len(logger.records), **self._counters(done))
    return state

  def _counters(self, calls: int) -> Dict[str, Any]:
    """What a checkpoint keeps beside the state: env steps, and the mesh it was laid on."""
    return dict(env_steps=calls * self.steps_per_call, mesh=list(self.mesh.devices.shape))

  # -- what a call's records are (AnakinRuns: one per run) -----------------------------

  def each_run(self, out: Any) -> List[Any]:
    """[`out`] of each run (one run: `out` itself)."""
    return [out]

  def labels(self, state: AnakinState, updates: int) -> List[Dict[str, Any]]:
    """What each run's records carry besides the window's fields (one run: nothing)."""
    del state, updates
    return [{}]

  def write_records(self, logger: Any, records: List[Dict[str, Any]],
                    compile_step: bool) -> None:
    logger.write(records[0], compile_step=compile_step)


class AnakinRuns(ManyRunsOfAnakin, Anakin):
  """Anakin's many runs in one program (`num_runs` x `sweep`, a replayed schedule, PBT):
  one run's program vmapped over them; podracer/runtimes/many_runs.py says how."""


def _plain(results: Dict[str, Any]) -> Dict[str, float]:
  return {k: float(v) for k, v in results.items()}


class _CallRecords:
  """Turns one call's metrics and episode sums into its records (one per run) and writes
  them: replay rates and evaluation when due, warm-up fields, each run's labels."""

  def __init__(self, anakin: Anakin, evaluate: Optional[Callable[..., Any]],
               evaluation: Any, state: AnakinState):
    self.anakin, self.evaluate, self.evaluation = anakin, evaluate, evaluation
    self.replay = anakin.agent.replay
    counts = device_counts(self.replay, state.agent.experience)
    self.meter = RateMeter(*counts) if counts else None

  def write(self, logger, call: int, started: float, state: AnakinState, metrics,
            episodes, compile_step: bool) -> None:
    anakin = self.anakin
    steps = anakin.steps_per_call
    env_steps = (call + 1) * steps
    per_run = anakin.each_run((metrics, episodes))
    evaluated = None
    if self.evaluate and self.evaluation.due(env_steps - steps, env_steps):
      evaluated = self.evaluate(state, env_steps)
    rates = {}
    if self.meter:  # Summed over runs by the counters: each run's share.
      rates = {k: v / (1 if k == "sample_to_insert_ratio" else anakin.num_runs) for k, v in
               self.meter.rates(*device_counts(self.replay, state.agent.experience)).items()}
    labels = anakin.labels(state, (call + 1) * anakin.updates_per_call)
    records = []
    for r, (run_metrics, run_episodes) in enumerate(per_run):
      window = Window()
      window.start = started
      # Each column summed alone, in float32, as the program's totals are kept.
      window.add_steps(steps, np.ascontiguousarray(run_episodes.T).sum(axis=1))
      window.add_metrics(run_metrics)
      record = window.record(env_steps=env_steps, updates=(call + 1) * anakin.updates_per_call)
      if evaluated is not None:
        record.update(evaluated[r])
      record.update(rates)
      record.update(warming_up(record, self.replay))
      records.append({**labels[r], **record})
    anakin.write_records(logger, records, compile_step)
