"""podracer: the Podracer architectures (Anakin, Sebulba) as a pluggable JAX framework."""

__version__ = "0.9.0"


def check_environment(env, component=None):
  """Checks that a JAX environment's reset, step and spec() agree (podracer/contracts.py).

  Defined here so that `import podracer` stays light: JAX is imported on first use.
  """
  from podracer.contracts import check_environment as check  # pylint: disable=import-outside-toplevel
  check(env, component)
