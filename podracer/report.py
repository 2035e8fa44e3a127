"""Reports across runs, as papers show them (Agarwal et al., "Deep RL at the Edge of the
Statistical Precipice", NeurIPS 2021: their `rliable`'s estimates and stratified bootstrap,
vectorized over the bootstrap's replications; rliable draws the performance profiles):

  python -m podracer.report RUN_DIR... [--group-by=KEY] [--metric=episode_return]
      [--out=DIR] [--normalize=LOW:HIGH | FILE.json] [--final=0.1]

reads each run directory's `metrics.jsonl` and `config.json` (a many-runs directory
counts as its runs; separate launches of one config count as runs of it), groups the
runs by config (the keys in which the groups' configs differ name them), or by the
value of `--group-by` (a config key such as `agent.name`, or a swept one), with the
environment (`env.env_id`, `env.task_id` or `env.name`) as the task, and writes into
DIR (default `report/`):

  report.md       per group and task: runs, final scores (the mean of the metric over
                  the last `--final` of the env steps), and the IQM, median, mean and
                  optimality gap with 95 % stratified bootstrap intervals;
  aggregates.png  those estimates and intervals;
  curves.png      IQM of the metric over env steps with its interval band, each run
                  resampled onto a common env-step grid;
  profiles.png    performance profiles, where there are several tasks.

A population-based training run (`population.kind=pbt`) counts as its members, and the
report names its best member (by the final score) with the hyperparameter schedule that
member's lineage trained with: [env steps, {swept key: value}] where the values change,
the schedule `--config.schedule_from=RUN_DIR:MEMBER` replays.

Groups of different env-step ranges are compared on their common range (said in the
report). A run whose records stop early counts as what it reached (said, never dropped).
Scores are raw unless `--normalize` gives each task's (low, high): `LOW:HIGH` for every
task, or a JSON file {task: [low, high]} (e.g. MinAtar's random and a reference score);
the optimality gap needs them (the distance below `high`).
Bad input (a directory with no metrics.jsonl, records without the metric, an unknown
key) is one paragraph naming it, exit 2.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import textwrap
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from podracer.errors import ConfigError
from podracer.logs import runs as runs_log
from podracer.logs.metrics import METRICS_FILE
# The statistics, importable from here as before (docs/api.md lists interval_estimates).
from podracer.reporting.statistics import (  # noqa: F401
    REPS, quiet_bootstrap, aggregates, bootstrapped, interval_estimates, iqm, resampled)

# Config keys that say how long or how often, not what was run: runs that differ only in
# them are runs of one config. Per-run keys (seed, swept values) come from the records.
NOT_THE_CONFIG = ("seed", "num_runs", "sweep", "total_env_steps", "stop_at_return",
                  "checkpoint_interval", "checkpoints_to_keep", "log", "eval_interval",
                  "eval_episodes")
TASK_KEYS = ("env.env_id", "env.task_id", "env.env_name", "env.name")
AGGREGATES = ("IQM", "median", "mean", "optimality gap")
CURVE_REPS = 500         # ... of each point of the curves
CURVE_POINTS = 40


class Run(NamedTuple):
  """One run: where it came from, its config (dotted keys, its own seed and swept values
  in), and its (env steps, metric) points."""
  name: str
  config: Dict[str, Any]
  points: List[Tuple[int, float]]


class Score(NamedTuple):
  final: float      # mean of the metric over the run's last `final` of the range
  reached: int      # the last env steps it recorded within the range


# -- reading runs --------------------------------------------------------------------------


def read_runs(directories: Sequence[str], metric: str) -> List[Run]:
  """Every run in `directories` (a many-runs directory counts as its runs)."""
  runs: List[Run] = []
  for directory in directories:
    records = _records(directory)
    config = _flat(_config(directory))
    by_run: Dict[int, List[dict]] = collections.defaultdict(list)
    for record in records:
      by_run[record.get("run", 0)].append(record)
    found = False
    for index, kept in sorted(by_run.items()):
      points = [(int(r["env_steps"]), float(r[metric])) for r in kept
                if r.get(metric) is not None]
      found |= bool(points)
      # Its seed and swept values (the records carry them) over the directory's config.
      own = dict(config, **{k: v for k, v in kept[0].items() if k == "seed" or k in config})
      name = directory + (f"#run{index}" if len(by_run) > 1 else "")
      runs.append(Run(name, own, points))
    if not found:
      keys = sorted({k for r in records for k, v in r.items() if isinstance(v, (int, float))})
      raise ConfigError(f"the records of {directory}/{METRICS_FILE} have no `{metric}` "
                        f"(--metric); they have: {', '.join(keys)}.")
  return runs


def _records(directory: str) -> List[dict]:
  path = os.path.join(directory, METRICS_FILE)
  if not os.path.isfile(path):
    raise ConfigError(f"{directory} holds no {METRICS_FILE}: pass the workdirs of runs "
                      "(python -m podracer.launch ... --workdir=DIR writes one).")
  with open(path, encoding="utf-8") as f:
    records = [json.loads(line) for line in f if line.strip()]
  if not records:
    raise ConfigError(f"{path} is empty: the run recorded nothing.")
  return records


def _config(directory: str) -> Dict[str, Any]:
  path = os.path.join(directory, "config.json")
  if not os.path.isfile(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _flat(tree: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
  flat: Dict[str, Any] = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
  return flat


# -- grouping ------------------------------------------------------------------------------


def task_of(run: Run) -> str:
  return next((str(run.config[k]) for k in TASK_KEYS if run.config.get(k) is not None),
              "task")


def group_runs(runs: Sequence[Run], group_by: Optional[str]) -> Dict[str, List[Run]]:
  """{label: runs}: by the value of `group_by`, or by config (what the groups' configs
  differ in names them; the task is not part of it)."""
  if group_by:
    missing = [r.name for r in runs if group_by not in r.config]
    if missing:
      keys = sorted(k for k in runs[0].config if not k.startswith("__"))
      raise ConfigError(f"--group-by={group_by}: the config of {missing[0]} has no such key; "
                        f"keys are, e.g.: {', '.join(keys[:40])}.")
    groups: Dict[str, List[Run]] = collections.defaultdict(list)
    for run in runs:
      groups[f"{group_by}={run.config[group_by]}"].append(run)
    return dict(groups)
  identity = lambda run: tuple(sorted(
      (k, repr(v)) for k, v in run.config.items()
      if k.split(".")[0] not in NOT_THE_CONFIG and k not in TASK_KEYS
      and not k.startswith("env.")))
  by_identity: Dict[tuple, List[Run]] = collections.defaultdict(list)
  for run in runs:
    by_identity[identity(run)].append(run)
  return {_label(key, list(by_identity)): members for key, members in by_identity.items()}


def _label(identity: tuple, identities: List[tuple]) -> str:
  """What tells this group's config from the others': the components its sections name
  (`agent.name`, `network.name`, ...) where those alone tell them apart, else the keys
  whose values differ."""
  mine = dict(identity)
  value = lambda key, ident=mine: ident.get(key, "-").strip("'")
  name = value("agent.name") if "agent.name" in mine else "run"
  if len(identities) == 1:
    return name
  differing = sorted(k for k in set(mine).union(*map(dict, identities))
                     if any(dict(o).get(k) != mine.get(k) for o in identities))
  names = sorted((k for k in differing if k.endswith(".name")), key=lambda k: k != "agent.name")
  tells = lambda keys: len({tuple(value(k, dict(o)) for k in keys) for o in identities})
  for key in names:  # One component's name, if it alone tells the groups apart
    if tells([key]) == len(identities):
      return value(key)
  if names and tells(names) == len(identities):
    return "/".join(value(k) for k in names)
  keys = [k for k in differing if not k.endswith(".name")][:3]
  return name + ": " + ", ".join(f"{k}={value(k)}" for k in keys)


# -- scores --------------------------------------------------------------------------------


def common_end(groups: Dict[str, List[Run]]) -> int:
  """The env steps every group reached: the end of the range they are compared on."""
  return min(max(r.points[-1][0] for r in members if r.points)
             for members in groups.values())


def final_score(run: Run, end: int, fraction: float) -> Score:
  """The mean of the run's points in the last `fraction` of (0, its end within `end`]."""
  inside = [(s, v) for s, v in run.points if s <= end]
  if not inside:
    return Score(float("nan"), 0)
  reached = inside[-1][0]
  window = [v for s, v in inside if s > (1.0 - fraction) * reached] or [inside[-1][1]]
  return Score(float(np.mean(window)), reached)


