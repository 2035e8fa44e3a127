"""DQN configs. Launch one with

  python -m podracer.launch --config=agents/dqn/config.py:cartpole_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE`: `--config.loss.double=False` is DQN's
max target, `--config.loss.n_step=1` one-step returns, `--config.network.dueling=True` a
dueling head, `--config.replay.priority_exponent=0` uniform replay, and
`--config.replay.name=device|host|reverb` where the replay lives.
"""

from ml_collections import config_dict

from podracer.config import presets


def _base(total_env_steps: int) -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps)
  c.agent = presets.section(
      "dqn", discount=0.99, target_update_period=100, importance_sampling_exponent=0.6,
      priority_eta=0.9, epsilon=0.05, epsilon_alpha=0.0, epsilon_anneal_steps=0,
      eval_epsilon=0.0)
  c.loss = presets.section("q_learning", n_step=3, double=True, huber_delta=0.0,
                           value_rescaling_eps=config_dict.placeholder(float))
  c.network = presets.section("q_network", torso="mlp", hidden_sizes=(64, 64),
                              activation="relu", dueling=False, head_hidden_sizes=(),
                              channels_first=True)
  c.optimizer = presets.section("adam", learning_rate=1e-3, eps=1e-5, max_grad_norm=10.0,
                                anneal=False)
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """DQN on CartPole-v1 in JAX, replay on the devices: PureJaxRL's CartPole DQN (after
  CleanRL's) with double Q-learning targets, learning from the 256th transition.

  10 environments, one update per 10 env steps of 128 one-step transitions sampled
  uniformly (12.8 learned per env step) from the last 10,000; the target copied every 50
  updates (500 env steps); epsilon from 1 to 0.05 over each environment's first 25,000
  steps (250K env steps); Adam 2.5e-4 unclipped; a 120-84 relu network initialized as
  flax initializes PureJaxRL's (`w_init="lecun_normal"`: under podracer's orthogonal
  default more seeds fell back). 0.7.0's config (16 x 4 steps per update, 2 learned per
  env step, 3-step targets, prioritized, a target copy every 12,800 env steps) held less:
  docs/results/dqn.md measures each difference and says which lost what.
  """
  c = _base(total_env_steps=500_000)
  c.env = presets.section("cartpole")
  c.agent.update(dict(target_update_period=50, epsilon_anneal_steps=25_000,
                      importance_sampling_exponent=0.0))
  c.loss.n_step = 1
  c.network.hidden_sizes = (120, 84)
  c.network.w_init = "lecun_normal"
  c.optimizer = presets.section("adam", learning_rate=2.5e-4, eps=1e-8,
                                max_grad_norm=config_dict.placeholder(float), anneal=False)
  c.replay = presets.replay("device", batch_size=128, max_size=10_000, min_size=256,
                            samples_per_insert=12.8)
  c.replay.priority_exponent = 0.0
  return presets.anakin(c, num_envs_per_device=10, rollout_length=1, updates_per_call=500)


def wide_anakin() -> config_dict.ConfigDict:
  """cartpole_anakin with a Q-network larger than one device's budget (issue 78; docs/runs.md,
  "Larger networks than one device"): 16 MiB a device named here, a stand-in for an
  accelerator's memory at a CPU's scale. Two 1536-wide layers hold 2.4M parameters, 38 MB
  with the target network and Adam's two moments; each parameter of the replica's is
  split over 4 devices (`fsdp`), its target copy and moments with it: 9.5 MB a device.
  Needs 8 devices, data 2 x model 4 (on a CPU:
  XLA_FLAGS=--xla_force_host_platform_device_count=8)."""
  c = cartpole_anakin()
  c.network.hidden_sizes = (1536, 1536)
  return presets.model_parallel(c, model=4, sharding="fsdp")

def c51_cartpole_anakin() -> config_dict.ConfigDict:
  """C51 (Bellemare et al. 2017) on CartPole-v1 in JAX: `cartpole_anakin` (its
  environments, replay, exploration, target copies, optimizer, network sizes and init)
  with the `categorical_q_learning` loss (51 atoms on [0, 100], CartPole's discounted
  returns at 0.99 lie within; double Q-learning's bootstrap action, one-step targets)
  and the `categorical_q_network` network (logits [B, 2, 51]). Only the loss and the
  network's head differ from DQN's, so the two compare at the same settings
  (docs/agents.md, "C51")."""
  c = cartpole_anakin()
  c.loss = presets.section("categorical_q_learning", n_step=1, double=True, v_min=0.0,
                           v_max=100.0, num_atoms=51)
  c.network = presets.section("categorical_q_network", torso="mlp", hidden_sizes=(120, 84),
                              activation="relu", num_atoms=51, channels_first=True,
                              w_init="lecun_normal")
  return c


