"""The `dm_control` source against the installed `dm-control` (the default lane's): its
specs from states and pixels, each state step dm_control's own, the time limit a
truncation (LAST, discount 1), frames of 84 x 84 RGB stacked three deep, action repeat,
dm_env's conformance tests, and bad keys named (frame stack 0, an unknown domain or task
listing the suite's, pixels on a machine whose MUJOCO_GL backend cannot load)."""

import ctypes.util
import os
import subprocess
import sys

import numpy as np
import pytest

from podracer import builder, registry
from podracer.components.environments.control_suite import ControlTask
from podracer.components.environments.host import env_seeds
from podracer.errors import ConfigError
from podracer.testing import check_dm_env
from podracer.types import StepType
from tests.reverb_support import current_lane

# dm_control imports its renderer with the suite, states too: MUJOCO_GL=egl (the
# source's default) needs Mesa's libEGL (libegl1), a system library no pip install brings.
NO_EGL = ctypes.util.find_library("EGL") is None
pytestmark = [
    pytest.mark.skipif(current_lane() == "reverb", reason="dm-control is in the default lane "
                       "only (mujoco 3.17.0 beside MJX)"),
    pytest.mark.skipif(NO_EGL, reason="this machine has no libEGL (apt install libegl1): "
                       "dm_control's headless renderer cannot load"),
]


def _make(**kwargs):
  builder.register_builtin_components()
  return registry.build(registry.environments, dict(name="dm_control", **kwargs), key="env")


