"""podracer.testing: the fakes and helpers a user's component tests start from."""

import chex
import jax
import numpy as np
import pytest

from agents.ppo import config as ppo_config
from podracer import testing
from podracer.components.environments.base import VectorEnv
from podracer.errors import ConfigError
from podracer.types import StepType


def test_fake_environment_ends_episodes_terminated_or_truncated(fake_spec):
  for truncate, discount in ((False, 0.0), (True, 1.0)):
    env = testing.FakeEnvironment(fake_spec, episode_length=3, truncate=truncate)
    timesteps, stats = testing.rollout(env, num_envs=2, num_steps=8)
    chex.assert_shape(timesteps.step_type, (9, 2))
    chex.assert_shape(timesteps.observation, (9, 2, 4))
    expected = [StepType.FIRST, StepType.MID, StepType.MID, StepType.LAST] * 2 + [StepType.FIRST]
    np.testing.assert_array_equal(timesteps.step_type[:, 0], expected)
    np.testing.assert_array_equal(timesteps.observation[:4, 0, 0], [0, 1, 2, 3])
    assert timesteps.discount[3, 0] == discount and timesteps.discount[2, 0] == 1.0
    done = np.asarray(stats.done[:, 0])
    np.testing.assert_array_equal(np.flatnonzero(done), [2, 6])  # steps 3 and 7
    np.testing.assert_array_equal(stats.episode_return[done, 0], [3.0, 3.0])
    np.testing.assert_array_equal(stats.episode_length[done, 0], [3, 3])


def test_fake_environment_passes_the_contract_check_in_any_dtype():
  import podracer
  for dtype in (np.float32, np.uint8):
    podracer.check_environment(testing.FakeEnvironment(testing.fake_spec((2, 3), 4, dtype)))


def test_fake_host_environment_matches_the_jax_one_step_for_step(fake_spec):
  jax_steps, jax_stats = testing.rollout(testing.FakeEnvironment(fake_spec, 3), 2, 8)
  host = testing.FakeHostEnvironment(fake_spec, num_envs=2, episode_length=3)
  timestep, _ = host.reset()
  steps, dones = [timestep], []
  for _ in range(8):
    timestep, stats = host.step(np.zeros(2, np.int32))
    steps.append(timestep)
    dones.append(stats.done)
  for field in ("step_type", "reward", "discount", "observation"):
    np.testing.assert_array_equal(np.stack([getattr(t, field) for t in steps]),
                                  np.asarray(getattr(jax_steps, field)), err_msg=field)
  np.testing.assert_array_equal(np.stack(dones), np.asarray(jax_stats.done))
  failing = testing.FakeHostEnvironment(fake_spec, num_envs=2, fail_at=2)
  failing.reset()
  failing.step(np.zeros(2, np.int32))
  with pytest.raises(RuntimeError, match="fail_at"):
    failing.step(np.zeros(2, np.int32))


def test_fake_observations_and_trajectories_have_the_specs_shapes():
  spec = testing.fake_spec((4, 20, 10), 3, np.uint8)
  observations = testing.fake_observations(spec, 6)
  assert observations.shape == (6, 4, 20, 10) and observations.dtype == np.uint8
  trajectory = testing.fake_trajectory(spec, num_envs=2, length=5, extras=dict(value=()))
  chex.assert_shape(trajectory.timestep.observation, (5, 2, 4, 20, 10))
  chex.assert_shape([trajectory.action, trajectory.extras["value"]], (5, 2))
  assert trajectory.timestep.step_type[0, 0] == StepType.FIRST


def test_check_network_needs_no_agent_and_names_a_wrong_output(registered, fake_spec):
  network = registered.networks.get("mlp_actor_critic")(spec=fake_spec, hidden_sizes=(8,))
  shapes = testing.check_network(network, fake_spec, logits=(2,), value=())
  assert shapes["logits"] == (testing.CHECK_BATCH, 2)
  with pytest.raises(ConfigError, match="returns shape \\[5, 2\\] for `logits`; expected "
                                        "shape \\[5, 3\\]"):
    testing.check_network(network, fake_spec, logits=(3,))


@pytest.mark.reverb_lane
def test_one_update_changes_the_parameters_and_returns_the_metrics(registered):
  config = ppo_config.cartpole_anakin()
  config.topology.num_devices = 1
  config.runtime.update(dict(num_envs_per_device=4, rollout_length=8, updates_per_call=1))
  config.agent.num_minibatches = 2
  config.total_env_steps = 32
  before, after, metrics = testing.one_update(config)
  assert jax.tree.structure(before) == jax.tree.structure(after)
  assert any(np.any(a != b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))
  assert metrics["loss"].shape == (1,) and np.isfinite(metrics["loss"]).all()


def test_devices_fixture_hands_out_the_virtual_devices(devices):
  assert len(devices(8)) == 8 and len({d.id for d in devices(2)}) == 2


@pytest.mark.reverb_lane
def test_the_readmes_component_test_passes(registered):
  import importlib.util
  import pathlib

  # Loaded from its file: the reverb lane has another top-level `examples` package.
  root = pathlib.Path(__file__).resolve().parents[1]
  spec = importlib.util.spec_from_file_location("component_test",
                                                root / "examples" / "component_test.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  module.test_mlp_actor_critic_alone(registered)
  example = (root / "examples" / "component_test.py").read_text()
  body = example.split('"""', 2)[2].strip()
  assert body in (root / "docs" / "components.md").read_text()


@pytest.mark.parametrize("minimum, maximum", [((0.0, -0.5), (1.0, 0.5)),
                                              (-np.inf, np.inf),
                                              ((0.0, -np.inf), (np.inf, 0.5))])
def test_rollout_acts_within_the_bounds_and_never_nan_for_infinite_ones(minimum, maximum):
  """A user's environment test built on `rollout`: finite bounds give uniform actions
  inside them; an infinite side gives finite actions past the finite one (it was NaN)."""
  from podracer.types import ArraySpec, EnvSpec  # pylint: disable=import-outside-toplevel
  spec = EnvSpec(observation=ArraySpec((1,), np.float32, "observation"),
                 action=ArraySpec((2,), np.float32, "action", minimum=minimum,
                                  maximum=maximum))
  actions = np.asarray(testing._random_actions(spec, jax.random.PRNGKey(0), (2000,)))
  low, high = np.broadcast_to(minimum, 2), np.broadcast_to(maximum, 2)
  assert np.isfinite(actions).all()
  assert (actions >= low).all() and (actions <= high).all()
  bounded = np.isfinite(low) & np.isfinite(high)
  width = np.where(bounded, high - low, 1.0)
  # Uniform: the mean near the middle, the extremes near the bounds.
  np.testing.assert_allclose(np.where(bounded, actions.mean(0), 0.0),
                             np.where(bounded, (low + high) / 2, 0.0), atol=0.05)
  assert (np.where(bounded, actions.max(0) - actions.min(0), width) > 0.95 * width).all()
