"""The Brax adapter against the installed Brax (the default lane's; the reverb lane has
none, and says so): specs, dtypes, termination against truncation, resets and episode
statistics, step by step against Brax's own `EpisodeWrapper` for the same keys."""

import subprocess
import sys

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
needs_brax = pytest.mark.skipif(IN_THE_REVERB_LANE, reason="Brax is in the default lane "
                                "only (checked there by the next test)")


def _make(env_name="inverted_pendulum", **kwargs):
  """The registered `brax` environment, as a config's `env` section builds it."""
  builder.register_builtin_components()
  return registry.build(registry.environments, dict(name="brax", env_name=env_name,
                                                    **kwargs), key="env")


@pytest.mark.reverb_lane
@pytest.mark.skipif(not IN_THE_REVERB_LANE, reason="the default lane has Brax")
def test_the_reverb_lane_says_brax_is_in_the_default_lane_exit_2_no_traceback():
  with pytest.raises(ConfigError, match="`env`.*default install lane.*0.4.34"):
    _make()
  run = subprocess.run(
      [sys.executable, "-m", "podracer.launch", "--config=agents/sac/config.py:brax_anakin",
       "--workdir=/nonexistent/never_written"], capture_output=True, text=True, timeout=300)
  assert run.returncode == 2, run.stderr[-2000:]
  assert "Traceback" not in run.stderr and "default install lane" in run.stderr


@pytest.mark.slow
@needs_brax
def test_each_step_is_braxs_episode_wrapper_step_for_the_same_keys():
  """Inverted double pendulum (11 observations): gentle pushes for 100 steps (episodes
  run into the limit), then full ones (the poles fall)."""
  from brax import envs  # pylint: disable=import-outside-toplevel
  env_name = "inverted_double_pendulum"
  limit = 20
  env = _make(env_name, episode_length=limit)
  theirs = envs.training.EpisodeWrapper(envs.get_environment(env_name), limit, 1)
  spec = env.spec()
  assert spec.observation.shape == (theirs.observation_size,)
  assert spec.action.shape == (theirs.action_size,) and spec.action.dtype == np.float32
  # Brax's trainers' action range, whatever the actuators' (module docstring).
  assert np.all(np.asarray(spec.action.minimum) == -1)
  assert np.all(np.asarray(spec.action.maximum) == 1)
  ctrl = np.stack([-np.ones(spec.action.shape), np.ones(spec.action.shape)], -1)

  def step(carry, key_and_scale):
    (state, wrapped), (key, scale) = carry, key_and_scale
    action_key, reset_key = jax.random.split(key)
    action = scale * jax.random.uniform(action_key, spec.action.shape, minval=ctrl[:, 0],
                                        maxval=ctrl[:, 1])
    state, ts = env.step(state, action)
    wrapped = theirs.step(wrapped, action)
    out = (ts, wrapped.reward, wrapped.done, wrapped.info["truncation"], wrapped.obs)
    # A LAST step restarts both from one key, as VectorEnv and AutoResetWrapper do.
    state, wrapped = jax.lax.cond(ts.step_type == StepType.LAST,
                                  lambda: (env.reset(reset_key)[0], theirs.reset(reset_key)),
                                  lambda: (state, wrapped))
    return (state, wrapped), out

  key = jax.random.PRNGKey(0)
  state, first = env.reset(key)
  assert first.step_type == StepType.FIRST and first.discount == 1.0
  assert first.observation.dtype == spec.observation.dtype
  scales = jnp.where(jnp.arange(200) < 100, 0.05, 1.0)
  _, (ts, reward, done, truncation, obs) = jax.lax.scan(
      step, (state, theirs.reset(key)), (jax.random.split(jax.random.PRNGKey(1), 200), scales))
  np.testing.assert_allclose(ts.reward, reward, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(ts.step_type == StepType.LAST, done > 0)
  np.testing.assert_array_equal(ts.discount == 0, (done > 0) & (truncation == 0))
  np.testing.assert_allclose(ts.observation, obs, rtol=1e-5, atol=1e-5)
  assert ts.observation.dtype == np.float32 and ts.reward.dtype == np.float32
  assert int(jnp.sum(ts.discount == 0)) >= 1 and int(jnp.sum(truncation > 0)) >= 1


@needs_brax
def test_bad_brax_keys_exit_2_naming_the_key():
  with pytest.raises(ConfigError, match="`env`.*no environment 'invertd_pendulum'.*ant"):
    _make("invertd_pendulum")
  with pytest.raises(ConfigError, match="`env`.*backend"):
    _make(backend="fast")
  with pytest.raises(ConfigError, match="`env`.*episode_length"):
    _make(episode_length=0)


@needs_brax
@pytest.mark.slow
@pytest.mark.parametrize("name,obs,actions,steps,epochs,discount,unroll,batch", [
    ("brax_hopper", 11, 3, 163_840, 4, 0.97, 5, 1024),
    ("brax_halfcheetah", 17, 6, 327_680, 8, 0.95, 20, 512),
    ("brax_ant", 27, 8, 327_680, 4, 0.97, 5, 2048)])
def test_the_named_brax_variants_build_their_task_at_the_notebooks_settings(
    name, obs, actions, steps, epochs, discount, unroll, batch):
  """PPO's `brax_hopper`, `brax_halfcheetah` and `brax_ant` load their tasks offline with
  the spec Brax gives them, and take Brax's notebook's steps per update (its batch x
  unroll x minibatches), epochs, discount, and minibatches of `batch` windows of its
  unroll."""
  from agents.ppo import config as ppo_config
  config = getattr(ppo_config, name)()
  experiment = builder.build(config)
  spec = experiment.agent.spec
  assert spec.observation.shape == (obs,) and spec.action.shape == (actions,)
  np.testing.assert_array_equal(spec.action.minimum, -1.0)
  assert config.runtime.num_envs_per_device * config.runtime.rollout_length == steps
  assert (experiment.agent.num_epochs, experiment.agent.discount) == (epochs, discount)
  assert experiment.agent.num_minibatches == 32 and experiment.agent.fresh_advantages
  assert experiment.agent.gae_window == unroll
  assert steps // unroll // experiment.agent.num_minibatches == batch
