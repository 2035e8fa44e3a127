"""Replicas across processes and hosts: JAX's multi-controller runtime (`jax.distributed`).

Every process runs the same program on its own local devices; a mesh over the devices
of all processes (podracer/mesh.py) makes `replica_mean` (podracer/types.py) a cross-process mean. This
module is the one place that knows about processes:

  initialize(...)       before anything touches a device: connects the processes, and on
                        CPU switches on gloo collectives (required on jax 0.4.34).
  mesh_devices(local)   the devices of a mesh over all processes: the same positions on
                        every process, so each process runs its own and collectives span all.
  ends_process_on_failure()  a failed process exits at once instead of waiting in JAX's
                        shutdown barrier, so the others learn of it (below).
  check_same_run(config, version)  every process was started with the same config and
                        podracer version (else a ConfigError on every one, naming keys).
  check_shared_workdir(workdir)  every process sees the directory process 0 writes (the
                        checkpoints' home must be shared).

Timeouts (see docs/runs.md, "Several processes and hosts"):
  INIT_TIMEOUT_S       how long processes wait for each other to connect.
  HEARTBEAT_TIMEOUT_S  after this long without a heartbeat from a process, JAX's
                       coordination service ends every other process, naming the missing
                       task (`/job:jax_worker/replica:0/task:<process id>`). JAX >= 0.5
                       takes it as an argument; jax 0.4.34 has it fixed at 100 s.
  launch_local         stops the other processes as soon as one exits non-zero, whichever
                       JAX: the bound there is its own grace period, not a heartbeat.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys
import time
import traceback
from typing import Any, Iterator, List, Optional


INIT_TIMEOUT_S = 60
HEARTBEAT_TIMEOUT_S = 10
SHUTDOWN_TIMEOUT_S = 30

# Environment variables of the clusters JAX detects by itself, and how many processes each
# says there are. A single-process job on such a cluster stays a plain single process.
_CLUSTER_SIZE_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")

_initialized = False


def cluster_detected(environ=os.environ) -> bool:
  """Whether this process was started as one of several by SLURM, Open MPI or a TPU pod."""
  for var in _CLUSTER_SIZE_VARS:
    if var in environ:
      return environ[var].isdigit() and int(environ[var]) > 1
  return "," in environ.get("TPU_WORKER_HOSTNAMES", "")


def initialize(coordinator: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None) -> bool:
  """Starts `jax.distributed` if flags or a cluster ask for it; returns whether it did.

  With a coordinator, `num_processes` and `process_id` are required (checked by the
  launcher). With none, JAX's cluster detection runs only where `cluster_detected()`.
  """
  global _initialized
  if coordinator is None and not cluster_detected():
    return False
  import jax  # pylint: disable=import-outside-toplevel

  # CPU devices of different processes talk through gloo. Newer JAX defaults to it; on
  # jax 0.4.34 cross-process CPU collectives fail without it.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  kwargs = dict(initialization_timeout=INIT_TIMEOUT_S)
  accepted = inspect.signature(jax.distributed.initialize).parameters
  if "heartbeat_timeout_seconds" in accepted:  # Not on jax 0.4.34.
    kwargs.update(heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
                  shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S)
  jax.distributed.initialize(coordinator, num_processes, process_id, **kwargs)
  _initialized = True
  return True


def process_index() -> int:
  """This process's index (0 without jax.distributed), without touching a device before
  `initialize` has run."""
  if not _initialized:
    return 0
  import jax  # pylint: disable=import-outside-toplevel
  return jax.process_index()


def process_count() -> int:
  if not _initialized:
    return 1
  import jax  # pylint: disable=import-outside-toplevel
  return jax.process_count()


def is_main() -> bool:
  """Process 0 writes the run's files; the others log to `process_<i>.log`."""
  return process_index() == 0


def log_name(index: int) -> str:
  return f"process_{index}.log"


