"""Learning claims as a user would see them: the launcher in a process of its own, without
this suite's 8 virtual devices (XLA's flags change a program's numerics, so a figure
measured under them is not what a user's command gives), over several seeds in one
Anakin program (`num_runs`), judged by the interquartile mean of the runs' last-20 %
means (Agarwal et al. 2021), not by seed 0 alone."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
import sys
from typing import Dict, List, Sequence

import numpy as np
from scipy.stats import trim_mean

from podracer.logs.metrics import tail_mean

ROOT = pathlib.Path(__file__).resolve().parents[1]


def launch_runs(config: str, workdir: pathlib.Path, *overrides: str,
                timeout: float = 900, host_devices: int = 0) -> List[dict]:
  """Runs `python -m podracer.launch --config=CONFIG OVERRIDES` into `workdir` as a user
  would (host devices only: `host_devices` > 0 virtual CPU devices, as a user's
  XLA_FLAGS would make them) and returns its records; fails with the launcher's output."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
  env.pop("XLA_FLAGS", None)
  if host_devices:
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={host_devices}"
  result = subprocess.run(
      [sys.executable, "-m", "podracer.launch", f"--config={config}", f"--workdir={workdir}",
       *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def returns_by_run(records: Sequence[dict], key: str = "episode_return"
                   ) -> Dict[int, List[tuple]]:
  """{run: [(env steps, mean return of that record's episodes)]} (run 0 for one run)."""
  runs: Dict[int, List[tuple]] = collections.defaultdict(list)
  for record in records:
    if record.get(key) is not None:
      runs[record.get("run", 0)].append((record["env_steps"], record[key]))
  return dict(runs)


def last_fifth_means(records: Sequence[dict], key: str = "episode_return") -> List[float]:
  """Each run's mean of its records over the last 20 % of them."""
  means = []
  for _, points in sorted(returns_by_run(records, key).items()):
    means.append(tail_mean([value for _, value in points]))
  return means


def best_by_run(records: Sequence[dict], key: str = "episode_return") -> List[float]:
  return [max(v for _, v in points) for _, points in sorted(returns_by_run(records, key).items())]


def iqm(values: Sequence[float]) -> float:
  """The interquartile mean: the mean of the middle half (scipy's 25 % trimmed mean)."""
  return float(trim_mean(values, 0.25))


def held(records: Sequence[dict], at_least: float, runs: int) -> str:
  """'' if the IQM of `runs` runs' last-20 % means is at least `at_least`, else why not
  (each run's figure, for the failure message)."""
  means = last_fifth_means(records)
  assert len(means) == runs, f"{len(means)} runs recorded returns, not {runs}"
  figure = iqm(means)
  if figure >= at_least:
    return ""
  return (f"IQM of the last-20 % means {figure:.1f} < {at_least} (runs: "
          f"{', '.join(f'{m:.1f}' for m in means)})")


def assert_reached_and_held(records: Sequence[dict], runs: int, *, reached=None,
                            held_iqm=None, held_each=None) -> None:
  """Every run's best record reached `reached`, the IQM of the runs' last-20 % means is
  at least `held_iqm`, and each run's last-20 % mean at least `held_each` (any of them
  left out when None)."""
  if reached is not None:
    assert min(best_by_run(records)) >= reached, best_by_run(records)
  if held_iqm is not None:
    why = held(records, held_iqm, runs)
    assert not why, why
  if held_each is not None:
    means = last_fifth_means(records)
    assert len(means) == runs and min(means) >= held_each, (
        f"a run's last-20 % mean is below {held_each}: {', '.join(f'{m:.1f}' for m in means)}")


def one_call_learning(config):
  """Builds `config`, runs its runtime's first compiled call and returns the call's
  metrics, flattened, at the updates that learned (the replay could sample)."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  experiment = builder.build(config)
  _, metrics, _ = experiment.runtime.step(experiment.runtime.init())
  learning = np.asarray(metrics["learning"]).reshape(-1) > 0
  return {key: np.asarray(value).reshape(-1)[learning] for key, value in metrics.items()
          if np.size(value) == learning.size}
