"""Bad sizes, paths and config files: one paragraph and exit 2 before anything is built."""

import pytest
from ml_collections import config_dict

from agents.ppo import config as ppo_config
from podracer.config import validation
from podracer.errors import ConfigError
from tests.test_launch import launch

BAD_INPUTS = {
    "num_envs_per_actor=0": (["--config=agents/ppo/config.py:cartpole_sebulba",
                              "--config.runtime.num_envs_per_actor=0"],
                             "`runtime.num_envs_per_actor`"),
    "async with odd num_envs_per_actor": (["--config=agents/ppo/config.py:cartpole_sebulba",
                                           "--config.runtime.env_mode=async",
                                           "--config.runtime.num_envs_per_actor=7"],
                                          "`runtime.num_envs_per_actor` environments into two"),
    "rollout_length=0": (["--config=agents/ppo/config.py:cartpole_anakin",
                          "--config.runtime.rollout_length=0"], "`runtime.rollout_length`"),
    "num_envs_per_device=0": (["--config=agents/ppo/config.py:cartpole_anakin",
                               "--config.runtime.num_envs_per_device=0"],
                              "`runtime.num_envs_per_device`"),
    "updates_per_call=-1": (["--config=agents/ppo/config.py:cartpole_anakin",
                             "--config.runtime.updates_per_call=-1"],
                            "`runtime.updates_per_call`"),
    "minibatches do not divide": (["--config=agents/ppo/config.py:cartpole_anakin",
                                   "--config.agent.num_minibatches=3"],
                                  "512 transitions (`runtime.num_envs_per_device` x "
                                  "`runtime.rollout_length` = 4 x 128 per replica)"),
    "workdir not creatable": (["--config=agents/ppo/config.py:cartpole_anakin",
                               "--workdir=/proc/forbidden"], "--workdir=/proc/forbidden"),
    "seed beyond int64": (["--config=agents/ppo/config.py:cartpole_anakin",
                           "--config.seed=99999999999999999999"], "`seed`"),
    "negative layer width": (["--config=agents/ppo/config.py:cartpole_anakin",
                              "--config.network.hidden_sizes=(64,-1)"],
                             "`network.hidden_sizes`"),
    "negative critic width": (["--config=agents/sac/config.py:pendulum_anakin",
                               "--config.critic_network.hidden_sizes=(0,)"],
                              "`critic_network.hidden_sizes`"),
    # 10^9 CartPole environments x 128 steps per replica: terabytes of trajectory.
    "Anakin state beyond memory": (["--config=agents/ppo/config.py:cartpole_anakin",
                                    "--config.runtime.num_envs_per_device=1000000000"],
                                   "`runtime.num_envs_per_device`"),
    "discrete agent, continuous actions": (["--config=agents/ppo/config.py:cartpole_anakin",
                                            "--config.env=pendulum"],
                                           "Agent 'ppo' acts through its `distribution` "
                                           "section ('categorical', the default), but "
                                           "environment 'pendulum' (`env.name`) has "
                                           "continuous actions of shape [1]"),
    "continuous agent, discrete actions": (["--config=agents/sac/config.py:pendulum_anakin",
                                            "--config.env=cartpole"],
                                           "Agent 'sac' takes continuous actions (its "
                                           "`action_kind`), but environment 'cartpole' "
                                           "(`env.name`) has 2 discrete actions"),
    # Out of the range each key declares (podracer/registry/ranges.py).
    "negative learning rate": (["--config=agents/ppo/config.py:cartpole_anakin",
                                "--config.optimizer.learning_rate=-0.001"],
                               "`optimizer.learning_rate` of optimizer 'adam' is a positive "
                               "number in (0, inf], got -0.001"),
    "nan learning rate": (["--config=agents/impala/config.py:cartpole_anakin",
                           "--config.optimizer.learning_rate=nan"],
                          "`optimizer.learning_rate` of optimizer 'rmsprop' is a positive"),
    "discount above 1": (["--config=agents/ppo/config.py:cartpole_anakin",
                          "--config.agent.discount=1.5"],
                         "`agent.discount` of agent 'ppo' is a probability in [0, 1], got 1.5"),
    "gae_lambda above 1": (["--config=agents/ppo/config.py:cartpole_anakin",
                            "--config.agent.gae_lambda=2.0"], "`agent.gae_lambda`"),
    "negative clip epsilon": (["--config=agents/ppo/config.py:cartpole_anakin",
                               "--config.loss.clip_epsilon=-0.2"],
                              "`loss.clip_epsilon` of loss 'ppo' is a positive number"),
    "SAC tau of 0": (["--config=agents/sac/config.py:pendulum_anakin", "--config.agent.tau=0.0"],
                     "`agent.tau` of agent 'sac' is a fraction in (0, 1], got 0.0"),
    "config file missing": (["--config=agents/ppo/no_such_config.py:cartpole_anakin"],
                            "'agents/ppo/no_such_config.py' does not exist"),
    # PPO Pong's annealed learning rate counts optimizer steps in int32.
    "optimizer steps beyond int32": (["--config=agents/ppo/config.py:pong_sebulba",
                                      "--config.total_env_steps=1000000000000"],
                                     "total_env_steps gives 20,833,333,344 optimizer steps"),
    # R2D2's 4M observations as whole sequences of stacks: about 224 GiB on the device.
    "device replay beyond memory": (["--config=agents/r2d2/config.py:atari_sebulba",
                                     "--config.replay.name=device"],
                                    "needs 240,450,000,000 bytes"),
    # The Nature DQN's 1M transitions as items of 4 (+1) stacks: 33 GiB.
    "DQN device replay beyond memory": (["--config=agents/dqn/config.py:atari_sebulba",
                                         "--config.replay.name=device"],
                                        "needs 35,301,000,000 bytes"),
    "DQN n_step": (["--config=agents/dqn/config.py:cartpole_anakin",
                    "--config.loss.n_step=0"], "`loss.n_step`"),
    "DQN target period": (["--config=agents/dqn/config.py:cartpole_anakin",
                           "--config.agent.target_update_period=0"],
                          "`agent.target_update_period`"),
    "PQN lambda above 1": (["--config=agents/pqn/config.py:cartpole_anakin",
                            "--config.agent.lam=1.5"],
                           "`agent.lam` of agent 'pqn' is a probability in [0, 1], got 1.5"),
    "PQN eps_start below eps_finish": (["--config=agents/pqn/config.py:cartpole_anakin",
                                        "--config.agent.eps_start=0.1",
                                        "--config.agent.eps_finish=0.5"],
                                       "`agent.eps_start` (0.1) must be at least "
                                       "`agent.eps_finish` (0.5)"),
    "PQN eps_finish above 1": (["--config=agents/pqn/config.py:cartpole_anakin",
                                "--config.agent.eps_finish=1.2"],
                               "`agent.eps_finish` of agent 'pqn' is a probability"),
    "PQN eps_decay of 0": (["--config=agents/pqn/config.py:cartpole_anakin",
                            "--config.agent.eps_decay=0.0"],
                           "`agent.eps_decay` of agent 'pqn' is a fraction in (0, 1]"),
    # Met when the learner first traces its update: a thread's ConfigError, still exit 2.
    "PQN minibatches under Sebulba": (["--config=agents/pqn/config.py:cartpole_sebulba",
                                       "--config.agent.num_minibatches=7"],
                                      "`agent.num_minibatches` = 7 minibatches of equal "
                                      "size do not divide the 2048 examples"),
    "PQN continuous actions": (["--config=agents/pqn/config.py:cartpole_anakin",
                                "--config.env=pendulum"],
                               "Agent 'pqn' takes discrete actions (its `action_kind`), but "
                               "environment 'pendulum'"),
}


