"""PPO on EnvPool's MuJoCo under the host runtimes, beside CleanRL's published figure: for
each config and seed, `python -m podracer.launch` as a user runs it, then the mean
return over the last 20 % of the run's records, its final record's and the wall time.

  python benchmarks/envpool_ppo.py [--configs=mujoco_sebulba,mujoco_seed] [--seeds=0,1,2]
      [--total_env_steps=1000000] [--overrides=env.task_id=Hopper-v4] [--out=runs/mujoco]
      [--plot=docs/continuous_halfcheetah.png]
  # TD3 and SAC beside each other (a config AGENT:NAME), keeping runs already in --out:
  python benchmarks/envpool_ppo.py --configs=td3:mujoco_sebulba,sac:mujoco_sebulba \
      --total_env_steps=300000 --seeds=0,1 --out=runs/offpolicy --existing \
      --plot=docs/continuous_halfcheetah_td3_sac.png

CleanRL's `ppo_continuous_action.py` (PyTorch, one environment, the settings PPO's
`mujoco_sebulba` takes) reports 1,443 +- 46 on HalfCheetah-v4 at 1M steps, over 3 seeds
(its benchmark page, `openrlbenchmark`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Tuple

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from podracer.logs.metrics import tail_mean  # noqa: E402  pylint: disable=wrong-import-position

_CONFIGS = flags.DEFINE_list("configs", ["mujoco_sebulba", "mujoco_seed"],
                             "Configs: NAME (PPO's) or AGENT:NAME (agents/AGENT/config.py).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds, one run each.")
_STEPS = flags.DEFINE_integer("total_env_steps", 1_000_000, "Env steps per run.")
_OVERRIDES = flags.DEFINE_list("overrides", [], "More --config overrides, KEY=VALUE.")
_OUT = flags.DEFINE_string("out", "", "A folder for the runs (default: a temporary one).")
_PLOT = flags.DEFINE_string("plot", "", "A PNG of every run's curve, CleanRL's figure on it.")
_EXISTING = flags.DEFINE_bool("existing", False, "Read a run whose workdir in --out holds "
                              "a finished run's records instead of launching it again.")
CLEANRL = {"HalfCheetah-v4": (1443.0, 46.0)}


def records(workdir: str) -> List[dict]:
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def curve(runs: List[dict]) -> List[Tuple[int, float]]:
  """A run's (env steps, mean episode return) records."""
  return [(r["env_steps"], r["episode_return"]) for r in runs
          if r.get("episode_return") is not None]


def plot(curves: Dict[str, List[List[Tuple[int, float]]]], task: str, path: str) -> None:
  """Every run's curve, one colour per config, and CleanRL's figure at 1M steps."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(7, 4))
  for colour, (config, runs) in zip(("tab:blue", "tab:orange", "tab:green"), curves.items()):
    for i, points in enumerate(runs):
      steps, returns = zip(*points)
      ax.plot(steps, returns, color=colour, alpha=0.8, label=config if i == 0 else None)
  if task in CLEANRL and any(":" not in config for config in curves):  # PPO's figure
    mean, spread = CLEANRL[task]
    ax.axhspan(mean - spread, mean + spread, color="grey", alpha=0.3,
               label="CleanRL's PPO at 1M steps")
  ax.set(xlabel="env steps", ylabel="episode return", title=task)
  ax.legend()
  fig.savefig(path, dpi=100, bbox_inches="tight")


def run(config: str, seed: int, workdir: str) -> Dict[str, Any]:
  """One launch (or, with --existing, a finished one's records); its curve, what it held
  (`tail_mean`: the last 20 % of its records), its final return and wall time."""
  agent, name = config.split(":", 1) if ":" in config else ("ppo", config)
  args = [sys.executable, "-m", "podracer.launch",
          f"--config=agents/{agent}/config.py:{name}", f"--workdir={workdir}",
          f"--config.seed={seed}", f"--config.total_env_steps={_STEPS.value}",
          *(f"--config.{o}" for o in _OVERRIDES.value)]
  runs = _existing(workdir)
  if not runs:
    subprocess.run(args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    runs = records(workdir)
  points = curve(runs)
  return dict(curve=points, held=tail_mean([value for _, value in points]),
              final=points[-1][1], wall=runs[-1]["wall_time"])


def _existing(workdir: str) -> List[dict]:
  """With --existing, the records of a finished run in `workdir` (they reach
  --total_env_steps); else none."""
  if not (_EXISTING.value and os.path.isfile(os.path.join(workdir, "metrics.jsonl"))):
    return []
  runs = records(workdir)
  return runs if runs and runs[-1].get("env_steps", 0) >= _STEPS.value else []


def main(argv):
  del argv
  out = _OUT.value or tempfile.mkdtemp(prefix="podracer-mujoco-")
  task = next((o.split("=", 1)[1] for o in _OVERRIDES.value if o.startswith("env.task_id=")),
              "HalfCheetah-v4")
  curves = {}
  for config in _CONFIGS.value:
    results = [run(config, int(s), os.path.join(out, f"{config.replace(':', '_')}-{s}"))
               for s in _SEEDS.value]
    curves[config] = [r["curve"] for r in results]
    for seed, r in zip(_SEEDS.value, results):
      print(f"{config} seed {seed}: last-20 % mean {r['held']:.1f}, final "
            f"{r['final']:.1f}, {r['wall']:.0f} s", flush=True)
    held = [r["held"] for r in results]
    spread = statistics.stdev(held) if len(held) > 1 else 0.0
    print(f"{config} on {task}, {_STEPS.value:,} steps, {len(held)} seeds: last-20 % mean "
          f"{statistics.fmean(held):.1f} +- {spread:.1f}, median wall "
          f"{statistics.median(r['wall'] for r in results):.0f} s", flush=True)
  if _PLOT.value:
    plot(curves, task, _PLOT.value)
  if task in CLEANRL and any(":" not in config for config in _CONFIGS.value):
    print(f"CleanRL's PPO (PyTorch) on {task} at 1M steps: {CLEANRL[task][0]:,.0f} +- "
          f"{CLEANRL[task][1]:.0f}")


if __name__ == "__main__":
  app.run(main)
