"""Anakin's many runs in one program (`num_runs` x `sweep`, podracer/config/runs.py): what
`AnakinRuns` (podracer/runtimes/anakin.py) does besides one run's Anakin
(`ManyRunsOfAnakin`, mixed in before it: one run's program vmapped over the runs, each
run's agent built from its swept values), and, laid on the device mesh (`RunsOnMesh`),
each run's swept values as the program reads them, a replayed PBT schedule's values per
call, population-based training's step over the members
(podracer/runtimes/population.py), each run's rows read back from the mesh, and the
labels each run's records carry. The builder builds it only when `num_runs`, `sweep`,
`population` or `schedule_from` ask for many runs; a one-run config never comes here.

The mesh holds runs side by side on its `runs` axis (each device `runs_per_device` of
them) and each run's replicas on its `data` axis; `rows()` are this process's devices'
(run group, replica) places.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from podracer import mesh as mesh_lib
from podracer.config.population import Population, Schedule, plain
from podracer.config.runs import Runs
from podracer.errors import ConfigError
from podracer.lifecycle import evaluation as evaluation_lib, guards
from podracer.lifecycle.memory import tree_bytes
from podracer.runtimes import population as population_lib
from podracer.runtimes.compile_once import compile_once
from podracer.types import REPLICA_AXIS


def swept_values(runs: Runs) -> Dict[str, np.ndarray]:
  """Each swept key's value per run, [R], in the dtype the program reads."""
  return {k: np.asarray(v, np.float32 if isinstance(v[0], float) else np.int32)
          for k, v in runs.values().items()}


def check_sweep_traces(runs: Runs, abstract_run: Callable[[Dict[str, Any]], Any]) -> None:
  """Refuses, naming it, a swept key that the program cannot read as a traced value: one
  that sets a shape, a count, a Python branch or a check made when a component is built."""
  try:
    jax.eval_shape(abstract_run, runs.values())
    return
  except Exception as error:  # pylint: disable=broad-except
    first = error
  for key, values in runs.values().items():
    try:
      jax.eval_shape(abstract_run, {key: values})
    except Exception as error:  # pylint: disable=broad-except
      raise ConfigError(
          f"Config key `sweep.{key}` cannot be swept in one program: `{key}` is read when "
          f"the program is built (a shape, a count, a branch or a check), not as a value "
          f"inside it (tracing it raised {type(error).__name__}). Sweep it with separate "
          "launches; "
          "numbers such as learning rates, loss coefficients, discount and lambda can be "
          "swept.") from None
  raise first