def devices_taking_part(topology) -> int:
  """Devices of all processes that the topology uses (recorded with every metrics record)."""
  local = getattr(topology, "devices", None) or {
      *topology.actor_devices, *topology.learner_devices}
  return len(local) * process_count()


def open_log(workdir: Optional[str], stream):
  """Where a process other than 0 writes its progress and result: WORKDIR/process_<i>.log
  (`stream` without a workdir)."""
  if not workdir:
    return stream
  os.makedirs(workdir, exist_ok=True)  # Process 0 may not have made it yet.
  return open(os.path.join(workdir, log_name(process_index())), "w", buffering=1)


def mesh_devices(local: List["jax.Device"]) -> List["jax.Device"]:
  """The devices of a mesh over every process for `local` (this process's chosen devices).

  A multi-process mesh needs the same device list on every process, each process
  mapping its own. Every process chose the same positions among its local devices (the
  config is the same), so the list is those positions on each process, process-major:
  global replica index = process index * len(local) + local index.
  """
  import jax  # pylint: disable=import-outside-toplevel
  if jax.process_count() == 1:
    return list(local)
  platform = local[0].platform
  mine = jax.local_devices(backend=platform)
  positions = [mine.index(d) for d in local]
  devices = []
  for p in range(jax.process_count()):
    theirs = sorted((d for d in jax.devices(platform) if d.process_index == p),
                    key=lambda d: d.id)
    devices += [theirs[i] for i in positions]
  return devices


@contextlib.contextmanager
def ends_process_on_failure() -> Iterator[None]:
  """Around the launcher: a process of several that fails exits right away.

  JAX's exit handler waits in a shutdown barrier that the other processes, blocked in a
  collective, never reach; exiting without it lets launch_local (or the coordination
  service's heartbeat) see the failure and stop the others.
  """
  try:
    yield
  except SystemExit as e:
    if _initialized and e.code not in (0, None):
      _exit_now(e.code if isinstance(e.code, int) else 1, None)
    if e.code == 1:  # A failed run, alone: its outputs are written; leave without teardown.
      _flush_and_exit(1)
    raise
  except BaseException as e:  # pylint: disable=broad-except
    if _initialized:
      _exit_now(1, e)
    raise


def _exit_now(code: int, error: Optional[BaseException]) -> None:
  if error is not None:
    traceback.print_exception(type(error), error, error.__traceback__)
  # A config error (exit 2) was said in its paragraph, and a stop on SIGINT or SIGTERM
  # (130, 143) agreed and saved, on every process: those leave together, said already.
  together = code in (2, 130, 143)
  if not together:
    sys.stderr.write(f"Process {process_index()} of {process_count()} failed (exit status "
                     f"{code}); the other processes stop too.\n")
  if together:
    sys.stdout.flush()
    sys.stderr.flush()
    _leave_together()
  _flush_and_exit(code)


def _flush_and_exit(code: int) -> None:
  """Exits without the interpreter's teardown, what was written flushed. Also for a run
  that failed on one process (a thread, a worker, a non-finite update): the runtime has
  stopped its threads and written its outputs, and the teardown of native threads still
  winding down (Reverb's, TensorFlow's, an environment pool's) can abort the process
  instead of letting it exit 1 (seen in the reverb lane: SIGABRT after the run had said
  why it stopped)."""
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


LEAVE_GRACE_S = 1.0  # how long process 0 outlives the others at a shared exit


def _leave_together(wait_s: float = 30.0) -> None:
  """A config error every process found (ranks that disagree, a workdir not shared) or a
  stop every process agreed on: process 0, which holds the coordination service, leaves
  after the others have said they leave (at most `wait_s`), so that none is aborted by
  the service's end before it has said its own paragraph and exited with its code. The
  wait ends as soon as every process has said so; its bound is for a busy machine (5 s
  was too short beside the test lanes: a rank reached its `key_value_set` after process
  0 had gone, and the service's loss aborted it)."""
  client = _kv()
  if client is None:
    return
  try:
    if not is_main():
      client.key_value_set(f"podracer/leaving/{process_index()}", "1")
      return
    for p in range(1, process_count()):
      client.blocking_key_value_get(f"podracer/leaving/{p}", int(wait_s * 1000))
    # A process that said it leaves still has to: the service's end before its exit would
    # abort it (its client's RPCs fail), so the holder of the service leaves last, later.
    time.sleep(LEAVE_GRACE_S)
  except Exception:  # pylint: disable=broad-except -- a process that failed otherwise
    pass


