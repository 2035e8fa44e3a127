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

Arrays split over a replica's devices (a `model` axis, issue 78) are not copied whole to
the host: orbax writes them shard by shard, with their layout, and a resume reads them
straight into the shards of the resumed run's arrays, whatever its `model` size (the
check that the newest checkpoint restores still reads it once on the host).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import numpy as np

from podracer import mesh as mesh_lib, distributed
from podracer.logs import disk
from podracer.errors import ConfigError

CHECKPOINT_DIR = "checkpoints"
COMMITTED = "committed"  # the checkpoints every process of a run finished (markers)
TMP_MARK = ".orbax-checkpoint-tmp"  # in the names of orbax's checkpoints being written


def for_run(config: Any, runtime: Any, workdir: Optional[str],
            stream=sys.stderr) -> Optional["Checkpointer"]:
  """A checkpointer for a run in `workdir`, or None: no workdir, a runtime that cannot
  resume (its `checkpoints()` is False), or orbax-checkpoint missing (said once)."""
  if not workdir or not runtime.checkpoints():
    return None
  several = distributed.process_count() > 1
  try:
    return (MultiProcessCheckpointer if several else Checkpointer)(
        workdir, interval=config.get("checkpoint_interval", 600.0),
        keep=config.get("checkpoints_to_keep", 3))
  except ImportError as e:  # A venv made before it was a dependency: still run.
    if stream:
      stream.write(f"Not writing checkpoints: {e} (pip install orbax-checkpoint, see "
                   "setup.py).\n")
    return None


def _remove_temporaries(directory: str) -> int:
  """Removes orbax's temporary directories (checkpoints being written) in `directory`;
  returns how many there were."""
  partial = [n for n in (os.listdir(directory) if os.path.isdir(directory) else [])
             if TMP_MARK in n]
  for name in partial:
    shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
  return len(partial)


