"""The worker processes a SEED run starts on its own host (`runtime.num_local_workers`).

Each runs `python -m podracer.worker --server=ADDRESS` in a process group of its own (so
a terminal's Ctrl-C reaches it only through the run, which stops it), logging to
`WORKDIR/workers/worker_<i>.log`, with JAX_PLATFORMS=cpu: a worker never takes
accelerator memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Tuple

import podracer
from podracer.distributed.auth import SECRET_ENV

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(podracer.__file__)))


def describe(status: int) -> str:
  if status < 0:
    return f"was killed by {signal.Signals(-status).name}"
  return f"exited with status {status}"


def tail(path: str, lines: int = 15) -> str:
  try:
    with open(path, errors="replace") as f:
      return "".join(f.readlines()[-lines:]).rstrip()
  except OSError:
    return ""


CONNECT_TIMEOUT_S = 60.0  # A local worker that has not connected by then exits.


class LocalWorkers:
  """`n` worker processes of this host; `exited()` reports (and forgets) dead ones."""

  def __init__(self, n: int, address: str, transport: str, workdir: Optional[str],
               secret: Optional[bytes] = None, tls_ca: Optional[str] = None):
    self.address, self.transport, self.secret, self.tls_ca = address, transport, secret, tls_ca
    self.log_dir = os.path.join(workdir, "workers") if workdir else tempfile.mkdtemp(
        prefix="podracer-workers-")
    os.makedirs(self.log_dir, exist_ok=True)
    self.processes: List[Optional[subprocess.Popen]] = [None] * n
    self.started_at: List[float] = [0.0] * n
    self.restarts = 0
    for i in range(n):
      self.start(i)

  def log(self, i: int) -> str:
    return os.path.join(self.log_dir, f"worker_{i}.log")

  def start(self, i: int) -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
    if self.secret is not None:  # In its environment: not on a command line `ps` shows.
      env[SECRET_ENV] = self.secret.decode()
    tls = [f"--tls_ca={self.tls_ca}"] if self.tls_ca else []
    with open(self.log(i), "a") as log:
      self.processes[i] = subprocess.Popen(
          [sys.executable, "-m", "podracer.worker", f"--server={self.address}",
           f"--transport={self.transport}", f"--connect_timeout={CONNECT_TIMEOUT_S:g}",
           *tls],
          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
          start_new_session=True)
    self.started_at[i] = time.monotonic()

  def starting(self) -> bool:
    """Whether a worker is still running within its connect timeout of its start: it
    may still be importing and connecting (seconds on a busy machine), which is not a
    silence; one that never connects exits at that timeout."""
    now = time.monotonic()
    return any(p is not None and p.poll() is None and now - t < CONNECT_TIMEOUT_S
               for p, t in zip(self.processes, self.started_at))

  def exited(self) -> List[Tuple[int, int]]:
    """(index, status) of each worker that has exited since the last call."""
    out = []
    for i, p in enumerate(self.processes):
      if p is not None and p.poll() is not None:
        out.append((i, p.returncode))
        self.processes[i] = None
    return out

  def pids(self) -> List[int]:
    return [p.pid for p in self.processes if p is not None]

  def stop(self, grace: float = 5.0) -> None:
    """Waits up to `grace` s for the workers to exit (the server said BYE), then
    SIGTERM, then SIGKILL."""
    deadline = time.monotonic() + grace
    live = [p for p in self.processes if p is not None]
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
      for p in live:
        if sig is not None and p.poll() is None:
          try:
            os.killpg(p.pid, sig)
          except OSError:
            pass
      for p in live:
        try:
          p.wait(timeout=max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
          pass
      live = [p for p in live if p.poll() is None]
      if not live:
        return
      deadline = time.monotonic() + 2.0
