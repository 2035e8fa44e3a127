"""IMPALA configs. Launch one with

  python -m podracer.launch --config=agents/impala/config.py:cartpole_anakin --workdir=runs/x

and override any key with `--config.KEY=VALUE` (e.g. `--config.seed=1`).
"""

from ml_collections import config_dict

from podracer.config import presets


def _vtrace(reduction: str) -> config_dict.ConfigDict:
  return presets.section("vtrace", baseline_coef=0.5, entropy_coef=0.01,
                         clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0, lambda_=1.0,
                         reduction=reduction)


def _base() -> config_dict.ConfigDict:
  c = presets.experiment(total_env_steps=1_000_000)
  c.env = presets.section("cartpole")
  c.agent = presets.section("impala", discount=0.99)
  c.network = presets.section("mlp_actor_critic", hidden_sizes=(64, 64), activation="tanh")
  # Tuned for CartPole with a mean over the batch (its eps and clip are set for that).
  c.loss = _vtrace("mean")
  c.optimizer = presets.section("rmsprop", learning_rate=7e-4, decay=0.99, eps=1e-5,
                                max_grad_norm=0.5, anneal=False)
  return c


def cartpole_anakin() -> config_dict.ConfigDict:
  """IMPALA on CartPole-v1 in JAX: seeds 0-5 pass a mean return of 450 by 600k steps."""
  c = _base()
  c.total_env_steps = 30 * 16 * 16 * 128  # 983,040: whole calls, under 1M.
  # Small batches and many updates learn CartPole faster and more stably than large ones.
  return presets.anakin(c, num_envs_per_device=16, rollout_length=16, updates_per_call=128)


def cartpole_sebulba() -> config_dict.ConfigDict:
  """IMPALA on EnvPool's CartPole-v1 under Sebulba; the agent section is cartpole_anakin's."""
  # 12 envs per actor thread split evenly over 1, 2, 3, 4 or 6 learner devices.
  return presets.sebulba(_base(), presets.envpool("CartPole-v1"), num_envs_per_actor=12,
                         rollout_length=16)


def cartpole_seed() -> config_dict.ConfigDict:
  """cartpole_sebulba under SEED: 4 worker processes x 16 environments, one worker's
  rollout per learner batch; only the runtime section differs."""
  c = presets.seed(cartpole_sebulba())
  c.total_env_steps = 2_000_000
  return c


def _atari_agent(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """The IMPALA paper's Atari agent (Espeholt et al. 2018): the deep ResNet torso, RMSProp
  (lr 6e-4 annealed to 0, decay 0.99, eps 0.01, momentum 0), global gradient norm 40,
  entropy 0.01, baseline 0.5, discount 0.99.

  The paper's losses are SUMS over time and batch (scalable_agent's experiment.py), and
  RMSProp's eps (inside the square root) and the clipping norm are absolute scales set for
  those sums. With a mean over the batch the gradients are N times smaller, eps dominates
  the denominator once the first large gradients have passed, and the policy stops
  moving: on Pong frames (benchmarks/update_size.py, 320 transitions) the fourth update
  moved the parameters 0.0145 lr (rms) with a mean against 0.34 lr with the sum, and the
  policy by KL 1.4e-4 against 3.9e-3. Hence `reduction="sum"`.
  """
  c.network = presets.impala_resnet()
  c.loss = _vtrace("sum")
  c.optimizer = presets.section("rmsprop", learning_rate=6e-4, decay=0.99, eps=0.01,
                                max_grad_norm=40.0, anneal=True)
  return c


def pong_sebulba() -> config_dict.ConfigDict:
  """IMPALA with the deep ResNet torso on EnvPool's Pong-v5, the paper's Atari settings
  (`_atari_agent`): unroll 20, clipped rewards, episodic life. Episode returns are
  reported from true game ends.
  """
  c = _atari_agent(_base())
  c.total_env_steps = 50_000_000
  # 24 envs per actor thread split evenly over 1, 2, 3, 4, 6 or 8 learner devices.
  return presets.atari_sebulba(c, "Pong-v5", num_envs_per_actor=24, rollout_length=20)


def pong_seed() -> config_dict.ConfigDict:
  """pong_sebulba under SEED: 12 local worker processes x 32 environments (a GPU box's
  16 cores), learner batches of 32 environments."""
  return presets.seed(pong_sebulba(), num_local_workers=12, envs_per_worker=32)


def pixel_catch_anakin() -> config_dict.ConfigDict:
  """IMPALA's Atari agent (`_atari_agent`: ResNet, RMSProp, summed losses) on Catch seen
  as uint8 frame stacks [4, 20, 10]: a pixel learning test that runs on a CPU."""
  return presets.pixel_catch_anakin(_atari_agent(_base()), calls=24)  # 122,880 steps


CONFIGS = {"cartpole_anakin": cartpole_anakin, "cartpole_sebulba": cartpole_sebulba,
           "pong_sebulba": pong_sebulba, "cartpole_seed": cartpole_seed,
           "pong_seed": pong_seed, "pixel_catch_anakin": pixel_catch_anakin}


get_config = presets.getter("IMPALA", CONFIGS, default="cartpole_anakin")
