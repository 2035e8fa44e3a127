"""The MuJoCo Playground adapter against the installed `playground` (the default lane's):
its spec, each step Playground's own for the same actions with episodes cut at the limit
(LAST, discount 1), bad keys named, and PPO learning steps on it under Anakin."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.ppo import config as ppo_config
from podracer import builder, registry
from podracer.config import presets
from podracer.errors import ConfigError
from podracer.logs.metrics import MetricsLogger
from podracer.types import StepType
from tests.reverb_support import current_lane

pytestmark = pytest.mark.skipif(current_lane() == "reverb", reason="MuJoCo Playground is "
                                "in the default lane only (its JAX is too new for Reverb's)")


def _make(**kwargs):
  builder.register_builtin_components()
  return registry.build(registry.environments, dict(name="playground", **kwargs), key="env")


@pytest.mark.slow
def test_each_step_is_playgrounds_own_and_the_limit_cuts_with_discount_1():
  """CartpoleBalance (MJX): 5 observations, one action in [-1, 1]; 12 steps with a limit
  of 5: Playground's own rewards and observations for the same actions, LAST with
  discount 1 at steps 5 and 10 (the pole does not fall: truncations), a restart after."""
  from mujoco_playground import registry as theirs  # pylint: disable=import-outside-toplevel
  env = _make(env_name="CartpoleBalance", episode_length=5)
  spec = env.spec()
  assert spec.observation.shape == (5,) and spec.action.shape == (1,)
  np.testing.assert_array_equal(np.broadcast_to(spec.action.minimum, (1,)), [-1.0])
  np.testing.assert_array_equal(np.broadcast_to(spec.action.maximum, (1,)), [1.0])
  raw = theirs.load("CartpoleBalance", config_overrides={"impl": "jax"})
  actions = 0.3 * jnp.sin(jnp.arange(12.0))[:, None]

  def ours(state, action):
    state, ts = env.step(state, action)
    state = jax.lax.cond(ts.step_type == StepType.LAST,
                         lambda: env.reset(jax.random.PRNGKey(0))[0], lambda: state)
    return state, ts

  def playground(state, action):
    stepped = raw.step(state, action)
    return stepped, (stepped.reward, stepped.obs)

  _, ts = jax.jit(lambda: jax.lax.scan(ours, env.reset(jax.random.PRNGKey(0))[0], actions))()
  _, (reward, obs) = jax.jit(lambda: jax.lax.scan(
      playground, raw.reset(jax.random.PRNGKey(0)), actions[:5]))()
  np.testing.assert_allclose(ts.reward[:5], reward, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ts.observation[:5], obs, rtol=1e-5, atol=1e-5)
  last = np.flatnonzero(np.asarray(ts.step_type) == StepType.LAST)
  np.testing.assert_array_equal(last, [4, 9])
  np.testing.assert_array_equal(np.asarray(ts.discount)[last], 1.0)
  assert ts.observation.dtype == np.float32 and ts.reward.dtype == np.float32


def test_bad_playground_keys_are_named():
  with pytest.raises(ConfigError, match="`env`.*no environment 'CartpoleBalence'.*CheetahRun"):
    _make(env_name="CartpoleBalence")
  with pytest.raises(ConfigError, match="`env`.*impl must be one of jax, warp"):
    _make(env_name="CartpoleBalance", impl="cuda")


@pytest.mark.slow
def test_ppo_learns_on_a_playground_task_under_anakin():
  """PPO's continuous settings (`pendulum_anakin`) with the environment swapped for
  Playground's CartpoleBalance: two updates of 8 environments x 32 steps, finite losses,
  the observation statistics counting every step."""
  config = ppo_config.pendulum_anakin()
  config.env = presets.section("playground", env_name="CartpoleBalance", episode_length=50)
  config.topology.num_devices = 1
  config.runtime.num_envs_per_device, config.runtime.rollout_length = 8, 32
  config.runtime.updates_per_call = 1
  config.total_env_steps = 512
  experiment = builder.build(config)
  logger = MetricsLogger(stream=None)
  state = experiment.runtime.train(logger)
  assert logger.records[-1]["env_steps"] == 512
  assert all(np.isfinite(r["policy_loss"]) for r in logger.records if "policy_loss" in r)
  assert int(np.asarray(state.agent.nets["observation_statistics"].count).max()) == 512
