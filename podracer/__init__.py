"""podracer: the Podracer architectures (Anakin, Sebulba) as a pluggable JAX framework."""

__version__ = "0.22.0"

from podracer import deprecation as _deprecation  # noqa: E402

# Modules 0.9.0 grouped into packages (ARCHITECTURE.md): their old paths keep working,
# warning once, for the deprecation policy's two minor versions and 90 days.
MOVED_MODULES = {f"podracer.{old}": (f"podracer.{new}", "0.9.0") for old, new in dict(
    compose="config.compose", config_files="config.files", configs="config.presets",
    runs="config.runs", imports="registry.imports", validation="config.validation",
    checkpoint="lifecycle.checkpoint", workdir="lifecycle.workdir",
    guards="lifecycle.guards", preemption="lifecycle.preemption",
    evaluation="lifecycle.evaluation", memory="lifecycle.memory", metrics="logs.metrics",
    tensorboard="logs.tensorboard", wandb_log="logs.wandb", disk="logs.disk",
    launch_local="distributed.launch_local", transport="distributed.transport").items()}
# ... and those 0.17.0 moved, each into the package of its concern.
MOVED_MODULES.update({f"podracer.{old}": (f"podracer.{new}", "0.17.0") for old, new in dict(
    off_policy="kits.q_learning").items()})
_deprecation.install_moved_modules(MOVED_MODULES)


def check_environment(env, component=None):
  """Checks that a JAX environment's reset, step and spec() agree (podracer/contracts.py).

  Defined here so that `import podracer` stays light: JAX is imported on first use.
  """
  from podracer.contracts import check_environment as check  # pylint: disable=import-outside-toplevel
  check(env, component)
