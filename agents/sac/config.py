"""SAC configs. Launch one with

  python -m podracer.launch --config=agents/sac/config.py:pendulum_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE`. Each of SAC's three optimizers has its
own section: `actor_optimizer`, `critic_optimizer`, `alpha_optimizer`.
"""

from ml_collections import config_dict

from podracer.config import presets


def _base(total_env_steps: int) -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps)
  c.agent = presets.section("sac", discount=0.99, tau=0.005, initial_alpha=1.0,
                            target_entropy=config_dict.placeholder(float))  # None: -|A|
  # Pendulum needs little capacity: 64 units learn as fast per step as the paper's 256
  # and run over ten times faster on a CPU.
  c.actor_network = presets.section("gaussian_policy", hidden_sizes=(64, 64),
                                    activation="relu", log_std_min=-5.0, log_std_max=2.0)
  c.critic_network = presets.section("twin_q", hidden_sizes=(64, 64), activation="relu")
  c.actor_optimizer = presets.plain_adam(3e-4)
  c.critic_optimizer = presets.plain_adam(1e-3)
  c.alpha_optimizer = presets.plain_adam(3e-4)
  # Uniform transition replay holding the whole run; the runtime sets the pace (one
  # update per 8 env steps).
  c.replay = presets.transition_replay(max_size=100_000, min_size=1_000)
  # What its records have (the default names PPO's losses).
  c.log.progress_metrics = ("critic_loss", "actor_loss", "alpha", "actor_entropy")
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


def pendulum_seed() -> config_dict.ConfigDict:
  """pendulum_sebulba under SEED: 2 worker processes of 8 environments."""
  return presets.seed(pendulum_sebulba(), num_local_workers=2, envs_per_worker=8)


def mujoco_sebulba() -> config_dict.ConfigDict:
  """SAC on EnvPool's HalfCheetah-v4 under Sebulba at CleanRL's sizes (256 x 256, 5K
  steps before learning), one update per env step."""
  c = _base(total_env_steps=300_000)
  c.actor_network.hidden_sizes = c.critic_network.hidden_sizes = (256, 256)
  c.replay.max_size, c.replay.min_size = 300_000, 5_000
  c = presets.sebulba(c, presets.envpool("HalfCheetah-v4"), num_envs_per_actor=1,
                      rollout_length=8)
  c.runtime.updates_per_batch = 8
  return c


def control_dm_sebulba() -> config_dict.ConfigDict:
  """SAC on the Control Suite's cartpole swingup from states (`dm_control`) at D4PG's
  `control_dm_sebulba` pace, to set them side by side: 256 x 256 networks, 2 actor
  threads of 8 environments, one update of 256 transitions per 32 env steps (8 learned
  transitions per env step), learning from the 4,000th transition; 200K env steps.
  (`mujoco_sebulba`'s one update per env step learns 32 times as much a step.)"""
  c = _base(total_env_steps=200_000)
  c.actor_network.hidden_sizes = c.critic_network.hidden_sizes = (256, 256)
  c.replay.max_size = 200_000
  c.replay.min_size = 4_000
  env = presets.section("dm_control", domain="cartpole", task="swingup")
  c = presets.sebulba(c, env, num_envs_per_actor=8, rollout_length=4)
  c.runtime.updates_per_batch = 1  # 32 env steps an actor's batch: one update.
  return c


get_config = presets.getter(
    "SAC", {"pendulum_anakin": pendulum_anakin, "pendulum_sebulba": pendulum_sebulba,
            "pendulum_seed": pendulum_seed, "mujoco_sebulba": mujoco_sebulba,
            "control_dm_sebulba": control_dm_sebulba, "brax_anakin": brax_anakin},
    default="pendulum_anakin")
