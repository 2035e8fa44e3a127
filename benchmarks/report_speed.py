"""How long `python -m podracer.report` takes as the number of runs grows:

  python benchmarks/report_speed.py [--runs=8,64,256] [--records=13] [--repeats=3]

For each N, writes two many-runs directories of N/2 synthetic PPO CartPole runs each
(`--records` records a run, 8,192 env steps apart: a 100K-step run's), then times the
report's command end to end (a new Python process: imports, bootstrap, plots) and prints
the median seconds of `--repeats` launches, and seconds per run.
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

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_runs(directory: str, runs: int, records: int, learning_rate: float, seed: int):
  """A many-runs directory as Anakin writes it: records of every run, and its config."""
  os.makedirs(directory)
  rng = np.random.default_rng(seed)
  config = dict(agent=dict(name="ppo"), env=dict(name="cartpole"), num_runs=runs,
                optimizer=dict(name="adam", learning_rate=learning_rate))
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
    for step in range(1, records + 1):
      for run in range(runs):
        value = 500 * (1 - np.exp(-step / 4)) * rng.uniform(0.5, 1.0)
        f.write(json.dumps(dict(run=run, seed=run, env_steps=8192 * step,
                                episode_return=value)) + "\n")


def seconds(directories, out: str) -> float:
  start = time.perf_counter()
  subprocess.run([sys.executable, "-m", "podracer.report", *directories, f"--out={out}"],
                 check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
  return time.perf_counter() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--runs", default="8,64,256")
  parser.add_argument("--records", type=int, default=13)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  print(f"{'runs':>6} {'seconds':>8} {'ms/run':>7}")
  for n in map(int, args.runs.split(",")):
    with tempfile.TemporaryDirectory() as tmp:
      dirs = [os.path.join(tmp, f"lr{i}") for i in range(2)]
      for i, d in enumerate(dirs):
        write_runs(d, n // 2, args.records, (2.5e-4, 1e-3)[i], seed=i)
      times = [seconds(dirs, os.path.join(tmp, "out")) for _ in range(args.repeats)]
    median = statistics.median(times)
    print(f"{n:>6} {median:>8.2f} {1000 * median / n:>7.1f}", flush=True)


if __name__ == "__main__":
  main()
