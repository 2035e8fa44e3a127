"""Learning tests: PPO and IMPALA reach and hold stated returns within stated budgets, as
a user's command runs them (tests/learning.py), over 5 seeds where it is cheap."""

import pytest

from agents.impala import config as impala_config
from agents.ppo import config as ppo_config
from agents.ppo.config import cartpole_anakin, catch_anakin
from podracer.config import presets
from tests.learning import assert_reached_and_held, launch_runs


def best_return_by(records, env_steps):
  returns = [r["episode_return"] for r in records
             if "episode_return" in r and r["env_steps"] <= env_steps]
  return max(returns) if returns else float("-inf")


@pytest.mark.learning
def test_ppo_cartpole_anakin_over_5_seeds_reaches_475_and_holds_it(tmp_path):
  """Seeds 0-4 in one program, one host device: every run reaches 500 and holds it over
  the last 20 % of 500K (2026-11-27, 23 s)."""
  assert cartpole_anakin().total_env_steps == 500_000
  records = launch_runs("agents/ppo/config.py:cartpole_anakin", tmp_path,
                        "--config.num_runs=5")
  assert_reached_and_held(records, 5, reached=475, held_iqm=475)


@pytest.mark.extended  # PPO's CI tests: CartPole over 5 seeds, Sebulba in turns
@pytest.mark.learning
def test_ppo_catch_anakin_over_5_seeds_holds_0_9(tmp_path):
  """Seeds 0-4, one host device, 200K env steps: the last-20 % means are 0.997-1.0
  (2026-11-27, 16 s)."""
  assert catch_anakin().total_env_steps == 200_000
  records = launch_runs("agents/ppo/config.py:catch_anakin", tmp_path, "--config.num_runs=5")
  assert_reached_and_held(records, 5, held_iqm=0.9)


PIXEL_CATCH = {"impala": impala_config.pixel_catch_anakin,
               "ppo": ppo_config.pixel_catch_anakin}
# PPO's 16 minibatch steps per update learn Catch in fewer env steps than IMPALA's one.
PIXEL_CATCH_BUDGETS = {"impala": 122_880, "ppo": 81_920}
# Each agent's Atari optimizer, exactly as its pong_sebulba config has it.
ATARI_OPTIMIZERS = {
    "impala": dict(name="rmsprop", learning_rate=6e-4, decay=0.99, eps=0.01,
                   max_grad_norm=40.0, anneal=True),
    "ppo": dict(name="adam", learning_rate=2.5e-4, eps=1e-5, max_grad_norm=0.5,
                anneal=True),
}


@pytest.mark.learning
@pytest.mark.parametrize("agent", [  # CI: IMPALA's (the Atari actor-critic); both: --all.
    a if a == "impala" else pytest.param(a, marks=pytest.mark.extended) for a in PIXEL_CATCH])
def test_pixel_catch_anakin_learns_from_frames_with_the_atari_settings(agent, tmp_path):
  """Catch seen as [4, 20, 10] uint8 frame stacks, learned by the Atari ResNet with each
  agent's Atari optimizer settings: the CPU's stand-in for Pong.

  It catches issue 9's defect: IMPALA's V-trace loss as a mean (not the paper's sum)
  under the paper's RMSProp (eps 0.01) makes updates so small that the policy stays
  near uniform: seed 0 then never passes -0.35 in the whole 122,880-step budget and ends
  at -0.37, entropy 0.97 (ln 3 = 1.10). With the sum, run as a user's command (one host
  device, 2026-11-27, after conv2d's matmul on maps the kernel overhangs), IMPALA passes
  0.5 at 51,200 env steps (0.57) and PPO at 20,480 (0.70), in about 35 s each.
  """
  config = PIXEL_CATCH[agent]()
  pong = {"impala": impala_config, "ppo": ppo_config}[agent].pong_sebulba()
  assert config.network == presets.impala_resnet() == pong.network
  assert dict(config.optimizer) == dict(pong.optimizer) == ATARI_OPTIMIZERS[agent]
  assert dict(config.loss) == dict(pong.loss)
  assert config.env.name == "pixel_catch" and config.seed == 0
  budget = PIXEL_CATCH_BUDGETS[agent]
  assert config.total_env_steps == budget
  # Seed 0 alone: the Atari ResNet on the CPU is too dear for five. Ends once it passes.
  records = launch_runs(f"agents/{agent}/config.py:pixel_catch_anakin", tmp_path,
                        "--config.stop_at_return=0.5")
  best = best_return_by(records, budget)
  assert best >= 0.5, f"best mean episode return {best:.2f} < 0.5 within {budget:,} steps"
