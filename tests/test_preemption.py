"""SIGTERM, as `timeout`, SLURM and Kubernetes send it, through the launcher as a user runs it."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

GYMNASIUM_CONFIG = """
from ml_collections import config_dict
from agents.ppo.config import cartpole_sebulba

def get_config():
  c = cartpole_sebulba()
  c.env = config_dict.ConfigDict(dict(name="gymnasium", env_id="CartPole-v1"))
  c.runtime.num_envs_per_actor = 2  # One worker process per environment: 4 in all.
  return c
"""


def start(config, workdir):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
  env.pop("XLA_FLAGS", None)  # Host devices only, as a user runs it.
  return subprocess.Popen(
      [sys.executable, "-m", "podracer.launch", f"--config={config}", f"--workdir={workdir}",
       "--config.total_env_steps=1000000000"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_records(process, metrics, count, timeout=180, poll=0.2):
  """Waits until the running launcher `process` has written `count` metrics records."""
  deadline = time.monotonic() + timeout
  while not (metrics.exists() and len(metrics.read_text().splitlines()) >= count):
    assert process.poll() is None, process.communicate()[1]
    assert time.monotonic() < deadline, f"no {count} records within {timeout} s"
    time.sleep(poll)


def children(pid):
  """Pids of the processes whose parent is `pid` (environment workers, trackers)."""
  found = []
  for entry in pathlib.Path("/proc").iterdir():
    try:
      stat = (entry / "stat").read_text()
    except (OSError, ValueError):
      continue
    # "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
    if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
      found.append(int(entry.name))
  return found


def alive(pid):
  try:
    state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
  except OSError:
    return False
  return state != "Z"


@pytest.mark.parametrize("case", [  # The reverb lane: Anakin (its signals under that JAX).
    pytest.param("anakin", marks=pytest.mark.reverb_lane),
    "sebulba_envpool", pytest.param("sebulba_gymnasium", marks=pytest.mark.extended)])
@pytest.mark.slow
def test_sigterm_stops_within_10s_writes_outputs_and_exits_143(case, tmp_path):
  if case == "sebulba_gymnasium":
    config = tmp_path / "gymnasium_config.py"
    config.write_text(GYMNASIUM_CONFIG)
  else:
    config = f"agents/ppo/config.py:cartpole_{case.split('_')[0]}"
  workdir = tmp_path / "run"
  process = start(config, workdir)
  metrics = workdir / "metrics.jsonl"
  wait_for_records(process, metrics, 2)
  workers = children(process.pid)
  if case == "sebulba_gymnasium":
    assert len(workers) >= 4, workers  # The test must see the workers it checks on.

  sent = time.monotonic()
  process.send_signal(signal.SIGTERM)  # To the launcher only, as `timeout` sends it.
  stdout, stderr = process.communicate(timeout=60)
  took = time.monotonic() - sent

  assert process.returncode == 143, stderr
  assert took < 10.0, f"took {took:.1f} s to stop"
  assert "Stopped by SIGTERM; all threads and environments were stopped." in stderr
  assert "Traceback" not in stderr + stdout
  assert "Error" not in stderr, stderr  # No EOFError / BrokenPipeError from workers.
  result = [l for l in stdout.splitlines() if l.startswith("result: ")]
  assert len(result) == 1, stdout
  summary = json.loads(result[0][len("result: "):])
  assert summary["stopped_by"] == "SIGTERM" and summary["env_steps"] > 0
  records = [json.loads(l) for l in metrics.read_text().splitlines()]
  # The result says what the run did, which its checkpoint holds: past the last record
  # when Sebulba's learner stopped inside a record's window.
  # (Without orbax there is no checkpoint: the last record's.)
  saved = re.search(r"saved a checkpoint at env steps ([\d,]+)", stdout)
  done = int(saved[1].replace(",", "")) if saved else records[-1]["env_steps"]
  assert summary["env_steps"] == done >= records[-1]["env_steps"]
  assert (workdir / "learning_curve.png").stat().st_size > 1000
  grace = time.monotonic() + 5
  while any(alive(p) for p in workers) and time.monotonic() < grace:
    time.sleep(0.1)
  assert not [p for p in workers if alive(p)], "processes left behind"


def test_sigterm_inside_deferred_is_raised_when_the_block_ends():
  from podracer.lifecycle import preemption  # pylint: disable=import-outside-toplevel
  previous = signal.getsignal(signal.SIGTERM)
  try:
    preemption.handle_sigterm()
    finished = False
    with pytest.raises(preemption.Terminated):
      with preemption.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # The handler has run by now; the block must still finish.
        finished = True
    assert finished
    # Later SIGTERMs are ignored: the first one's cleanup must not be cut short.
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
  finally:
    signal.signal(signal.SIGTERM, previous)
