"""Runs over several processes (podracer/distributed/: processes.py, launch_local.py), on
this machine's CPU with virtual devices and gloo collectives."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from agents.ppo.config import cartpole_anakin, pendulum_anakin
from podracer import distributed
from podracer.components.normalizers import STATISTICS
from podracer.config import presets
from podracer.distributed import launch_local
from tests.test_anakin import run_records

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Times and rates differ between runs; the process count is what differs on purpose
# (the in-process run below records no process or device count).
NOT_COMPARED = ("sps", "wall_time", "includes_compilation", "compile_s", "num_processes",
                "num_devices")
# Learner metrics are means over the 8 replicas; gloo sums them across processes in
# another order than XLA does within one, so they agree to float32 rounding only.
LEARNER_KEYS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                "clip_fraction")
ANAKIN_OVERRIDES = dict(seed=3, rollout_length=16, updates_per_call=1, total_env_steps=1024)


def env():
  path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
  out = dict(os.environ, PYTHONPATH=path)
  out.pop("XLA_FLAGS", None)  # launch_local sets the device count.
  return out


def launch_local_cmd(num_processes, devices, *args):
  return [sys.executable, "-m", "podracer.distributed.launch_local",
          f"--num_processes={num_processes}",
          f"--devices_per_process={devices}", "--", *args]


def run_launch_local(*args, timeout=240):
  return subprocess.run(launch_local_cmd(*args), cwd=ROOT, env=env(), capture_output=True,
                        text=True, timeout=timeout)


def records(workdir):
  return [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]


def assert_same_records(two, one, learner_keys, abs_tol):
  """The records of 2 processes of 4 devices are one process of 8's: exactly, but for
  the learner's means over replicas (`learner_keys`), equal to float32 rounding."""
  for a, b in zip(two, one):
    assert a["num_processes"] == 2 and a["num_devices"] == 8
    exact = {k: v for k, v in a.items() if k not in NOT_COMPARED + learner_keys}
    assert exact == {k: b[k] for k in exact}
    for k in learner_keys:
      assert a[k] == pytest.approx(b[k], rel=1e-4, abs=abs_tol), k


def result(text):
  line = next(l for l in text.splitlines() if l.startswith("result: "))
  return json.loads(line[len("result: "):])


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_anakin_two_processes_of_four_devices_match_one_of_eight(tmp_path):
  o = ANAKIN_OVERRIDES
  run = run_launch_local(
      2, 4, "--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={tmp_path}",
      f"--config.seed={o['seed']}", f"--config.runtime.rollout_length={o['rollout_length']}",
      f"--config.runtime.updates_per_call={o['updates_per_call']}",
      f"--config.total_env_steps={o['total_env_steps']}")
  assert run.returncode == 0, run.stderr[-3000:]
  two = records(tmp_path)

  config = cartpole_anakin()  # The same run in this process, on its 8 virtual devices.
  config.seed, config.total_env_steps = o["seed"], o["total_env_steps"]
  config.runtime.rollout_length = o["rollout_length"]
  config.runtime.updates_per_call = o["updates_per_call"]
  one, _ = run_records(config)

  assert len(two) == len(one) == 2
  assert_same_records(two, one, LEARNER_KEYS, abs_tol=1e-7)
  assert all("episode_return" in a and a["episodes"] > 0 for a in two), two
  assert (tmp_path / "config.json").exists() and (tmp_path / "learning_curve.png").exists()
  # Process 1 logged to its own file, and reached the same result.
  log = (tmp_path / "process_1.log").read_text()
  assert result(log)["final_episode_return"] == two[-1]["episode_return"]


