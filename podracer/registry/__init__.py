"""One registry per kind of component.

Register your own component from any module, or straight in your config file:

    from podracer import registry

    @registry.environments.register("my_env")
    class MyEnv(podracer.components.environments.Environment): ...

then select it with `config.env.name = "my_env"`. Everything under the config section
other than `name` is passed to the factory as keyword arguments (see `build`).
"""

from podracer.registry.registry import (DuplicateComponentError, Registry,
                                        UnknownComponentError)
from podracer.registry.build import build, check_kwargs, parameters

environments = Registry("environment")
networks = Registry("network")
losses = Registry("loss")
optimizers = Registry("optimizer")
replay = Registry("replay")
topologies = Registry("device topology")
agents = Registry("agent")
runtimes = Registry("runtime")
loggers = Registry("logger")
distributions = Registry("distribution")
normalizers = Registry("normalizer")
shardings = Registry("sharding")

ALL = {
    "environments": environments,
    "networks": networks,
    "losses": losses,
    "optimizers": optimizers,
    "replay": replay,
    "topologies": topologies,
    "agents": agents,
    "runtimes": runtimes,
    "loggers": loggers,
    "distributions": distributions,
    "normalizers": normalizers,
    "shardings": shardings,
}

__all__ = ["Registry", "UnknownComponentError", "DuplicateComponentError", "build",
           "check_kwargs", "parameters", "ALL", *ALL]
