"""Population-based training's and schedules' config: `population.*` checked against the
runs it is for (`Population`), the hyperparameter schedule of a PBT member read back from
its run folder (`schedule_from`, `Schedule`), and the one walk of a config's many-runs
keys (`num_runs`, `sweep`, `population`, `schedule_from`) that the builder makes.

What PBT does inside Anakin's program (fitness, exploit, explore) is the runtime's:
podracer/runtimes/population.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import jax
import numpy as np

from podracer.config import runs as runs_lib
from podracer.config.runs import Runs, flatten, parse_values
from podracer.errors import ConfigError
from podracer.logs import runs as runs_records

KINDS = ("none", "pbt")
EXPLORE = ("perturb", "resample")
# population.fitness: what ranks members, as the mean over the episodes that ended since
# the last step of (column of `metrics.episode_sums` [count, return sum, length sum],
# sign): the return (the default), the length (survival tasks), or the length negated
# (reach a goal soon).
FITNESS = {"episode_return": (1, 1.0), "episode_length": (2, 1.0),
           "neg_episode_length": (2, -1.0)}


@dataclasses.dataclass(frozen=True)
class Population:
  """`population.*`, checked against the runs it is for."""
  interval: int                       # updates between exploit/explore steps
  truncation: float                   # the bottom (and top) fraction
  explore: str                        # "perturb" or "resample"
  perturb_factors: Tuple[float, ...]
  bounds: Dict[str, Tuple[float, float]]  # per swept key, for `perturb`
  choices: Dict[str, Tuple[Any, ...]]     # per swept key: the sweep's values
  integer: Dict[str, bool]                # per swept key: an integer key
  size: int                               # members
  seed: int
  fitness: str = "episode_return"         # a key of FITNESS

  @property
  def copies(self) -> int:
    """How many members copy at each step (and how many they copy from)."""
    return max(1, int(self.size * self.truncation))

  def due(self, updates_done: int) -> bool:
    return updates_done % self.interval == 0

  def key(self, updates_done: int) -> jax.Array:
    """The step's key: the same on every device and process."""
    return jax.random.fold_in(jax.random.PRNGKey(self.seed), updates_done)


def from_config(config: Any, runs: Optional[Runs], updates_per_call: Optional[int]
                ) -> Optional[Population]:
  """The population `config.population` asks for; None for `kind=none` (the default)."""
  section = config.get("population") or {}
  kind = section.get("kind", "none")
  if kind not in KINDS:
    raise ConfigError(f"Config key `population.kind` is {kind!r}; it takes one of "
                      f"{', '.join(KINDS)}.")
  if kind == "none":
    return None
  if runs is None or runs.num_runs < 2:
    raise ConfigError("Config key `population.kind=pbt` trains a population of runs in one "
                      "program: give it members with `num_runs` and `sweep` (e.g. "
                      "--config.num_runs=4 --config.sweep.optimizer.learning_rate=1e-4,1e-3).")
  if not runs.swept:
    raise ConfigError("Config key `population.kind=pbt` explores hyperparameters, and this "
                      "run sweeps none: give the members their starting values with a sweep "
                      "of at least one key the run reads (e.g. "
                      "--config.sweep.optimizer.learning_rate=1e-4,3e-4,1e-3).")
  if updates_per_call is None:
    raise ConfigError("Config key `population.kind=pbt` needs runtime.name=anakin: its "
                      "members step, and are compared, inside one compiled program.")
  interval = _interval(section.get("interval"), updates_per_call)
  truncation = section.get("truncation", 0.25)
  if isinstance(truncation, bool) or not isinstance(truncation, (int, float)) or not (
      0 < truncation <= 0.5):
    raise ConfigError(f"Config key `population.truncation` is {truncation!r}; it is the "
                      "fraction of members that copy (and are copied from), in (0, 0.5].")
  explore = section.get("explore", "perturb")
  if explore not in EXPLORE:
    raise ConfigError(f"Config key `population.explore` is {explore!r}; it takes one of "
                      f"{', '.join(EXPLORE)}.")
  factors = _factors(section.get("perturb_factors", (0.8, 1.25)))
  measure = section.get("fitness", "episode_return")
  if measure not in FITNESS:
    raise ConfigError(f"Config key `population.fitness` is {measure!r}; it takes one of "
                      f"{', '.join(FITNESS)} (the mean over the episodes since the last "
                      "step that ranks the members).")
  return Population(
      interval=interval, truncation=float(truncation), explore=explore,
      perturb_factors=factors, bounds=_bounds(section.get("bounds") or {}, runs),
      choices={k: tuple(sorted(set(v))) for k, v in runs.swept.items()},
      integer={k: isinstance(v[0], int) for k, v in runs.swept.items()},
      size=runs.num_runs, seed=int(config.seed), fitness=measure)


