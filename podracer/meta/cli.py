"""`python -m podracer.meta`: the config's flags as the launcher takes them and
`--config.meta.KEY=VALUE`; bad input exit 2 with one paragraph, a stop exit 130 or 143
saying what was kept."""

from __future__ import annotations

import os
import sys
import textwrap
from typing import List, Optional

import numpy as np

from podracer.config import runs as runs_lib
from podracer.errors import ConfigError, NonFiniteError
from podracer.lifecycle import preemption
from podracer.meta import files
from podracer.meta.config import MetaConfig
from podracer.meta.search import train

META_FLAG = "--config.meta."
EXIT_CONFIG_ERROR = 2


def _stopped(interrupt: KeyboardInterrupt, workdir: str) -> str:
  """What a stop kept: the generations done and the objective saved after the last one."""
  path = os.path.join(workdir, files.STATE_FILE)
  done = 0
  if os.path.isfile(path):
    with np.load(path) as saved:
      done = int(saved["generation"])
  kept = (f"{workdir}/{files.STATE_FILE} keeps {done} generation{'s' * (done != 1)} and "
          f"{files.OBJECTIVE_FILE} the mean theta after the last; relaunch with the same "
          "flags to resume." if done else "no generation had finished, nothing was saved.")
  return f"podracer.meta: stopped by {preemption.stopped_by(interrupt)}; {kept}\n"


def main(argv: Optional[List[str]] = None) -> int:
  """`python -m podracer.meta`: the config's flags as the launcher takes them, and
  `--config.meta.KEY=VALUE`."""
  argv = list(sys.argv if argv is None else argv)
  meta_args, rest = runs_lib.sweep_args(argv[1:], META_FLAG)
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  values = flags.FlagValues()
  config_flag = config_flags.DEFINE_config_file("config", None, "PPO Anakin config.",
                                                flag_values=values)
  workdir = flags.DEFINE_string("workdir", None, "Where the meta-training goes.",
                                flag_values=values)
  saved, sys.argv = sys.argv, [argv[0], *rest]  # config_flags reads overrides from it.
  try:
    values(sys.argv)
    if not workdir.value or config_flag.value is None:
      raise ConfigError("podracer.meta needs --config=path/to/config.py:NAME and "
                        "--workdir=DIR.")
    from podracer import launch  # pylint: disable=import-outside-toplevel
    launch.register_components_and_agents()
    preemption.handle_sigint()
    preemption.handle_sigterm()
    train(config_flag.value, MetaConfig.from_args(meta_args), workdir.value)
  except KeyboardInterrupt as interrupt:
    sys.stderr.write(_stopped(interrupt, workdir.value))
    return preemption.exit_status(interrupt)
  except (ConfigError, flags.Error) as e:
    sys.stderr.write("\n".join(textwrap.wrap(f"Config error: {e}", 88,
                                             break_long_words=False)) + "\n")
    return EXIT_CONFIG_ERROR
  except NonFiniteError as e:
    sys.stderr.write("\n".join(textwrap.wrap(str(e), 88, break_long_words=False)) + "\n")
    return 1
  finally:
    sys.argv = saved
  return 0
