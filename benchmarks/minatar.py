"""Agents on MinAtar games (gymnax, Anakin): the learning figures that do not fit in CI.

  python benchmarks/minatar.py [--agent=ppo] [--game=SpaceInvaders-MinAtar] [--target=150]
                               [--config_name=minatar_anakin] [--num_runs=1] [--seed=0]
                               [--total_env_steps=10000000] [--num_envs=N]
                               [--eval_interval=0] [--eval_episodes=32]

Trains `agents/AGENT/config.py:CONFIG_NAME` for each agent of `--agent` (ppo, pqn, dqn; a
comma-separated list) on each game of `--game` (a list too), in that order, one program
each, and prints per run the wall time, the median env steps/s (records after the
first, which includes compilation), the first env steps at which the mean return reached
`target` and the mean return over the last 20 % of the records; then a markdown table of
all of them. `--num_envs` sets every agent's environments per device (the same
environments for a speed comparison; the configs' own otherwise: PPO 64, PQN 128, DQN 16).
`--eval_interval` (env steps; 0: none) adds the greedy policy's return
(`podracer/lifecycle/evaluation.py`: `eval_episodes` episodes each time, training unchanged) and
its mean over the last 20 % of the evaluations, the "eval held" column: a training
return includes exploration (PQN's epsilon, PPO's sampling), an evaluation does not.

On the 2-core CPU (2026-11-25): PPO SpaceInvaders seed 0 reached 150 at 2.36M env steps,
held 180.0 over the last 20 %, 10M env steps in 210 s. PQN against PPO and DQN: the table
in docs/agents.md.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
from typing import Optional

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_AGENTS = flags.DEFINE_list("agent", ["ppo"], "Agents (agents/<name>/config.py).")
_GAMES = flags.DEFINE_list("game", ["SpaceInvaders-MinAtar"], "gymnax MinAtar games.")
_TARGET = flags.DEFINE_float("target", 150.0, "Mean return to reach.")
_CONFIG = flags.DEFINE_string("config_name", "minatar_anakin", "Each agent's config.")
_NUM_RUNS = flags.DEFINE_integer("num_runs", 1, "Runs (seeds) in one program.")
_SEED = flags.DEFINE_integer("seed", 0, "First seed.")
_STEPS = flags.DEFINE_integer("total_env_steps", 10_000_000, "Env steps per run.")
_NUM_ENVS = flags.DEFINE_integer("num_envs", None, "Environments per device, every agent.")
_EVAL_INTERVAL = flags.DEFINE_integer("eval_interval", 0,
                                      "Env steps between greedy evaluations (0: none).")
_EVAL_EPISODES = flags.DEFINE_integer("eval_episodes", 32, "Episodes per evaluation.")


def _tail_mean(records: list, key: str) -> Optional[float]:
  """Mean of `key` over the last 20 % of the records that have it (at least one)."""
  from podracer.logs.metrics import tail_mean  # pylint: disable=import-outside-toplevel
  return tail_mean([r[key] for r in records if key in r])


def train(agent: str, game: str) -> list:
  """One program of `num_runs` runs of `agent` on `game`; a row per run."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  config = importlib.import_module(f"agents.{agent}.config").CONFIGS[_CONFIG.value]()
  config.env.env_id = game
  config.topology.num_devices = 1
  config.total_env_steps = _STEPS.value
  config.num_runs, config.seed = _NUM_RUNS.value, _SEED.value
  config.checkpoint_interval = 0.0
  config.eval_interval, config.eval_episodes = _EVAL_INTERVAL.value, _EVAL_EPISODES.value
  if _NUM_ENVS.value:
    config.runtime.num_envs_per_device = _NUM_ENVS.value
  result = builder.build(config).train(workdir=None, stream=sys.stdout, print_interval=10.0)
  records = result.pop("records")
  rates = [r["sps"] for r in records[1:] if "sps" in r] or [result["median_sps"]]
  rows = []
  for run in range(_NUM_RUNS.value):
    mine = [r for r in records if r.get("run", 0) == run]
    reached = next((r["env_steps"] for r in mine
                    if r.get("episode_return", -float("inf")) >= _TARGET.value), None)
    rows.append(dict(agent=agent, game=game, seed=_SEED.value + run,
                     env_steps=result["env_steps"], wall=result["wall_time"],
                     sps=statistics.median(rates), reached=reached,
                     held=_tail_mean(mine, "episode_return") or 0.0,
                     eval_held=_tail_mean(mine, "eval_return")))
    print(f"{agent} {_CONFIG.value} on {game}, seed {_SEED.value + run}: "
          f"{result['env_steps']:,} env steps in {result['wall_time']:.0f} s, median "
          f"{rows[-1]['sps']:,.0f} env steps/s; reached {_TARGET.value:g} at "
          f"{f'{reached:,}' if reached else 'never'}; last 20 % mean {rows[-1]['held']:.1f}"
          f"{_eval_text(rows[-1]['eval_held'], '; greedy evaluations, last 20 % mean ')}",
          flush=True)
  return rows


def main(argv):
  del argv
  from podracer import launch  # pylint: disable=import-outside-toplevel
  launch.register_components_and_agents()
  rows = [row for game in _GAMES.value for agent in _AGENTS.value
          for row in train(agent, game)]
  print("\n| agent | game | seed | env steps | last 20 % mean | eval held | wall time "
        "| env steps/s |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- |")
  for r in rows:
    print(f"| {r['agent']} | {r['game']} | {r['seed']} | {r['env_steps']:,} | "
          f"{r['held']:.1f} | {_eval_text(r['eval_held']) or '-'} | {r['wall']:.0f} s | "
          f"{r['sps']:,.0f} |")


def _eval_text(value: Optional[float], prefix: str = "") -> str:
  return f"{prefix}{value:.1f}" if value is not None else ""


if __name__ == "__main__":
  app.run(main)
