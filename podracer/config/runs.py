"""Many runs in one program: `num_runs` seeds, crossed with a `sweep` of hyperparameters.

    --config.num_runs=16                                   16 seeds: seed, seed+1, ...
    --config.sweep.optimizer.learning_rate=1e-4,2.5e-4     each value, num_runs seeds each

Anakin vmaps one run's program over a `runs` axis inside each replica's program (beside
the devices' `replica` axis, so replica means never mix runs): run r starts from
`PRNGKey(seeds[r])`, exactly as a single run with that seed, and reads each swept
hyperparameter as a traced value of its own. A swept key must be a number that the
agent, a loss, a network or an optimizer reads inside the compiled program; a key that
sets shapes or the program's structure (sizes, counts, names, the environment, the
runtime) is refused, because all runs share one program. Sweep several of those with
separate launches.

Imports no JAX: the launcher parses `--config.sweep.KEY=...` with it.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from podracer.errors import ConfigError

RUNS_AXIS = "runs"
SWEEP_FLAG = "--config.sweep."
# Population-based training's bounds of a swept key (podracer/runtimes/population.py),
# like a sweep a key the config does not have until the command line names it.
BOUNDS_FLAG = "--config.population.bounds."
# Sections whose keys shape the program itself, whatever their type.
STRUCTURAL_SECTIONS = ("env", "runtime", "topology")


@dataclasses.dataclass(frozen=True)
class Runs:
  """Run r's seed and its value of each swept key (dotted config key -> value per run)."""
  seeds: Tuple[int, ...]
  swept: Dict[str, Tuple[Any, ...]] = dataclasses.field(default_factory=dict)

  @property
  def num_runs(self) -> int:
    return len(self.seeds)

  def labels(self, run: int) -> Dict[str, Any]:
    """What each of run `run`'s records carries: its index, seed and swept values."""
    return dict(run=run, seed=self.seeds[run],
                **{key: values[run] for key, values in self.swept.items()})

  def values(self) -> Dict[str, List[Any]]:
    """{swept key: [value of run r]}: the program's per-run hyperparameters."""
    return {key: list(values) for key, values in self.swept.items()}


def asks_for_runs(config: Any) -> bool:
  """Whether the config asks for anything but one plain run: `num_runs` other than 1, a
  `sweep`, a `population.kind` other than none, or `schedule_from`. Only then does the
  builder read those keys (and refuse a malformed one): one run never reads them."""
  num_runs = config.get("num_runs", 1)
  population = config.get("population") or {}
  return (type(num_runs) is not int or num_runs != 1  # pylint: disable=unidiomatic-typecheck
          or bool(flatten(config.get("sweep") or {}))
          or population.get("kind", "none") != "none" or bool(config.get("schedule_from")))


def from_config(config: Any) -> Optional[Runs]:
  """The runs `num_runs` and `sweep` ask for; None for one plain run (the default)."""
  num_runs = config.get("num_runs", 1)
  if isinstance(num_runs, bool) or not isinstance(num_runs, int) or num_runs < 1:
    raise ConfigError(f"Config key `num_runs` is the number of runs (seeds) trained in one "
                      f"program, an integer >= 1, got {num_runs!r}.")
  sweep = flatten(config.get("sweep") or {})
  if num_runs == 1 and not sweep:
    return None
  grid = {key: _values(config, key, given) for key, given in sweep.items()}
  combos = list(itertools.product(*grid.values())) or [()]
  seeds, swept = [], {key: [] for key in grid}
  for combo in combos:
    for s in range(num_runs):
      seeds.append(config.seed + s)
      for key, value in zip(grid, combo):
        swept[key].append(value)
  return Runs(tuple(seeds), {k: tuple(v) for k, v in swept.items()})


