"""Anakin throughput: PPO on CartPole against the bare environment, acting alone, and a
hand-fused single-file PPO (benchmarks/ppo_reference.py, the ceiling to beat); with
--num_runs, many runs in one program (podracer/config/runs.py) against one.

  python benchmarks/anakin.py [--num_envs=4,16,64,256,1024] [--repeats=5]
  python benchmarks/anakin.py --num_runs=1,4,16,64 [--num_envs=4]

With --num_runs it prints, for each number of runs R (each run `num_envs` environments),
the total env steps/s of the one program over all its runs, the same per run, and the
total against R = 1 (the speed-up of training R seeds at once over one after another).

For each number of environments (per device) it measures, in one process:
  env:   the bare batched environment step with random actions, in a compiled scan;
  act:   environment plus the agent's policy (no learning), in a compiled scan;
  ppo:   the full Anakin program (acting, GAE, 4 epochs x 4 minibatches of updates);
  ref:   the reference PPO, same environment, network and math, jitted by hand.
Figures are medians over `repeats` timed calls after a warm-up (compile) call; ppo and
ref calls alternate, so load from other processes hits both alike. ppo/ref is the
framework's cost (1.0 = none); ppo/env and act/env what learning and acting cost.
"""

from __future__ import annotations

import os
import platform
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import (acting_only, median_sps, paired_median_sps,  # noqa: E402
                               ppo_runtime)

_NUM_ENVS = flags.DEFINE_list("num_envs", ["4", "16", "64", "256", "1024"],
                              "Environments per device.")
_ROLLOUT = flags.DEFINE_integer("rollout_length", 128, "Steps per rollout.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per measurement.")
_NUM_RUNS = flags.DEFINE_list("num_runs", [], "Runs in one program: prints the scaling "
                              "table of many runs instead (e.g. 1,4,16,64).")
_MIN_STEPS = flags.DEFINE_integer("min_steps_per_call", 131072,
                                  "Work per timed call, so launch overhead stays small.")


def measure(num_envs: int, rollout_length: int, repeats: int, min_steps: int):
  import jax

  from podracer import mesh

  updates = max(1, min_steps // (num_envs * rollout_length))
  runtime = ppo_runtime(num_envs, rollout_length, updates)
  steps_per_call = runtime.steps_per_call
  state = runtime.init()

  # Bare environment: random actions, nothing else.
  env = runtime.env
  num_actions = env.spec().action.num_values

  def env_only(carry):
    def body(carry, _):
      env_state, key = carry
      key, action_key = jax.random.split(key)
      action = jax.random.randint(action_key, (num_envs,), 0, num_actions)
      env_state, _, _ = env.step(env_state, action)
      return (env_state, key), None
    return jax.lax.scan(body, carry, None, length=rollout_length * updates)[0]

  env_fn = mesh.spmd(env_only, runtime.mesh)
  env_sps = median_sps(env_fn, (state.env, state.key), steps_per_call, repeats)

  act_sps = median_sps(acting_only(runtime, updates), state, steps_per_call, repeats)

  from benchmarks import ppo_reference
  init_reference, train_reference = ppo_reference.make(num_envs, rollout_length, updates)
  ppo_sps, ref_sps = paired_median_sps(
      [lambda s: runtime._step(s)[0], lambda s: train_reference(s)[0]],
      [state, init_reference()], steps_per_call, repeats)
  return env_sps, act_sps, ppo_sps, ref_sps


def measure_runs(num_runs: int, num_envs: int, rollout_length: int, repeats: int,
                 min_steps: int) -> float:
  """Total env steps/s (all runs) of the Anakin program of `num_runs` PPO runs."""
  updates = max(1, min_steps // (num_runs * num_envs * rollout_length))
  runtime = ppo_runtime(num_envs, rollout_length, updates, num_runs=num_runs)
  state = runtime.init()
  step = (lambda s: runtime.step(s)[0])
  return median_sps(step, state, runtime.steps_per_call * num_runs, repeats)


def runs_table() -> None:
  num_envs = int(_NUM_ENVS.value[0])
  print(f"PPO CartPole Anakin, many runs in one program, 1 device, {num_envs} envs per run, "
        f"rollout {_ROLLOUT.value}; median of {_REPEATS.value} calls")
  header = f"{'runs':>6} {'total steps/s':>14} {'per run':>12} {'vs 1 run':>9}"
  print(header)
  print("-" * len(header))
  one = None
  for num_runs in map(int, _NUM_RUNS.value):
    total = measure_runs(num_runs, num_envs, _ROLLOUT.value, _REPEATS.value, _MIN_STEPS.value)
    one = one or (total if num_runs == 1 else None)
    ratio = f"{total / one:>8.2f}x" if one else f"{'-':>9}"
    print(f"{num_runs:>6} {total:>14,.0f} {total / num_runs:>12,.0f} {ratio}", flush=True)


def main(argv):
  del argv
  import jax
  import jaxlib
  print(f"jax {jax.__version__} (jaxlib {jaxlib.__version__}), backend "
        f"{jax.default_backend()}, {jax.device_count()} device(s), "
        f"{os.cpu_count()} CPU core(s), Python {platform.python_version()}")
  if _NUM_RUNS.value:
    return runs_table()
  print(f"PPO CartPole Anakin, 1 device, rollout {_ROLLOUT.value}, 4 epochs x 4 "
        f"minibatches, 64x64 tanh MLP; median of {_REPEATS.value} calls")
  header = f"{'envs':>6} {'env steps/s':>14} {'act steps/s':>14} {'ppo steps/s':>14} " \
           f"{'ref steps/s':>14} {'act/env':>8} {'ppo/env':>8} {'ppo/ref':>8}"
  print(header)
  print("-" * len(header))
  for num_envs in map(int, _NUM_ENVS.value):
    env_sps, act_sps, ppo_sps, ref_sps = measure(num_envs, _ROLLOUT.value, _REPEATS.value,
                                                 _MIN_STEPS.value)
    print(f"{num_envs:>6} {env_sps:>14,.0f} {act_sps:>14,.0f} {ppo_sps:>14,.0f} "
          f"{ref_sps:>14,.0f} {act_sps / env_sps:>8.3f} {ppo_sps / env_sps:>8.3f} "
          f"{ppo_sps / ref_sps:>8.3f}", flush=True)


if __name__ == "__main__":
  app.run(main)
