"""PPO configs. Launch one with

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE` (e.g. `--config.seed=1`).
"""

from ml_collections import config_dict

from podracer.config import presets


def _base() -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps=500_000)
  c.env = presets.section("cartpole")
  c.agent = presets.section("ppo", discount=0.99, gae_lambda=0.95, num_epochs=4,
                            num_minibatches=4)
  c.network = presets.section("mlp_actor_critic", hidden_sizes=(64, 64), activation="tanh")
  c.loss = presets.section("ppo", clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.01,
                           clip_value=True, normalize_advantages=True)
  c.optimizer = presets.section("adam", learning_rate=2.5e-4, eps=1e-5, max_grad_norm=0.5,
                                anneal=True)
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """PPO on CartPole-v1 in JAX; PureJaxRL's hyperparameters."""
  return presets.anakin(_base(), num_envs_per_device=4, rollout_length=128,
                        updates_per_call=16)


def wide_anakin() -> config_dict.ConfigDict:
  """cartpole_anakin with a network larger than one device's budget (issue 78; docs/runs.md,
  "Larger networks than one device"). The budget named here is 16 MiB a device, a
  stand-in for an accelerator's memory at a CPU's scale: actor and critic torsos of two
  1024-wide layers hold 2.1M parameters, 25 MB with Adam's two moments. Each replica
  spans 4 devices, its dense layers split column then row (`tensor`): 6.4 MB a device.
  Needs 8 devices, data 2 x model 4 (on a CPU:
  XLA_FLAGS=--xla_force_host_platform_device_count=8)."""
  c = cartpole_anakin()
  c.network.hidden_sizes = (1024, 1024)
  return presets.model_parallel(c, model=4, sharding="tensor")


def catch_anakin() -> config_dict.ConfigDict:
  """PPO on bsuite's Catch in JAX."""
  c = _base()
  c.total_env_steps = 200_000
  c.env = presets.section("catch", rows=10, columns=5)
  c.optimizer.learning_rate = 5e-4
  return presets.anakin(c, num_envs_per_device=16, rollout_length=32, updates_per_call=16)


def minatar_anakin() -> config_dict.ConfigDict:
  """PPO on a MinAtar game in JAX (gymnax; the default lane), PureJaxRL's published
  MinAtar settings: 64 environments x 128 steps, 4 epochs x 8 minibatches, Adam 5e-3
  annealed, a relu MLP 64x64 on the flattened [10, 10, C] frame, 10M env steps. The game
  is `--config.env.env_id` (Breakout-, SpaceInvaders-, Asterix-, Freeway-MinAtar)."""
  c = _base()
  c.total_env_steps = 10_000_000
  c.env = presets.section("gymnax", env_id="SpaceInvaders-MinAtar",
                          env_kwargs=config_dict.placeholder(dict),
                          env_params=config_dict.placeholder(dict))
  c.agent.num_minibatches = 8
  c.network.activation = "relu"
  c.optimizer.learning_rate = 5e-3
  return presets.anakin(c, num_envs_per_device=64, rollout_length=128, updates_per_call=4)


def minatar_conv_anakin() -> config_dict.ConfigDict:
  """minatar_anakin with a conv network on the [10, 10, C] frame: the MinAtar paper's
  torso (a 3x3 conv of 16 channels, a dense 128) under the policy and value layers."""
  c = minatar_anakin()
  c.network = presets.section("atari_actor_critic", torso="minatar", channels_first=False)
  return c


def navix_anakin() -> config_dict.ConfigDict:
  """PPO on Navix's MiniGrid Empty-5x5 (`pip install -e ".[navix]"`): a 5x5 room seen as
  a symbolic [5, 5, 3] grid, +1 at the goal; `--config.env.env_id` picks another
  Navix-* grid, or `--config.env.name=xminigrid` XLand-MiniGrid's."""
  c = _base()
  c.total_env_steps = 100_000
  c.env = presets.section("navix", env_id="Navix-Empty-5x5-v0",
                          env_kwargs=config_dict.placeholder(dict))
  c.network.activation = "relu"
  c.optimizer.learning_rate = 1e-3
  return presets.anakin(c, num_envs_per_device=16, rollout_length=64, updates_per_call=8)