def normalizer(spec: Optional[str], tasks: Sequence[str]) -> Dict[str, Tuple[float, float]]:
  """{task: (low, high)} from `LOW:HIGH` or a JSON file; {} for raw scores."""
  if not spec:
    return {}
  if os.path.isfile(spec):
    with open(spec, encoding="utf-8") as f:
      given = json.load(f)
    missing = [t for t in tasks if t not in given]
    if missing:
      raise ConfigError(f"--normalize={spec} gives no (low, high) for the task(s) "
                        f"{', '.join(missing)}; it has {', '.join(given)}.")
    return {t: (float(given[t][0]), float(given[t][1])) for t in tasks}
  try:
    low, high = (float(x) for x in spec.split(":"))
  except ValueError:
    raise ConfigError(f"--normalize={spec} is neither LOW:HIGH (e.g. 0.6:80) nor a JSON "
                      "file of {task: [low, high]}.") from None
  if high == low:
    raise ConfigError(f"--normalize={spec}: LOW and HIGH must differ.")
  return {t: (low, high) for t in tasks}


def score_matrix(members: List[Run], tasks: List[str], end: int, fraction: float,
                 norm: Dict[str, Tuple[float, float]]) -> Tuple[np.ndarray, List[Score]]:
  """[runs, tasks] final scores (normalized where asked); a task with fewer runs than
  the others repeats none: the matrix takes the fewest runs any task has."""
  per_task = {t: [final_score(r, end, fraction) for r in members if task_of(r) == t]
              for t in tasks}
  count = min(len(v) for v in per_task.values())
  matrix = np.array([[_normalized(per_task[t][i].final, norm.get(t)) for t in tasks]
                     for i in range(count)])
  return matrix, [s for v in per_task.values() for s in v]