def minatar_anakin() -> config_dict.ConfigDict:
  """Double DQN on a MinAtar game in JAX (gymnax; the default lane), the MinAtar paper's
  DQN (Young & Tian 2019) on Anakin: its torso (a 3x3 conv of 16 channels, a dense 128)
  on the [10, 10, C] frame, discount 0.99, a replay of 100k transitions learning from
  5k, uniform sampling, a target copy every 1,000 updates, epsilon annealed from 1 to
  0.1 over the first 100k env steps (6,250 per environment of 16), Adam at the paper's
  RMSProp rate 2.5e-4, 5M env steps; 3-step double targets. 16 environments x 4 steps
  per update, 32 items of 4 transitions each (2 learned transitions per env step). The
  game is `--config.env.env_id` (SpaceInvaders-, Breakout-, Asterix-, Freeway-MinAtar)."""
  c = _base(total_env_steps=5_000_000)
  c.env = presets.section("gymnax", env_id="SpaceInvaders-MinAtar",
                          env_kwargs=config_dict.placeholder(dict),
                          env_params=config_dict.placeholder(dict))
  c.agent.update(dict(target_update_period=1_000, epsilon=0.1, epsilon_anneal_steps=6_250))
  c.network = presets.section("q_network", torso="minatar", hidden_sizes=(),
                              activation="relu", dueling=False, head_hidden_sizes=(),
                              channels_first=False)
  c.optimizer.learning_rate = 2.5e-4
  c.replay = presets.replay("device", batch_size=32, max_size=25_000, min_size=1_250,
                            samples_per_insert=2.0)
  c.replay.priority_exponent = 0.0
  return presets.anakin(c, num_envs_per_device=16, rollout_length=4, updates_per_call=64)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """Double DQN on EnvPool's CartPole-v1 under Sebulba with `cartpole_anakin`'s settings
  (PureJaxRL's, double Q): actors write items of 4 transitions to the `host` replay
  (Reverb in the Reverb lane; `--config.replay.name=device` keeps it on the learner
  devices), uniform, 2,500 items (10,000 transitions) learning from 64 (256); 32 items
  (128 transitions) per update and 12.8 sampled per item inserted (12.8 learned per env
  step: an update per 10 env steps), the target copied every 50 updates (500 env steps),
  one-step targets, epsilon from 1 to 0.05 over each environment's first 12,500 steps
  (250K env steps over 2 actor threads x 10), Adam 2.5e-4, a 120-84 network initialized
  as flax does. Each actor batch of 40 env steps is 4 updates (the device replay's
  `updates_per_batch`; the host and Reverb replays' rate limiter gives the same). What
  it held with each replay and init: docs/results/dqn.md ("Under Sebulba")."""
  c = _base(total_env_steps=500_000)
  c.env = presets.section("cartpole")
  c.agent.update(dict(target_update_period=50, epsilon_anneal_steps=12_500,
                      importance_sampling_exponent=0.0))
  c.loss.n_step = 1
  c.network.hidden_sizes = (120, 84)
  c.network.w_init = "lecun_normal"
  c.optimizer.update(dict(learning_rate=2.5e-4, eps=1e-8))
  c.replay = presets.replay(presets.lane_replay(), batch_size=32, max_size=2_500, min_size=64,
                            samples_per_insert=12.8)
  c.replay.priority_exponent = 0.0
  c = presets.sebulba(c, presets.envpool("CartPole-v1"), num_envs_per_actor=10,
                      rollout_length=4)
  c.runtime.updates_per_batch = 4  # 40 env steps x 12.8 = 4 x 128 (the device replay's)
  return c


def atari_sebulba() -> config_dict.ConfigDict:
  """The Nature DQN (Mnih et al. 2015) on one GPU, with double Q-learning targets:
  the Nature torso on EnvPool's [4, 84, 84] stacks (rewards clipped, a lost life ends the
  learning episode), discount 0.99, the Huber loss, 1-step returns (`loss.n_step=3` is
  Rainbow's), Adam 6.25e-5 with eps 1.5e-4 (Dopamine's and Rainbow's for the paper's
  RMSProp), 32 transitions per update and 8 learned per env step (one update every 4
  actions), a target copy every 10,000 updates, a replay of 1M transitions learning from
  50k, uniform sampling, and epsilon annealed from 1 to 0.01 over the first 1M frames
  (250k env steps: 7,813 per environment of 32); 51.2M frames (12.8M env steps, 100k
  learner batches of 128; the paper ran 50M). An item is
  4 transitions, so a batch of 32 transitions is 8 items and the replay holds 250k."""
  c = _base(total_env_steps=12_800_000)
  c.agent.update(dict(target_update_period=10_000, epsilon=0.01,
                      epsilon_anneal_steps=7_813, eval_epsilon=0.001))
  c.loss.update(dict(n_step=1, huber_delta=1.0))
  c.network = presets.section("q_network", torso="nature", hidden_sizes=(),
                              activation="relu", dueling=False, head_hidden_sizes=(),
                              channels_first=True)
  c.optimizer = presets.section("adam", learning_rate=6.25e-5, eps=1.5e-4,
                                max_grad_norm=10.0, anneal=False)
  # Each insert is one item (4 env steps); 8 items sampled per insert: 8 transitions
  # learned per env step.
  c.replay = presets.replay(presets.lane_replay(), batch_size=8, max_size=250_000,
                            min_size=12_500, samples_per_insert=8.0)
  c.replay.priority_exponent = 0.0
  return presets.atari_sebulba(c, "Pong-v5", num_envs_per_actor=32, rollout_length=4)


CONFIGS = {"cartpole_anakin": cartpole_anakin, "cartpole_sebulba": cartpole_sebulba,
           "c51_cartpole_anakin": c51_cartpole_anakin,
           "atari_sebulba": atari_sebulba, "minatar_anakin": minatar_anakin,
           "wide_anakin": wide_anakin}


get_config = presets.getter("DQN", CONFIGS, default="cartpole_anakin")