class RunsOnMesh:
  """The many runs of one Anakin program, on its mesh: what each call passes them, what
  each run holds now, and how their rows are read back."""

  def __init__(self, runs: Runs, mesh: Any, rows: Callable[[], List[Any]],
               population: Optional[Population] = None,
               schedule: Optional[Schedule] = None):
    self.runs, self.mesh, self.rows = runs, mesh, rows
    self.population, self.schedule = population, schedule
    self.num_runs = runs.num_runs
    self.mesh_runs, self.mesh_data = mesh.devices.shape
    self.runs_per_device = self.num_runs // self.mesh_runs
    self.swept = self.hparams()                 # What each call passes its runs,
    self.values_now = swept_values(runs)        # ... as {key: [R]},
    self._placed: Optional[Any] = None          # ... placed on the mesh, at the first call.

  def hparams(self, values: Optional[Dict[str, np.ndarray]] = None
              ) -> Dict[str, np.ndarray]:
    """Each swept key's value per run (`values`, by default the sweep's), [this
    process's devices, runs per device], each device its own runs, as the program reads
    them."""
    values, per = values or swept_values(self.runs), self.runs_per_device
    return {k: np.stack([v[g * per:(g + 1) * per] for g, _ in self.rows()])
            for k, v in values.items()}

  def hparams_of(self, j: int):
    """The swept values of each device's j-th run, placed on the mesh."""
    return mesh_lib.put(self.mesh, {k: v[:, j] for k, v in self.swept.items()})

  def call_inputs(self, calls_done: int, steps_per_call: int, updates_per_call: int):
    """What the next call takes besides the state: under PBT whether it ends with an
    exploit/explore step and that step's key; else the runs' values (a schedule's at
    this call: an input, so nothing compiles again)."""
    if self.population:
      done = (calls_done + 1) * updates_per_call
      rows = len(mesh_lib.local_devices_of(self.mesh))
      due = np.full((rows,), self.population.due(done))
      key = np.stack([np.asarray(self.population.key(done))] * rows)
      return mesh_lib.feed(self.mesh, (due, key))
    if self.schedule:
      self._follow_schedule(calls_done * steps_per_call)
    if self._placed is None:
      self._placed = mesh_lib.put(self.mesh, self.swept)
    return (self._placed,)

  def _follow_schedule(self, env_steps: int) -> None:
    """Sets every run's values to the schedule's at `env_steps`."""
    values = self.schedule.at(env_steps)
    now = {k: np.full(self.num_runs, v, self.values_now[k].dtype)
           for k, v in values.items()}
    if self._placed is None or any(
        not np.array_equal(now[k], v) for k, v in self.values_now.items()):
      self.values_now = now
      self.swept, self._placed = self.hparams(now), None

  def per_run(self, rows: Any) -> Any:
    """Each run's [R, ...] host arrays from rows of the mesh, read from the first replica
    of each run group (a run's replicas agree after psum/pmean). Only runs spread over
    devices need the other processes' rows."""
    gathered = mesh_lib.gather(rows) if self.mesh_runs > 1 else mesh_lib.local(rows)
    return jax.tree.map(lambda x: x[::self.mesh_data].reshape(-1, *x.shape[2:]), gathered)

  def hparams_now(self, state: Any) -> Dict[str, np.ndarray]:
    """Each run's current values, {key: [R]}: the swept (or scheduled) values, or under
    PBT the values each member holds now."""
    if not self.population:
      return self.values_now
    return population_lib.as_numpy(self.per_run(state.population.hparams))

  def labels(self, state: Any, updates: int) -> List[Dict[str, Any]]:
    """Each run's labels (index, seed, swept values); under PBT the values each member
    holds now and, after an exploit/explore step, `parent`: the member it continues
    (itself if it did not copy)."""
    labels = [self.runs.labels(r) for r in range(self.num_runs)]
    if self.population or self.schedule:
      now = self.hparams_now(state)
      for r, label in enumerate(labels):
        label.update({k: plain(v[r]) for k, v in now.items()})
    if self.population:
      exploited = self.population.due(updates)
      parents, replaced = (np.asarray(x) for x in self.per_run(
          (state.population.parent, state.population.replaced)))
      for r, label in enumerate(labels):
        if exploited or replaced[r]:
          label["parent"] = int(parents[r])
        if replaced[r]:  # Its parameters went non-finite: a top member's replaced them.
          label["replaced"] = 1
    return labels

  def population_step(self, run_updates: Callable[[Any, Any], Any]):
    """One device's PBT call: its members' updates (`run_updates(state, hparams)`, each
    with the values it holds), their fitness added up, then, when `due` (or a member's
    parameters went non-finite), one exploit/explore step over the population."""
    population = self.population
    axis = mesh_lib.RUNS if self.mesh_runs > 1 else None

    def step(state, due, key):
      state, (metrics, episodes) = jax.vmap(run_updates)(state, state.population.hparams)
      pop = jax.vmap(functools.partial(population_lib.accumulate,
                                       measure=population.fitness))(state.population, episodes)
      members = (state.agent.nets, state.agent.opt)
      broken = ~jax.vmap(guards.all_finite)(members)
      any_broken = jnp.sum(broken) if axis is None else jax.lax.psum(jnp.sum(broken), axis)

      def exploit(members, pop):
        return population_lib.exploit_explore(population, members, pop, key, axis, broken,
                                              due)

      def keep(members, pop):
        return members, pop._replace(replaced=jnp.zeros_like(pop.replaced))

      (nets, opt), pop = jax.lax.cond(due | (any_broken > 0), exploit, keep, members, pop)
      agent = state.agent._replace(nets=nets, opt=opt)
      return state._replace(agent=agent, population=pop), (metrics, episodes)
    return step


