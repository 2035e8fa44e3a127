"""Self-play on connect four (MuZero, or AlphaZero): its win rate against a random player
and against the pure-MCTS baseline as it trains.

  python benchmarks/selfplay.py                       # 2 seeds, MCTS with 64 simulations
  python benchmarks/selfplay.py --seeds=3 --simulations=128 --plot=/tmp/c4.png
  python benchmarks/selfplay.py --config=agents/muzero/config.py:connect_four_alphazero \
    --plot=docs/alphazero_connect_four.png

Runs `--config` (`agents/muzero/config.py:connect_four_anakin`) as a user's command runs it, `--seeds`
runs in one program (`num_runs`), twice in one sitting: evaluated against a uniformly
random player (`env.eval_opponent=random`) and against pure MCTS with random playouts
(`env.eval_opponent=mcts`, `env.opponent_simulations`). Evaluation has a key stream of
its own, so both launches train the same agents. Prints each evaluation's win rate (the
mean over the seeds, and its range), the last 20 %'s means and each launch's wall time,
and writes the curves to `--plot` (docs/selfplay_connect_four.png by default).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from podracer.logs.metrics import tail_mean  # noqa: E402  pylint: disable=wrong-import-position

CONFIG = "agents/muzero/config.py:connect_four_anakin"


def curve(opponent: str, args: argparse.Namespace) -> Tuple[Dict[int, List[float]], float]:
  """{env steps: each seed's eval_win_rate} of one launch, and its wall time."""
  with tempfile.TemporaryDirectory() as workdir:
    command = [sys.executable, "-m", "podracer.launch", f"--config={args.config}",
               f"--workdir={workdir}", f"--config.num_runs={args.seeds}",
               f"--config.env.eval_opponent={opponent}",
               f"--config.env.opponent_simulations={args.simulations}",
               f"--config.eval_interval={args.eval_interval}",
               f"--config.eval_episodes={args.games}", "--config.log.loggers=('jsonl',)",
               *args.overrides.split()]
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)  # One device, as a user has.
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
  points: Dict[int, List[float]] = {}
  for r in records:
    if r.get("eval_win_rate") is not None:
      points.setdefault(r["env_steps"], []).append(r["eval_win_rate"])
  return points, wall


def plot(curves: Dict[str, Dict[int, List[float]]], path: str, simulations: int,
         title: str) -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6, 3.6))
  for name, points in curves.items():
    steps = sorted(points)
    means = [sum(points[s]) / len(points[s]) for s in steps]
    label = f"vs pure MCTS ({simulations} simulations)" if name == "mcts" else "vs random"
    ax.plot(steps, means, label=label)
    ax.fill_between(steps, [min(points[s]) for s in steps], [max(points[s]) for s in steps],
                    alpha=0.2)
  ax.set_xlabel("env steps (self-play moves)")
  ax.set_ylabel("win rate")
  ax.set_ylim(0, 1)
  ax.set_title(title)
  ax.legend(loc="lower right")
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default=CONFIG, help="a self-play config")
  parser.add_argument("--seeds", type=int, default=2, help="runs in one program")
  parser.add_argument("--simulations", type=int, default=64, help="the baseline's")
  parser.add_argument("--games", type=int, default=128, help="games per evaluation")
  parser.add_argument("--eval_interval", type=int, default=50_000)
  parser.add_argument("--overrides", default="", help="more --config.KEY=VALUE")
  parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "selfplay_connect_four.png"))
  args = parser.parse_args()
  curves = {}
  for opponent in ("random", "mcts"):
    curves[opponent], wall = curve(opponent, args)
    print(f"against {opponent}: {wall:.0f} s", flush=True)
    for steps, rates in sorted(curves[opponent].items()):
      print(f"  {steps:>9,} env steps  win rate {sum(rates) / len(rates):.3f} "
            f"(seeds {min(rates):.3f}-{max(rates):.3f})")
    held = [tail_mean([rates[i] for _, rates in sorted(curves[opponent].items())])
            for i in range(args.seeds)]
    print(f"  last 20 %: " + ", ".join(f"{h:.3f}" for h in held), flush=True)
  agent = "AlphaZero" if "alphazero" in args.config else "MuZero"
  plot(curves, args.plot, args.simulations, f"{agent} self-play, connect four")
  print(f"wrote {args.plot}")


if __name__ == "__main__":
  main()
