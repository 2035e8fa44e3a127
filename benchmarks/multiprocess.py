"""The cost of crossing processes: PPO CartPole Anakin on D devices in one process
against the same D devices split over P processes (launch_local, gloo on CPU).

  python benchmarks/multiprocess.py [--num_processes=2] [--devices=8] [--calls=6]

Both runs are the launcher as a user runs it, same seed and config; the figure is the
median steps/s of the records after the first (which includes compilation), read from
each run's metrics.jsonl. With virtual CPU devices all processes share this machine's
cores, so the ratio shows the collectives' overhead, not a multi-host speed-up.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROCESSES = flags.DEFINE_integer("num_processes", 2, "Processes of the split run.")
_DEVICES = flags.DEFINE_integer("devices", 8, "Devices in all, in both runs.")
_NUM_ENVS = flags.DEFINE_integer("num_envs", 64, "Environments per device.")
_ROLLOUT = flags.DEFINE_integer("rollout_length", 128, "Steps per rollout.")
_UPDATES = flags.DEFINE_integer("updates_per_call", 4, "Updates per compiled call.")
_CALLS = flags.DEFINE_integer("calls", 6, "Calls (records) per run; the first is not timed.")


def measure(num_processes: int, devices: int) -> float:
  steps = devices * _NUM_ENVS.value * _ROLLOUT.value * _UPDATES.value * _CALLS.value
  args = ["--config=agents/ppo/config.py:cartpole_anakin", "--config.seed=0",
          f"--config.runtime.num_envs_per_device={_NUM_ENVS.value}",
          f"--config.runtime.rollout_length={_ROLLOUT.value}",
          f"--config.runtime.updates_per_call={_UPDATES.value}",
          f"--config.total_env_steps={steps}"]
  env = dict(os.environ, PYTHONPATH=ROOT)
  with tempfile.TemporaryDirectory() as workdir:
    args.append(f"--workdir={workdir}")
    if num_processes == 1:
      env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
      command = [sys.executable, "-m", "podracer.launch", *args]
    else:
      command = [sys.executable, "-m", "podracer.distributed.launch_local",
                 f"--num_processes={num_processes}",
                 f"--devices_per_process={devices // num_processes}", "--", *args]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if run.returncode:
      sys.exit(f"{' '.join(command)} failed:\n{run.stderr[-3000:]}")
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f]
  return statistics.median(r["sps"] for r in records if not r.get("includes_compilation"))


def main(argv):
  del argv
  p, d = _PROCESSES.value, _DEVICES.value
  if p < 2 or d % p:
    sys.exit(f"--num_processes={p} must be at least 2 and divide --devices={d}.")
  print(f"PPO CartPole Anakin, {_NUM_ENVS.value} envs/device, rollout {_ROLLOUT.value}, "
        f"{_UPDATES.value} updates/call, {os.cpu_count()} CPU core(s); median of "
        f"{_CALLS.value - 1} calls")
  one = measure(1, d)
  print(f"1 process  x {d} devices: {one:>12,.0f} steps/s", flush=True)
  split = measure(p, d)
  print(f"{p} processes x {d // p} devices: {split:>12,.0f} steps/s "
        f"({split / one:.2f} x the single process)")


if __name__ == "__main__":
  app.run(main)
