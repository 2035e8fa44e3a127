"""Learning tests: a fixed seed must reach a stated return within a stated number of steps."""

from agents.ppo.config import cartpole_anakin, catch_anakin
from podracer import builder


def best_return_by(records, env_steps):
  returns = [r["episode_return"] for r in records
             if "episode_return" in r and r["env_steps"] <= env_steps]
  return max(returns) if returns else float("-inf")


def test_ppo_cartpole_anakin_reaches_475_within_500k_steps():
  config = cartpole_anakin()
  config.topology.num_devices = 1
  assert config.seed == 0 and config.total_env_steps == 500_000
  summary = builder.build(config).run(stream=None)
  best = best_return_by(summary["records"], 500_000)
  assert best >= 475, f"best mean episode return {best:.1f} < 475"


def test_ppo_catch_anakin_reaches_0_9_within_200k_steps():
  config = catch_anakin()
  config.topology.num_devices = 1
  assert config.total_env_steps == 200_000
  summary = builder.build(config).run(stream=None)
  best = best_return_by(summary["records"], 200_000)
  assert best >= 0.9, f"best mean episode return {best:.2f} < 0.9"
