"""The run's workdir: checked before the build, and never silently overwritten.

A workdir that already holds a run's metrics is refused (runs cannot resume yet: nothing
is checkpointed, so relaunching would start again from zero and overwrite them) unless
the launcher is given `--fresh`, which moves the previous run's files into
`previous/<UTC time>/` inside the workdir and starts over. Nothing is ever deleted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Optional

from podracer.errors import ConfigError
from podracer.metrics import METRICS_FILE, PLOT_FILE
from podracer.tensorboard import EVENTS_PREFIX

CONFIG_FILE = "config.json"
PREVIOUS_DIR = "previous"


def check_writable(workdir: str) -> None:
  """The workdir must be creatable and writable: found now, not after the build."""
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    reason = e.strerror or str(e)
    raise ConfigError(f"--workdir={workdir} cannot be used: {reason}. Metrics, the "
                      "config and the plot are written there; pass a directory you can "
                      "create and write to.") from e


def previous_records(workdir: str) -> int:
  """How many metrics records a previous run left in `workdir` (0 if none)."""
  try:
    with open(os.path.join(workdir, METRICS_FILE)) as f:
      return sum(1 for line in f if line.strip())
  except FileNotFoundError:
    return 0


def prepare(workdir: Optional[str], fresh: bool = False) -> Optional[str]:
  """Checks `workdir` for a new run; with `fresh`, moves a previous run aside.

  Returns the folder the previous run's files were moved to, or None.
  """
  if not workdir:
    return None
  check_writable(workdir)
  records = previous_records(workdir)
  if not records:
    return None
  if not fresh:
    raise ConfigError(
        f"--workdir={workdir} already holds a run ({records} records in {METRICS_FILE}). "
        "Runs cannot resume yet, and a new run would overwrite them: pass --fresh to move "
        f"the previous run's files into {os.path.join(workdir, PREVIOUS_DIR)}/ and start "
        "over, or choose another --workdir.")
  return move_aside(workdir)


def move_aside(workdir: str) -> str:
  """Moves the run outputs in `workdir` into a new `previous/<UTC time>/` folder."""
  stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
  target = os.path.join(workdir, PREVIOUS_DIR, stamp)
  suffix = 1
  while os.path.exists(target):  # Two relaunches within a second.
    target = os.path.join(workdir, PREVIOUS_DIR, f"{stamp}-{suffix}")
    suffix += 1
  os.makedirs(target)
  for name in sorted(os.listdir(workdir)):
    if name in (METRICS_FILE, CONFIG_FILE, PLOT_FILE) or name.startswith(EVENTS_PREFIX):
      shutil.move(os.path.join(workdir, name), os.path.join(target, name))
  return target
