"""MuZero configs. Launch one with

  python -m podracer.launch --config=agents/muzero/config.py:catch_anakin --workdir=runs/x

The replay ratio: under Anakin each update takes `agent.sgd_steps` gradient steps, each on
a fresh sample of `replay.batch_size` items; under Sebulba with a device replay each
actor trajectory is observed once and then learned from `runtime.updates_per_batch` times
(the paper's batch split); with a host replay the ratio is `replay.samples_per_insert`.
"""

from ml_collections import config_dict

from podracer.config import presets


def _base(total_env_steps: int, support: float, num_bins: int) -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps)
  c.agent = presets.section(
      "muzero", search="gumbel", num_simulations=16, max_num_considered_actions=16,
      num_unroll_steps=5, td_steps=5, discount=0.99, value_bootstrap="search",
      target_update_period=100, support_min=-support, support_max=support,
      num_bins=num_bins, value_coef=0.25, sgd_steps=1, importance_sampling_exponent=1.0,
      dirichlet_alpha=0.25, dirichlet_fraction=0.25, value_rescaling_eps=1e-3)
  c.network = presets.section("muzero_mlp", num_bins=num_bins, embedding_size=64,
                              hidden_sizes=(64,), activation="relu")
  c.optimizer = presets.section("adam", learning_rate=1e-3, eps=1e-8, max_grad_norm=5.0,
                                anneal=False)
  c.log.progress_metrics = ("search_value", "loss", "value_loss", "policy_loss")
  return c


def catch_anakin() -> config_dict.ConfigDict:
  """MuZero on bsuite's Catch in JAX: 8 simulations, the replay on the devices."""
  c = _base(total_env_steps=200_000, support=1.0, num_bins=21)
  c.env = presets.section("catch", rows=10, columns=5)
  c.agent.update(dict(num_simulations=8, max_num_considered_actions=3, sgd_steps=8))
  c.replay = presets.replay("device", batch_size=128, max_size=2_000, min_size=256,
                            samples_per_insert=None)
  c.replay.priority_exponent = 1.0
  return presets.anakin(c, num_envs_per_device=16, rollout_length=16, updates_per_call=16)


def cartpole_anakin() -> config_dict.ConfigDict:
  """MuZero on CartPole-v1 in JAX: discount 0.997, values up to about 260 (h: 15.4) on a
  support of [-20, 20] in h's units, 16 simulations, the replay on the devices.

  The search is `muzero` (visit counts as the policy target): CartPole's two actions differ
  by little in value, and Gumbel MuZero's min-max rescaled Q-values made near one-hot
  targets of that noise, which learned less than visit counts.

  8 gradient steps of 256 per update of 16 x 32 env steps (4 samples per env step, as
  `cartpole_sebulba`); 32 environments (2 samples per env step), bootstrapping from a
  target network or 10-step targets did worse; the learning rate anneals to 0 over the
  run. The figures: docs/results/learning.md ("From the configs' docstrings")."""
  c = _base(total_env_steps=500_000, support=20.0, num_bins=81)
  c.env = presets.section("cartpole")
  c.agent.update(dict(search="muzero", discount=0.997, num_simulations=16,
                      max_num_considered_actions=2, sgd_steps=8))
  c.replay = presets.replay("device", batch_size=256, max_size=2_000, min_size=256,
                            samples_per_insert=None)
  c.replay.priority_exponent = 1.0
  c.optimizer.anneal = True
  return presets.anakin(c, num_envs_per_device=16, rollout_length=32, updates_per_call=8)


def connect_four_anakin() -> config_dict.ConfigDict:
  """MuZero in self-play on Pgx's connect four (`pip install -e ".[pgx]"`): the agent
  plays both seats (`env.opponent=self`; discount -1 where the turn passes, so the value
  targets and the search's backups are negamax), illegal moves masked at the root, each
  game opened by 0-12 random moves (without them self-play repeats its own line and
  loses more often to a random player). Every `eval_interval` env steps it plays
  `eval_episodes` games against `env.eval_opponent` (random, or mcts: pure MCTS with
  random playouts) from the empty board, a seat drawn per game; records hold
  `eval_return` and `eval_win_rate`. Values lie in [-1, 1]: 21 bins over [-1, 1],
  discount 1 (a game's result), 10-step targets from the search's values; Gumbel MuZero
  with 16 simulations over all 7 moves; 16 gradient steps of 128 per 512 env steps, the
  learning rate annealed to 0. Its wins against random: docs/results/learning.md
  ("From the configs' docstrings"). `env.env_id=tic_tac_toe` plays tic-tac-toe."""
  c = _base(total_env_steps=1_000_000, support=1.0, num_bins=21)
  c.env = presets.section("pgx", env_id="connect_four", opponent="self",
                          eval_opponent="random", opponent_simulations=64, opening_moves=12)
  c.agent.update(dict(discount=1.0, td_steps=10, num_simulations=16,
                      max_num_considered_actions=7, sgd_steps=16))
  c.network.update(dict(embedding_size=128, hidden_sizes=(128,)))
  c.optimizer.anneal = True
  c.replay = presets.replay("device", batch_size=128, max_size=4_000, min_size=256,
                            samples_per_insert=None)
  c.replay.priority_exponent = 1.0
  c.eval_interval = 50_000
  c.eval_episodes = 128
  c.log.progress_metrics = ("eval_win_rate", "search_value", "loss", "policy_loss")
  return presets.anakin(c, num_envs_per_device=32, rollout_length=16, updates_per_call=8)