@pytest.mark.slow
def test_two_processes_keep_one_set_of_observation_and_return_statistics(tmp_path):
  """PPO on Pendulum with normalised observations and `return_std` rewards over 2
  processes of 4 devices: the statistics are merged over all 8 replicas of both
  processes (the actors of each process act on observations normalised by them, and
  the learner scales rewards by them), so the records are those of one process of 8
  devices. Statistics kept per process (4 replicas' observations, or 4 replicas'
  returns) would change the actions of the second call and so its returns."""
  args = ["--config.distribution.name=tanh_normal", "--config.reward_normalizer=return_std",
          "--config.seed=3", "--config.runtime.num_envs_per_device=2",
          "--config.runtime.rollout_length=32", "--config.runtime.updates_per_call=1",
          "--config.total_env_steps=1536"]
  run = run_launch_local(2, 4, "--config=agents/ppo/config.py:pendulum_anakin",
                         f"--workdir={tmp_path}", *args)
  assert run.returncode == 0, run.stderr[-3000:]
  two = records(tmp_path)

  config = pendulum_anakin()  # The same run in this process, on its 8 virtual devices.
  config.distribution.name = "tanh_normal"
  config.reward_normalizer = presets.section("return_std")
  config.seed, config.total_env_steps = 3, 1536
  config.runtime.num_envs_per_device, config.runtime.rollout_length = 2, 32
  config.runtime.updates_per_call = 1
  one, state = run_records(config)
  counts = np.asarray(state.agent.nets[STATISTICS].count)
  assert (counts == 1536).all(), counts  # Every step of every replica, counted once.

  assert len(two) == len(one) == 3
  assert_same_records(two, one, LEARNER_KEYS + ("return_std",), abs_tol=1e-6)


@pytest.mark.slow
def test_many_runs_over_two_processes_are_the_runs_of_one_process(tmp_path):
  """4 runs on 2 processes of 2 devices: the mesh's `runs` axis spans both processes (one
  run per device, no collective), and process 0's records hold every run, each what the
  same 4 runs give in one process on 4 devices."""
  o = ANAKIN_OVERRIDES
  run = run_launch_local(
      2, 2, "--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={tmp_path}",
      "--config.num_runs=4", f"--config.seed={o['seed']}",
      f"--config.runtime.rollout_length={o['rollout_length']}",
      f"--config.runtime.updates_per_call={o['updates_per_call']}",
      f"--config.total_env_steps={o['total_env_steps']}")
  assert run.returncode == 0, run.stderr[-3000:]
  two = records(tmp_path)

  config = cartpole_anakin()
  config.seed, config.total_env_steps, config.num_runs = o["seed"], o["total_env_steps"], 4
  config.topology.num_devices = 4
  config.runtime.rollout_length = o["rollout_length"]
  config.runtime.updates_per_call = o["updates_per_call"]
  one, _ = run_records(config)

  assert sorted({r["run"] for r in two}) == [0, 1, 2, 3]
  assert len(two) == len(one) == 4 * 16
  for a, b in zip(two, one):
    assert a["num_processes"] == 2 and a["num_devices"] == 4
    exact = {k: v for k, v in a.items() if k not in NOT_COMPARED}
    # One run per device: no cross-device sum, so even the learner's metrics are exact.
    assert exact == {k: b[k] for k in exact}
  assert [r["seed"] for r in two[:4]] == [3, 4, 5, 6]


