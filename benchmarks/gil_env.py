"""A GIL-bound host environment, registered from its config file as a user would: CartPole
simulated in plain Python, one environment at a time, with `cost_us` microseconds of
Python work added to every environment step (a physics engine or game written in Python).

Sebulba steps it on its actor threads, which share the interpreter's lock with each
other and with the learner's Python; SEED steps it in worker processes, one interpreter
each. `benchmarks/gil_bound.py` trains PPO on it under both, with the same environments
and budget, and compares their env steps/s.

  python -m podracer.launch --config=benchmarks/gil_env.py:sebulba --workdir=runs/gil
  python -m podracer.launch --config=benchmarks/gil_env.py:seed --workdir=runs/gils \
      --config.env.cost_us=200
"""

from __future__ import annotations

import math
import time

import numpy as np
from ml_collections import config_dict

from agents.ppo.config import cartpole_sebulba
from podracer import registry
from podracer.config import presets
from podracer.components.environments import HostEnvironment, episode_stats
from podracer.components.environments.host import env_seeds, host_timestep
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec, StepType


class _Pole:
  """One CartPole-v1 (Gymnasium's dynamics and limits), as plain Python floats."""

  def __init__(self, rng: np.random.Generator):
    self.rng = rng
    self.reset()

  def reset(self):
    self.x, self.x_dot, self.theta, self.theta_dot = self.rng.uniform(-0.05, 0.05, 4)
    self.steps = 0

  def step(self, push: int) -> bool:
    force = 10.0 if push else -10.0
    cos, sin = math.cos(self.theta), math.sin(self.theta)
    temp = (force + 0.05 * self.theta_dot ** 2 * sin) / 1.1
    theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
    x_acc = temp - 0.05 * theta_acc * cos / 1.1
    self.x += 0.02 * self.x_dot
    self.x_dot += 0.02 * x_acc
    self.theta += 0.02 * self.theta_dot
    self.theta_dot += 0.02 * theta_acc
    self.steps += 1
    return abs(self.x) > 2.4 or abs(self.theta) > 12 * 2 * math.pi / 360

  def observation(self):
    return (self.x, self.x_dot, self.theta, self.theta_dot)


def busy(microseconds: float) -> None:
  """Python work holding the interpreter's lock for `microseconds` (not a sleep)."""
  end = time.perf_counter() + microseconds * 1e-6
  while time.perf_counter() < end:
    pass


@registry.environments.register("python_cartpole")
class PythonCartPole(HostEnvironment):
  """`num_envs` CartPoles stepped one after the other in Python, each step costing
  `cost_us` more microseconds of Python work; 500-step limit (truncated, discount 1)."""

  def __init__(self, num_envs: int, seed: int = 0, cost_us: float = 100.0,
               max_episode_steps: int = 500):
    super().__init__(num_envs, seed)
    self.cost_us, self.limit = float(cost_us), int(max_episode_steps)
    self.poles = [_Pole(np.random.default_rng(s)) for s in env_seeds(seed, num_envs)]
    self._was_last = np.zeros(num_envs, bool)
    self._return = np.zeros(num_envs, np.float64)

  def spec(self) -> EnvSpec:
    return EnvSpec(ArraySpec((4,), np.float32), DiscreteSpec(2))

  def reset(self):
    for pole in self.poles:
      pole.reset()
    self._was_last[:] = False
    self._return[:] = 0.0
    return (host_timestep(np.full(self.num_envs, StepType.FIRST), np.zeros(self.num_envs),
                          np.ones(self.num_envs), self._observation()),
            episode_stats(np.zeros(self.num_envs, bool), self._return, np.zeros(self.num_envs)))

  def step(self, action):
    action = self._check_action(action)
    step_type = np.full(self.num_envs, StepType.MID, np.int32)
    reward, discount = np.ones(self.num_envs), np.ones(self.num_envs)
    lengths = np.zeros(self.num_envs, np.int64)
    for i, pole in enumerate(self.poles):
      busy(self.cost_us)
      if self._was_last[i]:  # The step after LAST starts the next episode.
        pole.reset()
        step_type[i], reward[i], self._return[i], self._was_last[i] = StepType.FIRST, 0, 0, False
        continue
      fell = pole.step(int(action[i]))
      self._return[i] += 1.0
      lengths[i] = pole.steps
      if fell or pole.steps >= self.limit:
        step_type[i], discount[i], self._was_last[i] = StepType.LAST, 0.0 if fell else 1.0, True
    stats = episode_stats(self._was_last.copy(), self._return.copy(), lengths)
    return host_timestep(step_type, reward, discount, self._observation()), stats

  def _observation(self):
    return np.asarray([pole.observation() for pole in self.poles], np.float32)


def sebulba() -> config_dict.ConfigDict:
  """PPO cartpole_sebulba's agent on `python_cartpole`: 2 actor threads x 16 environments
  on one device that acts and learns, policy lag 1."""
  c = cartpole_sebulba()
  c.env = presets.section("python_cartpole", cost_us=100.0, max_episode_steps=500)
  c.runtime.num_envs_per_actor = 16
  c.total_env_steps = 200_000
  c.topology.actor_devices, c.topology.learner_devices = (0,), (0,)
  return c


def seed() -> config_dict.ConfigDict:
  """The same agent and environments under SEED: 2 worker processes x 16 environments,
  one worker's rollouts per learner batch, as Sebulba's actor threads hand theirs over."""
  return presets.seed(sebulba(), num_local_workers=2, envs_per_worker=16)


get_config = presets.getter("gil_env", {"sebulba": sebulba, "seed": seed}, default="sebulba")
