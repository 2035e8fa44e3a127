"""Anakin PPO CartPole steps/s, wall-clock and per CPU-second, of the checkout it runs in.

To compare two commits on a shared machine, run it in both checkouts at once, so both
see the same load (the CPU-second figure is the less load-sensitive one):

  (cd /tmp/old && python /path/to/benchmarks/anakin_trees.py) & python benchmarks/anakin_trees.py

Medians of `--calls` timed calls of 131,072 env steps each, after a compiling call.
"""

import importlib.util
import os
import statistics
import sys
import time

# This file's benchmarks/anakin.py builds the runtime; podracer and agents come from the
# checkout it runs in (cwd, put first after anakin.py has added its own root).
_SPEC = importlib.util.spec_from_file_location(
    "anakin_benchmark", os.path.join(os.path.dirname(os.path.abspath(__file__)), "anakin.py"))
anakin_benchmark = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(anakin_benchmark)
sys.path.insert(0, os.getcwd())

import jax  # noqa: E402

try:  # Newer checkouts register their components in the launcher.
  from podracer import launch
  launch.register_components_and_agents()
except (ImportError, AttributeError):
  pass


def main(calls: int = 9) -> None:
  for num_envs in (4, 64):
    runtime = anakin_benchmark.ppo_runtime(num_envs, 128, max(1, 131072 // (num_envs * 128)))
    state = jax.block_until_ready(runtime._step(runtime.init())[0])
    wall, cpu = [], []
    for _ in range(calls):
      c, w = time.process_time(), time.perf_counter()
      state = jax.block_until_ready(runtime._step(state)[0])
      cpu.append(runtime.steps_per_call / (time.process_time() - c))
      wall.append(runtime.steps_per_call / (time.perf_counter() - w))
    print(f"{os.getcwd()}: {num_envs} envs: {statistics.median(wall):,.0f} steps/s wall, "
          f"{statistics.median(cpu):,.0f} per CPU-second", flush=True)


if __name__ == "__main__":
  main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
