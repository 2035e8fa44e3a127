"""TD3 configs. Launch one with

  python -m podracer.launch --config=agents/td3/config.py:pendulum_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE`. The actor and the critic each have their
optimizer's section: `actor_optimizer`, `critic_optimizer`.
"""

from ml_collections import config_dict

from podracer.config import presets


def _base(total_env_steps: int, hidden: int) -> config_dict.ConfigDict:
  """CleanRL's `td3_continuous_action` settings (learning rates 3e-4, batch 256, tau
  0.005, exploration 0.1, target noise 0.2 clipped at 0.5, policy delay 2), the networks
  `hidden` x `hidden`, a uniform device replay of the whole run."""
  c = presets.experiment(total_env_steps)
  c.agent = presets.section("td3", discount=0.99, tau=0.005, policy_delay=2,
                            exploration_noise=0.1, target_noise=0.2, target_noise_clip=0.5)
  c.actor_network = presets.section("deterministic_policy", hidden_sizes=(hidden, hidden),
                                    activation="relu")
  c.critic_network = presets.section("twin_q", hidden_sizes=(hidden, hidden),
                                     activation="relu")
  c.actor_optimizer = presets.plain_adam(3e-4)
  c.critic_optimizer = presets.plain_adam(3e-4)
  c.replay = presets.transition_replay(max_size=total_env_steps, min_size=1_000)
  # What its records have (the default names PPO's losses).
  c.log.progress_metrics = ("critic_loss", "actor_loss", "critic_q_mean")
  return c


def pendulum_anakin() -> config_dict.ConfigDict:
  """TD3 on Pendulum in JAX, compiled end to end: CleanRL's pace (one environment, one
  update per env step, 100K steps) and 64-unit networks. At SAC's pace (8 environments,
  one update per 8 env steps: `--config.runtime.num_envs_per_device=8`) it learned less
  (docs/results/continuous.md)."""
  c = _base(total_env_steps=100_000, hidden=64)
  c.env = presets.section("pendulum", max_episode_steps=200)
  return presets.anakin(c, num_envs_per_device=1, rollout_length=1, updates_per_call=250)


def pendulum_sebulba() -> config_dict.ConfigDict:
  """TD3 on EnvPool's Pendulum-v1 under Sebulba, the replay on the learner device."""
  c = _base(total_env_steps=150_000, hidden=64)
  c = presets.sebulba(c, presets.envpool("Pendulum-v1"), num_envs_per_actor=8,
                      rollout_length=8)
  c.runtime.updates_per_batch = 8  # One update per 8 env steps, as under Anakin.
  return c


def pendulum_seed() -> config_dict.ConfigDict:
  """pendulum_sebulba under SEED: 2 worker processes of 8 environments."""
  return presets.seed(pendulum_sebulba(), num_local_workers=2, envs_per_worker=8)


def mujoco_sebulba() -> config_dict.ConfigDict:
  """TD3 on EnvPool's HalfCheetah-v4 under Sebulba at CleanRL's settings (256 x 256
  networks, 25K steps before learning), one update per env step."""
  c = _base(total_env_steps=300_000, hidden=256)
  c.replay.min_size = 25_000
  c = presets.sebulba(c, presets.envpool("HalfCheetah-v4"), num_envs_per_actor=1,
                      rollout_length=8)
  c.runtime.updates_per_batch = 8
  return c


def control_dm_sebulba() -> config_dict.ConfigDict:
  """TD3 on the Control Suite's cartpole swingup from states (`dm_control`) at D4PG's
  `control_dm_sebulba` pace, to set them side by side: 256 x 256 networks, 2 actor
  threads of 8 environments, one update of 256 transitions per 32 env steps (8 learned
  transitions per env step), learning from the 4,000th transition; 200K env steps.
  (`mujoco_sebulba`'s one update per env step learns 32 times as much a step.)"""
  c = _base(total_env_steps=200_000, hidden=256)
  c.replay.min_size = 4_000
  env = presets.section("dm_control", domain="cartpole", task="swingup")
  c = presets.sebulba(c, env, num_envs_per_actor=8, rollout_length=4)
  c.runtime.updates_per_batch = 1  # 32 env steps an actor's batch: one update.
  return c


get_config = presets.getter("TD3", {"pendulum_anakin": pendulum_anakin,
                                    "pendulum_sebulba": pendulum_sebulba,
                                    "pendulum_seed": pendulum_seed,
                                    "mujoco_sebulba": mujoco_sebulba,
                                    "control_dm_sebulba": control_dm_sebulba},
                            default="pendulum_anakin")