def xminigrid_anakin() -> config_dict.ConfigDict:
  """navix_anakin's agent on XLand-MiniGrid's MiniGrid-Empty-5x5 (`pip install -e
  ".[xminigrid]"`): a 7x7 egocentric view of 2 channels; +1 - 0.9 t / max_steps at the
  goal."""
  c = navix_anakin()
  c.env = presets.section("xminigrid", env_id="MiniGrid-Empty-5x5",
                          env_params=config_dict.placeholder(dict))
  return c


def tictactoe_anakin() -> config_dict.ConfigDict:
  """PPO on Pgx's tic-tac-toe against a uniformly random legal opponent, the agent's seat
  drawn per game (`pip install -e ".[pgx]"`); illegal moves masked. Return: +1 won, -1
  lost, 0 drawn. `--config.env.env_id=connect_four` for connect four."""
  c = _base()
  c.total_env_steps = 200_000
  c.env = presets.section("pgx", env_id="tic_tac_toe", opponent="random")
  c.network.activation = "relu"
  c.optimizer.learning_rate = 1e-3
  return presets.anakin(c, num_envs_per_device=32, rollout_length=32, updates_per_call=8)


def snake_anakin() -> config_dict.ConfigDict:
  """PPO on Jumanji's Snake-v1 (`pip install -e ".[jumanji]"`) on an 8x8 grid (5
  channels; its raw step count left out), 400 steps at most, +1 a fruit, moves the mask
  forbids masked; `--config.env.env_id`
  picks another Jumanji task with one discrete action (Knapsack-v1, TSP-v1...)."""
  c = _base()
  c.total_env_steps = 1_000_000
  c.env = presets.section("jumanji", env_id="Snake-v1",
                          env_kwargs=dict(num_rows=8, num_cols=8, time_limit=400),
                          exclude=("step_count",))
  c.network.activation = "relu"
  c.optimizer.learning_rate = 5e-4
  return presets.anakin(c, num_envs_per_device=32, rollout_length=64, updates_per_call=8)


def craftax_anakin() -> config_dict.ConfigDict:
  """PPO on Craftax-Classic, symbolic (`pip install -e ".[craftax]"`): PureJaxRL's
  Craftax baseline's shape (an MLP of 512, Adam 2e-4, GAE 0.8) at a CPU's size (Craftax
  steps at about 300 a second on a 2-core CPU: 150k steps take 8 minutes; the paper's 1B
  want a GPU); the return counts the achievements unlocked (22 in all).
  `--config.env.env_id=Craftax-Classic-Pixels-v1` with
  `--config.network.name=atari_actor_critic` for pixels."""
  c = _base()
  c.total_env_steps = 150_000
  c.env = presets.section("craftax", env_id="Craftax-Classic-Symbolic-v1",
                          env_params=config_dict.placeholder(dict))
  c.agent.update(dict(gae_lambda=0.8, num_minibatches=8))
  c.network.update(dict(hidden_sizes=(512, 512), activation="relu"))
  c.optimizer.learning_rate = 2e-4
  return presets.anakin(c, num_envs_per_device=64, rollout_length=64, updates_per_call=4)


def pong_anakin() -> config_dict.ConfigDict:
  """PPO on JAXtari's Pong (`pip install -e ".[jaxtari]"`): Atari's Pong reimplemented in
  JAX, so under Anakin with no emulator; Atari's protocol (frame skip 4, sticky actions,
  the last 4 observations), the game's objects as the observation, drawn with podracer's
  sprites (`--config.env.observation=pixels` with `--config.network.name=
  atari_actor_critic` for frames, which want a GPU: about 5k steps/s on a 2-core CPU)."""
  c = _base()
  c.total_env_steps = 3_000_000
  c.env = presets.section("jaxtari", game="pong", observation="objects", sprites="podracer")
  c.agent.num_minibatches = 8
  c.network.update(dict(hidden_sizes=(256, 256), activation="relu"))
  c.optimizer.learning_rate = 1e-3
  return presets.anakin(c, num_envs_per_device=64, rollout_length=128, updates_per_call=4)