def flatten(sweep: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
  """{"optimizer.learning_rate": values} from a nested `sweep` section."""
  out: Dict[str, Any] = {}
  for key, value in dict(sweep).items():
    if hasattr(value, "items"):
      out.update(flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def parse_values(text: Any) -> List[Any]:
  """`1e-4,2.5e-4` (or a list) -> [0.0001, 0.00025]: ints stay ints."""
  items = text.split(",") if isinstance(text, str) else list(text)
  values = []
  for item in items:
    if isinstance(item, str):
      item = item.strip()
      try:
        item = int(item)
      except ValueError:
        try:
          item = float(item)
        except ValueError:
          item = item  # Refused below, with the key's name.
    values.append(item)
  return values


def _values(config: Any, key: str, given: Any) -> List[Any]:
  """The sweep's values of `key`, of the type of the key's own value; else ConfigError."""
  current = _current_value(config, key)
  values = parse_values(given)
  if not values:
    raise ConfigError(f"Config key `sweep.{key}` has no values; give them as "
                      f"--config.sweep.{key}=V1,V2,...")
  want_int = isinstance(current, int) and not isinstance(current, bool)
  out = []
  for v in values:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
      raise ConfigError(f"Config key `sweep.{key}` has the value {v!r}; a sweep takes "
                        f"numbers (`{key}` is {current!r}).")
    if want_int and float(v) != int(v):
      raise ConfigError(f"Config key `sweep.{key}` has the value {v!r}, but `{key}` is an "
                        f"integer ({current!r}); give integers.")
    out.append(int(v) if want_int else float(v))
  if len(set(out)) != len(out):
    raise ConfigError(f"Config key `sweep.{key}` repeats a value ({values}); use "
                      "`num_runs` for seeds of one value.")
  return out


def _current_value(config: Any, key: str) -> Any:
  """`key`'s value in the config, or the component's default; refuses structural keys."""
  head, _, arg = key.partition(".")
  if not arg or "." in arg:
    raise ConfigError(f"Config key `sweep.{key}` must name SECTION.KEY, a number a "
                      "component reads (e.g. `sweep.optimizer.learning_rate`).")
  if head in STRUCTURAL_SECTIONS or arg == "name":
    raise ConfigError(
        f"Config key `sweep.{key}` is structural: `{key}` sets the environment, the "
        "runtime, the devices or a component's name, which all runs of one program share. "
        "Launch one process per value instead.")
  if head not in config or not hasattr(config[head], "keys"):
    raise ConfigError(f"Config key `sweep.{key}` names no section `{head}` of this config; "
                      "a sweep sets keys of the agent's sections (agent, network, loss, "
                      "optimizer, replay).")
  section = config[head]
  if arg in section and section[arg] is not None:
    current = section[arg]
  else:
    from podracer.config import compose  # Lazy: compose imports the registries.
    reg = compose.section_registry(head)
    defaults = compose.section_defaults(reg, section.name, head) if reg else {}
    if arg not in defaults:
      raise ConfigError(f"Config key `sweep.{key}` names no parameter `{arg}` of section "
                        f"`{head}` ('{section.get('name')}'); it accepts: "
                        f"{', '.join(k for k in defaults if k != 'name') or 'nothing'}.")
    current = defaults[arg]
  if isinstance(current, bool) or not isinstance(current, (int, float)):
    raise ConfigError(f"Config key `sweep.{key}` is structural: `{key}` is {current!r}, not "
                      "a number the program can read as a value; launch one process per "
                      "value instead.")
  return current


def with_values(config: Any, values: Mapping[str, Any]) -> Any:
  """A copy of `config` with each dotted key set to its value (a number or a traced
  array): what the agent of one run is built from."""
  from ml_collections import config_dict
  copy = config_dict.ConfigDict(config.to_dict(), type_safe=False)
  for key, value in values.items():
    head, _, arg = key.partition(".")
    copy[head][arg] = value
  return copy


def describe(runs: Runs) -> str:
  """One line for the start of the output: how many runs, of what."""
  seeds = sorted(set(runs.seeds))
  parts = [f"{runs.num_runs} runs in one program", f"seeds {seeds[0]}-{seeds[-1]}"
           if len(seeds) > 1 else f"seed {seeds[0]}"]
  for key, values in runs.swept.items():
    parts.append(f"{key} in {sorted(set(values))}")
  return ", ".join(parts)


def sweep_args(argv: Sequence[str], prefix: str = SWEEP_FLAG
               ) -> Tuple[Dict[str, str], List[str]]:
  """Splits `--config.sweep.KEY=V1,V2` (or another `prefix`) off argv: ({KEY: "V1,V2"},
  the rest)."""
  sweeps, rest = {}, []
  for arg in argv:
    if arg.startswith(prefix) and "=" in arg:
      key, _, text = arg[len(prefix):].partition("=")
      sweeps[key] = text
    else:
      rest.append(arg)
  return sweeps, rest


def add_sweep(config: Any, sweeps: Mapping[str, str], section: str = "sweep") -> None:
  """Puts command-line sweeps into `config.sweep` (nested, as a config file writes it);
  `section` "population.bounds" puts PBT's bounds into theirs."""
  from ml_collections import config_dict
  if not sweeps:
    return
  node = config
  for head in section.split("."):
    if node.get(head) is None:
      node[head] = config_dict.ConfigDict()
    node = node[head]
  for key, text in sweeps.items():
    node = config
    for head in section.split("."):
      node = node[head]
    *heads, last = key.split(".")
    for head in heads:
      if head not in node:
        node[head] = config_dict.ConfigDict()
      node = node[head]
    node[last] = text
