"""Continuous control beside Brax's own PPO trainer, at one setting (PPO's `brax_anakin`,
Brax's training-notebook settings for `inverted_pendulum` on the `generalized` backend):
for each seed, the deterministic policy's evaluation return after each update (128
episodes, as Brax's trainer evaluates), the training env steps/s with the compile
counted apart, and the steps and seconds to a return of 950.

  python benchmarks/continuous.py [--seeds=0,1,2] [--which=podracer,brax]
      [--total_env_steps=983040] [--out=runs/continuous]
      [--podracer_overrides=agent.gae_window=0,agent.fresh_advantages=false]

Brax 0.14's trainer calls `jax.device_put_replicated` and `jax.device_put_sharded`,
which JAX 0.10 removed: this script puts JAX's documented drop-ins back (a stack of
copies, put on the devices along their axis) before it calls the trainer, and touches
nothing else of it. Both run in this process, one after the other per seed, so load
from elsewhere hits both alike. With --out, a plot of both curves (docs/agents.md).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds, each run by both trainers.")
_WHICH = flags.DEFINE_list("which", ["podracer", "brax"], "The trainers to run.")
_STEPS = flags.DEFINE_integer("total_env_steps", 983_040, "Env steps per run (6 updates "
                              "of 163,840 at these settings).")
_EVAL_EPISODES = flags.DEFINE_integer("eval_episodes", 128, "Episodes per evaluation.")
_OUT = flags.DEFINE_string("out", "", "A folder for the curves (JSON) and the plot.")
_OVERRIDES = flags.DEFINE_list("podracer_overrides", [], "More --config overrides for "
                               "podracer's runs, e.g. agent.fresh_advantages=false.")
TARGET = 950.0
PER_UPDATE = 163_840


def _drop_ins() -> None:
  """JAX's documented replacements for the two functions Brax's trainer still calls: the
  shards (or copies) stacked along a new axis, put one per device."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  def device_put_sharded(shards, devices):
    put = jax.pmap(lambda x: x, devices=devices)
    return jax.tree.map(lambda *xs: put(jnp.stack(xs)), *shards)

  def device_put_replicated(x, devices):
    return device_put_sharded([x] * len(devices), devices)

  if not hasattr(jax, "device_put_sharded"):  # Removed in JAX 0.10.
    jax.device_put_sharded = device_put_sharded
  if not hasattr(jax, "device_put_replicated"):
    jax.device_put_replicated = device_put_replicated


def brax_run(seed: int, total: int) -> Dict[str, List]:
  """Brax's `ppo.train` at the notebook's inverted_pendulum settings."""
  _drop_ins()
  from brax import envs  # pylint: disable=import-outside-toplevel
  from brax.training.agents.ppo import train as ppo  # pylint: disable=import-outside-toplevel

  points, start = [], time.perf_counter()

  def progress(steps, metrics):
    # The first call is the evaluation before training, the second's epoch compiled.
    points.append(dict(env_steps=int(steps), wall_time=time.perf_counter() - start,
                       eval_return=float(metrics["eval/episode_reward"]),
                       sps=metrics.get("training/sps"), compile=len(points) < 2))
    print(f"  brax seed {seed}: {int(steps):>9,} steps, eval {points[-1]['eval_return']:8.1f}, "
          f"{points[-1]['wall_time']:6.1f} s", flush=True)

  ppo.train(environment=envs.get_environment("inverted_pendulum", backend="generalized"),
            num_timesteps=total, num_evals=total // PER_UPDATE + 1, reward_scaling=10,
            episode_length=1000, normalize_observations=True, action_repeat=1,
            unroll_length=5, num_minibatches=32, num_updates_per_batch=4,
            discounting=0.97, learning_rate=3e-4, entropy_cost=1e-2, num_envs=2048,
            batch_size=1024, seed=seed, deterministic_eval=True,
            num_eval_envs=_EVAL_EPISODES.value, progress_fn=progress)
  return dict(points=points)