def memory_anakin() -> config_dict.ConfigDict:
  """Recurrent PPO (`ppo_recurrent`: an LSTM of 64) on POPGym's RepeatFirst, 4 symbols
  over 8 steps: only memory scores above -0.31 (docs/agents.md); memory_ff_anakin is
  the feed-forward baseline."""
  c = _base()
  c.total_env_steps = 100_000
  c.env = presets.section("repeat_first", num_symbols=4, length=8)
  c.agent.name = "ppo_recurrent"
  c.network = presets.section("recurrent_actor_critic", hidden_sizes=(64,), activation="tanh",
                              lstm_size=64)
  c.optimizer.learning_rate = 1e-3
  return presets.anakin(c, num_envs_per_device=32, rollout_length=32, updates_per_call=8)


def memory_ff_anakin() -> config_dict.ConfigDict:
  """memory_anakin's task and budget for feed-forward PPO (mlp_actor_critic 64x64)."""
  c = memory_anakin()
  c.agent.name = "ppo"
  c.network = presets.section("mlp_actor_critic", hidden_sizes=(64, 64), activation="tanh")
  return c


def memory_sebulba() -> config_dict.ConfigDict:
  """memory_anakin under Sebulba: the same agent on RepeatFirst stepped on the CPU
  (the dm_env adapter), one actor thread of 32 environments."""
  c = memory_anakin()
  env = presets.section("dm_env",
                        factory="podracer.components.environments.memory:RepeatFirstDmEnv",
                        num_symbols=4, length=8)
  return presets.sebulba(c, env, num_envs_per_actor=32, rollout_length=32)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """PPO on EnvPool's CartPole-v1, stepped on the CPU by Sebulba's actor threads.

  The agent section is cartpole_anakin's; only env, runtime and topology change.
  """
  c = _base()
  c.total_env_steps = 1_000_000
  # 12 envs per actor thread split evenly over 1, 2, 3, 4 or 6 learner devices. PPO's
  # clipped objective assumes fresh data: a policy lag of at most one update (Cleanba's).
  return presets.sebulba(c, presets.envpool("CartPole-v1"), num_envs_per_actor=12,
                         rollout_length=64, max_policy_lag=1)


def cartpole_seed() -> config_dict.ConfigDict:
  """cartpole_sebulba under SEED: 2 worker processes x 32 environments, one worker's
  rollouts per learner batch, one inference thread (both workers' steps in one call);
  only the runtime section differs. CartPole's steps cost nothing, so the server's cost
  per message and per call decides: on the 2-core CPU this runs 1.45x four workers of 16
  with two inference threads (the same 64 environments; docs/seed.md)."""
  c = presets.seed(cartpole_sebulba(), num_local_workers=2, envs_per_worker=32)
  c.runtime.inference_threads_per_device = 1
  c.total_env_steps = 2_000_000
  return c