# -- what every process must agree on, through the coordination service's key-value store --

KV_TIMEOUT_MS = 60_000


def _kv():
  """jax.distributed's key-value store (the coordinator's); None in one process."""
  if not _initialized:
    return None
  from jax._src import distributed as jax_distributed  # pylint: disable=import-outside-toplevel
  return jax_distributed.global_state.client


def exchange(name: str, value: str) -> List[str]:
  """Every process's `value` under `name`, in process order (this one's too)."""
  client = _kv()
  if client is None:
    return [value]
  client.key_value_set(f"podracer/{name}/{process_index()}", value)
  return [client.blocking_key_value_get(f"podracer/{name}/{p}", KV_TIMEOUT_MS)
          for p in range(process_count())]


def check_same_run(config_json: str, version: str) -> None:
  """A ConfigError on every process, naming the keys, if any process was started with
  another config or podracer version than process 0: one run, one config."""
  from podracer.errors import ConfigError  # pylint: disable=import-outside-toplevel
  versions = exchange("version", version)
  configs = exchange("config", config_json)
  for p, theirs in enumerate(versions):
    if theirs != versions[0]:
      raise ConfigError(
          f"Process {p} runs podracer {theirs} and process 0 podracer {versions[0]}: every "
          "process of a run must run the same version; install one on every host.")
  for p, theirs in enumerate(configs):
    if theirs != configs[0]:
      keys = _differing_keys(json.loads(configs[0]), json.loads(theirs))
      shown = ", ".join(f"`{k}` ({a!r} on process 0, {b!r} on process {p})"
                        for k, a, b in keys[:4])
      raise ConfigError(
          f"Process {p} was started with another config than process 0: {shown}"
          f"{' and more' if len(keys) > 4 else ''}. Every process of a run must be "
          "started with the same --config and overrides.")


def _differing_keys(a: Any, b: Any, prefix: str = "") -> List[tuple]:
  if isinstance(a, dict) and isinstance(b, dict):
    out = []
    for key in sorted(set(a) | set(b)):
      out += _differing_keys(a.get(key), b.get(key), f"{prefix}{key}.")
    return out
  return [] if a == b else [(prefix.rstrip("."), a, b)]


SHARED_MARK = ".podracer-shared"


def check_shared_workdir(workdir: Optional[str]) -> None:
  """A ConfigError on every process unless each sees the mark process 0 writes into
  `workdir`: checkpoints over several processes go into one shared directory."""
  from podracer.errors import ConfigError  # pylint: disable=import-outside-toplevel
  if not workdir or _kv() is None:
    return
  path = os.path.join(workdir, SHARED_MARK)
  if is_main():
    nonce = os.urandom(8).hex()
    with open(path, "w", encoding="utf-8") as f:
      f.write(nonce)
  nonce = exchange("shared_nonce", nonce if is_main() else "")[0]
  try:
    with open(path, encoding="utf-8") as f:
      seen = f.read().strip() == nonce
  except OSError:
    seen = False
  missing = [p for p, ok in enumerate(exchange("shared_seen", str(int(seen)))) if ok != "1"]
  if missing:
    raise ConfigError(
        f"The workdir {workdir} is not shared: process(es) {', '.join(map(str, missing))} "
        f"do not see the file process 0 wrote there ({SHARED_MARK}). A run over several "
        "processes keeps one set of checkpoints and records: give every process the same "
        "directory on a shared filesystem (NFS, a cluster's shared disk).")
