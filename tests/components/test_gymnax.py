"""The gymnax adapter against the installed gymnax (the default lane's; the reverb lane
has none, and says so): specs, dtypes, termination against truncation, resets and
episode statistics, step by step against gymnax's own `step` for the same keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import builder, registry
from podracer.components.environments.base import VectorEnv
from podracer.errors import ConfigError
from podracer.types import StepType
from tests.reverb_support import current_lane

IN_THE_REVERB_LANE = current_lane() == "reverb"
# (id, env_params): small time limits where an episode would otherwise rarely end.
SUITE = [("CartPole-v1", {"max_steps_in_episode": 20}),
         ("Acrobot-v1", {"max_steps_in_episode": 50}),
         ("MountainCar-v0", {"max_steps_in_episode": 30}), ("Catch-bsuite", {}),
         ("DeepSea-bsuite", {}), ("Breakout-MinAtar", {}),
         ("SpaceInvaders-MinAtar", {"max_steps_in_episode": 40}), ("Asterix-MinAtar", {}),
         ("Freeway-MinAtar", {"max_steps_in_episode": 40})]
needs_gymnax = pytest.mark.skipif(IN_THE_REVERB_LANE, reason="gymnax is in the default "
                                  "lane only (checked there by the next test)")


def _make(env_id, env_params=None):
  """The registered `gymnax` environment, as a config's `env` section builds it."""
  builder.register_builtin_components()
  return registry.build(registry.environments, dict(name="gymnax", env_id=env_id,
                                                    env_params=env_params or None), key="env")


@pytest.mark.reverb_lane
@pytest.mark.skipif(not IN_THE_REVERB_LANE, reason="the default lane has gymnax")
def test_the_reverb_lane_says_gymnax_is_in_the_default_lane():
  with pytest.raises(ConfigError, match="`env`.*default install lane.*jax >= 0.6"):
    _make("CartPole-v1")


