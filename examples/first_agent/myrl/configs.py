"""A2C's configs: `--config=myrl/configs.py:cartpole_anakin` (or `:cartpole_sebulba`)."""

from ml_collections import config_dict

from podracer.config import presets


def _a2c() -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps=500_000)
  c.imports = ("myrl",)  # What registers "a2c": launch needs no --import for it.
  c.env = presets.section("cartpole")
  c.agent = presets.section("a2c", discount=0.99, gae_lambda=1.0)
  c.network = presets.section("mlp_actor_critic", hidden_sizes=(64, 64), activation="tanh")
  c.loss = presets.section("a2c", value_coef=0.5, entropy_coef=0.01)
  c.optimizer = presets.section("adam", learning_rate=7e-4, eps=1e-5, max_grad_norm=0.5)
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """A2C on CartPole in JAX: 16 environments x 8 steps a rollout, one update each."""
  return presets.anakin(_a2c(), num_envs_per_device=16, rollout_length=8,
                        updates_per_call=64)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """The same agent on EnvPool's CartPole-v1, stepped by Sebulba's actor threads. A2C's
  gradient assumes the data came from the parameters it differentiates: acting and
  learning take turns (max_policy_lag=0)."""
  return presets.sebulba(_a2c(), presets.envpool("CartPole-v1"), num_envs_per_actor=32,
                         rollout_length=8, max_policy_lag=0)


get_config = presets.getter("A2C", {"cartpole_anakin": cartpole_anakin,
                                     "cartpole_sebulba": cartpole_sebulba},
                            default="cartpole_anakin")
