"""Processes: JAX's multi-controller runtime for every runtime (processes.py), N
launcher processes on one machine (launch_local.py), and SEED's wire between a server and
its worker processes (transport.py). JAX-free at import; the names of processes.py are
read from it on first use, so that a SEED worker importing the wire loads no more.
"""

import importlib
from typing import Any

from podracer import deprecation

_PROCESSES = ("HEARTBEAT_TIMEOUT_S", "INIT_TIMEOUT_S", "KV_TIMEOUT_MS", "LEAVE_GRACE_S",
              "SHARED_MARK", "SHUTDOWN_TIMEOUT_S", "check_same_run", "check_shared_workdir",
              "cluster_detected", "devices_taking_part", "ends_process_on_failure",
              "exchange", "initialize", "is_main", "log_name", "mesh_devices", "open_log",
              "process_count", "process_index")
__all__ = list(_PROCESSES)
# `pmap_devices` was renamed `mesh_devices` in 0.9.0, when the runtimes left jax.pmap.
_renamed = deprecation.renamed_module_names(__name__, {"pmap_devices": ("mesh_devices",
                                                                        "0.9.0")})


def __getattr__(name: str) -> Any:  # pylint: disable=invalid-name
  if name in _PROCESSES:
    return getattr(importlib.import_module("podracer.distributed.processes"), name)
  return _renamed(name)