@needs_gymnax
@pytest.mark.parametrize("env_id,env_params", SUITE, ids=[s[0] for s in SUITE])
def test_each_step_is_gymnaxs_own_step_for_the_same_key(env_id, env_params):
  import gymnax  # pylint: disable=import-outside-toplevel
  env = _make(env_id, env_params)
  theirs, params = gymnax.make(env_id)
  params = params.replace(**env_params)
  spec = env.spec()
  space = theirs.observation_space(params)
  assert spec.observation.shape == tuple(space.shape)
  assert spec.action.num_values == theirs.action_space(params).n

  def step(state, key):
    action = jax.random.randint(key, (), 0, spec.action.num_values)
    gymnax_key = jax.random.split(state.key)[1]   # what the adapter hands gymnax
    _, _, reward, terminated, truncated, info = theirs.step(gymnax_key, state.env_state,
                                                             action, params)
    next_state, ts = env.step(state, action)
    # A LAST step restarts, as VectorEnv does.
    next_state = jax.lax.cond(ts.step_type == StepType.LAST,
                              lambda: env.reset(next_state.key)[0], lambda: next_state)
    return next_state, (ts, reward, terminated, truncated,
                                 info["final_observation"])

  state, first = env.reset(jax.random.PRNGKey(0))
  assert first.step_type == StepType.FIRST
  assert first.observation.dtype == spec.observation.dtype
  _, (ts, reward, terminated, truncated, final_obs) = jax.lax.scan(
      step, state, jax.random.split(jax.random.PRNGKey(1), 300))
  np.testing.assert_allclose(ts.reward, reward, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(ts.step_type == StepType.LAST, terminated | truncated)
  np.testing.assert_array_equal(ts.discount == 0, terminated)  # a time limit keeps 1
  # The same math, compiled in another program: equal to float32 rounding.
  np.testing.assert_allclose(ts.observation, final_obs, rtol=1e-5, atol=1e-5)
  assert ts.observation.dtype == spec.observation.dtype
  assert int(jnp.sum(terminated | truncated)) >= 1, "no episode ended in 300 steps"


@needs_gymnax
def test_cartpole_ends_at_its_time_limit_truncated_and_its_returns_stop_at_500():
  """A policy that keeps the pole up runs into the limit: LAST with discount 1 at step 5
  (gymnax 1.0.1 reports it from `step`; the old adapter went on to step 8), and under
  the default limit no episode passes 500 steps (returns were 620)."""
  def balance(observation):  # push towards where the pole falls
    return (observation[..., 2] + 0.5 * observation[..., 3] > 0).astype(jnp.int32)

  env = _make("CartPole-v1", {"max_steps_in_episode": 5})
  state, ts = env.reset(jax.random.PRNGKey(0))
  kinds = []
  for _ in range(6):
    state, ts = env.step(state, balance(ts.observation))
    kinds.append((int(ts.step_type), float(ts.discount)))
  assert kinds[:5] == [(1, 1.0)] * 4 + [(2, 1.0)]

  vector = VectorEnv(_make("CartPole-v1"), num_envs=4)
  state, ts = vector.reset(jax.random.PRNGKey(1))

  def act(carry, _):
    state, ts = carry
    state, ts, stats = vector.step(state, balance(ts.observation))
    return (state, ts), (ts, stats)

  _, (steps, stats) = jax.lax.scan(act, (state, ts), None, length=1100)
  last = np.asarray(steps.step_type == StepType.LAST)
  assert last.sum() >= 8  # two 500-step episodes per environment
  np.testing.assert_array_equal(np.asarray(stats.done), last)
  # The episode statistics: CartPole pays 1 a step, so return = length = 500 at most.
  np.testing.assert_array_equal(np.asarray(stats.episode_length)[last], 500)
  np.testing.assert_array_equal(np.asarray(stats.episode_return)[last], 500.0)
  np.testing.assert_array_equal(np.asarray(steps.discount)[last], 1.0)


@pytest.mark.slow
@needs_gymnax
def test_ppo_minatar_config_trains_on_a_minatar_game_through_the_adapter():
  """PureJaxRL's MinAtar settings build on the real game and one compiled call learns
  (a smaller batch here: 8 environments x 16 steps)."""
  from agents.ppo import config as ppo_config  # pylint: disable=import-outside-toplevel
  from podracer.testing import one_update  # pylint: disable=import-outside-toplevel
  config = ppo_config.minatar_anakin()
  assert (config.env.env_id, config.runtime.num_envs_per_device,
          config.runtime.rollout_length) == ("SpaceInvaders-MinAtar", 64, 128)
  assert (config.agent.num_epochs, config.agent.num_minibatches) == (4, 8)
  assert config.optimizer.learning_rate == 5e-3 and config.optimizer.anneal
  config.env.env_id = "Breakout-MinAtar"
  config.topology.num_devices = 1
  config.runtime.update(dict(num_envs_per_device=8, rollout_length=16, updates_per_call=1))
  before, after, metrics = one_update(config)
  assert before["actor_torso/linear_0"]["w"].shape[0] == 10 * 10 * 4  # the whole frame
  assert np.isfinite(metrics["loss"]).all()
  assert not np.allclose(before["head/policy"]["w"], after["head/policy"]["w"])


@pytest.mark.slow
@needs_gymnax
def test_ppo_minatar_conv_config_puts_a_conv_torso_on_the_frame():
  """The conv variant: the MinAtar paper's 3x3 conv of 16 on [10, 10, C], then 128."""
  from agents.ppo import config as ppo_config  # pylint: disable=import-outside-toplevel
  from podracer.testing import one_update  # pylint: disable=import-outside-toplevel
  config = ppo_config.minatar_conv_anakin()
  config.env.env_id = "Breakout-MinAtar"
  config.topology.num_devices = 1
  config.runtime.update(dict(num_envs_per_device=8, rollout_length=16, updates_per_call=1))
  before, after, metrics = one_update(config)
  assert before["torso/~features/conv"]["w"].shape == (3, 3, 4, 16)
  assert before["torso/linear"]["w"].shape == (10 * 10 * 16, 128)
  assert np.isfinite(metrics["loss"]).all()
  assert not np.allclose(before["torso/linear"]["w"], after["torso/linear"]["w"])


@pytest.mark.slow
@needs_gymnax
def test_dqn_minatar_config_learns_from_its_replay_on_a_minatar_game():
  """The MinAtar paper's DQN settings build on the real game; once the replay holds
  min_size items an update moves the conv torso (a smaller run: 8 envs, min 16 items)."""
  from agents.dqn import config as dqn_config  # pylint: disable=import-outside-toplevel
  from podracer.testing import one_update  # pylint: disable=import-outside-toplevel
  config = dqn_config.minatar_anakin()
  assert (config.network.torso, config.replay.max_size, config.agent.target_update_period,
          config.optimizer.learning_rate) == ("minatar", 25_000, 1_000, 2.5e-4)
  config.env.env_id = "Breakout-MinAtar"
  config.topology.num_devices = 1
  config.replay.min_size = 8
  config.runtime.update(dict(num_envs_per_device=8, rollout_length=4, updates_per_call=1))
  before, after, metrics = one_update(config)
  assert before["torso/~features/conv"]["w"].shape == (3, 3, 4, 16)
  assert np.isfinite(metrics["loss"]).all()
  assert not np.allclose(before["torso/linear"]["w"], after["torso/linear"]["w"])


@pytest.mark.extended  # PPO's CI tests: tests/test_learning.py
@needs_gymnax
@pytest.mark.learning
def test_ppo_learns_breakout_minatar_in_500k_env_steps(tmp_path):
  """PureJaxRL's MinAtar settings on Breakout-MinAtar, seed 0, 500k env steps (the
  learning rate annealed over them), one host device as a user's command runs it: holds
  16.0 over the last 20 % (2026-11-27, jax 0.10.2, gymnax 1.0.1; 14 s); a random policy
  scores about 0.6. Under the suite's 8 virtual devices seeds 0-2 held 14.0, 25.1, 8.5."""
  from tests.learning import last_fifth_means, launch_runs  # pylint: disable=import-outside-toplevel
  records = launch_runs("agents/ppo/config.py:minatar_anakin", tmp_path,
                        "--config.env.env_id=Breakout-MinAtar",
                        "--config.total_env_steps=500000")
  held = last_fifth_means(records)[0]
  assert held >= 10.0, f"mean return over the last 20% {held:.2f}"