def connect_four_alphazero() -> config_dict.ConfigDict:
  """connect_four_anakin with AlphaZero's search (`agent.name=alphazero`): the same
  network, replay, self-play and evaluation, but the search steps the game itself
  (`env.simulator=True`) with the network's policy and value at each node, as Pgx's own
  AlphaZero example does; so there is no model to learn and no unroll. Held 0.99 wins
  against random over the last 20 % (docs/agents.md)."""
  c = connect_four_anakin()
  c.agent.name = "alphazero"
  del c.agent["num_unroll_steps"]
  c.env.simulator = True
  return c


def _atari_network(c: config_dict.ConfigDict, channels=(16, 32, 32)) -> None:
  """The Atari model (`muzero_resnet` on the IMPALA torso) and MuZero's Atari optimizer:
  Adam with the paper's weight-decay-free learning rate 5e-4 (no annealing here)."""
  c.network = presets.section("muzero_resnet", num_bins=c.agent.num_bins, torso="impala",
                              channels_first=True, channels=channels, num_blocks=1,
                              head_hidden_size=256)
  c.optimizer = presets.section("adam", learning_rate=5e-4, eps=1e-8, max_grad_norm=5.0,
                                anneal=False)


def pixel_catch_anakin() -> config_dict.ConfigDict:
  """MuZero's Atari model and optimizer (`_atari_network`) on Catch seen as uint8 frame
  stacks [4, 20, 10]: the CPU's pixel learning test.

  8 gradient steps of 64 per 256 env steps (2 samples per env step); 0.5 samples per env
  step (64 environments x 8 steps, 4 gradient steps) did not learn. The figures:
  docs/results/learning.md ("From the configs' docstrings")."""
  c = _base(total_env_steps=150_000, support=1.0, num_bins=21)
  c.env = presets.pixel_catch()
  c.agent.update(dict(num_simulations=8, max_num_considered_actions=3, sgd_steps=8))
  _atari_network(c)
  c.replay = presets.replay("device", batch_size=64, max_size=4_000, min_size=256,
                            samples_per_insert=None)
  c.replay.priority_exponent = 1.0
  return presets.anakin(c, num_envs_per_device=16, rollout_length=16, updates_per_call=8)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """MuZero on EnvPool's CartPole-v1 under Sebulba: actors search on the actor device,
  the learner keeps a device replay and takes `runtime.updates_per_batch` updates per
  actor batch (the paper's batch split).

  8 updates of 256 per batch of 16 x 32 env steps (4 samples per env step). One actor
  thread acts with the parameters of the last update (`max_policy_lag=0`: acting and
  learning take turns, so a second thread would only wait), which makes the run the same
  for a seed under the same XLA flags. Discount 0.99 (values up to about 100), not
  `cartpole_anakin`'s 0.997, which learned far less here (docs/results/learning.md,
  "From the configs' docstrings")."""
  c = cartpole_anakin()
  c.agent.update(dict(sgd_steps=1, discount=0.99))
  c.replay.batch_size = 256
  c = presets.sebulba(c, presets.envpool("CartPole-v1"), num_envs_per_actor=16,
                      rollout_length=32)
  c.runtime.actor_threads_per_device = 1
  c.runtime.updates_per_batch = 8
  c.runtime.max_policy_lag = 0
  return c


def atari_sebulba() -> config_dict.ConfigDict:
  """MuZero on Atari (EnvPool) with the paper's settings scaled to one GPU
  (Schrittwieser et al. 2020, appendix; the Podracer paper's Sebulba MuZero, no
  Reanalyse): EnvPool's [4, 84, 84] stacks rather than 32 frames and actions at 96x96;
  the IMPALA ResNet (16, 32, 32) as representation and one residual dynamics block
  rather than 16 blocks of 256 channels; a support of 601 bins over [-300, 300] in h's
  units; 16 simulations (the paper: 50) with Gumbel search; K = 5 unroll steps and
  10-step targets bootstrapped from the stored search values; discount 0.997; no reward
  clipping; batch 256 (the paper: 1024); priorities with exponent 1 and importance
  sampling 1; a replay of 1M steps in sequences of 40 new steps (25,000 items) from
  `presets.lane_replay()` (`host` here, Reverb in its lane) sampled 0.5 items per inserted item."""
  c = _base(total_env_steps=200_000_000, support=300.0, num_bins=601)
  c.agent.update(dict(discount=0.997, num_simulations=16, td_steps=10, num_unroll_steps=5,
                      max_num_considered_actions=16))
  _atari_network(c)
  c.replay = presets.replay(presets.lane_replay(), batch_size=256, max_size=1_000_000 // 40,
                            min_size=1_000, samples_per_insert=0.5)
  c.replay.priority_exponent = 1.0
  return presets.atari_sebulba(c, "Pong-v5", num_envs_per_actor=32, rollout_length=40,
                               episodic_life=False, reward_clip=False)


CONFIGS = {"catch_anakin": catch_anakin, "cartpole_anakin": cartpole_anakin,
           "pixel_catch_anakin": pixel_catch_anakin,
           "connect_four_anakin": connect_four_anakin,
           "connect_four_alphazero": connect_four_alphazero, "cartpole_sebulba": cartpole_sebulba,
           "atari_sebulba": atari_sebulba}

get_config = presets.getter("MuZero", CONFIGS, default="catch_anakin")
