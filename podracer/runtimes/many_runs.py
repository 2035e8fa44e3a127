"""Anakin's many runs in one program (`num_runs` x `sweep`, podracer/config/runs.py): each
run's swept values laid on the device mesh as the program reads them, a replayed PBT
schedule's values per call, population-based training's step over the members
(podracer/runtimes/population.py), each run's rows read back from the mesh, and the
labels each run's records carry.

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
from podracer.lifecycle import guards
from podracer.runtimes import population as population_lib


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
