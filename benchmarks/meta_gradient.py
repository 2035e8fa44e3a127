"""Meta-gradients from a poor start, against the same start held fixed (docs/meta.md):

  python benchmarks/meta_gradient.py                 # PPO and IMPALA, CartPole, 5 seeds
  python benchmarks/meta_gradient.py --agents=ppo --starts=discount --seeds=8

For each agent and each poor start (discount 0.9; lambda 0.3), two launches of
`agents/AGENT/config.py:cartpole_anakin` with `--seeds` seeds in one program each (seeds
from 100, one device, as a user's command runs them): the start held fixed, and the same
start with `--config.meta_loss=meta_gradient` (Xu et al. 2018's online cross-validation,
reference discount 0.99 and lambda 1; meta learning rate 0.01 for PPO, 0.001 for IMPALA). Prints each seed's mean return over the last 20 %
of its records, the IQM of each side and their ratio, the adapted values at the end, and
the median env steps/s of each; draws the curves into `--plot`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.meta import held_by_run, launch_records  # noqa: E402  pylint: disable=wrong-import-position
from podracer.report import iqm  # noqa: E402  pylint: disable=wrong-import-position

# The key each agent's lambda is under, each poor start, and each agent's meta learning
# rate (`meta_loss.learning_rate`): IMPALA's update is one gradient step, PPO's sixteen,
# and IMPALA's discount overshot at PPO's rate (docs/meta.md).
LAMBDA_KEY = {"ppo": "agent.gae_lambda", "impala": "loss.lambda_"}
META_LEARNING_RATE = {"ppo": 0.01, "impala": 0.001}
STARTS = {"discount": ("agent.discount", 0.9), "lambda": (None, 0.3)}


def _overrides(agent: str, start: str) -> List[str]:
  key, value = STARTS[start]
  return [f"--config.{key or LAMBDA_KEY[agent]}={value}"]


def _median(records: List[dict], key: str) -> float:
  return float(np.median([r[key] for r in records if r.get(key) is not None][1:]))


def _summary(label: str, records: List[dict]) -> Dict[str, float]:
  held = held_by_run(records)
  score = float(iqm(np.asarray(held, np.float64)))
  finals = {k: [r[k] for r in records if k in r][-len(held):] for k in
            ("meta_discount", "meta_lambda")}
  adapted = "; ".join(f"{k} at the end {min(v):.3f}-{max(v):.3f}"
                      for k, v in finals.items() if v)
  print(f"  {label:>8}: held {', '.join(f'{v:.1f}' for v in held)}; IQM {score:.1f}; "
        f"{_median(records, 'sps'):,.0f} env steps/s" + (f"; {adapted}" if adapted else ""),
        flush=True)
  return dict(iqm=score)


def compare(agent: str, start: str, args: argparse.Namespace) -> Dict[str, List[dict]]:
  task = f"agents/{agent}/config.py:cartpole_anakin"
  print(f"{agent.upper()} on CartPole, {start} {STARTS[start][1]}, {args.seeds} seeds, "
        f"{args.env_steps:,} env steps:", flush=True)
  runs = {}
  adapt = ["--config.meta_loss=meta_gradient",
           f"--config.meta_loss.learning_rate={META_LEARNING_RATE[agent]}"]
  for label, extra in (("fixed", []), ("adapted", adapt)):
    runs[label] = launch_records(task, args.seeds, args.env_steps,
                                 _overrides(agent, start) + extra)
  fixed, adapted = (_summary(label, runs[label])["iqm"] for label in ("fixed", "adapted"))
  print(f"  adapted / fixed: {adapted / fixed:.2f}x", flush=True)
  return runs


def plot(results: Dict[str, Dict[str, List[dict]]], path: str) -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, axes = plt.subplots(2, len(results), figsize=(4 * len(results), 6), squeeze=False)
  for column, (title, runs) in enumerate(results.items()):
    for label, records in runs.items():
      steps, returns = _mean_curve(records, "episode_return")
      axes[0][column].plot(steps, returns, label=label)
    for key in ("meta_discount", "meta_lambda"):
      steps, values = _mean_curve(runs["adapted"], key)
      axes[1][column].plot(steps, values, label=key)
    axes[0][column].set_title(title, fontsize=9)
    axes[0][column].legend(fontsize=8)
    axes[1][column].legend(fontsize=8)
    axes[1][column].set_xlabel("env steps")
  axes[0][0].set_ylabel("mean return over seeds")
  axes[1][0].set_ylabel("adapted value (mean over seeds)")
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  print(f"wrote {path}")


def _mean_curve(records: List[dict], key: str):
  by_step: Dict[int, List[float]] = {}
  for r in records:
    if r.get(key) is not None:
      by_step.setdefault(r["env_steps"], []).append(r[key])
  steps = sorted(by_step)
  return steps, [float(np.mean(by_step[s])) for s in steps]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
  parser.add_argument("--agents", default="ppo,impala")
  parser.add_argument("--starts", default="discount,lambda")
  parser.add_argument("--seeds", type=int, default=5)
  parser.add_argument("--env_steps", type=int, default=500_000)
  parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "meta_gradient.png"))
  args = parser.parse_args()
  results = {f"{agent.upper()}, {start} {STARTS[start][1]}": compare(agent, start, args)
             for agent in args.agents.split(",") for start in args.starts.split(",")}
  if args.plot:
    plot(results, args.plot)


if __name__ == "__main__":
  main()
