"""Environments written in JAX; importing this package registers them by name."""

from podracer.components.environments.base import (Environment, VectorEnv, VectorEnvState,
                                                   restart, transition)
from podracer.components.environments.cartpole import CartPole
from podracer.components.environments.catch import Catch
from podracer.components.environments.gymnax_adapter import Gymnax

__all__ = ["Environment", "VectorEnv", "VectorEnvState", "restart", "transition",
           "CartPole", "Catch", "Gymnax"]
