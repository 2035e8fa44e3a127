"""Continuous control's host sources: an episode cut by its time limit ends LAST with
discount 1 (so every agent bootstraps from its last observation) and a termination with
discount 0, on EnvPool's MuJoCo and Gymnasium; float64 observations come as float32; the
opt-in action clip."""

import numpy as np
import pytest

from podracer.types import StepType

envpool = pytest.importorskip("envpool")

from podracer.components.environments.envpool_env import EnvPool  # noqa: E402


def _steps(env, action, count):
  env.reset()
  out = []
  for _ in range(count):
    timestep, _ = env.step(action)
    out.append(timestep)
  return out


def test_envpool_mujoco_truncation_bootstraps_and_observations_are_float32():
  env = EnvPool("InvertedPendulum-v4", num_envs=2, max_episode_steps=5)
  assert env.spec().observation.dtype == np.float32
  steps = _steps(env, np.zeros((2, 1), np.float32), 6)
  assert all(t.observation.dtype == np.float32 for t in steps)
  last = steps[4]  # The 5th step: the limit, the pole still up under no push.
  assert (last.step_type == StepType.LAST).all() and (last.discount == 1.0).all()
  assert (steps[5].step_type == StepType.FIRST).all()
  env.close()


def test_envpool_mujoco_termination_does_not_bootstrap():
  env = EnvPool("InvertedPendulum-v4", num_envs=2, max_episode_steps=1000)
  steps = _steps(env, np.full((2, 1), 3.0, np.float32), 60)  # Full push: the pole falls.
  ends = [t for t in steps if (t.step_type == StepType.LAST).any()]
  assert ends and (ends[0].discount[ends[0].step_type == StepType.LAST] == 0.0).all()
  env.close()


def test_gymnasium_truncation_bootstraps():
  pytest.importorskip("gymnasium")
  from podracer.components.environments.gymnasium_env import Gymnasium  # pylint: disable=import-outside-toplevel
  env = Gymnasium("Pendulum-v1", num_envs=2, asynchronous=False, max_episode_steps=4)
  assert env.spec().observation.dtype == np.float32
  steps = _steps(env, np.zeros((2, 1), np.float32), 4)
  assert (steps[3].step_type == StepType.LAST).all() and (steps[3].discount == 1.0).all()
  assert steps[0].observation.dtype == np.float32
  env.close()


def test_clip_actions_bounds_what_the_environment_gets():
  env = EnvPool("InvertedPendulum-v4", num_envs=2, clip_actions=True)
  clipped = env._check_action(np.array([[10.0], [-0.5]], np.float32))  # pylint: disable=protected-access
  np.testing.assert_array_equal(clipped, [[3.0], [-0.5]])
  env.close()
  plain = EnvPool("InvertedPendulum-v4", num_envs=2)
  assert plain._check_action(np.array([[10.0], [0.0]]))[0, 0] == 10.0  # pylint: disable=protected-access
  plain.close()
