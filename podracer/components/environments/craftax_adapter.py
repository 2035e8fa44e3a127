"""Craftax (Matthews et al. 2024): Crafter's open-ended survival game in JAX, as podracer
`Environment`s (`pip install -e ".[craftax]"`). Craftax speaks gymnax's interface, so this
is the gymnax adapter over `craftax.craftax_env.make_craftax_env_from_name(env_id,
auto_reset=False)`: "Craftax-Classic-Symbolic-v1" (a flat vector of 1,345), its pixels
(63 x 63 x 3, float), and the full "Craftax-Symbolic-v1" / "Craftax-Pixels-v1". Its
`done` includes the time limit (`max_timesteps`, 10,000 steps by default), which ends an
episode as truncated (discount 1); death terminates it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import jax

from podracer import registry
from podracer.components.environments.base import as_frame, observation_spec
from podracer.components.environments.gymnax_adapter import Gymnax
from podracer.components.environments.suites import api_of, require
from podracer.types import PyTree


@registry.environments.register("craftax")
class Craftax(Gymnax):
  """`make_craftax_env_from_name(env_id, auto_reset=False)`; `env_params` override its
  default params (e.g. max_timesteps)."""

  def __init__(self, env_id: str = "Craftax-Classic-Symbolic-v1",
               env_params: Optional[Mapping] = None):  # pylint: disable=super-init-not-called
    require("craftax", f"craftax {env_id}", "craftax")
    self.env_id = env_id
    self._renderer = None
    with api_of("craftax", f"craftax {env_id}"):
      from craftax.craftax_env import make_craftax_env_from_name  # pylint: disable=g-import-not-at-top
      self._env = make_craftax_env_from_name(env_id, auto_reset=False)
      params = self._env.default_params
      self._params = params.replace(**env_params) if env_params else params
      self._obs = observation_spec(self)

  def render(self, state: Any) -> jax.Array:
    """What a player sees, as Craftax-Classic's pixel renderer draws it (Classic only)."""
    if not self.env_id.startswith("Craftax-Classic"):
      raise NotImplementedError("podracer renders Craftax-Classic only.")
    if self._renderer is None:
      from craftax.craftax_classic import renderer  # pylint: disable=g-import-not-at-top
      self._renderer = renderer.make_craftax_pixel_renderer(10)
    return as_frame(self._renderer(state.env_state))

  def _time_up(self, env_state: PyTree) -> Any:
    return env_state.timestep >= self._params.max_timesteps

  def __repr__(self) -> str:
    return f"Craftax({self.env_id!r})"