def _normalized(x: float, low_high: Optional[Tuple[float, float]]) -> float:
  if low_high is None:
    return x
  low, high = low_high
  return (x - low) / (high - low)


def curves(groups: Dict[str, List[Run]], tasks: List[str], end: int,
           norm: Dict[str, Tuple[float, float]], points: int = CURVE_POINTS):
  """(grid, {group: IQM per grid point}, {group: [2, points] interval}): each run's
  points linearly interpolated onto the grid; past a run's last record, its last value
  (what it reached)."""
  start = max(r.points[0][0] for members in groups.values() for r in members if r.points)
  grid = np.linspace(start, end, points)
  # The IQM over runs x tasks at each point, of [..., runs, tasks, points].
  curve_iqm = lambda x: iqm(x.reshape(*x.shape[:-3], -1, x.shape[-1]), axis=-2)
  estimates, intervals = {}, {}
  for i, (label, members) in enumerate(groups.items()):
    per_task = [[np.interp(grid, *zip(*r.points)) for r in members if task_of(r) == t]
                for t in tasks]
    count = min(len(v) for v in per_task)
    series = np.array([[_normalized_array(per_task[j][r], norm.get(t))
                        for j, t in enumerate(tasks)] for r in range(count)])
    estimates[label], intervals[label] = bootstrapped(curve_iqm, series, CURVE_REPS, 1 + i)
  return grid, estimates, intervals


def _normalized_array(x: np.ndarray, low_high: Optional[Tuple[float, float]]) -> np.ndarray:
  return x if low_high is None else (x - low_high[0]) / (low_high[1] - low_high[0])


# -- the report ----------------------------------------------------------------------------


def report(directories: Sequence[str], out: str, metric: str = "episode_return",
           group_by: Optional[str] = None, normalize: Optional[str] = None,
           fraction: float = 0.1) -> Dict[str, Any]:
  """Writes OUT/report.md and its PNGs; returns what they show."""
  runs = read_runs(directories, metric)
  groups = group_runs(runs, group_by)
  tasks = sorted({task_of(r) for r in runs})
  end = common_end(groups)
  norm = normalizer(normalize, tasks)
  matrices, scores = {}, {}
  for label, members in groups.items():
    matrices[label], scores[label] = score_matrix(members, tasks, end, fraction, norm)
  points, intervals = interval_estimates(matrices, bool(norm))
  grid, curve, band = curves(groups, tasks, end, norm)
  os.makedirs(out, exist_ok=True)
  plots = _plots(out, matrices, points, intervals, grid, curve, band, bool(norm), metric)
  populations = [p for p in (best_member(d, fraction, metric) for d in directories) if p]
  result = dict(populations=populations,
                groups={g: dict(runs=matrices[g].shape[0], tasks=tasks,
                                matrix=matrices[g].tolist(),
                                estimates=dict(zip(AGGREGATES, points[g].tolist())),
                                intervals=intervals[g].T.tolist())
                        for g, m in groups.items()},
                common_end=end, plots=plots, notes=_notes(groups, scores, end, fraction))
  with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as f:
    f.write(_markdown(result, directories, metric, fraction, norm, scores))
  return result


