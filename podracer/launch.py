"""Launches a run from a config file:

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin --workdir=DIR \
      [--config.KEY=VALUE ...]

Writes DIR/config.json (the resolved config), DIR/metrics.jsonl and, at the end,
DIR/learning_curve.png. Exit status: 0 when the run ends, 2 with one paragraph saying why
when the config cannot be built, 1 with the thread's traceback when a runtime thread fails,
130 on Ctrl-C (after all threads and environments are stopped).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

from absl import app, flags, logging
from ml_collections import config_flags

from podracer.errors import ConfigError, ThreadFailure

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, as path/to/config.py:NAME.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where metrics, config and plots go.")
_DEBUG = flags.DEFINE_bool("debug", False, "Show tracebacks for config errors too.")

EXIT_CONFIG_ERROR = 2
EXIT_THREAD_FAILURE = 1
EXIT_INTERRUPTED = 130


def _fail(message: str) -> None:
  sys.stderr.write("\n".join(textwrap.wrap(f"Config error: {message}", width=88)) + "\n")
  sys.exit(EXIT_CONFIG_ERROR)


def register_builtin_components() -> None:
  """Registers podracer's components and runtimes, and the agents that ship with it.

  The application, not the library, knows the built-in agents: `podracer/` never
  imports `agents`, so an agent is a plug-in like any user's.
  """
  from podracer import builder  # Imports JAX: keep `--help` fast.
  import agents  # noqa: F401  # pylint: disable=import-outside-toplevel

  builder.register_builtin_components()


def run(config, workdir=None, stream=sys.stdout):
  """Builds and runs `config`; returns the run's summary. Raises ConfigError."""
  from podracer import builder  # Imports JAX: keep `--help` fast.

  register_builtin_components()
  experiment = builder.build(config)
  if workdir:
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True) + "\n")
  summary = experiment.run(workdir=workdir, stream=stream)
  summary.pop("records", None)
  if stream:
    stream.write("result: " + json.dumps(summary) + "\n")
    if workdir:
      stream.write(f"wrote {workdir}/metrics.jsonl, config.json, learning_curve.png\n")
  return summary


def _parse_flags(argv):
  """absl's parser, with bad overrides reported as one paragraph instead of a traceback."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    message = str(e)
    if "Traceback (most recent call last)" in message:  # A config file raised: keep its error.
      message = message.split(":", 2)[0] + ": " + message.strip().splitlines()[-1]
    _fail(message)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    bad = [a for a in argv[1:] if a.startswith("--config.")]
    _fail(f"could not apply {' '.join(bad) or 'the command line'}: {e}. Overrides must "
          "name an existing config key, as --config.KEY=VALUE.")


def main(argv):
  logging.set_verbosity(logging.WARNING)  # Keep JAX's backend probing out of the output.
  if len(argv) > 1:
    _fail(f"unexpected arguments {' '.join(argv[1:])!r}; overrides look like "
          "--config.KEY=VALUE.")
  if _CONFIG.value is None:
    _fail("no config given; pass --config=path/to/config.py:NAME.")
  try:
    run(_CONFIG.value, _WORKDIR.value)
  except ConfigError as e:
    if _DEBUG.value:
      raise
    _fail(str(e))
  except ThreadFailure as e:
    # The runtime stopped its other threads and environments before raising.
    sys.stderr.write(f"Run stopped because a thread failed.\n{e}\n")
    sys.exit(EXIT_THREAD_FAILURE)
  except KeyboardInterrupt:
    # Runtimes stop their threads and environments before this propagates.
    sys.stderr.write("Interrupted; all threads and environments were stopped.\n")
    sys.exit(EXIT_INTERRUPTED)


def entry_point():
  app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
  entry_point()
