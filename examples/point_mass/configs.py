"""PPO and SAC on the point mass of examples/point_mass/point_mass.py, under Anakin:

  python -m podracer.launch --config=examples/point_mass/configs.py:ppo --workdir=runs/pm_ppo
  python -m podracer.launch --config=examples/point_mass/configs.py:sac --workdir=runs/pm_sac

Each starts from the agent's Pendulum config (agents/ppo/config.py, agents/sac/config.py:
`pendulum_anakin`, the configs to start from for a continuous task of one's own in JAX)
and swaps the environment; `imports` registers `point_mass` wherever the config is read.
"""

import os

from agents.ppo.config import pendulum_anakin as ppo_pendulum
from agents.sac.config import pendulum_anakin as sac_pendulum
from podracer.config import presets

POINT_MASS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "point_mass.py")


def _on_point_mass(c, total_env_steps):
  c.imports = (POINT_MASS,)
  c.env = presets.section("point_mass", max_episode_steps=200)
  c.total_env_steps = total_env_steps
  c.topology.num_devices = 1
  return c


def ppo():
  """PPO's continuous settings (CleanRL's: a clipped normal, 8 envs x 256 steps)."""
  return _on_point_mass(ppo_pendulum(), 98_304)  # 12 calls of 8,192 steps.


def sac():
  """SAC's Pendulum settings (8 envs, one update per 8 env steps, 64 x 64 networks) but
  the temperature's start: 0.1, not 1, for rewards of about 1 a step (Pendulum's are up to
  16): from 1 the entropy bonus outweighed the reward for the first 30K steps."""
  c = _on_point_mass(sac_pendulum(), 30_000)
  c.agent.initial_alpha = 0.1
  return c


get_config = presets.getter("point mass", {"ppo": ppo, "sac": sac}, default="ppo")