def has_checkpoint(workdir: str) -> bool:
  path = os.path.join(workdir, CHECKPOINT_DIR)
  # One process's orbax checkpoints, or the commit markers of a run over several.
  return bool(_numbered(path) or _numbered(os.path.join(path, COMMITTED)))


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
  refused: the run stops with one DiskError paragraph saying it (podracer/logs/disk.py)."""

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
    self._check_kind()
    self._manager = self._new_manager(keep)
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
      steps = self._steps()
      for step in steps:
        try:
          meta, arrays = self._restored(step)
          self._usable = (step, meta, arrays)
          self._good.add(step)
          break
        except ConfigError:  # Another layout of processes and devices: refuse, not skip.
          raise
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

  def _own_directory(self) -> str:
    """Where this process's orbax checkpoints go."""
    return self.directory

  def _check_kind(self) -> None:
    """A ConfigError if the workdir holds a run over several processes' checkpoints."""
    marker = _newest_marker(self.directory)
    if marker is not None:
      raise ConfigError(
          f"The checkpoints in {self.directory} were written by a run over "
          f"{marker.get('num_processes', 'several')} processes; this run has 1. A run "
          "resumes only on as many processes and devices as it had: relaunch it so, or "
          "with --fresh to start over.")

  def _new_manager(self, keep: int) -> Any:
    # What an earlier run's failed save left goes first, here and synchronously: orbax's
    # own `cleanup_tmp_directories` does it in a thread that a run ending at once (a
    # config error) leaves to crash at the interpreter's shutdown.
    _remove_temporaries(self.directory)
    return self._ocp.CheckpointManager(
        self.directory, options=self._ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=False),
        item_handlers=dict(state=self._ocp.StandardCheckpointHandler(),
                           meta=self._ocp.JsonCheckpointHandler()))

  def _steps(self):
    """The steps of the checkpoints there are, newest first."""
    return sorted(self._manager.all_steps(), reverse=True)

  def due(self) -> bool:
    return time.monotonic() - self._last_save >= self.interval

  def decide(self) -> Tuple[bool, bool]:
    """(save now, stop now) at a step boundary: here, whether the interval is due (a
    stop comes from the signal itself); over several processes, agreed by all."""
    return self.due(), False

  def maybe_save(self, step: int, state: Any, num_records: int, **counters: Any) -> bool:
    """Saves if `decide` says so; returns whether the run must stop here (agreed)."""
    save, stop = self.decide()
    if save or stop:
      self.save(step, state, num_records, **counters)
    return stop

  def save(self, step: int, state: Any, num_records: int, **counters: Any) -> None:
    """Saves `state` as checkpoint `step`; `counters` (JSON: env_steps, ...) beside it."""
    if step not in self._good:  # Else this state is saved already (or resumed from).
      self._delete(step)  # A damaged checkpoint the resume skipped, if any.
      self._save(step, state, num_records, counters)
      self._good.add(step)
      self._commit(step)
    self.saved_step, self.saved_env_steps = step, counters.get("env_steps")

  def _delete(self, step: int) -> None:
    if step in self._manager.all_steps():
      self._manager.delete(step)

  def _save(self, step: int, state: Any, num_records: int, counters: Dict[str, Any]):
    with disk.writing(f"checkpoint {step}", self.directory, cleanup=self._remove_partial):
      self._write(step, state, num_records, counters)

  def _remove_partial(self) -> None:
    """Removes what a failed save left: orbax's temporary directories (a complete
    checkpoint is renamed from one), so a relaunch resumes from the last whole one.
    Tensorstore's writes still in flight when a save failed may land once the removal
    frees space, so this repeats until none has appeared for half a second (at most 3 s)."""
    quiet_since = start = time.monotonic()
    while time.monotonic() - quiet_since < 0.5 and time.monotonic() - start < 3.0:
      if _remove_temporaries(self.directory):
        quiet_since = time.monotonic()
      time.sleep(0.05)

  def _write(self, step: int, state: Any, num_records: int, counters: Dict[str, Any]):
    """The state's arrays as host arrays, but those split over a replica's devices (a
    `model` axis), which orbax writes shard by shard from their devices; their keys in
    the meta's `sharded`."""
    leaves = _saved_leaves(state)
    meta = dict(counters, step=step, records=num_records, **self.layout())
    sharded = sorted(k for k, v in leaves.items() if isinstance(v, jax.Array))
    if sharded:
      meta["sharded"] = sharded
    self._manager.save(step, args=self._ocp.args.Composite(
        state=self._ocp.args.StandardSave(leaves), meta=self._ocp.args.JsonSave(meta)))
    self._manager.wait_until_finished()
    self._last_save = time.monotonic()

  def _commit(self, step: int) -> None:
    """What makes a saved checkpoint count: here, orbax's rename of it (done)."""

  def layout(self) -> Dict[str, int]:
    """How many processes and devices wrote a checkpoint: a run resumes only on the same."""
    return dict(num_processes=distributed.process_count(),
                num_local_devices=jax.local_device_count())

  def _restored(self, step: int) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """(meta, state arrays) of checkpoint `step`, read whole on the host (which checks
    that every array restores); raises if it does not restore."""
    restored = self._manager.restore(step, args=self._ocp.args.Composite(
        state=self._ocp.args.StandardRestore(self._host_targets(step)),
        meta=self._ocp.args.JsonRestore()))
    return dict(restored["meta"]), {k: np.asarray(v) for k, v in restored["state"].items()}

  def _host_targets(self, step: int) -> Dict[str, np.ndarray]:
    """Host arrays of the shapes and dtypes of checkpoint `step`'s arrays: orbax reads
    those written shard by shard into them, whatever devices this run has."""
    tree = self._manager.item_metadata(step)["state"]
    tree = getattr(tree, "tree", tree)
    return {k: np.empty(m.shape, m.dtype) for k, m in tree.items()}

  def restore(self, like: Any) -> Tuple[Any, int]:
    """The newest usable checkpoint's state (the pytree of `like`) and step: host arrays,
    but those saved over a `model` axis, read by orbax straight into the shards of
    `like`'s arrays (another `model` size than the saved one included)."""
    step, meta, restored = self._newest_usable()
    like_leaves = jax.tree.leaves(like)
    template = {f"{i:06d}": _shape_and_dtype(x) for i, x in enumerate(like_leaves)}
    if sorted(restored) != sorted(template) or any(
        restored[k].shape != shape for k, (shape, _) in template.items()):
      raise ConfigError(f"Checkpoint {step} in {self.directory} holds a state of another "
                        "shape than this run's; relaunch with --fresh to start over.")
    sharded = self._read_into_shards(step, meta.get("sharded", ()), like_leaves, restored)
    leaves = [sharded[k] if k in sharded else _as_like(restored[k].astype(template[k][1]), x)
              for k, x in zip(sorted(template), like_leaves)]
    self._usable = (step, meta, {})  # The run holds the state now.
    return jax.tree.unflatten(jax.tree.structure(like), leaves), step

  def _read_into_shards(self, step: int, keys: Any, like_leaves: List[Any],
                        restored: Dict[str, np.ndarray]) -> Dict[str, jax.Array]:
    """Checkpoint `step`'s arrays `keys` (saved over a `model` axis), each read into the
    sharding of its leaf of `like_leaves` (jax.Arrays): no host or device holds one whole.
    The rest come back as the host arrays they are (`restored`, read again)."""
    keys = [k for k in keys if isinstance(like_leaves[int(k)], jax.Array)]
    if not keys:
      return {}
    target = dict(restored)
    for k in keys:
      x = like_leaves[int(k)]
      target[k] = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    read = self._manager.restore(step, args=self._ocp.args.Composite(
        state=self._ocp.args.StandardRestore(target)))["state"]
    return {k: read[k] for k in keys}

  def close(self) -> None:
    self._manager.close()


