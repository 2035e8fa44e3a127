"""Podracer's built-in components; importing this package registers them all."""

from podracer.components import (distributions, environments, loggers, losses, networks,
                                 normalizers, optimizers, replay, shardings,
                                 topologies)

__all__ = ["distributions", "environments", "loggers", "losses", "networks", "normalizers",
           "optimizers", "replay", "shardings", "topologies"]
