"""Runs over several processes that survive preemption: checkpoints written by every
process into one shared directory, a SIGTERM to every rank stopping all at the same step
with a save, an exact resume; and the refusals a cluster launch needs (ranks started
with different configs, a workdir that is not shared, another process layout)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import podracer
from podracer import distributed
from podracer.distributed import launch_local
from tests.test_distributed import (LEARNER_KEYS, NOT_COMPARED, ROOT, _alive, env,
                                    launch_local_cmd, records, result)

pytestmark = pytest.mark.slow

# 2 processes x 4 devices x 4 envs x 32 steps x 4 updates = 4,096 env steps a call, a
# checkpoint after every call (interval 0), 12 calls.
ANAKIN = ["--config=agents/ppo/config.py:cartpole_anakin",
          "--config.runtime.num_envs_per_device=4", "--config.runtime.rollout_length=32",
          "--config.runtime.updates_per_call=4", "--config.total_env_steps=49152",
          "--config.checkpoint_interval=0"]


def _start(num_processes, devices, workdir, *args):
  return subprocess.Popen(launch_local_cmd(num_processes, devices, *args,
                                           f"--workdir={workdir}"),
                          cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _wait_for(process, path, count, timeout=180):
  deadline = time.monotonic() + timeout
  while True:
    try:
      if len(path.read_text().splitlines()) >= count:
        return
    except OSError:
      pass
    assert process.poll() is None, process.communicate()
    assert time.monotonic() < deadline, f"fewer than {count} records in {timeout} s"
    time.sleep(0.05)


def _equal_records(got, expected):
  assert len(got) == len(expected)
  for a, b in zip(got, expected):
    exact = {k: v for k, v in a.items() if k not in NOT_COMPARED + LEARNER_KEYS}
    assert exact == {k: b.get(k) for k in exact}
    for k in LEARNER_KEYS:
      assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-7), k


def test_anakin_2x4_stopped_by_sigterm_on_every_rank_resumes_to_the_uninterrupted_records(
    tmp_path):
  whole = _start(2, 4, tmp_path / "whole", *ANAKIN)
  _, stderr = whole.communicate(timeout=300)
  assert whole.returncode == 0, stderr[-3000:]
  expected = records(tmp_path / "whole")
  assert len(expected) == 12

  run = tmp_path / "stopped"
  first = _start(2, 4, run, *ANAKIN)
  _wait_for(first, run / "metrics.jsonl", 4)
  first.send_signal(signal.SIGTERM)  # launch_local forwards it to every rank
  stdout, stderr = first.communicate(timeout=120)
  assert first.returncode == 143, stderr[-3000:]
  assert "saved a checkpoint at env steps" in stdout
  stopped_at = len(records(run))
  assert 4 <= stopped_at < 12, "the run must stop mid-way for the test to mean anything"
  committed = sorted(int(s) for s in os.listdir(run / "checkpoints" / "committed")
                     if s.isdigit())
  assert committed and committed[-1] == stopped_at  # every call saved, the last at the stop
  parts = [run / "checkpoints" / f"process_{rank}" / str(stopped_at) for rank in (0, 1)]
  assert all(part.is_dir() for part in parts)  # each process wrote its own part of it
  # The replicated state (parameters, optimizer state) once, in process 0's part; each
  # process's environment states and keys in its own.
  meta = [json.loads((part / "meta.json").read_text()) for part in parts]
  assert meta[0]["replicated"] == meta[1]["replicated"] and meta[0]["replicated"]
  assert (parts[0] / "replicated.npz").exists() and not (parts[1] / "replicated.npz").exists()
  with np.load(parts[1] / "state.npz") as own, np.load(parts[0] / "replicated.npz") as once:
    assert own.files and not set(own.files) & set(once.files)
    assert sorted(once.files) == sorted(meta[0]["replicated"])

  again = _start(2, 4, run, *ANAKIN)
  stdout, stderr = again.communicate(timeout=300)
  assert again.returncode == 0, stderr[-3000:]
  assert "resuming the run" in stdout
  _equal_records(records(run), expected)


def test_a_newest_checkpoint_one_process_cannot_restore_falls_back_for_every_process(
    tmp_path):
  """Process 1's part of the newest checkpoint damaged after it was written (a data file
  cut short): every process skips that checkpoint, process 0 says so, and all resume
  from the one before."""
  run = tmp_path / "run"
  first = _start(2, 4, run, *ANAKIN, "--config.total_env_steps=16384")
  _, stderr = first.communicate(timeout=300)
  assert first.returncode == 0, stderr[-3000:]
  steps = sorted(int(s) for s in os.listdir(run / "checkpoints" / "committed")
                 if s.isdigit())
  newest = run / "checkpoints" / "process_1" / str(steps[-1])
  data = max((p for p in newest.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
  data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
  again = _start(2, 4, run, *ANAKIN, "--config.total_env_steps=24576")
  stdout, stderr = again.communicate(timeout=300)
  assert again.returncode == 0, stderr[-3000:]
  assert f"Skipping checkpoint {steps[-1]}" in stderr
  assert "resuming the run" in stdout and len(records(run)) == 6


def test_a_relaunch_on_another_layout_is_refused_naming_both(tmp_path):
  run = tmp_path / "run"
  first = _start(2, 4, run, *ANAKIN, "--config.total_env_steps=8192")
  _, stderr = first.communicate(timeout=300)
  assert first.returncode == 0, stderr[-3000:]
  again = _start(2, 2, run, *ANAKIN, "--config.total_env_steps=16384")
  _, stderr = again.communicate(timeout=300)
  assert again.returncode == 2, stderr[-3000:]
  message = " ".join(stderr.split())
  assert "was written by 2 process(es) of 4 device(s) each; this run has 2 of 2" in message
  assert "Traceback" not in stderr


LAUNCH = [sys.executable, "-m", "podracer.launch"]
# The launcher as a host with another podracer installed would run it.
OLDER = [sys.executable, "-c", "import runpy, sys, podracer; podracer.__version__ = '0.0.1'; "
         "runpy.run_module('podracer.launch', run_name='__main__')"]


def _by_hand(tmp_path, per_rank, timeout=120, commands=(LAUNCH, LAUNCH)):
  """Two ranks started by hand (as on two hosts), each with its own arguments."""
  port = launch_local.free_port()
  procs = []
  for rank, args in enumerate(per_rank):
    procs.append(subprocess.Popen(
        [*commands[rank], *args, f"--coordinator=localhost:{port}",
         "--num_processes=2", f"--process_id={rank}"], cwd=ROOT,
        env=launch_local.child_env(2, env()), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True))
  outputs = [p.communicate(timeout=timeout) for p in procs]
  return [(p.returncode, *out) for p, out in zip(procs, outputs)]


def test_ranks_started_with_different_configs_are_refused_on_every_rank(tmp_path):
  base = ["--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={tmp_path / 'run'}",
          "--config.total_env_steps=4096"]
  for code, _, stderr in _by_hand(tmp_path, [base, base + ["--config.seed=1"]]):
    message = " ".join(stderr.split())
    assert code == 2 and "Traceback" not in stderr and message.startswith("Config error: ")
    assert "Process 1 was started with another config than process 0: `seed` (0 on " \
           "process 0, 1 on process 1)" in message


# Rank 1 as it would be if SIGKILLed half-way through writing its part of checkpoint 4.
KILLED_WRITING = [sys.executable, "-c", """
import os, runpy, signal
from podracer import checkpoint
replicated = checkpoint.MultiProcessCheckpointer._replicated
def killed_at_4(self, step, arrays):
  agreed = replicated(self, step, arrays)  # the last exchange before the parts are written
  if step == 4:
    partial = os.path.join(self._own_directory(), '.4.partial')
    os.makedirs(partial)
    open(os.path.join(partial, 'state.npz'), 'wb').write(b'half')
    os.kill(os.getpid(), signal.SIGKILL)
  return agreed
