"""SEED against Sebulba where the environment is the cost and holds the interpreter's lock:
PPO on `python_cartpole` (benchmarks/gil_env.py: CartPole in plain Python plus `cost_us`
of Python work per environment step), the same environments and budget under each,
both learning.

  python benchmarks/gil_bound.py [--cost_us=100,300] [--total_env_steps=200000]

Each run is the launcher in a process of its own (one host device), as a user runs it:
Sebulba steps 2 actor threads x 16 environments in the learner's process; SEED steps
2 worker processes x 16 environments. It prints each run's median env steps/s (over
its records after the first two, compilation) and wall time, the mean return over the
last 20 % of its records, and `seed/sebulba` per cost.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from podracer.logs.metrics import tail_mean  # pylint: disable=wrong-import-position

_COSTS = flags.DEFINE_list("cost_us", ["100"], "Microseconds of Python work per env step.")
_STEPS = flags.DEFINE_integer("total_env_steps", 200_000, "Budget of each run.")


def run(name: str, cost_us: float, total_env_steps: int) -> dict:
  """One launch of benchmarks/gil_env.py:NAME; its median steps/s, wall time, return."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)
  with tempfile.TemporaryDirectory() as workdir:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "podracer.launch",
                    f"--config=benchmarks/gil_env.py:{name}", f"--workdir={workdir}",
                    f"--config.env.cost_us={cost_us}",
                    f"--config.total_env_steps={total_env_steps}"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    wall = time.monotonic() - start
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
  rates = [r["sps"] for r in records[2:] if "sps" in r] or [records[-1]["sps"]]
  returns = [r["episode_return"] for r in records if r.get("episode_return") is not None]
  return dict(sps=statistics.median(rates), wall=wall, held=tail_mean(returns))


def main(argv):
  del argv
  print(f"PPO on python_cartpole, 32 environments, {_STEPS.value:,} env steps per run, "
        f"{os.cpu_count()} CPU cores")
  print(f"{'cost us':>8} {'runtime':>8} {'env steps/s':>12} {'wall s':>7} {'last 20 %':>10}")
  for cost in map(float, _COSTS.value):
    out = {name: run(name, cost, _STEPS.value) for name in ("sebulba", "seed")}
    for name, figures in out.items():
      print(f"{cost:>8g} {name:>8} {figures['sps']:>12,.0f} {figures['wall']:>7.0f} "
            f"{figures['held']:>10.1f}", flush=True)
    print(f"cost {cost:g} us: seed/sebulba {out['seed']['sps'] / out['sebulba']['sps']:.2f}",
          flush=True)


if __name__ == "__main__":
  app.run(main)