def podracer_run(seed: int, total: int, out: str) -> Dict[str, List]:
  """PPO's brax_anakin through the launcher, as a user runs it."""
  workdir = os.path.join(out or "/tmp", f"podracer_seed{seed}")
  result = subprocess.run(
      [sys.executable, "-m", "podracer.launch", "--config=agents/ppo/config.py:brax_anakin",
       f"--workdir={workdir}", f"--config.seed={seed}", f"--config.total_env_steps={total}",
       f"--config.eval_interval={PER_UPDATE}", f"--config.eval_episodes={_EVAL_EPISODES.value}",
       "--config.log.progress_metrics=false",
       *(f"--config.{override}" for override in _OVERRIDES.value)],
      cwd=ROOT, capture_output=True, text=True, check=False,
      env=dict(os.environ, PYTHONPATH=ROOT))
  if result.returncode:
    raise SystemExit(f"podracer seed {seed} failed:\n{result.stderr[-3000:]}")
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  points = [dict(env_steps=r["env_steps"], wall_time=r["wall_time"],
                 eval_return=r["eval_return"], sps=r.get("sps"),
                 compile=bool(r.get("includes_compilation")))
            for r in records if "eval_return" in r]
  for p in points:
    print(f"  podracer seed {seed}: {p['env_steps']:>9,} steps, eval {p['eval_return']:8.1f}, "
          f"{p['wall_time']:6.1f} s", flush=True)
  return dict(points=points)


def summary(name: str, runs: List[Dict[str, List]]) -> str:
  """Per trainer: the mean evaluation at each step count, the median training steps/s
  after the first update (its compile), and the steps and seconds to TARGET."""
  lines = [f"{name}:"]
  by_steps: Dict[int, List[float]] = {}
  for run in runs:
    for p in run["points"]:
      by_steps.setdefault(p["env_steps"], []).append(p["eval_return"])
  for steps, values in sorted(by_steps.items()):
    lines.append(f"  {steps:>9,} steps: eval return mean {statistics.mean(values):7.1f} "
                 f"({', '.join(f'{v:.1f}' for v in values)})")
  rates = [float(p["sps"]) for run in runs for p in run["points"]
           if p.get("sps") and not p["compile"]]
  if rates:
    lines.append(f"  training env steps/s, median after the compile: {statistics.median(rates):,.0f}")
  for i, run in enumerate(runs):
    hit = next((p for p in run["points"] if p["eval_return"] >= TARGET), None)
    lines.append(f"  seed {i}: " + (f"{TARGET:.0f} at {hit['env_steps']:,} steps, "
                                    f"{hit['wall_time']:.0f} s" if hit else f"never {TARGET:.0f}"))
  return "\n".join(lines)


def main(argv):
  del argv
  import jax  # pylint: disable=import-outside-toplevel
  print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores; "
        f"{_STEPS.value:,} env steps per run; evaluation of {_EVAL_EPISODES.value} episodes")
  results: Dict[str, List] = {name: [] for name in _WHICH.value}
  for seed in map(int, _SEEDS.value):
    for name in _WHICH.value:
      run = (brax_run(seed, _STEPS.value) if name == "brax"
             else podracer_run(seed, _STEPS.value, _OUT.value))
      results[name].append(run)
  for name, runs in results.items():
    print(summary(name, runs))
  if _OUT.value:
    os.makedirs(_OUT.value, exist_ok=True)
    with open(os.path.join(_OUT.value, "curves.json"), "w", encoding="utf-8") as f:
      json.dump(results, f)
    _plot(results, os.path.join(_OUT.value, "continuous_inverted_pendulum.png"))


def _plot(results: Dict[str, List], path: str) -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6, 4))
  for (name, runs), color in zip(results.items(), ("tab:blue", "tab:orange")):
    for i, run in enumerate(runs):
      xs = [p["env_steps"] for p in run["points"]]
      ax.plot(xs, [p["eval_return"] for p in run["points"]], color=color, alpha=0.8,
              label=name if i == 0 else None, marker="o", ms=3)
  ax.set_xlabel("env steps")
  ax.set_ylabel("evaluation return (deterministic)")
  ax.set_title("PPO, Brax inverted_pendulum (generalized), notebook settings", fontsize=9)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  print(f"wrote {path}")


if __name__ == "__main__":
  app.run(main)
