"""SAC configs. Launch one with

  python -m podracer.launch --config=agents/sac/config.py:pendulum_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE`. Each of SAC's three optimizers has its
own section: `actor_optimizer`, `critic_optimizer`, `alpha_optimizer`.
"""

from ml_collections import config_dict

from podracer import configs


def _adam(learning_rate: float) -> config_dict.ConfigDict:
  return config_dict.ConfigDict(dict(name="adam", learning_rate=learning_rate, eps=1e-8,
                                     max_grad_norm=config_dict.placeholder(float),
                                     anneal=False))


def _base() -> config_dict.ConfigDict:
  c = config_dict.ConfigDict()
  c.seed = 0
  c.stop_at_return = config_dict.placeholder(float)  # Ends the run early once reached.
  c.agent = config_dict.ConfigDict(dict(
      name="sac", discount=0.99, tau=0.005, initial_alpha=1.0,
      target_entropy=config_dict.placeholder(float)))  # None: -(action dimensions)
  # Pendulum needs little capacity: 64 units learn as fast per step as the paper's 256
  # and run over ten times faster on a CPU.
  c.actor_network = config_dict.ConfigDict(dict(
      name="gaussian_policy", hidden_sizes=(64, 64), activation="relu",
      log_std_min=-5.0, log_std_max=2.0))
  c.critic_network = config_dict.ConfigDict(dict(
      name="twin_q", hidden_sizes=(64, 64), activation="relu"))
  c.actor_optimizer = _adam(3e-4)
  c.critic_optimizer = _adam(1e-3)
  c.alpha_optimizer = _adam(3e-4)
  # Uniform transition replay (priority exponent 0) holding the whole run.
  c.replay = config_dict.ConfigDict(dict(
      name="device", batch_size=256, max_size=100_000, min_size=1_000,
      priority_exponent=0.0, initial_priority=1.0,
      samples_per_insert=config_dict.placeholder(float),
      error_buffer=config_dict.placeholder(float), address=config_dict.placeholder(str)))
  return c


def pendulum_anakin() -> config_dict.ConfigDict:
  """SAC on Pendulum in JAX (Gymnasium's Pendulum-v1 dynamics), compiled end to end."""
  c = _base()
  c.total_env_steps = 100_000
  c.env = config_dict.ConfigDict(dict(name="pendulum", max_episode_steps=200))
  # 8 envs x 1 step per update: one gradient step per 8 env steps.
  c.runtime = config_dict.ConfigDict(dict(
      name="anakin", num_envs_per_device=8, rollout_length=1, updates_per_call=250))
  c.topology = configs.replicate_topology()
  return c


def pendulum_sebulba() -> config_dict.ConfigDict:
  """SAC on EnvPool's Pendulum-v1 under Sebulba, replay on the learner devices."""
  c = _base()
  c.total_env_steps = 150_000
  c.env = config_dict.ConfigDict(dict(name="envpool", task_id="Pendulum-v1"))
  c.runtime = configs.sebulba_runtime(num_envs_per_actor=8, rollout_length=8)
  c.runtime.updates_per_batch = 8
  c.topology = configs.actor_learner_topology()
  return c


CONFIGS = {"pendulum_anakin": pendulum_anakin, "pendulum_sebulba": pendulum_sebulba}


def get_config(name: str = "pendulum_anakin") -> config_dict.ConfigDict:
  if name not in CONFIGS:
    raise ValueError(f"Unknown SAC config '{name}'; choose one of {', '.join(CONFIGS)}.")
  return CONFIGS[name]()
