"""Runs one podracer run as N processes on this machine:

  python -m podracer.distributed.launch_local --num_processes=2 [--devices_per_process=4] -- \\
      --config=agents/ppo/config.py:cartpole_anakin --workdir=DIR [--config.KEY=VALUE ...]

Starts `python -m podracer.launch ARGS --coordinator=localhost:PORT --num_processes=N
--process_id=I` for I = 0..N-1 (a free PORT). `--devices_per_process` gives each process
that many virtual CPU devices (XLA's --xla_force_host_platform_device_count), to try
multi-process runs without several accelerators. Ctrl-C and SIGTERM are passed on to
every process. When one process fails (non-zero exit, or killed), the others are sent
SIGTERM, then SIGKILL after GRACE_S seconds, and this command exits with the failed
process's status and a line naming it. Process 0 writes the run's files; process I > 0
logs to DIR/process_I.log.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional

GRACE_S = 10.0  # A process blocked in a collective may not act on SIGTERM.
POLL_S = 0.1
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def child_env(devices_per_process: Optional[int], environ=os.environ) -> dict:
  env = dict(environ)
  if devices_per_process:
    kept = [f for f in env.get("XLA_FLAGS", "").split()
            if not f.startswith(DEVICE_COUNT_FLAG)]
    env["XLA_FLAGS"] = " ".join(kept + [f"{DEVICE_COUNT_FLAG}={devices_per_process}"])
  return env


def describe(status: int) -> str:
  if status < 0:
    return f"was killed by {signal.Signals(-status).name}"
  return f"exited with status {status}"


def exit_status(status: int) -> int:
  return 128 - status if status < 0 else status


class Processes:
  """The children, and what to do when one fails or a signal comes."""

  def __init__(self, commands: List[List[str]], env: dict):
    # Own process group each: a terminal's Ctrl-C reaches them once, through us.
    self.procs = [subprocess.Popen(c, env=env, start_new_session=True) for c in commands]
    self.signalled: Optional[int] = None

  def send(self, sig: int) -> None:
    for p in self.procs:
      if p.poll() is None:
        p.send_signal(sig)

  def stop(self, sig: int = signal.SIGTERM) -> None:
    self.send(sig)
    deadline = time.monotonic() + GRACE_S
    while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
      time.sleep(POLL_S)
    self.send(signal.SIGKILL)
    for p in self.procs:
      p.wait()

  def wait(self) -> int:
    """Until all exit 0 (returns 0), one fails, or a signal came; returns the status."""
    while True:
      if self.signalled is not None:
        self.stop(self.signalled)
        return next((exit_status(p.returncode) for p in self.procs if p.returncode),
                    128 + self.signalled)
      statuses = [p.poll() for p in self.procs]
      failed = next((i for i, s in enumerate(statuses) if s not in (None, 0)), None)
      if failed is not None:
        status = statuses[failed]
        sys.stderr.write(f"launch_local: process {failed} (pid {self.procs[failed].pid}) "
                         f"{describe(status)}; stopping the other processes.\n")
        sys.stderr.flush()
        self.stop()
        return exit_status(status)
      if all(s == 0 for s in statuses):
        return 0
      time.sleep(POLL_S)


def parse(argv: List[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog="python -m podracer.distributed.launch_local",
      description="Runs podracer.launch as several processes on this machine.",
      epilog="Everything after `--` goes to podracer.launch.")
  parser.add_argument("--num_processes", type=int, required=True)
  parser.add_argument("--devices_per_process", type=int, default=None,
                      help="virtual CPU devices per process")
  parser.add_argument("--port", type=int, default=0, help="coordinator port (0: free)")
  ours, sep, theirs = (argv[:argv.index("--")], "--", argv[argv.index("--") + 1:]) \
      if "--" in argv else (argv, "", [])
  args = parser.parse_args(ours)
  if not sep or not theirs:
    parser.error("give the launcher's arguments after `--`, as: -- --config=FILE:NAME "
                 "--workdir=DIR")
  if args.num_processes < 1 or (args.devices_per_process or 1) < 1:
    parser.error("--num_processes and --devices_per_process must be positive.")
  taken = [a for a in theirs if a.split("=")[0] in
           ("--coordinator", "--num_processes", "--process_id")]
  if taken:
    parser.error(f"{' '.join(taken)} is set by launch_local; leave it out after `--`.")
  args.launcher_args = theirs
  return args


def main(argv: Optional[List[str]] = None) -> int:
  args = parse(sys.argv[1:] if argv is None else argv)
  port = args.port or free_port()
  commands = [[sys.executable, "-m", "podracer.launch", *args.launcher_args,
               f"--coordinator=localhost:{port}", f"--num_processes={args.num_processes}",
               f"--process_id={i}"] for i in range(args.num_processes)]
  processes = Processes(commands, child_env(args.devices_per_process))

  def on_signal(sig, frame):
    del frame
    processes.signalled = sig

  signal.signal(signal.SIGINT, on_signal)
  signal.signal(signal.SIGTERM, on_signal)
  return processes.wait()


if __name__ == "__main__":
  sys.exit(main())