class ManyRunsOfAnakin:
  """What Anakin does otherwise for many runs in one program: mixed in before `Anakin`
  (`AnakinRuns`), it overrides the parts of one run's runtime that many runs change:
  the program (one run's vmapped, or PBT's step), the state's size and init, each call's
  inputs, and how a call's rows become each run's records."""

  _memory_keys = ("num_runs",)
  _vmapped = True

  def __init__(self, agent: Any, env_factory: Callable[..., Any], topology: Any,
               options: Any, plan: Any, seed: int, runs: Runs,
               agent_for: Callable[[Dict[str, Any]], Any],
               population: Optional[Population] = None,
               schedule: Optional[Schedule] = None):
    # Run r's agent is built by `agent_for` from its swept values (traced in the program).
    self.runs, self._agent_for = runs, agent_for
    self.num_runs = runs.num_runs
    self.population, self.schedule = population, schedule  # PBT over the runs, a replay
    self.many: Optional[RunsOnMesh] = None  # Laid on the mesh with the program.
    super().__init__(agent, env_factory, topology, options, plan, seed)  # type: ignore

  @property
  def runs_per_device(self) -> int:
    return self.num_runs // self.mesh_runs

  def _program(self):
    """Runs are initialised one by one (see `init`), then stepped together."""
    self.many = RunsOnMesh(self.runs, self.mesh, self._rows, self.population, self.schedule)
    step = (self.many.population_step(self._run_updates_of_run) if self.population
            else jax.vmap(self._run_updates_of_run))
    return self._init_run, compile_once(step, "The Anakin step")

  def _state_bytes(self) -> int:
    """Bytes of one replica's runs. This traces one run's program: a swept key that sets
    a shape or the structure is refused here, before anything compiles."""
    check_sweep_traces(self.runs, self._abstract_run)
    key = jax.random.PRNGKey(0)
    first = {k: v[0] for k, v in self.runs.values().items()}
    return self.runs_per_device * tree_bytes(jax.eval_shape(self._init_run, key, key,
                                                             first))

  def _abstract_run(self, values: Dict[str, Any]) -> Any:
    """One run's first update, traced for its shapes only (on a replica axis of one)."""
    def first_update(hparams):
      key = jax.random.PRNGKey(0)
      state = self._init_run(key, key, hparams)
      return self._update(state, None, self._run_agent(hparams))
    one_replica = jax.vmap(first_update, axis_name=REPLICA_AXIS, in_axes=None, axis_size=1)
    return jax.eval_shape(one_replica, {k: v[0] for k, v in values.items()})

  def init(self) -> Any:
    """Run r starts from `runs.seeds[r]` exactly as a single run with that seed.

    One call per run a device holds, stacked on a runs axis after the devices': XLA:CPU
    deadlocked on a vmapped init over several devices (batched QR of orthogonal
    initialisers, jaxlib 0.10: two in one program hang on 2+ host devices); a run's init
    is cheap anyway. Call j initialises the j-th run of every device."""
    states = [mesh_lib.local(self._init(*mesh_lib.put(self.mesh, self._replica_keys(
        lambda group, j=j: group * self.runs_per_device + j)), self.many.hparams_of(j)))
              for j in range(self.runs_per_device)]
    return self._place(jax.tree.map(lambda *xs: np.stack(xs, axis=1), *states))

  def _run_seeds(self):
    return self.runs.seeds

  def _run_agent(self, hparams: Dict[str, Any]) -> Any:
    """The agent of one run: built with its swept values (traced), or the agent."""
    return self._agent_for(hparams) if hparams else self.agent

  def _init_run(self, nets_key, key, hparams) -> Any:
    state = self._init_replica(nets_key, key, self._run_agent(hparams))
    if self.population:
      state = state._replace(population=population_lib.init_state(hparams))
    return state

  def _run_updates_of_run(self, state: Any, hparams):
    return self._run_updates(state, self._run_agent(hparams))

  def _call_inputs(self):
    return self.many.call_inputs(self.calls_done, self.steps_per_call,
                                 self.updates_per_call)

  def hparams_now(self, state: Any) -> Dict[str, np.ndarray]:
    """Each run's current values, {key: [R]} (host arrays): the swept values (or a
    schedule's), or under PBT the values each member holds now."""
    return self.many.hparams_now(state)

  def per_run(self, rows: Any) -> Any:
    """Each run's [R, ...], read from the first replica of each run group."""
    return self.many.per_run(rows)

  def _evaluator(self, evaluation: Any) -> Callable[[Any, int], Any]:
    """Each run's evaluation fields: its own agent and parameters, the same key."""
    env, games = self._evaluation_env(evaluation)
    play_run = lambda nets, hp, key: evaluation_lib.jax_results(
        self._run_agent(hp), env, nets, key, games)
    play = jax.jit(jax.vmap(play_run, in_axes=(0, 0, None)))

    def each_run(state, env_steps):
      results = play(self.per_run(state.agent.nets), self.hparams_now(state),
                     evaluation.key(env_steps))
      return [{k: float(v[r]) for k, v in results.items()} for r in range(self.num_runs)]
    return each_run

  def _run_of(self, nets: Any, run: int, where: str) -> Any:
    if not 0 <= run < self.num_runs:
      raise ConfigError(f"--run={run}: {where} holds runs 0-{self.num_runs - 1}.")
    return jax.tree.map(lambda x: x[run], nets)

  def each_run(self, out: Any) -> List[Any]:
    return [jax.tree.map(lambda x, r=r: x[r], out) for r in range(self.num_runs)]

  def labels(self, state: Any, updates: int) -> List[Dict[str, Any]]:
    return self.many.labels(state, updates)

  def write_records(self, logger: Any, records: List[Dict[str, Any]],
                    compile_step: bool) -> None:
    logger.write_runs(records, compile_step=compile_step)