# The reverb lane checks the launcher's one paragraph there with a few (TensorFlow's logs).
REVERB_LANE_CASES = {"config file missing", "negative learning rate"}  # the launcher there


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.reverb_lane) if c in REVERB_LANE_CASES else c
    for c in BAD_INPUTS])
def test_bad_input_exits_2_with_one_paragraph_naming_it(case):
  args, named = BAD_INPUTS[case]
  result = launch(*args, timeout=120)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr + result.stdout
  assert result.stderr.startswith("Config error: ") and result.stderr.count("\n\n") == 0
  assert named in result.stderr.replace("\n", " "), result.stderr
  assert "| env steps" not in result.stdout  # Refused before the first record.


def test_sizes_must_be_positive_integers_and_unset_placeholders_pass():
  config = ppo_config.cartpole_sebulba()
  validation.check_config(config)  # topology.num_actors etc. are None placeholders.
  config.topology.num_learners = 0
  with pytest.raises(ConfigError, match="`topology.num_learners`"):
    validation.check_config(config)
  config = config_dict.ConfigDict(dict(agent=dict(num_epochs=True)))
  with pytest.raises(ConfigError, match="`agent.num_epochs`"):
    validation.check_config(config)



def test_ranges_admit_their_interval_and_refuse_the_rest():
  import math
  from podracer.registry.ranges import Fraction, NonNegative, Positive, Probability
  assert Probability.admits(0) and Probability.admits(1.0) and not Probability.admits(1.01)
  assert not Probability.admits(-0.1) and not Probability.admits(True)
  assert Positive.admits(1e-9) and not Positive.admits(0.0) and not Positive.admits(math.inf)
  assert NonNegative.admits(0.0) and not NonNegative.admits(math.nan)
  assert Fraction.admits(1.0) and not Fraction.admits(0.0)
  assert Probability.interval() == "[0, 1]" and Fraction.interval() == "(0, 1]"
  assert not Positive.admits("0.1")
