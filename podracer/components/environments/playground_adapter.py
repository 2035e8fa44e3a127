"""Any MuJoCo Playground task as a podracer `Environment` (PyPI `playground`, in the
default install lane with `.[jax-envs]`; its JAX is too new for the reverb lane).

Playground's `MjxEnv` steps as Brax's environments do (`reset(key)`, `step(state,
action)`, a state with `obs`, `reward`, `done`), so this is the `brax` adapter's
`StepLimited` with Playground's loader: `registry.load(env_name, config_overrides=...)`,
episodes cut at the task's own `episode_length` (1,000 for the dm_control suite) unless
one is given, actions in [-1, 1] as Playground's tasks take them. `impl` picks the
physics: `jax` (MJX, the default here: a compiled JAX program on any device) or `warp`
(MuJoCo Warp's kernels, Playground's own default, written for NVIDIA GPUs).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from podracer import registry
from podracer.components.environments.brax_adapter import StepLimited
from podracer.errors import require

IMPLS = ("jax", "warp")


@registry.environments.register("playground")
class Playground(StepLimited):
  """`mujoco_playground.registry.load(env_name, config_overrides={"impl": impl, ...})`,
  its episodes cut at `episode_length` steps (0: the task's own)."""

  def __init__(self, env_name: str = "CartpoleBalance", impl: str = "jax",
               episode_length: int = 0,
               config_overrides: Optional[Mapping[str, Any]] = None):
    playground = require(
        "mujoco_playground", f"The 'playground' environment ({env_name})",
        "the default install lane has it (pip install -e \".[jax-envs]\", or pip install "
        "playground); the reverb lane has none: its JAX is too old for it")
    if impl not in IMPLS:
      raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    if episode_length < 0:
      raise ValueError(f"episode_length must be 0 (the task's own) or positive, got "
                       f"{episode_length}")
    known = list(playground.registry.ALL_ENVS)
    if env_name not in known:
      raise ValueError(f"MuJoCo Playground has no environment {env_name!r}; it has "
                       f"{', '.join(known)}")
    self.env_name = env_name
    overrides = {"impl": impl, **dict(config_overrides or {})}
    self._env = playground.registry.load(env_name, config_overrides=overrides)
    default = playground.registry.get_default_config(env_name).episode_length
    self.episode_length = int(episode_length or default)
    self._bounded_spec(self._env.action_size)

  def __repr__(self) -> str:
    return f"Playground({self.env_name!r})"
