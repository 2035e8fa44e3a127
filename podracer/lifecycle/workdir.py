"""The run's workdir: checked before the build, and never silently overwritten.

A workdir that already holds a run's metrics is resumed from when it also holds a
checkpoint (podracer/lifecycle/checkpoint.py) and the same config, the step budget aside; it is
refused otherwise (a different config, or a run that cannot resume: nothing
checkpointed, so relaunching would start again from zero and overwrite its metrics)
unless the launcher is given `--fresh`, which moves the previous run's files into
`previous/<UTC time>/` inside the workdir and starts over. Nothing is ever deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import tempfile
import time
from typing import Any, Dict, Optional

from podracer.lifecycle.checkpoint import CHECKPOINT_DIR, has_checkpoint
from podracer.errors import ConfigError
from podracer.logs.metrics import METRICS_FILE, PLOT_FILE
from podracer.logs.tensorboard import EVENTS_PREFIX

CONFIG_FILE = "config.json"
PREVIOUS_DIR = "previous"
LOCK_FILE = ".podracer.lock"


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


@contextlib.contextmanager
def held(workdir: Optional[str]):
  """Holds `workdir` for this run with an OS lock on WORKDIR/.podracer.lock, so a second
  launch into it is refused (ConfigError naming the holder) instead of mixing two runs'
  metrics and checkpoints. The OS drops the lock when the process ends, however it ends:
  a killed run leaves nothing to clean up."""
  if not workdir:
    yield
    return
  check_writable(workdir)
  fd = os.open(os.path.join(workdir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
    os.close(fd)
    raise ConfigError(f"--workdir={workdir} is in use by a run that is still going "
                      f"({holder}); two runs in one workdir would mix their metrics and "
                      "checkpoints. Wait for it to end, stop it, or choose another "
                      "--workdir.") from e
  try:
    os.ftruncate(fd, 0)
    os.write(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
    yield
  finally:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def previous_records(workdir: str) -> int:
  """How many metrics records a previous run left in `workdir` (0 if none)."""
  try:
    with open(os.path.join(workdir, METRICS_FILE)) as f:
      return sum(1 for line in f if line.strip())
  except FileNotFoundError:
    return 0


# What may change between a run and its resumption.
RESUMABLE_CHANGES = ("total_env_steps", "log.progress_metrics",  # Budget; display;
                     "eval_video",                                 # what is watched;
                     "compile_cache",                              # where programs wait;
                     # a replica's devices and their layout (issue 78: the runtime checks
                     # that the mesh's runs x data rows stay the checkpoint's; Sebulba's
                     # and SEED's learner replicas, that the checkpoint's state fits).
                     "topology.model", "topology.sharding", "topology.num_devices",
                     "topology.learner_devices", "topology.num_learners",
                     # and the actors' devices (they hold nothing a checkpoint keeps).
                     "topology.actor_devices", "topology.num_actors",
                     "topology.actor_model")
# Keys a later version added to every config, at the value that behaves as before: a
# workdir whose config.json lacks one resumes (0.11.0: population-based training).
ADDED_KEYS = {"population.kind": "none", "population.interval": None,
              "population.truncation": 0.25, "population.fitness": "episode_return",
              "population.explore": "perturb",
              "population.perturb_factors": [0.8, 1.25], "schedule_from": None,
              "eval_video": 0}  # 0.12.0


# Outputs of some runtimes (SEED's worker logs and server address) and of `eval_video`.
OTHER_OUTPUTS = ("workers", "seed_address", "videos")


def prepare(workdir: Optional[str], fresh: bool = False,
            config: Optional[Any] = None) -> Optional[str]:
  """Checks `workdir` for `config`'s run; returns what it found to say, or None.

  With `fresh`, moves a previous run aside; with a checkpoint and the same config,
  leaves it for the run to resume; raises ConfigError for a run it would overwrite.
  """
  if not workdir:
    return None
  check_writable(workdir)
  records = previous_records(workdir)
  if not records and not has_checkpoint(workdir):
    return None
  if fresh:  # Also a run checkpointed before its first record (stopped early).
    return f"moved the previous run's files to {move_aside(workdir)}"
  again = (f"pass --fresh to move the previous run's files into "
           f"{os.path.join(workdir, PREVIOUS_DIR)}/ and start over, or choose another "
           "--workdir.")
  if not has_checkpoint(workdir):
    raise ConfigError(
        f"--workdir={workdir} already holds a run ({records} records in {METRICS_FILE}) "
        "with no checkpoint to resume from (it stopped before its first one), and a new run "
        f"would overwrite it: {again}")
  changed = _changed_keys(workdir, config)
  if changed:
    raise ConfigError(
        f"--workdir={workdir} holds a checkpointed run whose config differs in "
        f"{', '.join(f'`{k}`' for k in changed)}; a run resumes only with the same config "
        f"(only {', '.join(RESUMABLE_CHANGES)} may change): {again}")
  said = f"resuming the run in {workdir} from its latest checkpoint"
  done, budget = _last_env_steps(workdir), config and config.get("total_env_steps")
  if done is not None and budget and done >= budget:
    said += (f"; it already ran its {done:,} env steps (`total_env_steps` = {budget:,}), "
             "so nothing more is trained: a larger --config.total_env_steps goes on, "
             "--fresh or another --workdir starts a new run")
  return said


def _last_env_steps(workdir: str) -> Optional[int]:
  """The env steps of the last record a previous run left in `workdir`, if any."""
  try:
    with open(os.path.join(workdir, METRICS_FILE)) as f:
      lines = [line for line in f if line.strip()]
    return int(json.loads(lines[-1])["env_steps"]) if lines else None
  except (OSError, ValueError, KeyError, TypeError):
    return None


def _changed_keys(workdir: str, config: Optional[Any]) -> list:
  """Dotted keys whose values differ between the workdir's config.json and `config`."""
  if config is None:
    return []
  try:
    with open(os.path.join(workdir, CONFIG_FILE)) as f:
      old = json.load(f)
  except (OSError, ValueError):
    return [CONFIG_FILE]
  new = json.loads(config.to_json_best_effort(sort_keys=True))

  def flat(tree, prefix=""):
    if not isinstance(tree, dict):
      return {prefix[:-1]: tree}
    out = {}
    for k, v in tree.items():
      out.update(flat(v, f"{prefix}{k}."))
    return out

  old, new = flat(old), flat(new)
  old = {**{k: v for k, v in ADDED_KEYS.items() if not _has_section(old, k)}, **old}
  return sorted(k for k in set(old) | set(new)
                if k not in RESUMABLE_CHANGES and old.get(k) != new.get(k))


def _has_section(flat: Dict[str, Any], key: str) -> bool:
  """Whether a flat config has `key`'s section (an added key's absence then is a change)."""
  head = key.rpartition(".")[0]
  return any(k.startswith(head + ".") or k == head for k in flat)


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
    if (name in (METRICS_FILE, CONFIG_FILE, PLOT_FILE, CHECKPOINT_DIR) + OTHER_OUTPUTS
        or name.startswith(EVENTS_PREFIX)):
      shutil.move(os.path.join(workdir, name), os.path.join(target, name))
  return target