def _atari_agent(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """PPO's usual Atari settings (Schulman et al. 2017; CleanRL's ppo_atari): clip 0.1,
  Adam 2.5e-4 (eps 1e-5) annealed to 0, gradient norm 0.5, 4 epochs of 4 minibatches,
  GAE 0.95, discount 0.99, entropy 0.01, value 0.5; the IMPALA ResNet torso, so PPO and
  IMPALA differ only in their agent, loss and optimizer sections."""
  c.network = presets.impala_resnet()
  c.loss.clip_epsilon = 0.1
  c.optimizer = presets.section("adam", learning_rate=2.5e-4, eps=1e-5, max_grad_norm=0.5,
                                anneal=True)
  return c


def pong_sebulba() -> config_dict.ConfigDict:
  """PPO on EnvPool's Pong-v5 under Sebulba (`_atari_agent`), the Atari preprocessing of
  IMPALA's `pong_sebulba`. Rollouts of 32 steps keep the actors' policy lag short."""
  c = _atari_agent(_base())
  c.total_env_steps = 10_000_000
  # 24 envs per actor thread split evenly over 1, 2, 3, 4, 6 or 8 learner devices.
  c = presets.atari_sebulba(c, "Pong-v5", num_envs_per_actor=24, rollout_length=32)
  c.runtime.max_policy_lag = 1  # As cartpole_sebulba: PPO wants fresh data.
  return c


def pong_seed() -> config_dict.ConfigDict:
  """pong_sebulba under SEED: 12 local worker processes x 32 environments (a GPU box's
  16 cores), learner batches of 32 environments."""
  return presets.seed(pong_sebulba(), num_local_workers=12, envs_per_worker=32)


def pixel_catch_anakin() -> config_dict.ConfigDict:
  """PPO's Atari agent (`_atari_agent`: ResNet, Adam, clip 0.1) on Catch seen as uint8
  frame stacks [4, 20, 10]: a pixel learning test that runs on a CPU."""
  return presets.pixel_catch_anakin(_atari_agent(_base()), calls=16)  # 81,920 steps


def _continuous(c: config_dict.ConfigDict, distribution: str) -> config_dict.ConfigDict:
  """PPO's sections for continuous actions: a Gaussian policy (`distribution`) with its
  network, and observations normalised by running statistics."""
  c.distribution = presets.section(distribution)
  c.observation_normalizer = presets.section("running_mean_std", clip=10.0)
  return c


def pendulum_anakin() -> config_dict.ConfigDict:
  """PPO on Pendulum in JAX with CleanRL's continuous-PPO settings (a diagonal normal
  with a learned log-std, clipped to the bounds; 64 x 64 tanh torsos; observations
  normalised; 10 epochs of 32 minibatches; no entropy bonus), 8 environments of 256 steps
  per update, rewards scaled by 0.1."""
  c = _continuous(_base(), "normal")
  c.total_env_steps = 500_000
  c.env = presets.section("pendulum", max_episode_steps=200)
  c.agent.num_epochs, c.agent.num_minibatches = 10, 32
  c.network = presets.section("gaussian_actor_critic", policy_sizes=(64, 64),
                              value_sizes=(64, 64), activation="tanh", w_init="orthogonal",
                              state_dependent_std=False, init_scale=0.0)
  c.loss.entropy_coef = 0.0
  c.optimizer.learning_rate = 3e-4
  c.reward_normalizer = presets.section("reward_scale", scale=0.1)
  return presets.anakin(c, num_envs_per_device=8, rollout_length=256, updates_per_call=4)


def brax_anakin(env_name: str = "inverted_pendulum") -> config_dict.ConfigDict:
  """PPO on a Brax task (`env.env_name`, default `inverted_pendulum`) at the settings of
  Brax's training notebook: a tanh-squashed normal (its scale from the policy's last
  layer), policy 4 x 32 and value 5 x 256 swish MLPs, observations normalised, rewards
  scaled by 10, discount 0.97, GAE 0.95, clip 0.3, entropy 1e-2, learning rate 3e-4,
  2,048 environments, 32 minibatches x 4 epochs per 163,840 steps (16 unrolls of 5 steps
  in Brax; here one rollout of 80 cut into 16 windows of 5), and Brax's update itself:
  minibatches of whole windows, their advantages (Brax's form) taken in the loss from the
  values of the network being learned (`agent.fresh_advantages`; without it, PPO's own
  update, the curve reached 1,000 one or two updates later, docs/agents.md).
  `brax_hopper`, `brax_halfcheetah` and `brax_ant` are the notebook's other tasks."""
  c = _continuous(_base(), "tanh_normal")
  c.total_env_steps = 983_040  # 6 updates of 163,840 steps.
  c.env = presets.section("brax", env_name=env_name, backend="generalized",
                          episode_length=1000)
  c.agent.discount, c.agent.gae_lambda = 0.97, 0.95
  c.agent.num_epochs, c.agent.num_minibatches = 4, 32
  c.agent.gae_window, c.agent.advantage_form, c.agent.fresh_advantages = 5, "brax", True
  c.network = presets.section("gaussian_actor_critic", policy_sizes=(32, 32, 32, 32),
                              value_sizes=(256, 256, 256, 256, 256), activation="swish",
                              w_init="lecun_uniform", state_dependent_std=True,
                              init_scale=0.0)
  c.loss = presets.section("ppo", clip_epsilon=0.3, value_coef=0.5, entropy_coef=0.01,
                           clip_value=False, normalize_advantages=True)
  c.optimizer = presets.section("adam", learning_rate=3e-4, eps=1e-8,
                                max_grad_norm=config_dict.placeholder(float), anneal=False)
  c.reward_normalizer = presets.section("reward_scale", scale=10.0)
  return presets.anakin(c, num_envs_per_device=2048, rollout_length=80, updates_per_call=1)


def _brax_task(env_name: str, total_env_steps: int, num_envs: int, steps_per_env: int,
               ) -> config_dict.ConfigDict:
  """`brax_anakin` on `env_name` (the `positional` backend, the notebook's for its
  locomotion tasks), `num_envs` environments of `steps_per_env` steps an update."""
  c = brax_anakin(env_name)
  c.env.backend = "positional"
  c.total_env_steps = total_env_steps
  c.runtime.num_envs_per_device = num_envs
  c.runtime.rollout_length = steps_per_env
  return c


def brax_hopper() -> config_dict.ConfigDict:
  """PPO on Brax's `hopper`. The notebook trains hopper with SAC only: these are its PPO
  settings of `inverted_pendulum` and `ant` (unroll 5, 32 minibatches x 4 epochs,
  2,048 environments, batch 1,024: 163,840 steps an update), over 6.5 M steps."""
  return _brax_task("hopper", 6_553_600, num_envs=2048, steps_per_env=80)


def brax_halfcheetah() -> config_dict.ConfigDict:
  """PPO on Brax's `halfcheetah` at the notebook's settings: 50 M steps, rewards
  unscaled, discount 0.95, entropy 1e-3, 32 minibatches x 8 epochs, 2,048 environments,
  batch 512 of unrolls of 20 (327,680 steps an update: 160 per environment)."""
  c = _brax_task("halfcheetah", 50_000_000, num_envs=2048, steps_per_env=160)
  c.agent.discount, c.agent.num_epochs, c.agent.gae_window = 0.95, 8, 20
  c.loss.entropy_coef = 1e-3
  c.reward_normalizer.scale = 1.0
  return c


def brax_ant() -> config_dict.ConfigDict:
  """PPO on Brax's `ant` at the notebook's settings: 50 M steps, 4,096 environments,
  batch 2,048 of unrolls of 5, 32 minibatches x 4 epochs (327,680 steps an update: 80
  per environment), rewards scaled by 10, discount 0.97, entropy 1e-2."""
  return _brax_task("ant", 50_000_000, num_envs=4096, steps_per_env=80)


def mujoco_sebulba() -> config_dict.ConfigDict:
  """PPO on EnvPool's HalfCheetah-v4 under Sebulba with CleanRL's continuous-PPO settings
  (`pendulum_anakin`'s agent, rewards divided by the deviation of the discounted return
  and clipped to +-10 as CleanRL's `NormalizeReward`; 2,048 steps per update, here 8
  environments x 256, 1M steps); `--config.env.task_id=` swaps the task
  (InvertedPendulum-v4, Hopper-v4...)."""
  c = pendulum_anakin()
  c.total_env_steps = 1_000_000
  c.optimizer.anneal = True
  c.reward_normalizer = presets.section("return_std", discount=0.99)
  return presets.sebulba(c, presets.envpool("HalfCheetah-v4"), num_envs_per_actor=8,
                         rollout_length=256, max_policy_lag=1)


def mujoco_seed() -> config_dict.ConfigDict:
  """mujoco_sebulba under SEED: 2 worker processes of 8 environments, a learner batch of
  one worker's rollouts."""
  return presets.seed(mujoco_sebulba(), num_local_workers=2, envs_per_worker=8)


CONFIGS = {"cartpole_anakin": cartpole_anakin, "wide_anakin": wide_anakin,
           "catch_anakin": catch_anakin,
           "cartpole_sebulba": cartpole_sebulba, "pong_sebulba": pong_sebulba,
           "cartpole_seed": cartpole_seed, "pong_seed": pong_seed,
           "pixel_catch_anakin": pixel_catch_anakin, "minatar_anakin": minatar_anakin,
           "minatar_conv_anakin": minatar_conv_anakin, "navix_anakin": navix_anakin,
           "xminigrid_anakin": xminigrid_anakin,
           "tictactoe_anakin": tictactoe_anakin, "snake_anakin": snake_anakin,
           "craftax_anakin": craftax_anakin, "pong_anakin": pong_anakin,
           "memory_anakin": memory_anakin,
           "memory_ff_anakin": memory_ff_anakin, "memory_sebulba": memory_sebulba,
           "pendulum_anakin": pendulum_anakin, "brax_anakin": brax_anakin,
           "brax_hopper": brax_hopper, "brax_halfcheetah": brax_halfcheetah,
           "brax_ant": brax_ant,
           "mujoco_sebulba": mujoco_sebulba, "mujoco_seed": mujoco_seed}

get_config = presets.getter("PPO", CONFIGS, default="cartpole_anakin")
