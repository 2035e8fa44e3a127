"""The DeepMind Control Suite (PyPI `dm-control`, the `dm-control` extra) as a host
environment, from states or from pixels: `env.name=dm_control`, for Sebulba's actor
threads and SEED's workers (each worker process renders its own environments).

States: the task's observation dict flattened in its order (cartpole: position [3],
velocity [2]) as one float32 vector. Pixels (`pixels=True`): an RGB frame of `height` x
`width` (84 x 84) from `camera` (an index or a name), the last `frame_stack` (3) frames
stacked on the channels: uint8 [84, 84, 9], channels last. `action_repeat` steps the
physics that many times an action, summing the rewards (TF-Replicator's and Acme's
pixel settings repeat actions too; the Control Suite's 1,000-step episodes become
1000 / action_repeat agent steps). The suite's time limit ends an episode with LAST and
discount 1 (a truncation, bootstrapped), as dm_control itself says.

Rendering is headless: the source sets `MUJOCO_GL=egl` (EGL, through Mesa on a CPU
machine) before MuJoCo is imported, unless the environment already names a backend.
A machine without EGL's library cannot render; building a pixel environment there says
so in one paragraph (docs/environments.md).
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import os
from typing import Any, Deque, Optional, Union

import dm_env
from dm_env import specs
import numpy as np

from podracer import registry
from podracer.components.environments.dm_env_adapter import DmEnv
from podracer.errors import MissingPackage, require

INSTALL = ("pip install -e \".[dm-control]\" (dm-control 1.0.50 on mujoco 3.17.0; the "
           "default install lane has it, the reverb lane does not)")
# The backends dm_control renders with and what each needs.
NO_RENDERER = (
    "could not load MuJoCo's OpenGL backend MUJOCO_GL={backend!r} ({error}). Pixels "
    "need a headless renderer: MUJOCO_GL=egl (the source's default; Mesa's libEGL, "
    "apt-get install libegl1 libgl1-mesa-dri on Debian) or osmesa (libOSMesa); leave "
    "`env.pixels` false to learn from states, which need no renderer.")


def control_suite(pixels: bool) -> Any:
  """`dm_control.suite`, imported after `MUJOCO_GL` is set (egl unless the environment
  names one): a ValueError naming the backend where its library is missing."""
  os.environ.setdefault("MUJOCO_GL", "egl")
  try:
    return require("dm_control.suite", "The 'dm_control' environment", INSTALL)
  except MissingPackage as e:
    if importlib.util.find_spec("dm_control") is None:
      raise
    # Installed: what failed is its renderer's import (PyOpenGL's platform).
    raise ValueError(_no_renderer(pixels, e.__cause__ or e)) from e
  except (AttributeError, OSError, RuntimeError) as e:  # PyOpenGL without its library
    raise ValueError(_no_renderer(pixels, e)) from e


def _no_renderer(pixels: bool, error: BaseException) -> str:
  return ("The 'dm_control' environment " + NO_RENDERER.format(
      backend=os.environ["MUJOCO_GL"], error=f"{type(error).__name__}: {error}")
      + ("" if pixels else " dm_control imports it even for states: unset MUJOCO_GL "
         "or set it to a backend this machine has."))


def check_task(suite: Any, domain: str, task: str) -> None:
  """A ValueError listing the suite's domains, or the domain's tasks, for an unknown one."""
  tasks = collections.defaultdict(list)
  for d, t in suite.ALL_TASKS:
    tasks[d].append(t)
  if domain not in tasks:
    raise ValueError(f"The Control Suite has no domain {domain!r}; set `env.domain` to one "
                     f"of {', '.join(sorted(tasks))}.")
  if task not in tasks[domain]:
    raise ValueError(f"The Control Suite's {domain!r} has no task {task!r}; set "
                     f"`env.task` to one of {', '.join(sorted(tasks[domain]))}.")


def check_positive(**values: int) -> None:
  for key, value in values.items():
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"`env.{key}` must be a positive integer, got {value!r}.")


def flat_state(observation: Any) -> np.ndarray:
  """The task's observation dict as one float32 vector, in the dict's order."""
  return np.concatenate([np.asarray(x, np.float32).ravel() for x in observation.values()])


class ControlTask(dm_env.Environment):
  """One Control Suite task as a dm_env environment of one observation array: the
  flattened state, or the last `frame_stack` frames on the channels (module docstring)."""

  def __init__(self, domain: str, task: str, seed: int = 0, pixels: bool = False,
               camera: Union[int, str] = 0, height: int = 84, width: int = 84,
               frame_stack: int = 3, action_repeat: int = 1,
               time_limit: Optional[float] = None):
    check_positive(frame_stack=frame_stack, action_repeat=action_repeat, height=height,
                   width=width)
    suite = control_suite(pixels)
    check_task(suite, domain, task)
    task_kwargs = {"random": int(seed)}
    if time_limit is not None:
      task_kwargs["time_limit"] = float(time_limit)
    self._env = suite.load(domain, task, task_kwargs=task_kwargs)
    self.pixels, self.action_repeat = bool(pixels), int(action_repeat)
    self._camera, self._size = camera, (int(height), int(width))
    self._frames: Deque[np.ndarray] = collections.deque(maxlen=int(frame_stack))
    if self.pixels:
      self._first_frame()

  def _first_frame(self) -> np.ndarray:
    """Renders one frame: the check, at build, that this machine can."""
    try:
      return self._render()
    except (AttributeError, OSError, RuntimeError, ImportError) as e:
      raise ValueError("The 'dm_control' environment " + NO_RENDERER.format(
          backend=os.environ.get("MUJOCO_GL"), error=f"{type(e).__name__}: {e}")) from e

  def _render(self) -> np.ndarray:
    return self._env.physics.render(*self._size, camera_id=self._camera)

  def _observe(self, observation: Any, first: bool) -> np.ndarray:
    if not self.pixels:
      return flat_state(observation)
    frame = self._render()
    for _ in range(self._frames.maxlen if first else 1):
      self._frames.append(frame)
    return np.concatenate(self._frames, axis=-1)

  def reset(self) -> dm_env.TimeStep:
    timestep = self._env.reset()
    return timestep._replace(observation=self._observe(timestep.observation, True))

  def step(self, action) -> dm_env.TimeStep:
    reward, discount = 0.0, 1.0
    for _ in range(self.action_repeat):
      timestep = self._env.step(action)
      if timestep.first():  # dm_control restarts after LAST: a new episode began.
        return timestep._replace(observation=self._observe(timestep.observation, True))
      reward += timestep.reward or 0.0
      discount *= 1.0 if timestep.discount is None else timestep.discount
      if timestep.last():
        break
    return timestep._replace(reward=reward, discount=discount,
                             observation=self._observe(timestep.observation, False))

  def observation_spec(self) -> specs.Array:
    if self.pixels:
      height, width = self._size
      return specs.Array((height, width, 3 * self._frames.maxlen), np.uint8, "pixels")
    size = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
    return specs.Array((size,), np.float32, "observation")

  def action_spec(self) -> specs.BoundedArray:
    """The task's bounded action, declared float32 (what agents act in; dm_control's
    float64 spec takes either)."""
    spec = self._env.action_spec()
    return specs.BoundedArray(spec.shape, np.float32, spec.minimum.astype(np.float32),
                              spec.maximum.astype(np.float32), "action")

  def close(self) -> None:
    self._env.close()


@registry.environments.register("dm_control")
class DmControl(DmEnv):
  """`num_envs` Control Suite tasks (`domain`, `task`), from states or pixels, stepped
  in turn (module docstring)."""

  def __init__(self, num_envs: int, domain: str = "cartpole", task: str = "swingup",
               seed: int = 0, pixels: bool = False, camera: Union[int, str] = 0,
               height: int = 84, width: int = 84, frame_stack: int = 3,
               action_repeat: int = 1, time_limit: Optional[float] = None,
               clip_actions: bool = False):
    check_positive(num_envs=num_envs, frame_stack=frame_stack, action_repeat=action_repeat)
    make = functools.partial(ControlTask, domain, task, pixels=pixels, camera=camera,
                             height=height, width=width, frame_stack=frame_stack,
                             action_repeat=action_repeat, time_limit=time_limit)
    super().__init__(make, num_envs, seed, clip_actions)
    self.domain, self.task, self.pixels = domain, task, bool(pixels)

  def __repr__(self) -> str:
    kind = "pixels" if self.pixels else "states"
    return f"DmControl({self.domain!r}, {self.task!r}, {kind}, num_envs={self.num_envs})"