def best_member(directory: str, fraction: float, metric: str = "episode_return"
                ) -> Optional[Dict[str, Any]]:
  """A PBT run's best member by its final score (the mean of `metric` over the last
  `fraction` of its env steps) and the hyperparameter schedule its lineage trained with
  (podracer.logs.runs.schedule); None for a run that is not a PBT run."""
  records = _records(directory)
  if not any("parent" in r for r in records):
    return None
  keys = sorted(k[len("sweep."):] for k in _flat(_config(directory)) if k.startswith("sweep."))
  members: Dict[int, List[Tuple[int, float]]] = collections.defaultdict(list)
  for r in records:
    if r.get(metric) is not None:
      members[r.get("run", 0)].append((int(r["env_steps"]), float(r[metric])))
  end = max(points[-1][0] for points in members.values())
  scores = {m: final_score(Run(directory, {}, p), end, fraction).final
            for m, p in members.items()}
  best = max(scores, key=lambda m: (scores[m], -m))
  return dict(directory=directory, member=best, final=scores[best],
              schedule=runs_log.schedule(records, keys, best))


def _notes(groups: Dict[str, List[Run]], scores: Dict[str, List[Score]], end: int,
           fraction: float) -> List[str]:
  notes = []
  ends = {g: max(r.points[-1][0] for r in m if r.points) for g, m in groups.items()}
  if len(set(ends.values())) > 1:
    notes.append("The groups cover different env-step ranges (" + ", ".join(
        f"{g}: {e:,}" for g, e in ends.items()) + f"); they are compared on the common "
        f"range, up to {end:,} env steps.")
  for label, members in groups.items():
    for run in members:
      last = run.points[-1][0] if run.points else 0
      if last < (1.0 - fraction) * end:
        notes.append(f"{run.name} ({label}) stopped at {last:,} env steps of the "
                     f"{end:,} compared: it counts as what it reached.")
    if len(members) == 1:
      notes.append(f"{label} has one run: its intervals have width 0.")
  return notes


def _markdown(result, directories, metric, fraction, norm, scores) -> str:
  lines = ["# Report", "", f"- runs from: {', '.join(directories)}",
           f"- metric: `{metric}`; final score: its mean over the last {fraction:.0%} of "
           f"each run's env steps, up to {result['common_end']:,}",
           "- scores: " + ("normalized, (x - low) / (high - low): " + ", ".join(
               f"{t} ({lo:g}, {hi:g})" for t, (lo, hi) in norm.items()) if norm else
                           "raw (the optimality gap needs --normalize)"),
           "- intervals: 95 % stratified bootstrap (rliable's percentile method), "
           f"{REPS:,} replications", ""]
  lines += ["| group | runs | " + " | ".join(AGGREGATES) + " |",
            "| --- | --- |" + " --- |" * len(AGGREGATES)]
  for group, figures in result["groups"].items():
    cells = [f"{p:.3g} [{lo:.3g}, {hi:.3g}]" if np.isfinite(p) else "n/a"
             for p, (lo, hi) in zip(figures["estimates"].values(), figures["intervals"])]
    lines.append(f"| {group} | {figures['runs']} | " + " | ".join(cells) + " |")
  lines += ["", "Final scores per run:", ""]
  for group, figures in result["groups"].items():
    finals = ", ".join(f"{s.final:.3g}" for s in scores[group])
    lines.append(f"- {group} ({', '.join(figures['tasks'])}): {finals}")
  for p in result["populations"]:
    lines += ["", f"Population-based training, {p['directory']}: best member "
              f"{p['member']} (final {p['final']:.4g}); its schedule "
              f"(--config.schedule_from={p['directory']}:{p['member']}):", ""]
    lines += [f"- from {steps:,} env steps: " + ", ".join(f"{k}={v:.4g}" for k, v in
                                                         values.items())
              for steps, values in p["schedule"]]
  if result["notes"]:
    lines += [""] + [f"- {n}" for n in result["notes"]]
  lines += [""] + [f"![{p}]({p})" for p in result["plots"]]
  return "\n".join(lines) + "\n"


