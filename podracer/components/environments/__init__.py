"""Environments; importing this package registers them by name.

JAX environments (`Environment`: CartPole, Catch, PixelCatch, Pendulum, MaskedBandit, RepeatFirst,
and adapters of gymnax, Brax, MuJoCo Playground, Craftax, JAXtari, Jumanji, Navix, XLand-MiniGrid and Pgx, each suite
imported when such an environment is built; batched by `VectorEnv`) run inside compiled programs; host environments (`HostEnvironment`:
EnvPool, Gymnasium, dm_env, the Control Suite's dm_control) step on the CPU for the Sebulba runtime. EnvPool,
Gymnasium and dm_control are imported only when such an environment is built.
"""

from podracer.components.environments.base import (Environment, VectorEnv, VectorEnvState,
                                                   restart, transition)
from podracer.components.environments.cartpole import CartPole
from podracer.components.environments.brax_adapter import Brax
from podracer.components.environments.catch import Catch, PixelCatch
from podracer.components.environments.control_suite import DmControl
from podracer.components.environments.dm_env_adapter import CatchDmEnv, DmEnv
from podracer.components.environments.envpool_env import EnvPool
from podracer.components.environments.gymnasium_env import Gymnasium
from podracer.components.environments.gymnax_adapter import Gymnax
from podracer.components.environments.masked import MaskedBandit, MaskedBanditDmEnv
from podracer.components.environments.memory import RepeatFirst, RepeatFirstDmEnv
from podracer.components.environments.pendulum import Pendulum
from podracer.components.environments.craftax_adapter import Craftax
from podracer.components.environments.jaxtari_adapter import JAXtari
from podracer.components.environments.jumanji_adapter import Jumanji
from podracer.components.environments.navix_adapter import Navix, XLandMiniGrid
from podracer.components.environments.pgx_adapter import Pgx
from podracer.components.environments.playground_adapter import Playground
from podracer.components.environments.host import (EpisodeTracker, HostEnvironment,
                                                   episode_stats)

__all__ = ["Environment", "VectorEnv", "VectorEnvState", "restart", "transition",
           "CartPole", "Catch", "PixelCatch", "Pendulum", "Gymnax", "Brax", "HostEnvironment",
           "EpisodeTracker", "episode_stats", "EnvPool", "Gymnasium", "DmEnv", "CatchDmEnv",
           "MaskedBandit", "MaskedBanditDmEnv", "Craftax", "Jumanji", "Navix", "XLandMiniGrid",
           "Pgx", "JAXtari", "Playground", "RepeatFirst", "RepeatFirstDmEnv", "DmControl"]
