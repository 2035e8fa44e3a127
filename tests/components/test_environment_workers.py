"""A Gymnasium worker process that dies: the error says which, how, and is not buried."""

import os
import pathlib
import re
import signal
import time

import gymnasium
import numpy as np
import pytest

from podracer.components.environments.gymnasium_env import Gymnasium
from podracer.errors import EnvironmentWorkerError
from tests.test_preemption import (GYMNASIUM_CONFIG, alive, children, start,
                                   wait_for_records)


def _dying_spec(how):
  """An env whose worker dies at its first step; nested, so workers get it by value."""

  class Dying(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
      super().reset(seed=seed)
      return np.zeros(2, np.float32), {}

    def step(self, action):
      import os  # pylint: disable=g-import-not-at-top,reimported,redefined-outer-name
      import signal  # pylint: disable=g-import-not-at-top,reimported,redefined-outer-name
      if how == "exit":
        os._exit(3)  # pylint: disable=protected-access
      os.kill(os.getpid(), signal.SIGSEGV)  # A crashing simulator.

  return gymnasium.envs.registration.EnvSpec(f"PodracerDying{how}-v0", entry_point=Dying)


def test_killed_worker_is_named_with_its_signal_and_close_raises_nothing():
  env = Gymnasium("CartPole-v1", num_envs=2, seed=0, asynchronous=True)
  env.reset()
  processes = list(env._env.processes)
  victim = processes[1]
  os.kill(victim.pid, signal.SIGKILL)
  with pytest.raises(EnvironmentWorkerError) as error:
    env.step(np.zeros(2, np.int64))
  message = str(error.value)
  assert f"environment worker 1 of 2 (pid {victim.pid}) killed by signal SIGKILL" in message
  assert "worker 0" not in message  # The living one is not blamed.
  env.close()  # No second error over the first.
  env.close()
  assert not any(p.is_alive() for p in processes)


@pytest.mark.parametrize("how,expected", [("exit", "exited with code 3"),
                                          ("signal", "killed by signal SIGSEGV")])
def test_worker_dying_during_a_step_is_named(how, expected):
  env = Gymnasium(_dying_spec(how), num_envs=2, seed=0, asynchronous=True)
  env.reset()
  processes = list(env._env.processes)
  with pytest.raises(EnvironmentWorkerError, match=re.escape(expected)) as error:
    env.step(np.zeros(2, np.int64))
  assert re.search(r"environment worker \d of 2 \(pid \d+\)", str(error.value))
  env.close()
  assert not any(p.is_alive() for p in processes)


@pytest.mark.slow
def test_killed_worker_stops_a_sebulba_run_with_one_clear_error(tmp_path):
  config = tmp_path / "gymnasium_config.py"
  config.write_text(GYMNASIUM_CONFIG)
  workdir = tmp_path / "run"
  process = start(config, workdir)
  wait_for_records(process, workdir / "metrics.jsonl", 1)
  workers = [p for p in children(process.pid)
             if b"spawn_main" in pathlib.Path(f"/proc/{p}/cmdline").read_bytes()]
  assert len(workers) == 4, workers
  os.kill(workers[0], signal.SIGKILL)
  _, stderr = process.communicate(timeout=60)

  assert process.returncode == 1, stderr
  assert re.search(rf"EnvironmentWorkerError: .*environment worker \d of 2 "
                   rf"\(pid {workers[0]}\) killed by signal SIGKILL", stderr), stderr
  assert "During handling of the above exception" not in stderr  # Not buried.
  assert "Process Worker" not in stderr  # No tracebacks from the other workers.
  time.sleep(1.0)
  assert not [p for p in workers if alive(p)], "worker processes left behind"