def _plots(out, matrices, points, intervals, grid, curve, band, normalized, metric):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  names = list(matrices)
  shown = [i for i, a in enumerate(AGGREGATES) if normalized or a != "optimality gap"]
  fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown), 0.6 + 0.5 * len(names)),
                           squeeze=False)
  for ax, i in zip(axes[0], shown):
    for row, name in enumerate(names):
      lo, hi = intervals[name][:, i]
      ax.plot([lo, hi], [row, row], lw=6, alpha=0.5, color=f"C{row}")
      ax.plot([points[name][i]], [row], "k|", ms=14)
    ax.set_yticks(range(len(names)), names if i == shown[0] else [""] * len(names))
    ax.set_title(AGGREGATES[i])
  fig.supxlabel(("normalized " if normalized else "") + f"final {metric}")
  fig.tight_layout()
  fig.savefig(os.path.join(out, "aggregates.png"), dpi=100)
  plt.close(fig)
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for row, name in enumerate(names):
    ax.plot(grid, curve[name], color=f"C{row}", label=f"{name} ({matrices[name].shape[0]} runs)")
    ax.fill_between(grid, band[name][0], band[name][1], color=f"C{row}", alpha=0.2)
  ax.set_xlabel("env steps")
  ax.set_ylabel(f"IQM {'normalized ' if normalized else ''}{metric}")
  ax.legend(fontsize="small")
  fig.tight_layout()
  fig.savefig(os.path.join(out, "curves.png"), dpi=100)
  plt.close(fig)
  plots = ["aggregates.png", "curves.png"]
  if next(iter(matrices.values())).shape[1] > 1:
    plots.append(_profiles(out, matrices, normalized))
  return plots


def _profiles(out, matrices, normalized) -> str:
  """Performance profiles: the fraction of runs x tasks scoring above each tau."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  from rliable import library as rly  # pylint: disable=import-outside-toplevel
  high = max(float(np.nanmax(m)) for m in matrices.values())
  low = min(float(np.nanmin(m)) for m in matrices.values())
  taus = np.linspace(low, high, 41)
  with quiet_bootstrap():
    profiles, bands = rly.create_performance_profile(matrices, taus, reps=CURVE_REPS)
  fig, ax = plt.subplots(figsize=(6, 4))
  for row, name in enumerate(matrices):
    ax.plot(taus, profiles[name], color=f"C{row}", label=name)
    ax.fill_between(taus, bands[name][0], bands[name][1], color=f"C{row}", alpha=0.2)
  ax.set_xlabel(("normalized " if normalized else "") + "score tau")
  ax.set_ylabel("fraction of runs with score > tau")
  ax.legend(fontsize="small")
  fig.tight_layout()
  fig.savefig(os.path.join(out, "profiles.png"), dpi=100)
  plt.close(fig)
  return "profiles.png"


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m podracer.report",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
  parser.add_argument("--group-by", dest="group_by", default=None)
  parser.add_argument("--metric", default="episode_return")
  parser.add_argument("--out", default="report")
  parser.add_argument("--normalize", default=None)
  parser.add_argument("--final", type=float, default=0.1)
  args = parser.parse_args(argv)
  try:
    if not 0 < args.final <= 1:
      raise ConfigError(f"--final={args.final} is the fraction of each run's env steps "
                        "its final score averages, in (0, 1].")
    result = report(args.runs, args.out, args.metric, args.group_by, args.normalize,
                    args.final)
  except ConfigError as e:
    sys.stderr.write("\n".join(textwrap.wrap(f"Report error: {e}", 88,
                                             break_long_words=False)) + "\n")
    return 2
  for group, figures in result["groups"].items():
    iqm, (lo, hi) = figures["estimates"]["IQM"], figures["intervals"][0]
    print(f"{group}: {figures['runs']} runs, IQM {iqm:.4g} [{lo:.4g}, {hi:.4g}]")
  for p in result["populations"]:
    steps, values = p["schedule"][-1] if p["schedule"] else (0, {})
    print(f"{p['directory']}: best member {p['member']} (final {p['final']:.4g}), its "
          f"schedule in {len(p['schedule'])} steps, from {steps:,} env steps: " +
          ", ".join(f"{k}={v:.4g}" for k, v in values.items()))
  for note in result["notes"]:
    print(note)
  print(f"wrote {args.out}/report.md, " + ", ".join(result["plots"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