class MultiProcessCheckpointer(Checkpointer):
  """Checkpoints of a run over several processes, on a shared workdir. Each process writes
  its own part of every checkpoint (its environment states, actor states, keys, its
  slice of a device replay) into WORKDIR/checkpoints/process_<i>/<step>/: the state's
  host arrays (state.npz) and the meta (meta.json), written under a temporary name,
  synced and renamed, so a part is whole or absent. What every process holds alike (the
  replicated parameters and optimizer state: arrays whose rows are one row repeated,
  the same on every process) is written once, one row, by process 0 (replicated.npz).
  (Not orbax: its numpy arrays are written by process 0 only, and these parts are each
  one process's own.) Once every
  process has finished its part, process 0 marks the checkpoint committed
  (WORKDIR/checkpoints/committed/<step>, also written whole by a rename): a checkpoint
  not every process finished never counts. Saves happen at the same step on every
  process: at each step boundary process 0's clock decides whether one is due, and a
  SIGTERM to any process (SLURM signals every rank) becomes a stop that all agree on, at
  the same step, with a save (`preemption.coordinate`). A resume needs as many processes
  and devices as the checkpoint had (else a ConfigError naming both); every process
  restores its part of the newest committed checkpoint, and if one cannot (a file cut
  short: a CRC error), all go on to the one before.
  """

  def __init__(self, workdir: str, interval: float = 600.0, keep: int = 3,
               stream=sys.stderr):
    # Process 0 says what is skipped; the others would only say it again.
    super().__init__(workdir, interval, keep, stream if distributed.is_main() else None)
    self._exchanges = 0
    os.makedirs(self._own_directory(), exist_ok=True)
    from podracer.lifecycle import preemption  # pylint: disable=import-outside-toplevel
    preemption.coordinate()

  def _own_directory(self) -> str:
    return os.path.join(self.directory, f"process_{distributed.process_index()}")

  def _check_kind(self) -> None:
    """A ConfigError if the workdir holds the checkpoints of a run of one process."""
    if _numbered(self.directory):
      raise ConfigError(
          f"The checkpoints in {self.directory} were written by a run of one process; this "
          f"run has {distributed.process_count()}. A run resumes only on as many processes "
          "and devices as it had: relaunch it so, or with --fresh to start over.")

  def _new_manager(self, keep: int) -> None:
    return None  # Its parts are written here (`_write`): see the class's docstring.

  def _part(self, step: int) -> str:
    return os.path.join(self._own_directory(), str(step))

  def _delete(self, step: int) -> None:
    shutil.rmtree(self._part(step), ignore_errors=True)

  def _remove_partial(self) -> None:
    own = self._own_directory()
    for name in os.listdir(own) if os.path.isdir(own) else ():
      if name.endswith(".partial"):
        shutil.rmtree(os.path.join(own, name), ignore_errors=True)

  def _write(self, step: int, state: Any, num_records: int, counters: Dict[str, Any]):
    """This process's part: its state's host arrays and the meta, in a directory written
    whole under a temporary name, synced, then renamed. The replicated arrays (see
    `_replicated`) go once, into process 0's part (replicated.npz), the rest into each
    process's state.npz."""
    arrays = _host_leaves(state)
    replicated = self._replicated(step, arrays)
    partial = os.path.join(self._own_directory(), f".{step}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    own = {k: v for k, v in arrays.items() if k not in replicated}
    once = {k: arrays[k][0] for k in replicated} if distributed.is_main() else {}
    _write_synced(os.path.join(partial, "state.npz"), lambda f: np.savez(f, **own))
    if once:
      _write_synced(os.path.join(partial, "replicated.npz"), lambda f: np.savez(f, **once))
    meta = dict(counters, step=step, records=num_records, **self.layout(),
                replicated={k: list(arrays[k].shape) for k in replicated})
    _write_synced(os.path.join(partial, "meta.json"),
                  lambda f: f.write(json.dumps(meta).encode()))
    os.replace(partial, self._part(step))
    self._last_save = time.monotonic()

  def _replicated(self, step: int, arrays: Dict[str, np.ndarray]) -> list:
    """The arrays every process holds alike, each as copies of one row (the parameters
    and optimizer state replicated over every device): those whose rows are all equal
    here, with the same shape and the same row's digest on every process (one exchange)."""
    mine = {k: _digest(v) for k, v in arrays.items() if _rows_equal(v)}
    theirs = [json.loads(s) for s in self._exchange(f"replicated {step}", json.dumps(mine))]
    return sorted(k for k, d in mine.items() if all(t.get(k) == d for t in theirs))

  def _restored_part(self, step: int) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    with open(os.path.join(self._part(step), "meta.json"), encoding="utf-8") as f:
      meta = json.load(f)
    with np.load(os.path.join(self._part(step), "state.npz")) as npz:
      arrays = {k: npz[k] for k in npz.files}  # Reading checks each array's CRC.
    if meta.get("replicated"):  # Saved once, by process 0.
      once = os.path.join(self.directory, "process_0", str(step), "replicated.npz")
      with np.load(once) as npz:
        arrays.update({k: np.broadcast_to(npz[k], shape).copy()
                       for k, shape in meta["replicated"].items()})
    return meta, arrays

  def _prune(self) -> None:
    """Lets go of this process's parts beyond the newest `keep`."""
    for old in _numbered(self._own_directory())[self.keep:]:
      self._delete(old)

  def close(self) -> None:
    pass  # Nothing held open: each part is written whole and closed.

  def _exchange(self, what: str, value: str):
    """Every process's `value` (one exchange of the coordination service, each new)."""
    self._exchanges += 1
    return distributed.exchange(f"checkpoint/{self._exchanges}/{what}", value)

  def _steps(self):
    return _numbered(os.path.join(self.directory, COMMITTED))

  def decide(self) -> Tuple[bool, bool]:
    """Every process says whether a SIGTERM asked it to stop and process 0 whether a
    save is due; all get the same answers (one exchange per step)."""
    from podracer.lifecycle import preemption  # pylint: disable=import-outside-toplevel
    said = self._exchange("step", f"{int(preemption.requested())}{int(self.due())}")
    stop = any(s[0] == "1" for s in said)
    return said[0][1] == "1" or stop, stop

  def _commit(self, step: int) -> None:
    """After every process has saved its part of `step` (one exchange), process 0
    marks it committed and lets go of the markers beyond `keep`."""
    self._exchange(f"saved {step}", "1")
    self._prune()
    if not distributed.is_main():
      return
    committed = os.path.join(self.directory, COMMITTED)
    os.makedirs(committed, exist_ok=True)
    with disk.writing(f"checkpoint {step}'s commit", committed):
      partial = os.path.join(committed, f".{step}.partial")
      with open(partial, "w", encoding="utf-8") as f:
        json.dump(self.layout(), f)
      os.replace(partial, os.path.join(committed, str(step)))
    for old in self._steps()[self.keep:]:
      with contextlib.suppress(OSError):
        os.remove(os.path.join(committed, str(old)))

  def _restored(self, step: int) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """This process's part of checkpoint `step`, if every process restored its own."""
    ok, why, meta, arrays = "1", "", {}, {}
    try:
      meta, arrays = self._restored_part(step)
      self._check_layout(step, meta)
    except ConfigError:
      raise
    except Exception as e:  # pylint: disable=broad-except -- said below, by process 0
      ok, why = "0", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    said = self._exchange(f"restored {step}", ok + why)
    failed = [f"{p} ({s[1:]})" if s[1:] else str(p) for p, s in enumerate(said)
              if s[0] != "1"]
    if failed:
      raise RuntimeError(f"process(es) {', '.join(failed)} could not restore their part")
    return meta, arrays

  def _check_layout(self, step: int, meta: Dict[str, Any]) -> None:
    saved = {k: meta.get(k) for k in self.layout()}
    if saved != self.layout():
      raise ConfigError(
          f"Checkpoint {step} in {self.directory} was written by {saved['num_processes']} "
          f"process(es) of {saved['num_local_devices']} device(s) each; this run has "
          f"{self.layout()['num_processes']} of {self.layout()['num_local_devices']}. A run "
          "over several processes resumes only on as many processes and devices as it "
          "had: relaunch it so, or with --fresh to start over.")


def _newest_marker(directory: str) -> Optional[Dict[str, Any]]:
  """The layout in the newest commit marker of a run over several processes, or None."""
  committed = os.path.join(directory, COMMITTED)
  steps = _numbered(committed)
  if not steps:
    return None
  try:
    with open(os.path.join(committed, str(steps[0])), encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def _numbered(directory: str) -> List[int]:
  """The steps named in `directory` (checkpoints, parts or markers), newest first."""
  names = os.listdir(directory) if os.path.isdir(directory) else []
  return sorted((int(n) for n in names if n.isdigit()), reverse=True)


def _write_synced(path: str, write: Callable[[Any], Any]) -> None:
  """`write(f)` into a new binary file at `path`, flushed and synced to the disk."""
  with open(path, "wb") as f:
    write(f)
    f.flush()
    os.fsync(f.fileno())


def _rows_equal(x: np.ndarray) -> bool:
  return x.ndim >= 1 and x.shape[0] >= 1 and bool((x == x[:1]).all())


def _digest(x: np.ndarray) -> str:
  """One row's bytes, dtype and the array's shape, as a short hex digest."""
  h = hashlib.sha256(f"{x.dtype}{x.shape}".encode())
  h.update(np.ascontiguousarray(x[0]).tobytes())
  return h.hexdigest()[:32]


# Saved as a flat {index: array} dict: orbax may rebuild NamedTuples as dicts, whose
# sorted keys would reorder the leaves. Typed PRNG keys are saved as their key data.


def _is_key(x: Any) -> bool:
  return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _split_over_model(x: Any) -> bool:
  """Whether `x` is a jax.Array one replica's part of which lies over several devices of
  a `model` axis (issue 78)."""
  if not isinstance(x, jax.Array) or not isinstance(x.sharding, jax.sharding.NamedSharding):
    return False
  sharding = x.sharding
  if dict(sharding.mesh.shape).get(mesh_lib.MODEL, 1) == 1:
    return False
  named = [p if isinstance(p, tuple) else (p,) for p in sharding.spec if p is not None]
  return any(mesh_lib.MODEL in axes for axes in named)


def _saved_leaves(tree: Any) -> Dict[str, Any]:
  """`_host_leaves`, but arrays split over a `model` axis kept as they are (one process:
  orbax writes them shard by shard)."""
  return {f"{i:06d}": x if _split_over_model(x) else mesh_lib.local(x)
          for i, x in enumerate(_key_data_leaves(tree))}


def _key_data_leaves(tree: Any) -> List[Any]:
  """`tree`'s leaves, typed PRNG keys as their key data."""
  return [jax.random.key_data(x) if _is_key(x) else x for x in jax.tree.leaves(tree)]


def _shape_and_dtype(x: Any) -> Tuple[Tuple[int, ...], np.dtype]:
  """What `_host_leaves` would give of leaf `x`, its shape and dtype, without copying it."""
  if _is_key(x):
    x = jax.random.key_data(x)
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    x = mesh_lib.local(x)
  return tuple(np.shape(x)), np.dtype(x.dtype)


def _host_leaves(tree: Any) -> Dict[str, np.ndarray]:
  leaves = _key_data_leaves(tree)
  # Each process's rows of arrays over the mesh of every process's devices (mesh.py).
  return {f"{i:06d}": np.asarray(x) for i, x in enumerate(mesh_lib.local(leaves))}


def _as_like(value: np.ndarray, like: Any) -> Any:
  if _is_key(like):
    return jax.random.wrap_key_data(value, impl=jax.random.key_impl(like))
  return value
