"""PQN configs, each after purejaxql's (mttga/purejaxql, purejaxql/config/alg/). Launch one
with

  python -m podracer.launch --config=agents/pqn/config.py:cartpole_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE` (`--config.agent.lam=0.9`,
`--config.num_runs=16` for 16 seeds in one program).
"""

from ml_collections import config_dict

from podracer.config import presets


def _base(total_env_steps: int, lam: float, eps_finish: float, eps_decay: float,
          num_epochs: int, num_minibatches: int, learning_rate: float,
          anneal: bool) -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps)
  c.agent = presets.section("pqn", discount=0.99, lam=lam, eps_start=1.0,
                            eps_finish=eps_finish, eps_decay=eps_decay,
                            num_epochs=num_epochs, num_minibatches=num_minibatches,
                            reward_scale=1.0, eval_epsilon=0.0, acting_q_targets=True)
  c.loss = presets.section("q_lambda", huber_delta=0.0)
  c.network = presets.section("q_network", torso="mlp", hidden_sizes=(256, 256),
                              activation="relu", dueling=False, head_hidden_sizes=(),
                              channels_first=True, layer_norm=True)
  c.optimizer = presets.section("radam", learning_rate=learning_rate, eps=1e-8,
                                max_grad_norm=10.0, anneal=anneal)
  c.log.progress_metrics = ("loss", "q_mean", "epsilon")
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """PQN on CartPole-v1 in JAX: purejaxql's `pqn_cartpole` (32 environments x 64 steps, 4
  epochs x 16 minibatches, a 2 x 256 relu MLP with LayerNorm, RAdam 1e-4 annealed and
  clipped at 10, lambda 0.95, discount 0.99, rewards scaled by 0.1, epsilon 1 -> 0.2 over
  the first 20 % of updates, 500K env steps). A time limit bootstraps here (purejaxql's
  gymnax CartPole ends the return there)."""
  c = _base(500_000, lam=0.95, eps_finish=0.2, eps_decay=0.2, num_epochs=4,
            num_minibatches=16, learning_rate=1e-4, anneal=True)
  c.env = presets.section("cartpole")
  c.agent.reward_scale = 0.1
  return presets.anakin(c, num_envs_per_device=32, rollout_length=64, updates_per_call=4)


def minatar_anakin() -> config_dict.ConfigDict:
  """PQN on a MinAtar game in JAX (gymnax; the default lane): purejaxql's `pqn_minatar`
  (128 environments x 32 steps, 2 epochs x 32 minibatches, RAdam 5e-4 annealed and
  clipped at 10, lambda 0.65, discount 0.99, epsilon 1 -> 0.05 over the first 10 % of
  updates, 10M env steps) with its network: the MinAtar conv torso (3x3, 16 channels;
  dense 128) with LayerNorm after each layer. The game is `--config.env.env_id`
  (Asterix-, Breakout-, Freeway-, SpaceInvaders-MinAtar)."""
  c = _base(10_000_000, lam=0.65, eps_finish=0.05, eps_decay=0.1, num_epochs=2,
            num_minibatches=32, learning_rate=5e-4, anneal=True)
  c.env = presets.section("gymnax", env_id="Asterix-MinAtar",
                          env_kwargs=config_dict.placeholder(dict),
                          env_params=config_dict.placeholder(dict))
  c.network.update(dict(torso="minatar", channels_first=False))
  return presets.anakin(c, num_envs_per_device=128, rollout_length=32, updates_per_call=4)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """cartpole_anakin's agent on EnvPool's CartPole-v1 under Sebulba: 32 environments per
  actor thread x 64 steps, a policy lag of at most one update (PQN learns from the
  newest rollout, as PPO does)."""
  c = cartpole_anakin()
  return presets.sebulba(c, presets.envpool("CartPole-v1"), num_envs_per_actor=32,
                         rollout_length=64, max_policy_lag=1)


def cartpole_seed() -> config_dict.ConfigDict:
  """cartpole_sebulba under SEED: 2 worker processes x 32 environments, one worker's
  rollouts per learner batch."""
  return presets.seed(cartpole_sebulba(), num_local_workers=2, envs_per_worker=32)


def atari_sebulba() -> config_dict.ConfigDict:
  """PQN on Atari Pong under Sebulba: purejaxql's `pqn_atari` (128 environments x 32
  steps, 2 epochs x 32 minibatches, RAdam 2.5e-4 clipped at 10, not annealed, lambda
  0.65, epsilon 1 -> 0.001 over the first 10 % of updates; EnvPool Pong-v5 with
  episodic life, clipped rewards, 4-frame stacks, 30 no-ops, no sticky actions) with its
  network: the Nature torso with LayerNorm after each layer. 10M env steps (purejaxql
  trains 50M; Pong is solved long before)."""
  c = _base(10_000_000, lam=0.65, eps_finish=0.001, eps_decay=0.1, num_epochs=2,
            num_minibatches=32, learning_rate=2.5e-4, anneal=False)
  c.network.update(dict(torso="nature", channels_first=True))
  return presets.atari_sebulba(c, "Pong-v5", num_envs_per_actor=64, rollout_length=32)


CONFIGS = {"cartpole_anakin": cartpole_anakin, "minatar_anakin": minatar_anakin,
           "cartpole_sebulba": cartpole_sebulba, "cartpole_seed": cartpole_seed,
           "atari_sebulba": atari_sebulba}

get_config = presets.getter("PQN", CONFIGS, default="cartpole_anakin")
