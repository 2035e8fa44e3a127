"""D4PG configs. Launch one with

  python -m podracer.launch --config=agents/d4pg/config.py:pendulum_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE`: the critic's support is
`critic_loss.v_min`, `critic_loss.v_max` and `critic_loss.num_atoms` (the critic
network's `num_atoms` must match), its n-step targets `critic_loss.n_step`, the
per-actor noise `agent.exploration_noise` and `agent.exploration_alpha`.
"""

from ml_collections import config_dict

from podracer.config import presets


def _base(total_env_steps: int, hidden: int, v_min: float, v_max: float
          ) -> config_dict.ConfigDict:
  """Acme's D4PG settings (Barth-Maron et al. 2018): 51 atoms, 5-step targets, discount
  0.99, target networks copied every 100 updates, Gaussian exploration sigma 0.3 of the
  bounds' half-width, Adam 1e-4; prioritized replay (exponent 0.6, importance sampling
  0.6: the paper's prioritized variant), networks `hidden` x `hidden`."""
  c = presets.experiment(total_env_steps)
  c.agent = presets.section("d4pg", discount=0.99, target_update_period=100,
                            importance_sampling_exponent=0.6, priority_eta=0.9,
                            exploration_noise=0.3, exploration_alpha=0.0)
  c.actor_network = presets.section("deterministic_policy", hidden_sizes=(hidden, hidden),
                                    activation="relu")
  c.critic_network = presets.section("categorical_critic", hidden_sizes=(hidden, hidden),
                                     activation="relu", num_atoms=51)
  c.critic_loss = presets.section("categorical_td", v_min=v_min, v_max=v_max,
                                  num_atoms=51, n_step=5)
  c.actor_optimizer = presets.plain_adam(1e-4)
  c.critic_optimizer = presets.plain_adam(1e-4)
  return c


def pendulum_anakin() -> config_dict.ConfigDict:
  """D4PG on Pendulum in JAX, compiled end to end: 8 environments, one update per env
  step of 8 (each item one environment's step and the 5 completing its target), 256
  items a batch from a prioritized device replay of the whole run, learning from the
  1,000th; the support [-1000, 0] (Pendulum's rewards lie in [-16.3, 0]); Adam 3e-4
  (TD3's and SAC's here: 1e-4, Acme's, learns too slowly for 100K steps); 64-unit
  networks."""
  c = _base(total_env_steps=100_000, hidden=64, v_min=-1000.0, v_max=0.0)
  c.env = presets.section("pendulum", max_episode_steps=200)
  c.actor_optimizer.learning_rate = c.critic_optimizer.learning_rate = 3e-4
  c.replay = presets.replay("device", batch_size=256, max_size=100_000 // 8, min_size=125,
                            samples_per_insert=None)
  c.replay.priority_exponent = 0.6
  return presets.anakin(c, num_envs_per_device=8, rollout_length=1, updates_per_call=250)


def control_sebulba() -> config_dict.ConfigDict:
  """D4PG on the DeepMind Control Suite's cartpole swingup from states (EnvPool's
  `CartpoleSwingup-v1`; `--config.env.task_id` another EnvPool dm_control task) under
  Sebulba at Acme's settings (Adam 1e-4, 256 x 256 networks, the support [-150, 150]
  for rewards in [0, 1]): 2 actor threads of 8 environments, items of 4 steps and the 5
  completing their targets in the lane's replay (`host`; Reverb in its lane),
  prioritized, 64 items (256 transitions) an update and 8 items sampled per item
  inserted (8 learned transitions per env step), learning from the 1,000th item;
  200K env steps."""
  c = _base(total_env_steps=200_000, hidden=256, v_min=-150.0, v_max=150.0)
  c.replay = presets.replay(presets.lane_replay(), batch_size=64, max_size=50_000,
                            min_size=1_000, samples_per_insert=8.0)
  c.replay.priority_exponent = 0.6
  c = presets.sebulba(c, presets.envpool("CartpoleSwingup-v1"), num_envs_per_actor=8,
                      rollout_length=4)
  c.runtime.updates_per_batch = 1  # 32 env steps x 8 = 64 items of 4
  return c


def control_seed() -> config_dict.ConfigDict:
  """control_sebulba under SEED: 2 worker processes of 8 environments each."""
  return presets.seed(control_sebulba(), num_local_workers=2, envs_per_worker=8)


def control_dm_sebulba() -> config_dict.ConfigDict:
  """control_sebulba on the Control Suite's own package (`dm_control`, states: the
  observation dict flattened) instead of EnvPool's: `--config.env.domain`,
  `--config.env.task` any of the suite's."""
  c = control_sebulba()
  c.env = presets.section("dm_control", domain="cartpole", task="swingup")
  return c


def control_pixels_seed() -> config_dict.ConfigDict:
  """D4PG from pixels at TF-Replicator's settings (Buchlovsky et al. 2019, section 7):
  84 x 84 RGB from the task's camera 0, three frames stacked, a shared 9-layer ResNet
  giving a 64-wide embedding to actor and critic (`encoder_network`, trained by the
  critic's loss), a learner batch of 256 transitions (64 items of 4 steps and the 5
  completing their targets), the replay out of the learner's graph (the lane's host
  replay, Reverb in its lane), prioritized, and many worker processes that render: 4
  here of 4 environments each (the paper: 32 actors a learner replica, on more cores
  than this machine's 2); networks and Adam 1e-4 as D4PG's (Barth-Maron et al. 2018:
  the paper keeps its hyperparameters), actions repeated 4 times (Acme's and the
  pixel-control papers' usual for the suite; 250 agent steps an episode); 1M env steps.
  `--config.env.task=balance` for cartpole balance."""
  c = _base(total_env_steps=1_000_000, hidden=256, v_min=-150.0, v_max=150.0)
  c.encoder_network = presets.section("replicator_resnet", channels=(16, 32, 32),
                                      embedding_size=64, blocks=1, channels_first=False)
  c.replay = presets.replay(presets.lane_replay(), batch_size=64, max_size=20_000,
                            min_size=1_000, samples_per_insert=8.0)
  c.replay.priority_exponent = 0.6
  env = presets.section("dm_control", domain="cartpole", task="swingup", pixels=True,
                        camera=0, height=84, width=84, frame_stack=3, action_repeat=4)
  c = presets.sebulba(c, env, num_envs_per_actor=4, rollout_length=4)
  return presets.seed(c, num_local_workers=4, envs_per_worker=4, envs_per_batch=16)


get_config = presets.getter("D4PG", {"pendulum_anakin": pendulum_anakin,
                                     "control_sebulba": control_sebulba,
                                     "control_dm_sebulba": control_dm_sebulba,
                                     "control_seed": control_seed,
                                     "control_pixels_seed": control_pixels_seed},
                            default="pendulum_anakin")
