"""Meta-learns PPO's policy objective, then trains with it against PPO's own, as a user's
commands do (docs/meta.md):

  python benchmarks/meta.py                          # CartPole, lifted onto Catch too
  python benchmarks/meta.py --generations=30 --population=16 --inner_env_steps=65536 \
      --tasks="agents/ppo/config.py:cartpole_anakin;agents/ppo/config.py:catch_anakin"

1. `python -m podracer.meta` on `--config` (its progress lines pass through).
2. For each of `--tasks`: PPO's loss and the learned one (`--config.loss=learned_policy
   --config.loss.path=...`), `--seeds` seeds in one program each (`num_runs`, seeds from
   100: not the meta-training's), `--eval_env_steps` each, one device. Prints each run's
   mean return over the last 20 % of its records and the IQM of each side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from podracer.logs.metrics import tail_mean  # noqa: E402  pylint: disable=wrong-import-position
from podracer.report import iqm as _iqm  # noqa: E402  pylint: disable=wrong-import-position


def _env() -> dict:
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)  # One device, as a user has.
  return env


def meta_train(args: argparse.Namespace, workdir: str) -> str:
  command = [sys.executable, "-m", "podracer.meta", f"--config={args.config}",
             f"--workdir={workdir}", f"--config.meta.generations={args.generations}",
             f"--config.meta.population={args.population}",
             f"--config.meta.inner_env_steps={args.inner_env_steps}",
             f"--config.meta.hidden={args.hidden}", f"--config.meta.sigma={args.sigma}"]
  start = time.perf_counter()
  subprocess.run(command, cwd=ROOT, env=_env(), check=True)
  print(f"meta-training: {time.perf_counter() - start:.0f} s", flush=True)
  return os.path.join(workdir, "learned_objective.npz")


def held(task: str, args: argparse.Namespace, objective: str = "") -> List[float]:
  """Each seed's last-20 % mean return, training with PPO's loss or `objective`."""
  with tempfile.TemporaryDirectory() as workdir:
    command = [sys.executable, "-m", "podracer.launch", f"--config={task}",
               f"--workdir={workdir}", f"--config.num_runs={args.seeds}",
               "--config.seed=100", f"--config.total_env_steps={args.eval_env_steps}",
               "--config.log.loggers=('jsonl',)"]
    if objective:
      command += ["--config.loss=learned_policy", f"--config.loss.path={objective}",
                  f"--config.loss.hidden={args.hidden}"]
    subprocess.run(command, cwd=ROOT, env=_env(), check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f]
  returns: dict = {}
  for r in records:
    if r.get("episode_return") is not None:
      returns.setdefault(r.get("run", 0), []).append(r["episode_return"])
  return [tail_mean(returns[run]) for run in sorted(returns)]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="agents/ppo/config.py:cartpole_anakin")
  parser.add_argument("--tasks", default="agents/ppo/config.py:cartpole_anakin;"
                      "agents/ppo/config.py:catch_anakin")
  parser.add_argument("--generations", type=int, default=15)
  parser.add_argument("--population", type=int, default=16)
  parser.add_argument("--inner_env_steps", type=int, default=65536)
  parser.add_argument("--hidden", type=int, default=16)
  parser.add_argument("--sigma", type=float, default=0.1)
  parser.add_argument("--seeds", type=int, default=8)
  parser.add_argument("--eval_env_steps", type=int, default=65536)
  parser.add_argument("--workdir", default="", help="keep the meta-training here")
  args = parser.parse_args()
  workdir = args.workdir or tempfile.mkdtemp(prefix="podracer-meta-")
  objective = meta_train(args, workdir)
  for task in args.tasks.split(";"):
    for name, path in (("PPO", ""), ("learned", objective)):
      values = held(task, args, path)
      print(f"{task} {name:>7}: held {', '.join(f'{v:.1f}' for v in values)}; IQM "
            f"{float(_iqm(np.asarray(values, np.float64))):.1f}", flush=True)


if __name__ == "__main__":
  main()
