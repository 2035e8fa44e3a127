"""R2D2 configs. Launch one with

  python -m podracer.launch --config=agents/r2d2/config.py:catch_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE`. The replay is one key:
`--config.replay.name=device|host|reverb` keeps sequences on the learner devices, in
host memory (each environment's timeline once), or in Reverb (its own install lane).
"""

from ml_collections import config_dict

from podracer.config import presets


def _base(total_env_steps: int) -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps)
  c.agent = presets.section(
      "r2d2", discount=0.99, n_step=3, burn_in=4, target_update_period=100,
      importance_sampling_exponent=0.6, priority_eta=0.9, epsilon_base=0.4,
      epsilon_alpha=7.0, epsilon_anneal_steps=0, value_rescaling_eps=1e-3)
  c.network = presets.section("recurrent_q", torso="mlp", hidden_sizes=(64,),
                              activation="relu", lstm_size=64, head_hidden_sizes=(64,))
  c.optimizer = presets.section("adam", learning_rate=1e-3, eps=1e-3, max_grad_norm=40.0,
                                anneal=False)
  return c


def catch_anakin() -> config_dict.ConfigDict:
  """R2D2 on bsuite's Catch in JAX, replay on the devices inside the compiled program."""
  c = _base(total_env_steps=300_000)
  c.env = presets.section("catch", rows=10, columns=5)
  c.agent.burn_in = 2
  # The reported return is the actors' own, exploration included: Catch needs little.
  c.agent.epsilon_base = 0.1
  # 32 envs: Ape-X's epsilons leave most of them nearly greedy, so the mean return
  # reflects what the agent learned. Each update inserts 32 sequences and samples 256:
  # 128 (4 per insert) learned late, and a target copy every 10, 25 or 400 updates held
  # less (docs/results/learning.md, "From the configs' docstrings").
  c.replay = presets.replay("device", batch_size=256, max_size=8_000, min_size=512,
                            samples_per_insert=8.0)
  return presets.anakin(c, num_envs_per_device=32, rollout_length=8, updates_per_call=16)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """R2D2 on EnvPool's CartPole-v1 under Sebulba: actors write sequences to Reverb (an
  embedded server), the learner samples them. `--config.replay.name=device` keeps the
  replay on the learner devices instead (the default lane, which has no Reverb)."""
  c = _base(total_env_steps=500_000)
  # Values must propagate over a hundred steps: 5-step targets and a target network
  # copied every 50 updates get there in time. Discount 0.99, not R2D2's 0.997: a
  # horizon of 333 steps needs more target periods than 500k env steps give (the
  # values were still rising at the end and the greedy policy moved with them).
  c.agent.update(dict(n_step=5, target_update_period=50, discount=0.99))
  # A few dozen environments explore too little with Ape-X's fixed epsilons alone (the
  # greedy policy starts out pushing one way): each starts at random and anneals over
  # its first 2000 steps (48k env steps for 2 threads x 12) to Ape-X's epsilons. Their
  # base is low because the reported return is the actors' own: the mean is over the
  # episodes that end, and an exploring environment ends many short ones (two at 0.05
  # among 24 greedy ones at 500 hold the mean near 300).
  c.agent.update(dict(epsilon_base=0.01, epsilon_anneal_steps=2000))
  # One update of 64 sequences per trajectory of 12 (2 threads x 12 environments x 10
  # steps per turn): the device replay's ratio (`updates_per_batch=1`), and the host
  # replays' (samples per insert 64 / 12); 4 (0.75 updates per trajectory) held less.
  # A replay of 20,000 sequences (200K env steps, 40 % of the run): with 5,000 (50K env
  # steps) it held little but the last, mostly long episodes, and runs that had reached
  # 500 slid back (a forgetting of failure states, we think). The figures:
  # docs/results/learning.md ("From the configs' docstrings").
  c.replay = presets.replay("reverb", batch_size=64, max_size=20_000, min_size=256,
                            samples_per_insert=64 / 12)
  # Initialized as flax initializes (DQN's finding, docs/results/dqn.md): with the
  # orthogonal init a run fell back after reaching 500 (docs/results/learning.md).
  c.network.w_init = "lecun_normal"
  # Acting and learning take turns (each trajectory is acted with the parameters of the
  # updates before it): with the device or the host replay the run is the same every time.
  c = presets.sebulba(c, presets.envpool("CartPole-v1"), num_envs_per_actor=12,
                      rollout_length=10)
  c.runtime.max_policy_lag = 0
  return c


def cartpole_seed() -> config_dict.ConfigDict:
  """cartpole_sebulba under SEED: 4 worker processes x 16 environments, each worker's
  sequences inserted into the replay as they are cut; only the runtime section differs
  (`--config.replay.name=host` in the default lane, which has no Reverb). The learner
  samples while the workers step (SEED's server takes no turns with a host replay)."""
  c = presets.seed(cartpole_sebulba())
  c.runtime.max_policy_lag = None
  return c


def atari_sebulba() -> config_dict.ConfigDict:
  """R2D2 on Atari (EnvPool) with the paper's hyperparameters (Kapturowski et al. 2019,
  table 2): sequences of 80 = 40 burn-in + 40 learned (period 40), n = 5, discount 0.997,
  Adam 1e-4 (eps 1e-3), batch 64, priority exponent 0.9, importance sampling 0.6, eta 0.9,
  target every 2500 updates, value rescaling 1e-3, replay of 4M observations, Ape-X
  epsilons (0.4, 7), LSTM 512 after the Nature torso, dueling head 512; no reward
  clipping and no life loss as episode end. The replay is `host` (host memory: about
  7.7 KB per env step, 31 GB at capacity) in the default lane, Reverb in its own."""
  c = _base(total_env_steps=200_000_000)
  c.agent.update(dict(discount=0.997, n_step=5, burn_in=40, target_update_period=2500))
  c.network = presets.section("recurrent_q", torso="nature", hidden_sizes=(512,),
                              activation="relu", lstm_size=512, head_hidden_sizes=(512,),
                              channels_first=True)
  c.optimizer = presets.section("adam", learning_rate=1e-4, eps=1e-3, max_grad_norm=40.0,
                                anneal=False)
  # 4M observations in sequences that advance 40 steps each.
  c.replay = presets.replay(presets.lane_replay(), batch_size=64, max_size=4_000_000 // 40,
                            min_size=6_250, samples_per_insert=0.5)
  return presets.atari_sebulba(c, "Pong-v5", num_envs_per_actor=32, rollout_length=40,
                               episodic_life=False, reward_clip=False)


CONFIGS = {"catch_anakin": catch_anakin, "cartpole_sebulba": cartpole_sebulba,
           "cartpole_seed": cartpole_seed, "atari_sebulba": atari_sebulba}


get_config = presets.getter("R2D2", CONFIGS, default="catch_anakin")
