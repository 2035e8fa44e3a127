"""Replicas across processes and hosts: JAX's multi-controller runtime (`jax.distributed`).

Every process runs the same program on its own local devices; a `pmap` over the devices
of all processes makes `replica_mean` (podracer/types.py) a cross-process mean. This
module is the one place that knows about processes:

  initialize(...)       before anything touches a device: connects the processes, and on
                        CPU switches on gloo collectives (required on jax 0.4.34).
  pmap_devices(local)   the devices a pmap must be given: the same positions on every
                        process, so each process maps its own and collectives span all.
  ends_process_on_failure()  a failed process exits at once instead of waiting in JAX's
                        shutdown barrier, so the others learn of it (below).

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
import os
import sys
import traceback
from typing import Iterator, List, Optional

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


def pmap_devices(local: List["jax.Device"]) -> List["jax.Device"]:
  """The devices to give `jax.pmap` for `local` (this process's chosen devices).

  A multi-process pmap needs the same device list on every process, each process
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
    raise
  except BaseException as e:  # pylint: disable=broad-except
    if _initialized:
      _exit_now(1, e)
    raise


def _exit_now(code: int, error: Optional[BaseException]) -> None:
  if error is not None:
    traceback.print_exception(type(error), error, error.__traceback__)
  sys.stderr.write(f"Process {process_index()} of {process_count()} failed (exit status "
                   f"{code}); the other processes stop too.\n")
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access