@pytest.mark.extended  # CI: two processes give one process's records (Anakin, above)
@pytest.mark.learning
def test_sebulba_two_processes_reach_450_and_end_with_identical_parameters(tmp_path):
  """cartpole_sebulba (seed 0, 1 M env steps) on 2 processes of 1 actor + 1 learner
  device; the processes agree to stop once process 0's return passes 450. Acting and
  learning take turns in each process (`max_policy_lag=0`) and the learners all-reduce
  in lockstep, so the run is fixed by its seed (with the config's lag of 1 it is not:
  thread timing picks the update that first passes 450)."""
  run = run_launch_local(2, 2, "--config=agents/ppo/config.py:cartpole_sebulba",
                         f"--workdir={tmp_path}", "--config.stop_at_return=450",
                         "--config.runtime.max_policy_lag=0", timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  mine, theirs = result(run.stdout), result((tmp_path / "process_1.log").read_text())
  assert mine["stopped_at_return"] == 450  # Process 1's own episodes may not have.
  # Both stopped after the same update, with the same parameters.
  assert re.fullmatch(r"[0-9a-f]{16}", mine["params_checksum"])
  assert mine["params_checksum"] == theirs["params_checksum"]
  assert mine["env_steps"] == theirs["env_steps"] < 1_000_000
  lines = records(tmp_path)
  returns = [r["episode_return"] for r in lines
             if "episode_return" in r and r["env_steps"] <= 2_000_000]
  assert max(returns) >= 450, f"best mean episode return {max(returns):.1f} < 450"
  # 768 steps per batch on each of 2 processes: every update counts 1,536 env steps.
  last = lines[-1]
  assert last["num_processes"] == 2 and last["num_devices"] == 4
  assert last["env_steps"] == last["updates"] * 1536 == mine["env_steps"]


def _children(pid):
  found = {}
  for entry in os.listdir("/proc"):
    try:
      with open(f"/proc/{entry}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
      if parent == pid:
        with open(f"/proc/{entry}/cmdline") as f:
          found[int(re.search(r"--process_id=(\d)", f.read()).group(1))] = int(entry)
    except (OSError, ValueError, AttributeError):
      continue
  return found


def _alive(pid):
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except OSError:
    return False


def test_killing_one_process_stops_the_other_within_30_s(tmp_path):
  proc = subprocess.Popen(
      launch_local_cmd(2, 2, "--config=agents/ppo/config.py:cartpole_sebulba",
                       f"--workdir={tmp_path}", "--config.total_env_steps=10000000"),
      cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    log = tmp_path / "process_1.log"
    deadline = time.monotonic() + 180
    while not (log.exists() and "env steps" in log.read_text()):  # Under way.
      assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
      time.sleep(0.5)
    children = _children(proc.pid)
    assert sorted(children) == [0, 1]
    os.kill(children[1], signal.SIGKILL)
    killed = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - killed < 30
    assert proc.returncode != 0
    assert f"process 1 (pid {children[1]}) was killed by SIGKILL" in stderr
    assert not _alive(children[0])
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.communicate()


def test_cluster_detection_only_where_several_processes_were_started():
  assert not distributed.cluster_detected({})
  assert not distributed.cluster_detected({"SLURM_NTASKS": "1", "SLURM_JOB_ID": "7"})
  assert distributed.cluster_detected({"SLURM_NTASKS": "4"})
  assert distributed.cluster_detected({"OMPI_COMM_WORLD_SIZE": "2"})
  assert distributed.cluster_detected({"TPU_WORKER_HOSTNAMES": "a,b"})
  assert not distributed.cluster_detected({"TPU_WORKER_HOSTNAMES": "localhost"})


def test_launch_local_sets_the_device_count_and_refuses_bad_arguments(capsys):
  flags = launch_local.child_env(4, {"XLA_FLAGS": "--a --xla_force_host_platform_device_count=8"})
  assert flags["XLA_FLAGS"] == "--a --xla_force_host_platform_device_count=4"
  for argv in (["--num_processes=2"], ["--num_processes=0", "--", "--config=x"],
               ["--num_processes=2", "--", "--config=x", "--process_id=1"]):
    with pytest.raises(SystemExit) as e:
      launch_local.parse(argv)
    assert e.value.code == 2
  assert "--process_id=1 is set by launch_local" in capsys.readouterr().err


def test_launcher_wants_all_three_process_flags(tmp_path):
  run = subprocess.run(
      [sys.executable, "-m", "podracer.launch", "--config=agents/ppo/config.py:cartpole_anakin",
       "--num_processes=2", f"--workdir={tmp_path}"],
      cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
  assert run.returncode == 2
  assert "--num_processes given alone" in run.stderr and "Traceback" not in run.stderr