def check_fits(population: Optional[Population], total_updates: int) -> None:
  """Refuses an interval the run never reaches (no exploit step at all)."""
  if population and population.interval > total_updates:
    raise ConfigError(f"Config key `population.interval` is {population.interval} updates, "
                      f"more than the run's {total_updates}: no exploit/explore step would "
                      "happen. Lower it, or raise total_env_steps.")


def _interval(interval: Any, updates_per_call: int) -> int:
  if interval is None:  # By default every 10 calls.
    return 10 * updates_per_call
  if (isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0
      or interval % updates_per_call):
    raise ConfigError(
        f"Config key `population.interval` is {interval!r}; it is the number of updates "
        "between exploit/explore steps, a positive multiple of `runtime.updates_per_call` "
        f"({updates_per_call}): the step runs between the program's calls.")
  return interval


def _factors(factors: Any) -> Tuple[float, ...]:
  values = parse_values(factors)
  if not values or any(isinstance(f, bool) or not isinstance(f, (int, float)) or f <= 0
                       for f in values):
    raise ConfigError(f"Config key `population.perturb_factors` is {factors!r}; give "
                      "positive numbers, e.g. 0.8,1.25.")
  return tuple(float(f) for f in values)


def _bounds(given: Any, runs: Runs) -> Dict[str, Tuple[float, float]]:
  """Each swept key's range for `perturb`: `population.bounds.KEY=LOW,HIGH`, by default
  the sweep's own smallest and largest value."""
  given = flatten(given)
  unknown = sorted(set(given) - set(runs.swept))
  if unknown:
    raise ConfigError(f"Config key `population.bounds.{unknown[0]}` bounds a key that is not "
                      f"swept; the swept keys are {', '.join(runs.swept) or 'none'}.")
  bounds = {}
  for key, values in runs.swept.items():
    low, high = min(values), max(values)
    if key in given:
      pair = parse_values(given[key])
      if len(pair) != 2 or any(isinstance(x, (bool, str)) for x in pair) or pair[0] > pair[1]:
        raise ConfigError(f"Config key `population.bounds.{key}` is {given[key]!r}; give "
                          "LOW,HIGH with LOW <= HIGH.")
      low, high = pair
      if min(values) < low or max(values) > high:
        raise ConfigError(f"Config key `population.bounds.{key}` is [{low:g}, {high:g}], "
                          f"which excludes starting values of `sweep.{key}` "
                          f"({', '.join(f'{v:g}' for v in sorted(set(values)))}).")
    bounds[key] = (float(low), float(high))
  return bounds


def describe(population: Population, keys: Sequence[str]) -> str:
  """One line for the start of the output."""
  how = (f"perturb x{{{', '.join(f'{f:g}' for f in population.perturb_factors)}}} within "
         + ", ".join(f"{k} [{population.bounds[k][0]:g}, {population.bounds[k][1]:g}]"
                     for k in keys)) if population.explore == "perturb" else "resample"
  return (f"population-based training: {population.size} members, every "
          f"{population.interval} updates the bottom {population.copies} copy the top "
          f"{population.copies} by {population.fitness}, then {how}")


def plain(value: Any) -> Any:
  """A member's value as a record holds it: an int, or the shortest decimal of the
  float32 the program reads (1e-04, not 9.999999747378752e-05)."""
  value = np.asarray(value)
  if np.issubdtype(value.dtype, np.integer):
    return int(value)
  return float(str(np.float32(value)))


@dataclasses.dataclass(frozen=True)
class Schedule:
  """A PBT member's hyperparameter schedule, replayed as a plain run
  (`--config.schedule_from=RUN_DIR:MEMBER`): [(env steps, {key: value})], each entry's
  values from its env steps on."""
  entries: Tuple[Tuple[int, Dict[str, Any]], ...]
  source: str

  def at(self, env_steps: int) -> Dict[str, Any]:
    """The values for a call that starts at `env_steps`."""
    return [values for start, values in self.entries if start <= env_steps][-1]

  @property
  def keys(self) -> List[str]:
    return list(self.entries[0][1])