checkpoint.MultiProcessCheckpointer._replicated = killed_at_4
runpy.run_module('podracer.launch', run_name='__main__')"""]


def test_a_rank_killed_while_writing_a_checkpoint_stops_the_other_and_the_relaunch_resumes(
    tmp_path):
  run = tmp_path / "run"
  args = [*ANAKIN, f"--workdir={run}", "--config.topology.num_devices=2"]
  port = launch_local.free_port()
  procs = [subprocess.Popen(
      [*command, *args, f"--coordinator=localhost:{port}", "--num_processes=2",
       f"--process_id={rank}"], cwd=ROOT, env=launch_local.child_env(2, env()),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for rank, command in enumerate([LAUNCH, KILLED_WRITING])]
  procs[1].wait(timeout=180)
  killed = time.monotonic()
  _, stderr = procs[0].communicate(timeout=120)
  assert procs[1].returncode == -signal.SIGKILL and procs[0].returncode != 0
  assert time.monotonic() - killed < 2 * distributed.HEARTBEAT_TIMEOUT_S, stderr[-2000:]
  committed = sorted(int(n) for n in os.listdir(run / "checkpoints" / "committed"))
  assert committed[-1] == 3 and (run / "checkpoints" / "process_0" / "4").is_dir()
  before = records(run)
  again = _by_hand(tmp_path, [args, args], timeout=300)
  for code, _, stderr in again:
    assert code == 0, stderr[-3000:]
  assert "resuming the run" in again[0][1]
  after = records(run)
  assert len(before) < len(after) and after[-1]["env_steps"] == 49152  # killed mid-run
  assert not (run / "checkpoints" / "process_1" / ".4.partial").exists()


def test_ranks_running_different_podracer_versions_are_refused_on_every_rank(tmp_path):
  base = ["--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={tmp_path / 'run'}",
          "--config.total_env_steps=4096"]
  for code, _, stderr in _by_hand(tmp_path, [base, base], commands=(LAUNCH, OLDER)):
    message = " ".join(stderr.split())
    assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
    assert (f"Process 1 runs podracer 0.0.1 and process 0 podracer {podracer.__version__}"
            in message)


def test_a_workdir_not_shared_by_the_ranks_is_refused(tmp_path):
  common = ["--config=agents/ppo/config.py:cartpole_anakin", "--config.total_env_steps=4096"]
  results = _by_hand(tmp_path, [common + [f"--workdir={tmp_path / 'host0'}"],
                                common + [f"--workdir={tmp_path / 'host1'}"]])
  for code, _, stderr in results:
    assert code == 2, stderr[-2000:]
    message = " ".join(stderr.split())
    assert "is not shared: process(es) 1 do not see the file process 0 wrote" in message


@pytest.mark.extended  # CI: Anakin 2x4's resume here, Sebulba's in test_checkpoint.py
def test_sebulba_two_processes_resume_their_learner_and_counters_after_sigterm(tmp_path):
  args = ["--config=agents/ppo/config.py:cartpole_sebulba", "--config.checkpoint_interval=1",
          "--config.total_env_steps=200000"]
  run = tmp_path / "run"
  first = _start(2, 2, run, *args)
  _wait_for(first, run / "metrics.jsonl", 6)
  first.send_signal(signal.SIGTERM)
  stdout, stderr = first.communicate(timeout=120)
  assert first.returncode == 143, stderr[-3000:]
  before = records(run)
  saved = json.loads(next(l for l in stdout.splitlines() if l.startswith("result: "))[8:])
  again = _start(2, 2, run, *args)
  stdout, stderr = again.communicate(timeout=300)
  assert again.returncode == 0, stderr[-3000:]
  assert "resuming the run" in stdout
  step = max(int(n) for n in os.listdir(run / "checkpoints" / "committed") if n.isdigit())
  meta = json.loads((run / "checkpoints" / "process_1" / str(step) / "meta.json").read_text())
  assert meta["replicated"]  # the learners' parameters, saved once by process 0
  after = records(run)
  assert len(before) < len(after)  # the interruption was mid-run
  resumed = after[len([r for r in before if r["env_steps"] <= saved["env_steps"]]):]
  # The counters go on from the checkpoint's, and the two processes stay one run.
  assert resumed[0]["env_steps"] > saved["env_steps"] - 2 * 768
  assert after[-1]["env_steps"] >= 200_000 and after[-1]["updates"] > resumed[0]["updates"]
  assert after[-1]["num_processes"] == 2


def _mpirun(*args, devices=4, **popen):
  """`mpirun -np 2 python -m podracer.launch ARGS`, no podracer flags: JAX's own Open MPI
  detection forms the run, `devices` virtual CPU devices a rank."""
  mpirun = shutil.which("mpirun")
  if mpirun is None:
    pytest.skip("Open MPI's mpirun is not installed here (scripts/setup_env.sh installs "
                "openmpi-bin where apt can)")
  environ = dict(env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                 XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
  return subprocess.Popen([mpirun, "-np", "2", "--oversubscribe", "-x", "PYTHONPATH",
                           "-x", "XLA_FLAGS", "-x", "JAX_PLATFORMS", sys.executable, "-m",
                           "podracer.launch", *args], cwd=ROOT, env=environ,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.extended  # CI: launch_local's ranks; Open MPI's environment in unit tests
def test_mpirun_forms_one_run_that_a_sigterm_stops_and_a_second_mpirun_resumes(tmp_path):
  run = tmp_path / "mpi"
  first = _mpirun(*ANAKIN, f"--workdir={run}")
  _wait_for(first, run / "metrics.jsonl", 4)
  first.send_signal(signal.SIGTERM)  # mpirun forwards it to every rank
  _, stderr = first.communicate(timeout=120)
  assert "Stopped by SIGTERM" in stderr and "Traceback" not in stderr, stderr[-3000:]
  before = records(run)
  assert before[-1]["num_processes"] == 2 and before[-1]["num_devices"] == 8
  assert os.listdir(run / "checkpoints" / "committed")
  again = _mpirun(*ANAKIN, f"--workdir={run}")
  stdout, stderr = again.communicate(timeout=300)
  assert again.returncode == 0, stderr[-3000:]
  assert "resuming the run" in stdout
  after = records(run)
  assert len(before) < len(after) == 12  # stopped mid-run
  local = _start(2, 4, tmp_path / "local", *ANAKIN)
  _, stderr = local.communicate(timeout=300)
  assert local.returncode == 0, stderr[-3000:]
  _equal_records(after, records(tmp_path / "local"))


@pytest.mark.extended
def test_sebulba_ppo_under_mpirun_reaches_450_as_one_run(tmp_path):
  """As test_distributed's launch_local run: each rank 1 actor + 1 learner device, in
  turns (`max_policy_lag=0`) so that the seed fixes the run; the ranks agree to stop."""
  job = _mpirun("--config=agents/ppo/config.py:cartpole_sebulba", f"--workdir={tmp_path}",
                "--config.stop_at_return=450", "--config.runtime.max_policy_lag=0",
                devices=2)
  stdout, stderr = job.communicate(timeout=300)
  assert job.returncode == 0, stderr[-3000:]
  mine, theirs = result(stdout), result((tmp_path / "process_1.log").read_text())
  assert mine["stopped_at_return"] == 450 and mine["env_steps"] < 1_000_000
  assert mine["params_checksum"] == theirs["params_checksum"]
  last = records(tmp_path)[-1]
  assert last["num_processes"] == 2 and last["num_devices"] == 4


def test_a_rank_killed_under_mpirun_ends_the_job_within_seconds_naming_it(tmp_path):
  run = tmp_path / "mpi"
  job = _mpirun("--config=agents/ppo/config.py:cartpole_sebulba", f"--workdir={run}",
                "--config.total_env_steps=10000000")
  try:
    _wait_for(job, run / "metrics.jsonl", 1)
    ranks = subprocess.run(["ps", "--ppid", str(job.pid), "-o", "pid="], capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(ranks) == 2
    os.kill(int(ranks[1]), signal.SIGKILL)
    killed = time.monotonic()
    _, stderr = job.communicate(timeout=60)
    assert time.monotonic() - killed < 30 and job.returncode != 0
    # mpirun ends the other rank itself, at once, and names the one that died.
    assert "exited on signal 9 (Killed)" in stderr, stderr[-3000:]
    # mpirun may end before the other rank has: it is gone within its heartbeat's bound.
    deadline = killed + 2 * distributed.HEARTBEAT_TIMEOUT_S + 15
    while _alive(int(ranks[0])) and time.monotonic() < deadline:
      time.sleep(0.1)
    assert not _alive(int(ranks[0]))
  finally:
    if job.poll() is None:
      job.kill()
      job.communicate()
