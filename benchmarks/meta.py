"""Meta-learns PPO's policy objective, then trains with it against PPO's own, as a user's
commands do (docs/meta.md):

  python benchmarks/meta.py                          # CartPole, lifted onto Catch too
  python benchmarks/meta.py --generations=30 --population=16 --inner_env_steps=65536 \
      --tasks="agents/ppo/config.py:cartpole_anakin;agents/ppo/config.py:catch_anakin"
  # A task with overrides: the config and each override joined by "|".
  python benchmarks/meta.py --tasks="agents/ppo/config.py:cartpole_anakin|--config.env=gymnax|--config.env.env_id=Acrobot-v1"
  # PPO's return against its clip scale c (clip 0.2 exp(c)) first, 16 seeds each: where
  # the gain the search should find lies.
  python benchmarks/meta.py --clip_profile=-0.5,0,0.25,0.5,0.75,1,1.25,1.6,2.3 --seeds=16
  # The learned objective's own clip scales (c:c_v) with a zero drift, 64 seeds each.
  python benchmarks/meta.py --zero_drift_profile=0:0,0:-2,0:-6 --seeds=64
  # A saved objective against PPO on tasks (seen or never seen), no meta-training: each
  # side's IQM and their ratio with its 95 % bootstrap interval.
  python benchmarks/meta.py --transfer=DIR/learned_objective.npz --seeds=16 \
      --eval_env_steps=1015808 --tasks="agents/ppo/config.py:minatar_anakin|--config.env.env_id=Asterix-MinAtar"

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
  # The checkout first, then what the caller's PYTHONPATH gives (a GPU box's .gpu-site).
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
  env.pop("XLA_FLAGS", None)  # One device, as a user has.
  return env


def meta_train(args: argparse.Namespace, workdir: str) -> str:
  command = [sys.executable, "-m", "podracer.meta", f"--config={args.config}",
             f"--workdir={workdir}", f"--config.meta.generations={args.generations}",
             f"--config.meta.population={args.population}",
             f"--config.meta.inner_env_steps={args.inner_env_steps}",
             f"--config.meta.hidden={args.hidden}", f"--config.meta.sigma={args.sigma}",
             f"--config.meta.sigma_clip={args.sigma_clip}",
             f"--config.meta.drift_form={args.drift_form}",
             f"--config.meta.learning_rate={args.learning_rate}",
             f"--config.meta.seed={args.meta_seed}", f"--config.meta.tasks={args.meta_tasks}",
             f"--config.meta.lifetime={args.lifetime}",
             f"--config.meta.member_seeds={args.member_seeds}"]
  start = time.perf_counter()
  subprocess.run(command, cwd=ROOT, env=_env(), check=True)
  print(f"meta-training: {time.perf_counter() - start:.0f} s", flush=True)
  return os.path.join(workdir, "learned_objective.npz")


def launch_records(task: str, seeds: int, env_steps: int, overrides=()) -> List[dict]:
  """The records of `task` trained with `seeds` seeds in one program (seeds from 100: not
  a meta-training's), `env_steps` each, one device, as a user's command runs it."""
  with tempfile.TemporaryDirectory() as workdir:
    command = [sys.executable, "-m", "podracer.launch", f"--config={task}",
               f"--workdir={workdir}", f"--config.num_runs={seeds}",
               "--config.seed=100", f"--config.total_env_steps={env_steps}",
               "--config.log.loggers=('jsonl',)", *overrides]
    subprocess.run(command, cwd=ROOT, env=_env(), check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      return [json.loads(line) for line in f]


def held_by_run(records: List[dict], metric: str = "episode_return") -> List[float]:
  """Each run's mean of `metric` over the last 20 % of its records."""
  values: dict = {}
  for r in records:
    if r.get(metric) is not None:
      values.setdefault(r.get("run", 0), []).append(r[metric])
  return [tail_mean(values[run]) for run in sorted(values)]


def held(task: str, args: argparse.Namespace, objective: str = "") -> List[float]:
  """Each seed's last-20 % mean return, training with PPO's loss or `objective`. A task
  is a config and its overrides, joined by `|`."""
  config, *overrides = task.split("|")
  if objective:
    overrides += ["--config.loss=learned_policy", f"--config.loss.path={objective}",
                  f"--config.loss.hidden={args.hidden}"]
  return held_by_run(launch_records(config, args.seeds, args.eval_env_steps, overrides))


def cost(args: argparse.Namespace, workdir: str) -> None:
  """The inner runs' env steps/s inside meta-training against plain many-runs PPO of the
  same size (`population` x `member_seeds` runs of `inner_env_steps` in one program):
  medians, the first (compiling) generation or record left out."""
  with open(os.path.join(workdir, "meta.jsonl")) as f:
    inner = float(np.median([json.loads(line)["sps"] for line in f][1:]))
  trainings = args.population * args.member_seeds
  records = launch_records(args.config, trainings, args.inner_env_steps)
  # A many-runs record's `sps` is its own run's: the program's is that times the runs.
  plain = trainings * float(
      np.median([r["sps"] for r in records if r.get("sps")][trainings:]))
  print(f"inner runs {inner:,.0f} env steps/s; plain PPO with num_runs={trainings}: "
        f"{plain:,.0f}; ratio {inner / plain:.2f}x", flush=True)


def plot_fitness(workdir: str, path: str) -> None:
  """The meta-training's fitness (best, mean, min of each generation's members) over
  generations, from its meta.jsonl, into `path`."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  with open(os.path.join(workdir, "meta.jsonl")) as f:
    records = [json.loads(line) for line in f]
  generations = [r["generation"] for r in records]
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for key in ("fitness_best", "fitness_mean", "fitness_min"):
    ax.plot(generations, [r[key] for r in records], label=key.split("_")[1])
  evaluated = [r for r in records if r.get("mean_theta_fitness") is not None]
  if evaluated:  # What is saved: the mean theta, on held-out seeds.
    ax.plot([r["generation"] for r in evaluated],
            [r["mean_theta_fitness"] for r in evaluated], "ko-", label="mean theta")
  ax.set_xlabel("generation")
  ax.set_ylabel("members' fitness (return)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  print(f"wrote {path}", flush=True)


def clip_profile(args: argparse.Namespace) -> None:
  """PPO's held return (IQM over `--seeds` seeds) at clip_epsilon 0.2 exp(c) for each c
  of `--clip_profile`, at `--inner_env_steps`. `loss.clip_epsilon` widens PPO's value
  clip too, which the search's c does not (docs/meta.md): where they differ, the
  search's own profile is the learned_policy loss at log_clip c with a zero drift."""
  for c in map(float, args.clip_profile.split(",")):
    values = held_by_run(launch_records(
        args.config, args.seeds, args.inner_env_steps,
        [f"--config.loss.clip_epsilon={0.2 * np.exp(c):.6g}"]))
    print(f"clip profile c={c:+.2f} (clip {0.2 * np.exp(c):.3f}): IQM "
          f"{float(_iqm(np.asarray(values, np.float64))):.1f} over {len(values)} seeds "
          f"({', '.join(f'{v:.0f}' for v in values)})", flush=True)


def zero_drift_objective(folder: str, c: float, c_v: float, hidden: int = 16) -> str:
  """A learned_objective.npz (and its .json), as `podracer.meta` saves one, in a folder
  of its own under `folder`: clip scales (c, c_v), no drift."""
  from podracer import meta  # pylint: disable=import-outside-toplevel
  from podracer.components.losses.learned_policy import objective_form, zero_drift  # pylint: disable=import-outside-toplevel
  theta = dict(zero_drift(hidden), log_clip=np.full((1,), c, np.float32),
               log_value_clip=np.full((1,), c_v, np.float32))
  own = os.path.join(folder, f"c{c:+g}_cv{c_v:+g}")
  os.makedirs(own, exist_ok=True)
  return meta.save_objective(own, theta, dict(form=objective_form("first_order", True),
                                              loss="learned_policy", hidden=hidden))


def zero_drift_profile(args: argparse.Namespace) -> None:
  """`--zero_drift_profile=c:c_v,...`: the search's own space without its drift, the
  `learned_policy` loss at log clip scales (c, c_v) and a zero drift (c = c_v = 0: PPO),
  IQM over `--seeds` seeds at `--inner_env_steps`."""
  with tempfile.TemporaryDirectory() as folder:
    for point in args.zero_drift_profile.split(","):
      c, c_v = map(float, point.split(":"))
      path = zero_drift_objective(folder, c, c_v, args.hidden)
      values = held_by_run(launch_records(
          args.config, args.seeds, args.inner_env_steps,
          ["--config.loss=learned_policy", f"--config.loss.path={path}",
           f"--config.loss.hidden={args.hidden}"]))
      print(f"zero-drift profile c={c:+.2f} c_v={c_v:+.2f}: IQM "
            f"{float(_iqm(np.asarray(values, np.float64))):.1f} over {len(values)} seeds, "
            f"per-seed sd {float(np.std(values)):.1f}", flush=True)


def pass_rate(ppo: List[float], learned: List[float], seeds: int = 16, bar: float = 1.15,
              reps: int = 4000, seed: int = 0) -> float:
  """The chance that a launch of `seeds` seeds shows learned's IQM at least `bar` times
  PPO's: the fraction of `reps` draws of `seeds` runs from each side (without
  replacement; each side more than `seeds` runs) whose ratio reaches it."""
  a, b = np.asarray(ppo, np.float64), np.asarray(learned, np.float64)
  if min(len(a), len(b)) <= seeds:
    raise ValueError(f"pass_rate draws {seeds} of each side's runs: give more "
                     f"({len(a)} and {len(b)} given).")
  rng = np.random.default_rng(seed)
  draw = lambda x: rng.permuted(np.tile(x, (reps, 1)), axis=1)[:, :seeds]
  return float(np.mean(_iqm(draw(b)) >= bar * _iqm(draw(a))))


def ratio_interval(ppo: List[float], learned: List[float], reps: int = 2000,
                   seed: int = 0) -> tuple:
  """(learned's IQM over PPO's, its 95 % percentile interval): each side's seeds resampled
  on their own. Where both IQMs are negative (a return that is minus a cost, Acrobot's
  steps to swing up), the ratio is PPO's cost over the learned one's: above 1 is better."""
  a, b = np.asarray(ppo, np.float64), np.asarray(learned, np.float64)
  rng = np.random.default_rng(seed)
  pick = lambda x: x[rng.integers(0, len(x), size=(reps, len(x)))]
  point, boot = (_iqm(b), _iqm(a)), (_iqm(pick(b)), _iqm(pick(a)))
  flip = point[0] < 0 and point[1] < 0
  ratio = lambda num, den: den / num if flip else num / den
  return float(ratio(*point)), np.percentile(ratio(*boot), [2.5, 97.5])


def transfer(args: argparse.Namespace) -> None:
  """`--transfer=OBJECTIVE`: PPO and the saved objective on each of `--tasks`, `--seeds`
  held-out seeds of `--eval_env_steps` each; per seed, each side's IQM, the ratio."""
  for task in args.tasks.split(";"):
    start = time.perf_counter()
    ppo, learned = held(task, args), held(task, args, args.transfer)
    ratio, (low, high) = ratio_interval(ppo, learned)
    print(f"{task}: PPO {', '.join(f'{v:.1f}' for v in ppo)}; learned "
          f"{', '.join(f'{v:.1f}' for v in learned)}", flush=True)
    print(f"{task}: IQM PPO {float(_iqm(np.asarray(ppo))):.2f}, learned "
          f"{float(_iqm(np.asarray(learned))):.2f}: {ratio:.2f}x (95 % {low:.2f}-{high:.2f}), "
          f"{len(ppo)} seeds, {time.perf_counter() - start:.0f} s", flush=True)
    if args.pass_seeds and len(ppo) > args.pass_seeds:
      print(f"{task}: a launch of {args.pass_seeds} of these seeds a side shows at least "
            f"{args.bar:.2f}x in {100 * pass_rate(ppo, learned, args.pass_seeds, args.bar):.0f} %"
            " of draws", flush=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="agents/ppo/config.py:cartpole_anakin")
  parser.add_argument("--tasks", default="agents/ppo/config.py:cartpole_anakin;"
                      "agents/ppo/config.py:catch_anakin")
  parser.add_argument("--generations", type=int, default=30)
  parser.add_argument("--population", type=int, default=16)
  parser.add_argument("--inner_env_steps", type=int, default=65536)
  parser.add_argument("--hidden", type=int, default=16)
  parser.add_argument("--member_seeds", type=int, default=2, help="trainings per member, "
                      "their mean its fitness (`meta.member_seeds`; 2: docs/meta.md, 0.21.0)")
  parser.add_argument("--sigma", type=float, default=0.01)
  parser.add_argument("--sigma_clip", type=float, default=1.0)
  parser.add_argument("--learning_rate", type=float, default=0.05)
  parser.add_argument("--meta_seed", type=int, default=0, help="the search's seed")
  parser.add_argument("--meta_tasks", default="", help="more tasks the search trains each "
                      "member on (`meta.tasks`: ';'-separated, overrides joined by '|')")
  parser.add_argument("--drift_form", default="first_order")
  parser.add_argument("--lifetime", action="store_true", help="the drift also sees the "
                      "fraction of the training done (`meta.lifetime`, TA-LPO's)")
  parser.add_argument("--clip_profile", default="", help="c values: measure PPO's profile "
                      "along the clip scale instead of meta-training")
  parser.add_argument("--transfer", default="", help="a saved learned_objective.npz: "
                      "train it and PPO on each of --tasks instead of meta-training")
  parser.add_argument("--zero_drift_profile", default="", help="c:c_v pairs: the learned "
                      "objective's clip scales with a zero drift, instead of meta-training")
  parser.add_argument("--pass_seeds", type=int, default=16, help="--transfer with more "
                      "seeds: how often a launch of this many a side reaches --bar")
  parser.add_argument("--bar", type=float, default=1.15)
  parser.add_argument("--seeds", type=int, default=8)
  parser.add_argument("--eval_env_steps", type=int, default=65536)
  parser.add_argument("--workdir", default="", help="keep the meta-training here")
  parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "meta_fitness.png"),
                      help="the fitness curve's file ('' for none)")
  args = parser.parse_args()
  for given, measure in ((args.clip_profile, clip_profile), (args.transfer, transfer),
                         (args.zero_drift_profile, zero_drift_profile)):
    if given:
      measure(args)
      return
  workdir = args.workdir or tempfile.mkdtemp(prefix="podracer-meta-")
  objective = meta_train(args, workdir)
  if args.plot:
    plot_fitness(workdir, args.plot)
  cost(args, workdir)
  for task in args.tasks.split(";"):
    for name, path in (("PPO", ""), ("learned", objective)):
      values = held(task, args, path)
      print(f"{task} {name:>7}: held {', '.join(f'{v:.1f}' for v in values)}; IQM "
            f"{float(_iqm(np.asarray(values, np.float64))):.1f}", flush=True)


if __name__ == "__main__":
  main()