def load_schedule(spec: str) -> Schedule:
  """`RUN_DIR:MEMBER` (or `RUN_DIR`: its best member by final return) -> its schedule, from
  the PBT run's metrics.jsonl and config.json."""
  run_dir, _, member = str(spec).rpartition(":") if ":" in str(spec) else (spec, "", "")
  try:
    with open(os.path.join(run_dir, "config.json")) as f:
      keys = list(flatten(json.load(f).get("sweep") or {}))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f if line.strip()]
  except (OSError, ValueError) as e:
    raise ConfigError(f"Config key `schedule_from` is {spec!r}: its run directory's "
                      f"config.json and metrics.jsonl could not be read ({e}).") from None
  if not keys or not any("parent" in r for r in records):
    raise ConfigError(f"Config key `schedule_from` is {spec!r}, but {run_dir} is not a "
                      "population-based training run (no swept keys, or no exploit step "
                      "in its records).")
  members = runs_records.by_run(records)
  if member == "":
    member = max(members, key=lambda m: _final_return(members[m]))
  elif not member.isdigit() or int(member) not in members:
    raise ConfigError(f"Config key `schedule_from` is {spec!r}: member {member!r} is not one "
                      f"of the run's members 0-{max(members)}.")
  entries = runs_records.schedule(records, keys, int(member))
  return Schedule(tuple((int(e), dict(v)) for e, v in entries), f"{run_dir}:{member}")


def describe_schedule(schedule: Schedule) -> str:
  """One line for the start of a replay: whose schedule, and its values from when."""
  changes = "; ".join(f"from {start:,}: " + ", ".join(f"{k}={v:g}" for k, v in values.items())
                      for start, values in schedule.entries)
  return f"replaying the hyperparameter schedule of PBT member {schedule.source}: {changes}"


def _final_return(records: List[Dict[str, Any]]) -> float:
  returns = [r["episode_return"] for r in records if r.get("episode_return") is not None]
  return returns[-1] if returns else -float("inf")


def schedule_runs(config: Any, schedule: Schedule, supports_runs: bool) -> Runs:
  """The runs that replay `schedule`: `num_runs` seeds (one by default), each starting
  from the schedule's first values, traced as a sweep's are."""
  if not supports_runs:
    raise ConfigError("Config key `schedule_from` replays a schedule of hyperparameter "
                      "values inside one compiled program: it needs runtime.name=anakin.")
  if flatten(config.get("sweep") or {}) or (config.get("population") or {}).get(
      "kind", "none") != "none":
    raise ConfigError("Config key `schedule_from` sets the swept keys' values from a PBT "
                      "run; leave `sweep` empty and `population.kind=none`.")
  num_runs = config.get("num_runs", 1)
  first = schedule.at(0)
  return Runs(tuple(config.seed + s for s in range(num_runs)),
              {k: (v,) * num_runs for k, v in first.items()})


class ManyRuns(NamedTuple):
  """What a config's many-runs keys ask of the runtime: the runs (None: one), PBT over
  them (or None) and a replayed PBT schedule (or None)."""
  runs: Optional[Runs]
  population: Optional[Population]
  schedule: Optional[Schedule]


def many_runs(config: Any, runtime_name: str, supports_runs: bool) -> ManyRuns:
  """`num_runs`, `sweep` and `schedule_from`, read once and checked against the runtime
  (`supports_runs`: it runs many in one program); `population` is refused here where the
  runtime runs one, and read by `with_population` once the plan is known."""
  if config.get("schedule_from"):
    schedule = load_schedule(config.schedule_from)
    return ManyRuns(schedule_runs(config, schedule, supports_runs), None, schedule)
  if not supports_runs and (config.get("population") or {}).get("kind", "none") != "none":
    raise ConfigError(
        f"Config key `population.kind` asks for population-based training, but runtime "
        f"'{runtime_name}' runs one run per launch (its environments step on the "
        "host), so there is no population to compare inside one program. Use "
        "runtime.name=anakin with a JAX environment.")
  runs = runs_lib.from_config(config)
  if runs and not supports_runs:
    raise ConfigError(
        f"Config keys `num_runs` / `sweep` ask for {runs.num_runs} runs in one program, but "
        f"runtime '{runtime_name}' runs one: its environments are stepped on the "
        "host, per run, so runs would share nothing. Launch one process per seed or value "
        "(e.g. --config.seed=1, --config.seed=2), or use runtime.name=anakin with a JAX "
        "environment.")
  return ManyRuns(runs, None, None)


def with_population(many: ManyRuns, config: Any, updates_per_round: int,
                    total_updates: int) -> ManyRuns:
  """`many` with PBT over its runs, as `config.population` asks (its interval a multiple
  of the plan's `updates_per_round`), refused if the run never reaches an exploit step."""
  if many.schedule:
    return many
  population = from_config(config, many.runs, updates_per_round)
  check_fits(population, total_updates)
  return many._replace(population=population)


def describe_many(many: ManyRuns) -> str:
  """What the start of the output says of many runs, a population or a schedule."""
  lines = [runs_lib.describe(many.runs)]
  if many.population:
    lines.append(describe(many.population, list(many.runs.swept)))
  if many.schedule:
    lines.append(describe_schedule(many.schedule))
  return "".join(line + "\n" for line in lines)
