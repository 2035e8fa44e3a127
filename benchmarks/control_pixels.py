"""The Control Suite from pixels (the `dm_control` source, issue 79): a grid of the frames
an agent sees, and D4PG's `control_pixels_seed` env steps/s with 1, 2 and 4 rendering
SEED workers.

  python benchmarks/control_pixels.py frames [--out=docs/control_frames.png]
  python benchmarks/control_pixels.py workers [--workers=1,2,4] [--total_env_steps=3200]
      [--learn=false] [--out=runs/control_pixels]

`frames`: for cartpole swingup, cartpole balance, walker walk and cheetah run, the three
stacked 84 x 84 frames of one observation after 20 random actions (action_repeat 4), a
row each. `workers`: launches `control_pixels_seed` as a user does, once per worker count
(4 environments a worker, a learner batch of 16 environments), and prints its env
steps/s from its first record with env steps to its last (the start left out). With `--learn=false` (the default) the replay's
`min_size` is above the budget, so no update runs: the figure is acting alone (render,
send, batched inference, act), what the workers bound; `--learn=true` learns from the
1,000th item as the config does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = (("cartpole", "swingup"), ("cartpole", "balance"), ("walker", "walk"),
         ("cheetah", "run"))

flags.DEFINE_string("out", "", "Where the frame grid or the runs go.")
flags.DEFINE_string("workers", "1,2,4", "Rendering worker counts, comma-separated.")
flags.DEFINE_integer("total_env_steps", 3200, "Env steps of each run.")
flags.DEFINE_bool("learn", False, "Learn from the 1,000th item (the config's warm-up).")
FLAGS = flags.FLAGS


def frame_grid(out: str) -> None:
  """One row a task: the three frames of one stacked observation."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from podracer import builder, registry  # pylint: disable=import-outside-toplevel
  builder.register_builtin_components()
  fig, axes = plt.subplots(len(TASKS), 3, figsize=(6, 2 * len(TASKS)))
  for row, (domain, task) in enumerate(TASKS):
    env = registry.build(registry.environments, dict(
        name="dm_control", num_envs=1, domain=domain, task=task, pixels=True,
        action_repeat=4), key="env")
    spec, (timestep, _) = env.spec(), env.reset()
    rng = np.random.default_rng(row)
    for _ in range(20):
      action = rng.uniform(spec.action.minimum, spec.action.maximum,
                           (1, *spec.action.shape)).astype(np.float32)
      timestep, _ = env.step(action)
    frames = timestep.observation[0]
    for k in range(3):
      axes[row, k].imshow(frames[..., 3 * k:3 * k + 3])
      axes[row, k].set_xticks([]), axes[row, k].set_yticks([])
      axes[row, k].set_title(f"{domain} {task}: t-{2 - k}" if k < 2 else f"{domain} {task}: t",
                             fontsize=7)
    env.close()
  fig.tight_layout()
  fig.savefig(out or os.path.join(ROOT, "docs", "control_frames.png"), dpi=100)
  print(f"wrote {out or 'docs/control_frames.png'}")


def worker_speed(workers: int, out: str) -> float:
  """`control_pixels_seed`'s env steps/s with `workers` rendering workers."""
  workdir = os.path.join(out or "runs/control_pixels", f"workers_{workers}")
  min_size = 1_000 if FLAGS.learn else 20_000  # the replay's max_size: never reached
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)
  result = subprocess.run(
      [sys.executable, "-m", "podracer.launch",
       "--config=agents/d4pg/config.py:control_pixels_seed", f"--workdir={workdir}",
       f"--config.total_env_steps={FLAGS.total_env_steps}",
       f"--config.runtime.num_local_workers={workers}",
       f"--config.replay.min_size={min_size}"],
      cwd=ROOT, env=env, check=False, capture_output=True, text=True)
  if result.returncode:
    raise SystemExit(f"{workers} workers: the launch exited {result.returncode}:\n"
                     f"{result.stderr[-2000:]}")
  return env_steps_per_s(workdir)


def env_steps_per_s(workdir: str) -> float:
  """Env steps over wall time from the first record with env steps to the last: the
  start (workers, compiles) before the first step left out."""
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  stepped = [r for r in records if r.get("env_steps", 0) > 0]
  first, last = stepped[0], stepped[-1]
  return (last["env_steps"] - first["env_steps"]) / (last["wall_time"] - first["wall_time"])


def main(argv):
  if argv[1:] == ["frames"]:
    frame_grid(FLAGS.out)
    return
  if argv[1:] != ["workers"]:
    raise app.UsageError("Say `frames` or `workers`.")
  for workers in (int(w) for w in FLAGS.workers.split(",")):
    print(f"{workers} rendering workers: {worker_speed(workers, FLAGS.out):.0f} env steps/s "
          f"({'learning' if FLAGS.learn else 'acting only'}, "
          f"{FLAGS.total_env_steps} env steps)", flush=True)


if __name__ == "__main__":
  app.run(main)
