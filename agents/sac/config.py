"""SAC configs. Launch one with

  python -m podracer.launch --config=agents/sac/config.py:pendulum_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE`. Each of SAC's three optimizers has its
own section: `actor_optimizer`, `critic_optimizer`, `alpha_optimizer`.
"""

from ml_collections import config_dict

from podracer.config import presets


def _adam(learning_rate: float) -> config_dict.ConfigDict:
  return presets.section("adam", learning_rate=learning_rate, eps=1e-8,
                         max_grad_norm=config_dict.placeholder(float), anneal=False)


def _base(total_env_steps: int) -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps)
  c.agent = presets.section("sac", discount=0.99, tau=0.005, initial_alpha=1.0,
                            target_entropy=config_dict.placeholder(float))  # None: -|A|
  # Pendulum needs little capacity: 64 units learn as fast per step as the paper's 256
  # and run over ten times faster on a CPU.
  c.actor_network = presets.section("gaussian_policy", hidden_sizes=(64, 64),
                                    activation="relu", log_std_min=-5.0, log_std_max=2.0)
  c.critic_network = presets.section("twin_q", hidden_sizes=(64, 64), activation="relu")
  c.actor_optimizer = _adam(3e-4)
  c.critic_optimizer = _adam(1e-3)
  c.alpha_optimizer = _adam(3e-4)
  # Uniform transition replay (priority exponent 0) holding the whole run; the runtime
  # sets the pace (one update per 8 env steps), so no samples-per-insert limit.
  c.replay = presets.replay("device", batch_size=256, max_size=100_000, min_size=1_000,
                            samples_per_insert=None)
  c.replay.priority_exponent = 0.0
  return c


def pendulum_anakin() -> config_dict.ConfigDict:
  """SAC on Pendulum in JAX (Gymnasium's Pendulum-v1 dynamics), compiled end to end."""
  c = _base(total_env_steps=100_000)
  c.env = presets.section("pendulum", max_episode_steps=200)
  # 8 envs x 1 step per update: one gradient step per 8 env steps.
  return presets.anakin(c, num_envs_per_device=8, rollout_length=1, updates_per_call=250)


def brax_anakin() -> config_dict.ConfigDict:
  """SAC on a Brax task (`env.env_name`, default `inverted_pendulum`: reward 1 per step
  while the pole stays up, 1,000 steps at most), its physics compiled into the program
  with the agent; `env.backend` picks Brax's pipeline (`spring` is the fastest on a CPU)."""
  c = _base(total_env_steps=150_000)
  c.env = presets.section("brax", env_name="inverted_pendulum", backend="generalized",
                          episode_length=1000)
  return presets.anakin(c, num_envs_per_device=8, rollout_length=1, updates_per_call=250)


def pendulum_sebulba() -> config_dict.ConfigDict:
  """SAC on EnvPool's Pendulum-v1 under Sebulba, replay on the learner devices."""
  c = _base(total_env_steps=150_000)
  c = presets.sebulba(c, presets.envpool("Pendulum-v1"), num_envs_per_actor=8,
                      rollout_length=8)
  c.runtime.updates_per_batch = 8  # one gradient step per 8 env steps, as under Anakin
  return c


get_config = presets.getter(
    "SAC", {"pendulum_anakin": pendulum_anakin, "pendulum_sebulba": pendulum_sebulba,
            "brax_anakin": brax_anakin},
    default="pendulum_anakin")