def test_states_are_dm_controls_own_observations_flattened_as_float32():
  """cartpole swingup: position [3] and velocity [2] as one float32 [5]; an action in
  [-1, 1] (float32); 20 steps equal to dm_control's own for the same seed and actions."""
  env = _make(num_envs=1, domain="cartpole", task="swingup", seed=3)
  # After the source: it sets MUJOCO_GL before dm_control picks its renderer on import.
  from dm_control import suite  # pylint: disable=import-outside-toplevel
  spec = env.spec()
  assert spec.observation.shape == (5,) and spec.observation.dtype == np.float32
  assert spec.action.shape == (1,) and spec.action.dtype == np.float32
  np.testing.assert_array_equal(np.broadcast_to(spec.action.minimum, (1,)), [-1.0])
  np.testing.assert_array_equal(np.broadcast_to(spec.action.maximum, (1,)), [1.0])
  # The environment's own seed (podracer derives one an environment from `seed`).
  theirs = suite.load("cartpole", "swingup", task_kwargs={"random": int(env_seeds(3, 1)[0])})
  ours, first = env.reset()[0], theirs.reset()
  np.testing.assert_allclose(ours.observation[0], np.concatenate(
      [first.observation["position"], first.observation["velocity"]]), rtol=1e-6)
  for t in range(20):
    action = np.full((1, 1), np.sin(t), np.float32)
    ours, step = env.step(action)[0], theirs.step(action[0])
    assert ours.observation.dtype == np.float32 and ours.step_type[0] == StepType.MID
    np.testing.assert_allclose(ours.observation[0], np.concatenate(
        [step.observation["position"], step.observation["velocity"]]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.reward[0], step.reward, rtol=1e-5)
  env.close()


def test_the_time_limit_is_a_truncation_with_discount_1_and_action_repeat_shortens_it():
  """A 0.2 s limit (20 control steps of 0.01 s) with action_repeat 4: LAST at the 5th
  agent step with discount 1 (bootstrapped, not a termination), episode length 5, the
  reward the sum of the 4 repeated steps' (cartpole's reward is at most 1 a step), then
  a FIRST step with reward 0."""
  env = _make(num_envs=2, domain="cartpole", task="swingup", time_limit=0.2,
              action_repeat=4)
  env.reset()
  for t in range(1, 6):
    timestep, stats = env.step(np.zeros((2, 1), np.float32))
    assert np.all(timestep.step_type == (StepType.LAST if t == 5 else StepType.MID))
    np.testing.assert_array_equal(timestep.discount, [1.0, 1.0])
    assert np.all((timestep.reward >= 0) & (timestep.reward <= 4.0))
  assert stats.done.all() and np.all(stats.episode_length == 5)
  timestep, _ = env.step(np.zeros((2, 1), np.float32))
  assert np.all(timestep.step_type == StepType.FIRST) and np.all(timestep.reward == 0)
  env.close()


def test_pixels_are_three_84x84_rgb_frames_stacked_on_the_channels():
  """pixels=true: uint8 [84, 84, 9]; at reset the first frame three times; each step
  shifts the stack by one frame (the older two are the previous step's newer two) and
  the newest frame is the camera's drawing of the new state (the cart moves)."""
  env = _make(num_envs=1, domain="cartpole", task="swingup", pixels=True)
  assert os.environ.get("MUJOCO_GL")  # the source set one (egl) if none was named
  spec = env.spec()
  assert spec.observation.shape == (84, 84, 9) and spec.observation.dtype == np.uint8
  first = env.reset()[0].observation[0]
  assert first.shape == (84, 84, 9) and first.dtype == np.uint8 and first.std() > 0
  np.testing.assert_array_equal(first[..., 0:3], first[..., 3:6])
  np.testing.assert_array_equal(first[..., 3:6], first[..., 6:9])
  previous = first
  for _ in range(3):
    observation = env.step(np.ones((1, 1), np.float32))[0].observation[0]
    np.testing.assert_array_equal(observation[..., 0:6], previous[..., 3:9])
    previous = observation
  assert np.any(previous[..., 6:9] != first[..., 6:9])
  env.close()


def test_a_control_task_passes_dm_envs_conformance_tests():
  """dm_env's own tests (podracer.testing.check_dm_env) on one task from states."""
  assert check_dm_env(lambda: ControlTask("cartpole", "balance", time_limit=0.5)) > 0


@pytest.mark.parametrize("keys, says", [
    (dict(domain="cartpol", task="swingup"), ["no domain 'cartpol'", "cartpole", "walker",
                                              "`env.domain`"]),
    (dict(domain="cartpole", task="swingups"), ["no task 'swingups'", "balance",
                                                "swingup_sparse", "`env.task`"]),
    (dict(pixels=True, frame_stack=0), ["`env.frame_stack`", "positive integer", "0"]),
    (dict(action_repeat=0), ["`env.action_repeat`", "positive integer"]),
])
def test_bad_keys_are_one_paragraph_naming_the_key_and_the_choices(keys, says):
  with pytest.raises(ConfigError) as raised:
    _make(num_envs=1, **keys)
  message = str(raised.value)
  assert "\n" not in message and all(s in message for s in says), message


def test_pixels_without_a_renderer_say_which_backend_and_the_fix():
  """A machine whose MUJOCO_GL backend has no library (osmesa here: no libOSMesa) gets
  one paragraph naming MUJOCO_GL, egl and states as the ways out, not a traceback."""
  if ctypes.util.find_library("OSMesa"):  # the premise: osmesa's library is missing here
    pytest.skip("this machine has libOSMesa, so MUJOCO_GL=osmesa renders")
  code = ("from podracer import builder, registry\n"
          "from podracer.errors import ConfigError\n"
          "builder.register_builtin_components()\n"
          "try:\n"
          "  registry.build(registry.environments, dict(name='dm_control', num_envs=1, "
          "pixels=True), key='env')\n"
          "except ConfigError as e:\n"
          "  print('CONFIG ERROR:', e)\n")
  env = dict(os.environ, MUJOCO_GL="osmesa", JAX_PLATFORMS="cpu")
  env.pop("PYOPENGL_PLATFORM", None)  # dm_control's import set it to egl in this process
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=120, check=False)
  line = [l for l in out.stdout.splitlines() if l.startswith("CONFIG ERROR:")]
  assert line, out.stdout + out.stderr
  assert all(s in line[0] for s in ("MUJOCO_GL='osmesa'", "MUJOCO_GL=egl", "states")), line
