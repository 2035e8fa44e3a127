"""Podracer's built-in components; importing this package registers them all."""

from podracer.components import (environments, loggers, losses, networks, optimizers,
                                 replay, topologies)

__all__ = ["environments", "loggers", "losses", "networks", "optimizers", "replay",
           "topologies"]
