"""The records of many runs in one program (podracer/config/runs.py): the progress line's
record of a call, the result of the runs and the curves a plot draws."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


def progress_record(records: List[Dict[str, Any]]) -> Dict[str, Any]:
  """One call's records of all runs as one, for the progress line: the first run's, with
  the mean return over runs, its min and max, and steps/s summed over runs."""
  out = dict(records[0], num_runs=len(records))
  returns = [r["episode_return"] for r in records if r.get("episode_return") is not None]
  if returns:
    out.update(episode_return=sum(returns) / len(returns), episode_return_min=min(returns),
               episode_return_max=max(returns))
  else:
    out.pop("episode_return", None)
  evaluated = [r["eval_return"] for r in records if r.get("eval_return") is not None]
  if evaluated:
    out["eval_return"] = sum(evaluated) / len(evaluated)
  if "sps" in out:
    out["sps"] = sum(r.get("sps", 0.0) for r in records)
  return out


def by_run(records: List[Dict[str, Any]]) -> Dict[int, List[Dict[str, Any]]]:
  runs: Dict[int, List[Dict[str, Any]]] = {}
  for record in records:
    runs.setdefault(record["run"], []).append(record)
  return runs


def summary(records: List[Dict[str, Any]], runs: Any,
            stopped_at: Optional[float] = None) -> Dict[str, Any]:
  """The result of many runs: each run's final and best return (with its labels), the
  best run (by final return), the mean final return, steps/s summed over runs."""
  per_run = []
  for run, kept in sorted(by_run(records).items()):
    returns = [r["episode_return"] for r in kept if r.get("episode_return") is not None]
    # Under PBT a member's values move: its last record holds those it ended with.
    entry = {**runs.labels(run), **{k: kept[-1][k] for k in runs.swept if k in kept[-1]}}
    if returns:
      entry.update(final_episode_return=returns[-1], best_episode_return=max(returns))
    per_run.append(entry)
  finals = [e["final_episode_return"] for e in per_run if "final_episode_return" in e]
  out: Dict[str, Any] = dict(num_runs=runs.num_runs, env_steps=records[-1]["env_steps"],
                             wall_time=records[-1]["wall_time"], runs=per_run)
  if finals:
    out.update(final_episode_return=sum(finals) / len(finals),
               final_episode_return_min=min(finals), final_episode_return_max=max(finals),
               best_run=max((e for e in per_run if "final_episode_return" in e),
                            key=lambda e: e["final_episode_return"]))
    if any("parent" in r for r in records):  # Population-based training.
      best = out["best_run"]
      best["schedule"] = schedule(records, list(runs.swept), best["run"])
  calls = {}
  for r in records:
    if "sps" in r and not r.get("includes_compilation"):
      calls[r["env_steps"]] = calls.get(r["env_steps"], 0.0) + r["sps"]
  if calls:
    out["median_sps"] = sorted(calls.values())[len(calls) // 2]  # All runs together.
  if stopped_at is not None and stopped_at is not False:
    out["stopped_at_return"] = stopped_at
  return out


def schedule(records: List[Dict[str, Any]], keys: List[str], member: int
             ) -> List[List[Any]]:
  """A PBT member's hyperparameter schedule, [[env steps, {key: value}], ...]: the values
  its lineage (the members whose parameters it continues: at a step where it copied,
  its parent's before) trained with from those env steps on: from 0 the first member's,
  then those each call's step left, each entry where they change."""
  calls: Dict[int, Dict[int, Dict[str, Any]]] = {}
  for r in records:
    calls.setdefault(r["env_steps"], {})[r["run"]] = r
  held = []
  for env_steps in sorted(calls, reverse=True):
    record = calls[env_steps].get(member)
    if record is None:
      continue
    held.append((env_steps, {k: record.get(k) for k in keys}))
    parent = record.get("parent")
    if parent is not None:
      member = parent
  if held:  # The first call trained with the values the lineage's first member began with.
    first = calls[min(calls)].get(member, {})
    held.append((0, {k: first.get(k) for k in keys}))
  out: List[List[Any]] = []
  for env_steps, values in reversed(held):
    if not out or out[-1][1] != values:
      out.append([env_steps, values])
  return out


def curves(records: List[Dict[str, Any]], runs: Any, key: str = "episode_return"):
  """What a many-run plot draws: ([(xs, ys) per run], [(label, xs, mean, low, high)] per
  group): one group of all runs, or with a sweep one per swept value, the band spanning
  its seeds' min to max."""
  lines, groups = [], {}
  # A PBT member's values move (and it may continue another's parameters): one group.
  population = any("parent" in r for r in records)
  for run, kept in sorted(by_run(records).items()):
    points = [(r["env_steps"], r[key]) for r in kept if r.get(key) is not None]
    if not points:
      continue
    lines.append(tuple(zip(*points)))
    label = (f"mean of {runs.num_runs} members" if population else
             ", ".join(f"{k}={runs.swept[k][run]:g}" for k in runs.swept) or
             f"mean of {runs.num_runs} runs")
    groups.setdefault(label, []).append(dict(points))
  bands = []
  for label, members in groups.items():
    xs = sorted(set().union(*members))
    ys = [[m[x] for m in members if x in m] for x in xs]
    bands.append((label, xs, [sum(y) / len(y) for y in ys], [min(y) for y in ys],
                  [max(y) for y in ys]))
  return lines, bands
