"""The workdir: checked before the build, a previous run refused or moved aside, strict JSON."""

import io
import os
import json
import math

import pytest

from agents.ppo import config as ppo_config
from podracer import builder, launch as launcher
from podracer.lifecycle import preemption, workdir
from podracer.errors import ConfigError, ThreadFailure
from podracer.logs.metrics import MetricsLogger, tail_mean
from tests.test_launch import launch

OLD_RECORDS = "".join(json.dumps(dict(env_steps=i, episode_return=1.0)) + "\n"
                      for i in (1, 2, 3))


def previous_run(path):
  path.mkdir(parents=True, exist_ok=True)
  (path / "metrics.jsonl").write_text(OLD_RECORDS)
  (path / "config.json").write_text("{}")
  (path / "learning_curve.png").write_bytes(b"png")
  (path / "events.out.tfevents.1.host").write_bytes(b"tb")
  (path / "notes.txt").write_text("mine")
  return path


def test_relaunch_into_a_workdir_with_metrics_is_refused_and_leaves_it_alone(tmp_path):
  run = previous_run(tmp_path / "run")
  result = launch("--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={run}")
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  assert "3 records" in result.stderr and "--fresh" in result.stderr
  assert (run / "metrics.jsonl").read_text() == OLD_RECORDS


def test_fresh_moves_the_previous_run_aside_and_deletes_nothing(tmp_path):
  run = previous_run(tmp_path / "run")
  with pytest.raises(ConfigError, match="already holds a run"):
    workdir.prepare(str(run))
  found = workdir.prepare(str(run), fresh=True)
  moved = found.rsplit(" ", 1)[1]
  assert found.startswith("moved") and moved.startswith(str(run / "previous"))
  with open(f"{moved}/metrics.jsonl") as f:
    assert f.read() == OLD_RECORDS
  assert sorted(p.name for p in (run / "previous").iterdir()) == [moved.rsplit("/", 1)[1]]
  assert {p.name for p in run.iterdir()} == {"previous", "notes.txt"}
  assert workdir.prepare(str(run)) is None  # Now empty of runs: a new one may start.
  # Relaunching twice within a second must not overwrite the first move.
  previous_run(run)
  again = workdir.prepare(str(run), fresh=True).rsplit(" ", 1)[1]
  assert again != moved and (run / "previous").exists()


def test_workdir_that_is_a_file_is_refused(tmp_path):
  (tmp_path / "file").write_text("")
  with pytest.raises(ConfigError, match="cannot be used"):
    workdir.prepare(str(tmp_path / "file" / "run"))
  workdir.prepare(str(tmp_path / "new" / "run"))
  assert (tmp_path / "new" / "run").is_dir()


def test_metrics_jsonl_is_strict_json_with_null_for_non_finite(tmp_path):
  logger = MetricsLogger(str(tmp_path), stream=None)
  logger.write(dict(env_steps=1, loss=float("nan"), value=float("inf"), episode_return=2.0))
  logger.close()

  def refuse(token):
    raise ValueError(f"non-strict JSON token {token}")

  line = (tmp_path / "metrics.jsonl").read_text()
  record = json.loads(line, parse_constant=refuse)
  assert record["loss"] is None and record["value"] is None
  assert record["episode_return"] == 2.0
  assert math.isnan(logger.records[0]["loss"])  # In memory, for the guards and summary.


def test_a_run_that_fails_before_its_first_record_says_so(tmp_path, monkeypatch, capsys):
  class FailingExperiment:
    logger = checkpointer = None

    def train(self, workdir, stream):
      self.logger = MetricsLogger(workdir, stream=stream)
      try:
        raise ThreadFailure("actor-0-0 failed: boom")
      finally:
        self.logger.close()

  monkeypatch.setattr(builder, "build", lambda config: FailingExperiment())
  with pytest.raises(ThreadFailure):
    launcher.launch(ppo_config.cartpole_anakin(), str(tmp_path), stream=io.StringIO())
  assert "recorded no metrics before it failed" in capsys.readouterr().err
  assert (tmp_path / "metrics.jsonl").read_text() == ""
  assert not (tmp_path / "learning_curve.png").exists()  # No blank plot.


def test_a_stop_before_the_first_step_is_a_stop_not_a_crash(tmp_path, monkeypatch):
  """A rank that a launcher stops while it still starts (one of its peers found a config
  error first) has no logger yet: the stop propagates as the stop it is, exit 143."""
  class StoppedWhileStarting:
    logger = checkpointer = None

    def train(self, workdir, stream):
      raise preemption.Terminated()  # Before any logger, as a SIGTERM in an import.

  monkeypatch.setattr(builder, "build", lambda config: StoppedWhileStarting())
  with pytest.raises(preemption.Terminated):
    launcher.launch(ppo_config.cartpole_anakin(), str(tmp_path), stream=io.StringIO())
  assert not (tmp_path / "learning_curve.png").exists()


def test_a_held_workdir_refuses_a_second_holder_and_is_free_again_after(tmp_path):
  run = str(tmp_path / "run")
  with workdir.held(run):
    with pytest.raises(ConfigError, match=f"in use by a run that is still going "
                                          f"\\(process {os.getpid()} on "):
      with workdir.held(run):
        pass
  with workdir.held(run):  # Released when the first run ended.
    pass


def test_a_second_launch_into_a_running_workdir_exits_2_naming_the_first(tmp_path):
  """Two launches, one workdir: the second is refused while the first runs, and the
  first run's metrics stay its own; a SIGKILLed run leaves the workdir free."""
  from tests.test_preemption import start, wait_for_records
  run = tmp_path / "run"
  first = start("agents/ppo/config.py:cartpole_anakin", run)
  try:
    wait_for_records(first, run / "metrics.jsonl", 1)
    second = launch("--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={run}",
                    "--fresh", timeout=120)
    assert second.returncode == 2, second.stderr
    assert "Traceback" not in second.stderr + second.stdout
    message = second.stderr.replace("\n", " ")
    assert f"is in use by a run that is still going (process {first.pid} on " in message
    assert not (run / "previous").exists()  # --fresh moved nothing of the running run.
    assert first.poll() is None
  finally:
    first.kill()
    first.communicate()
  with workdir.held(str(run)):  # The OS released the killed run's lock.
    pass


def test_tail_mean_is_the_mean_of_the_last_fifth_and_at_least_of_the_last_value():
  assert tail_mean([0.0] * 8 + [3.0, 5.0]) == 4.0  # The last 2 of 10.
  assert tail_mean([1.0, 2.0, 3.0, 4.0, 10.0]) == 10.0  # The last 1 of 5.
  assert tail_mean([7.0]) == 7.0 and tail_mean([]) is None
  assert tail_mean(range(10), fraction=0.5) == 7.0  # 5, 6, 7, 8, 9.
  with pytest.raises(ValueError, match="fraction 0"):
    tail_mean([1.0], fraction=0.0)


def test_a_workdir_from_before_the_population_keys_resumes_and_a_changed_one_does_not(
    tmp_path):
  """0.11.0 added `population` and `schedule_from` to every config: a workdir whose
  config.json lacks them (written by 0.10.0) resumes with their defaults, and one that
  sets them differently is refused naming the key."""
  config = ppo_config.cartpole_anakin()
  old = json.loads(config.to_json_best_effort())
  del old["population"], old["schedule_from"]
  (tmp_path / "config.json").write_text(json.dumps(old))
  changed = workdir._changed_keys  # pylint: disable=protected-access
  assert changed(str(tmp_path), config) == []
  config.population.kind = "pbt"
  assert changed(str(tmp_path), config) == ["population.kind"]
