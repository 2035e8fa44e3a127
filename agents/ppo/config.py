"""PPO configs. Launch one with

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE` (e.g. `--config.seed=1`).
"""

from ml_collections import config_dict

from podracer import configs


def _base() -> config_dict.ConfigDict:
  c = configs.experiment(total_env_steps=500_000)
  c.env = configs.section("cartpole")
  c.agent = configs.section("ppo", discount=0.99, gae_lambda=0.95, num_epochs=4,
                            num_minibatches=4)
  c.network = configs.section("mlp_actor_critic", hidden_sizes=(64, 64), activation="tanh")
  c.loss = configs.section("ppo", clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.01,
                           clip_value=True, normalize_advantages=True)
  c.optimizer = configs.section("adam", learning_rate=2.5e-4, eps=1e-5, max_grad_norm=0.5,
                                anneal=True)
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """PPO on CartPole-v1 in JAX; PureJaxRL's hyperparameters."""
  return configs.anakin(_base(), num_envs_per_device=4, rollout_length=128,
                        updates_per_call=16)


def catch_anakin() -> config_dict.ConfigDict:
  """PPO on bsuite's Catch in JAX."""
  c = _base()
  c.total_env_steps = 200_000
  c.env = configs.section("catch", rows=10, columns=5)
  c.optimizer.learning_rate = 5e-4
  return configs.anakin(c, num_envs_per_device=16, rollout_length=32, updates_per_call=16)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """PPO on EnvPool's CartPole-v1, stepped on the CPU by Sebulba's actor threads.

  The agent section is cartpole_anakin's; only env, runtime and topology change.
  """
  c = _base()
  c.total_env_steps = 1_000_000
  # 12 envs per actor thread split evenly over 1, 2, 3, 4 or 6 learner devices.
  return configs.sebulba(c, configs.envpool("CartPole-v1"), num_envs_per_actor=12,
                         rollout_length=64)


CONFIGS = {"cartpole_anakin": cartpole_anakin, "catch_anakin": catch_anakin,
           "cartpole_sebulba": cartpole_sebulba}


get_config = configs.getter("PPO", CONFIGS, default="cartpole_anakin")
