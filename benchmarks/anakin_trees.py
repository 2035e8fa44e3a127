"""Anakin PPO CartPole steps/s, wall-clock and per CPU-second, of the checkout it runs in.

To compare two commits on a shared machine, run it in both checkouts at once, so both
see the same load (the CPU-second figure is the less load-sensitive one):

  (cd /tmp/old && python /path/to/benchmarks/anakin_trees.py) & python benchmarks/anakin_trees.py

Medians of `--calls` timed calls of 131,072 env steps each, after a compiling call.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())  # The checkout it runs in, not this file's.

import jax  # noqa: E402

from agents.ppo.config import cartpole_anakin  # noqa: E402
from podracer import builder  # noqa: E402

try:  # Newer checkouts register their components in the launcher.
  from podracer import launch
  launch.register_builtin_components()
except (ImportError, AttributeError):
  pass


def main(calls: int = 9) -> None:
  for num_envs in (4, 64):
    rollout, updates = 128, max(1, 131072 // (num_envs * 128))
    config = cartpole_anakin()
    config.topology.num_devices = 1
    config.runtime.num_envs_per_device = num_envs
    config.runtime.rollout_length = rollout
    config.runtime.updates_per_call = updates
    config.total_env_steps = num_envs * rollout * updates
    runtime = builder.build(config).runtime
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
