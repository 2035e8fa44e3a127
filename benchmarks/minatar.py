"""PPO on a MinAtar game (gymnax, Anakin): the learning figure that does not fit in CI.

  python benchmarks/minatar.py [--game=SpaceInvaders-MinAtar] [--target=150]
                               [--config_name=minatar_anakin] [--num_runs=1] [--seed=0]

Trains `agents/ppo/config.py:CONFIG_NAME` (10M env steps, PureJaxRL's settings) and prints
the wall time, env steps/s, the first env steps at which the mean return reached
`target`, and the mean return over the last 20 % of the records, per run. On the 2-core
CPU (2026-11-25): SpaceInvaders seed 0 reached 150 at 2.36M env steps, held 180.0 over
the last 20 %, 10M env steps in 210 s.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_GAME = flags.DEFINE_string("game", "SpaceInvaders-MinAtar", "gymnax MinAtar game.")
_TARGET = flags.DEFINE_float("target", 150.0, "Mean return to reach.")
_CONFIG = flags.DEFINE_string("config_name", "minatar_anakin", "A PPO config.")
_NUM_RUNS = flags.DEFINE_integer("num_runs", 1, "Runs (seeds) in one program.")
_SEED = flags.DEFINE_integer("seed", 0, "First seed.")
_STEPS = flags.DEFINE_integer("total_env_steps", 10_000_000, "Env steps per run.")


def main(argv):
  del argv
  from agents.ppo import config as ppo_config
  from podracer import builder, launch

  launch.register_components_and_agents()
  config = ppo_config.CONFIGS[_CONFIG.value]()
  config.env.env_id = _GAME.value
  config.topology.num_devices = 1
  config.total_env_steps = _STEPS.value
  config.num_runs, config.seed = _NUM_RUNS.value, _SEED.value
  config.checkpoint_interval = 0.0
  result = builder.build(config).run(workdir=None, stream=sys.stdout, print_interval=10.0)
  records = result.pop("records")
  print(f"{_CONFIG.value} on {_GAME.value}: {result['env_steps']:,} env steps per run in "
        f"{result['wall_time']:.0f} s, median {result['median_sps']:,.0f} env steps/s")
  for run in range(_NUM_RUNS.value):
    mine = [r for r in records if r.get("run", 0) == run and "episode_return" in r]
    reached = next((r["env_steps"] for r in mine if r["episode_return"] >= _TARGET.value), None)
    tail = mine[int(0.8 * len(mine)):]
    held = sum(r["episode_return"] for r in tail) / max(len(tail), 1)
    print(f"  seed {_SEED.value + run}: reached {_TARGET.value:g} at "
          f"{f'{reached:,}' if reached else 'never'} env steps; last 20 % mean {held:.1f}")


if __name__ == "__main__":
  app.run(main)
