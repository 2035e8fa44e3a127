"""Checkpoints of a run's whole state, written with orbax-checkpoint, and resume.

A runtime that can resume takes a `Checkpointer` in its `run` and calls `maybe_save`
as it goes, `save` at the end and when it is stopped (SIGTERM, Ctrl-C), and `restore`
before its first step. A checkpoint holds the runtime's state pytree and, beside it (JSON),
the step, how many records `metrics.jsonl` had and the runtime's counters, so that a
resumed run drops the records written after the checkpoint and appends from there.

  Anakin   the whole program state (networks, optimizer state, device replay, environment
           states, RNG keys, all replicas): a resumed run repeats exactly what the
           uninterrupted run would have done.
  Sebulba  the learner's state (networks, optimizer state, device replay, RNG key) and its
           counters (env steps, updates, episodes); a Reverb replay checkpoints itself
           through its client (`save_replay`). Host environments are not saved: resumed
           actors start new episodes, and the episodes in flight at the checkpoint are lost.

Checkpoints live in WORKDIR/checkpoints/<call>/. Orbax writes each one under a temporary
name and renames it when complete, so a crash while saving never leaves a broken latest
checkpoint; the last `keep` are kept. A checkpoint damaged later (a truncated file) is
skipped with a line saying which and why: the run resumes from the newest one that
restores, and `metrics.jsonl` is rewound to it; if none restores, a ConfigError names
the directory and `--fresh`. Saves copy the state to the host first and are
synchronous: the runtime may donate its state to the next step, so an asynchronous save of
device buffers could read memory the step is already overwriting.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import sys
import time
from typing import Any, Dict, Optional, Tuple

import jax
import numpy as np

from podracer import disk, distributed
from podracer.errors import ConfigError

CHECKPOINT_DIR = "checkpoints"
TMP_MARK = ".orbax-checkpoint-tmp"  # in the names of orbax's checkpoints being written


def for_run(config: Any, runtime: Any, workdir: Optional[str],
            stream=sys.stderr) -> Optional["Checkpointer"]:
  """A checkpointer for a run in `workdir`, or None: no workdir, a runtime that cannot
  resume (its `run` takes no `checkpointer`), or orbax-checkpoint missing (said once)."""
  if not workdir or "checkpointer" not in inspect.signature(runtime.run).parameters:
    return None
  if distributed.process_count() > 1:  # Each process's state holds only its own replicas.
    if stream:
      stream.write("Not writing checkpoints: a run over several processes cannot resume "
                   "yet.\n")
    return None
  try:
    return Checkpointer(workdir, interval=config.get("checkpoint_interval", 600.0),
                        keep=config.get("checkpoints_to_keep", 3))
  except ImportError as e:  # A venv made before it was a dependency: still run.
    if stream:
      stream.write(f"Not writing checkpoints: {e} (pip install orbax-checkpoint, see "
                   "setup.py).\n")
    return None


def has_checkpoint(workdir: str) -> bool:
  path = os.path.join(workdir, CHECKPOINT_DIR)
  return os.path.isdir(path) and any(name.isdigit() for name in os.listdir(path))


def _closed_loop_error(exc_type, value) -> bool:
  return (exc_type is RuntimeError and str(value) == "Event loop is closed")


def quiet_closed_event_loops() -> None:
  """Drops asyncio's 'Event loop is closed' errors that tensorstore's I/O callbacks raise
  after orbax has closed its event loop (a failed restore, the end of a failed run): they
  are reported as unraisable from a callback, not raised in the run, and mean nothing
  to the user. Every other error is reported as before."""
  if getattr(sys.unraisablehook, "podracer_quiet", False):
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    if not _closed_loop_error(unraisable.exc_type, unraisable.exc_value):
      previous(unraisable)
  hook.podracer_quiet = True
  sys.unraisablehook = hook


class _SkippedCheckpointReads(logging.Filter):
  """Drops asyncio's 'exception was never retrieved' reports of the reads of a checkpoint
  that was skipped (its other reads' failures, collected when their futures are freed);
  the skip itself was said in one line."""

  def __init__(self, directory: str):
    super().__init__()
    self.directory = directory

  def filter(self, record: logging.LogRecord) -> bool:
    return not ("was never retrieved" in record.getMessage()
                and self.directory in record.getMessage())


class _DiskFailureReports(logging.Filter):
  """Drops the reports (with tracebacks) that orbax's threads log of a write the disk
  refused: the run stops with one DiskError paragraph saying it (podracer/disk.py)."""

  def filter(self, record: logging.LogRecord) -> bool:
    error = record.exc_info[1] if record.exc_info else None
    return disk.disk_cause(error) is None and disk.reason_in(record.getMessage()) is None


def _quiet_disk_failure_reports() -> None:
  for name in ("absl", "asyncio"):
    logger = logging.getLogger(name)
    if not any(isinstance(f, _DiskFailureReports) for f in logger.filters):
      logger.addFilter(_DiskFailureReports())


class Checkpointer:
  """Saves every `interval` seconds (and when asked); restores the latest."""

  def __init__(self, workdir: str, interval: float = 600.0, keep: int = 3,
               stream=sys.stderr):
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
    quiet_closed_event_loops()
    _quiet_disk_failure_reports()
    self._ocp, self._stream = ocp, stream
    self._usable: Optional[Tuple[int, Dict[str, Any], Dict[str, np.ndarray]]] = None
    self._good: set = set()  # steps this run saved or resumed from
    self.directory = os.path.abspath(os.path.join(workdir, CHECKPOINT_DIR))
    self.interval, self.keep = interval, keep
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=False))
    self._last_save = time.monotonic()
    self.saved_step: Optional[int] = None
    self.saved_env_steps: Optional[int] = None

  def latest(self) -> Optional[int]:
    """The step of the newest checkpoint that restores (see `_newest_usable`), or None."""
    usable = self._newest_usable()
    return None if usable is None else usable[0]

  def meta(self) -> Optional[Dict[str, Any]]:
    """That checkpoint's JSON side: step, records, the runtime's counters; or None."""
    usable = self._newest_usable()
    return None if usable is None else dict(usable[1])

  def _newest_usable(self):
    """(step, meta, state arrays) of the newest checkpoint that restores whole, read once;
    newer ones that do not are skipped, each with a line saying why."""
    if self._usable is None:
      steps = sorted(self._manager.all_steps(), reverse=True)
      for step in steps:
        try:
          restored = self._manager.restore(step, args=self._ocp.args.Composite(
              state=self._ocp.args.StandardRestore(), meta=self._ocp.args.JsonRestore()))
          self._usable = (step, dict(restored["meta"]),
                          {k: np.asarray(v) for k, v in restored["state"].items()})
          self._good.add(step)
          break
        except Exception as e:  # pylint: disable=broad-except -- any damage: try older
          asyncio_logger = logging.getLogger("asyncio")
          if not any(isinstance(f, _SkippedCheckpointReads) for f in asyncio_logger.filters):
            asyncio_logger.addFilter(_SkippedCheckpointReads(self.directory))
          if self._stream:
            why = " ".join(str(e).split())[:300]
            self._stream.write(f"Skipping checkpoint {step} in {self.directory}: it does "
                               f"not restore ({type(e).__name__}: {why}).\n")
      if steps and self._usable is None:
        raise ConfigError(
            f"No checkpoint in {self.directory} restores (tried {len(steps)}: "
            f"{', '.join(map(str, steps))}), so the run cannot resume; relaunch with "
            "--fresh to move it aside and start over.")
    return self._usable

  def num_records(self) -> Optional[int]:
    """How many metrics records the latest checkpoint's run had written, or None."""
    meta = self.meta()
    return None if meta is None else int(meta["records"])

  def due(self) -> bool:
    return time.monotonic() - self._last_save >= self.interval

  def maybe_save(self, step: int, state: Any, num_records: int, **counters: Any) -> None:
    if self.due():
      self.save(step, state, num_records, **counters)

  def save(self, step: int, state: Any, num_records: int, **counters: Any) -> None:
    """Saves `state` as checkpoint `step`; `counters` (JSON: env_steps, ...) beside it."""
    if step not in self._good:  # Else this state is saved already (or resumed from).
      if step in self._manager.all_steps():  # A damaged checkpoint the resume skipped.
        self._manager.delete(step)
      self._save(step, state, num_records, counters)
      self._good.add(step)
    self.saved_step, self.saved_env_steps = step, counters.get("env_steps")

  def _save(self, step: int, state: Any, num_records: int, counters: Dict[str, Any]):
    with disk.writing(f"checkpoint {step}", self.directory, cleanup=self._remove_partial):
      self._write(step, state, num_records, counters)

  def _remove_partial(self) -> None:
    """Removes what a failed save left: orbax's temporary directories (a complete
    checkpoint is renamed from one), so a relaunch resumes from the last whole one."""
    if not os.path.isdir(self.directory):
      return
    for name in os.listdir(self.directory):
      if TMP_MARK in name:
        shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

  def _write(self, step: int, state: Any, num_records: int, counters: Dict[str, Any]):
    self._manager.save(step, args=self._ocp.args.Composite(
        state=self._ocp.args.StandardSave(_host_leaves(state)),
        meta=self._ocp.args.JsonSave(dict(counters, step=step, records=num_records))))
    self._manager.wait_until_finished()
    self._last_save = time.monotonic()

  def restore(self, like: Any) -> Tuple[Any, int]:
    """The newest usable checkpoint's state (host arrays, the pytree of `like`) and step."""
    step, _, restored = self._newest_usable()
    template = _host_leaves(like)
    if sorted(restored) != sorted(template) or any(
        restored[k].shape != v.shape for k, v in template.items()):
      raise ConfigError(f"Checkpoint {step} in {self.directory} holds a state of another "
                        "shape than this run's; relaunch with --fresh to start over.")
    leaves = [_as_like(restored[k].astype(template[k].dtype), x)
              for k, x in zip(sorted(template), jax.tree.leaves(like))]
    self._usable = (step, self._usable[1], {})  # The run holds the state now.
    return jax.tree.unflatten(jax.tree.structure(like), leaves), step

  def close(self) -> None:
    self._manager.close()


# Saved as a flat {index: array} dict: orbax may rebuild NamedTuples as dicts, whose
# sorted keys would reorder the leaves. Typed PRNG keys are saved as their key data.


def _is_key(x: Any) -> bool:
  return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _host_leaves(tree: Any) -> Dict[str, np.ndarray]:
  leaves = [jax.random.key_data(x) if _is_key(x) else x for x in jax.tree.leaves(tree)]
  return {f"{i:06d}": np.asarray(x) for i, x in enumerate(jax.device_get(leaves))}


def _as_like(value: np.ndarray, like: Any) -> Any:
  if _is_key(like):
    return jax.random.wrap_key_data(value, impl=jax.random.key_impl(like))
  return value
