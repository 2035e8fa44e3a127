"""IMPALA configs. Launch one with

  python -m podracer.launch --config=agents/impala/config.py:cartpole_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE` (e.g. `--config.seed=1`).
"""

from ml_collections import config_dict


def _base() -> config_dict.ConfigDict:
  c = config_dict.ConfigDict()
  c.seed = 0
  c.total_env_steps = 1_000_000
  c.env = config_dict.ConfigDict(dict(name="cartpole"))
  c.agent = config_dict.ConfigDict(dict(name="impala", discount=0.99))
  c.network = config_dict.ConfigDict(dict(
      name="mlp_actor_critic", hidden_sizes=(64, 64), activation="tanh"))
  c.loss = config_dict.ConfigDict(dict(
      name="vtrace", baseline_coef=0.5, entropy_coef=0.01, clip_rho_threshold=1.0,
      clip_pg_rho_threshold=1.0, lambda_=1.0))
  c.optimizer = config_dict.ConfigDict(dict(
      name="rmsprop", learning_rate=7e-4, decay=0.99, eps=1e-5, max_grad_norm=0.5,
      anneal=False))
  c.topology = config_dict.ConfigDict(dict(
      name="replicate", num_devices=config_dict.placeholder(int)))
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """IMPALA on CartPole-v1 in JAX: seeds 0-5 pass a mean return of 450 by 600k steps."""
  c = _base()
  # Small batches and many updates learn CartPole faster and more stably than large ones.
  c.runtime = config_dict.ConfigDict(dict(
      name="anakin", num_envs_per_device=16, rollout_length=16, updates_per_call=128))
  c.total_env_steps = 30 * 16 * 16 * 128  # 983,040: whole calls, under 1M.
  return c


# Sebulba configs are added here as they become runnable.
CONFIGS = {"cartpole_anakin": cartpole_anakin}


def get_config(name: str = "cartpole_anakin") -> config_dict.ConfigDict:
  if name not in CONFIGS:
    raise ValueError(f"Unknown IMPALA config '{name}'; choose one of {', '.join(CONFIGS)}.")
  return CONFIGS[name]()
