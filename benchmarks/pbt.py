"""Population-based training against the plain sweep of the same starting values.

  python benchmarks/pbt.py                      # PPO CartPole, half the learning rates bad
  python benchmarks/pbt.py --config=agents/ppo/config.py:minatar_anakin \
      --overrides="--config.env.env_id=Breakout-MinAtar --config.total_env_steps=5000000" \
      --sweep="optimizer.learning_rate=1e-5,1e-4,1e-3,1e-2;loss.entropy_coef=1e-4,1e-1" \
      --bounds="optimizer.learning_rate=1e-5,1e-2;loss.entropy_coef=1e-4,1e-1" \
      --num_runs=1 --interval=20 --seeds=0,1,2 --keep=runs/pbt_minatar

For each seed of the whole experiment, the launcher runs the members twice in one
sitting, as a user's commands run them: once as a sweep (every member keeps its values)
and once with `population.kind=pbt` (docs/runs.md). It prints each member's mean return
over the last 20 % of its records, the best and the median member, and the wall time, then
over the seeds the IQM of the best and of the median members, and PBT's wall time against
the sweep's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from podracer.logs.metrics import tail_mean  # noqa: E402  pylint: disable=wrong-import-position
from podracer.report import iqm as _iqm  # noqa: E402  pylint: disable=wrong-import-position

CARTPOLE_SWEEP = "optimizer.learning_rate=1e-6,3e-6,2.5e-4,1e-3"


def iqm(values: List[float]) -> float:
  return float(_iqm(np.asarray(values, np.float64)))


def run(config: str, seed: int, args: argparse.Namespace, pbt: bool) -> Dict[str, object]:
  """One launch: each member's last-20 % mean and the wall time."""
  with tempfile.TemporaryDirectory() as scratch:
    workdir = (os.path.join(args.keep, f"seed{seed}_{'pbt' if pbt else 'sweep'}")
               if args.keep else scratch)
    command = [sys.executable, "-m", "podracer.launch", f"--config={config}",
               f"--workdir={workdir}", f"--config.seed={seed}",
               f"--config.num_runs={args.num_runs}", "--config.log.loggers=('jsonl',)"]
    command += [f"--config.sweep.{item}" for item in args.sweep.split(";") if item]
    command += args.overrides.split()
    if pbt:
      command += ["--config.population.kind=pbt",
                  f"--config.population.interval={args.interval}"]
      command += [f"--config.population.bounds.{item}" for item in args.bounds.split(";")
                  if item]
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)  # One device, as a user has.
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f]
  returns: Dict[int, List[float]] = {}
  for r in records:
    if r.get("episode_return") is not None:
      returns.setdefault(r["run"], []).append(r["episode_return"])
  held = [tail_mean(returns[m]) for m in sorted(returns)]
  return dict(held=held, best=max(held), median=statistics.median(held), wall=wall)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="agents/ppo/config.py:cartpole_anakin")
  parser.add_argument("--sweep", default=CARTPOLE_SWEEP, help="KEY=V1,V2;KEY=...")
  parser.add_argument("--bounds", default="optimizer.learning_rate=1e-6,3e-3",
                      help="KEY=LOW,HIGH;... (population.bounds)")
  parser.add_argument("--num_runs", type=int, default=2, help="seeds of each value")
  parser.add_argument("--interval", type=int, default=64, help="updates between steps")
  parser.add_argument("--seeds", default="0", help="seeds of the whole experiment")
  parser.add_argument("--overrides", default="", help="more --config.KEY=VALUE, spaced")
  parser.add_argument("--keep", default="", help="keep each launch's workdir under this "
                      "directory (seedS_sweep, seedS_pbt: records, plots) instead of a "
                      "temporary one")
  args = parser.parse_args()
  results = {"sweep": [], "pbt": []}
  for seed in (int(s) for s in args.seeds.split(",")):
    for name in results:
      result = run(args.config, seed, args, pbt=name == "pbt")
      results[name].append(result)
      held = ", ".join(f"{h:.1f}" for h in result["held"])
      print(f"seed {seed} {name:>5}: held {held}; best {result['best']:.1f}, median "
            f"{result['median']:.1f}; {result['wall']:.0f} s", flush=True)
  for name, rows in results.items():
    print(f"{name:>5}: IQM over seeds of the best member {iqm([r['best'] for r in rows]):.1f}, "
          f"of the median member {iqm([r['median'] for r in rows]):.1f}; median wall "
          f"{statistics.median(r['wall'] for r in rows):.0f} s")
  ratio = statistics.median(p["wall"] / s["wall"] for p, s in zip(results["pbt"],
                                                                  results["sweep"]))
  print(f"PBT's wall time against the sweep's: {ratio:.2f}x (median over seeds)")


if __name__ == "__main__":
  main()
