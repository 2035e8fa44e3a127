"""PPO configs. Launch one with

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE` (e.g. `--config.seed=1`).
"""

from ml_collections import config_dict

from podracer import configs


def _base() -> config_dict.ConfigDict:
  c = config_dict.ConfigDict()
  c.seed = 0
  c.nan_policy = "stop"  # Or "skip_update": see podracer/guards.py.
  c.checkpoint_interval = 600.0  # Seconds between checkpoints (Anakin; also at the end).
  c.checkpoints_to_keep = 3
  c.stop_at_return = config_dict.placeholder(float)  # Ends the run early once reached.
  c.total_env_steps = 500_000
  c.env = config_dict.ConfigDict(dict(name="cartpole"))
  c.agent = config_dict.ConfigDict(dict(
      name="ppo", discount=0.99, gae_lambda=0.95, num_epochs=4, num_minibatches=4))
  c.network = config_dict.ConfigDict(dict(
      name="mlp_actor_critic", hidden_sizes=(64, 64), activation="tanh"))
  c.loss = config_dict.ConfigDict(dict(
      name="ppo", clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.01, clip_value=True,
      normalize_advantages=True))
  c.optimizer = config_dict.ConfigDict(dict(
      name="adam", learning_rate=2.5e-4, eps=1e-5, max_grad_norm=0.5, anneal=True))
  c.topology = configs.replicate_topology()
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """PPO on CartPole-v1 in JAX; PureJaxRL's hyperparameters."""
  c = _base()
  c.runtime = config_dict.ConfigDict(dict(
      name="anakin", num_envs_per_device=4, rollout_length=128, updates_per_call=16))
  return c


def catch_anakin() -> config_dict.ConfigDict:
  """PPO on bsuite's Catch in JAX."""
  c = _base()
  c.total_env_steps = 200_000
  c.env = config_dict.ConfigDict(dict(name="catch", rows=10, columns=5))
  c.optimizer.learning_rate = 5e-4
  c.runtime = config_dict.ConfigDict(dict(
      name="anakin", num_envs_per_device=16, rollout_length=32, updates_per_call=16))
  return c


def cartpole_sebulba() -> config_dict.ConfigDict:
  """PPO on EnvPool's CartPole-v1, stepped on the CPU by Sebulba's actor threads.

  The agent section is cartpole_anakin's; only env, runtime and topology change. By
  default a single device acts and learns; with 8 devices 2 act and 6 learn.
  """
  c = _base()
  c.total_env_steps = 1_000_000
  c.env = config_dict.ConfigDict(dict(name="envpool", task_id="CartPole-v1"))
  # 12 envs per actor thread split evenly over 1, 2, 3, 4 or 6 learner devices.
  c.runtime = configs.sebulba_runtime(num_envs_per_actor=12, rollout_length=64)
  c.topology = configs.actor_learner_topology()
  return c


CONFIGS = {"cartpole_anakin": cartpole_anakin, "catch_anakin": catch_anakin,
           "cartpole_sebulba": cartpole_sebulba}


def get_config(name: str = "cartpole_anakin") -> config_dict.ConfigDict:
  if name not in CONFIGS:
    raise ValueError(f"Unknown PPO config '{name}'; choose one of {', '.join(CONFIGS)}.")
  return CONFIGS[name]()
