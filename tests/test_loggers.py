"""Loggers (podracer/components/loggers): each built-in round-trips records (NaN where
the format needs it), a full disk under each is one paragraph, a run writes all four,
many runs are W&B runs of one group, and a user's logger plugs in like any component."""

import errno
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

from podracer import builder, logs, registry, testing
from podracer.logs import tensorboard, wandb as wandb_log
from podracer.errors import ConfigError, DiskError
from podracer.launch import register_components_and_agents
from tests.test_launch import launch

ROOT = pathlib.Path(__file__).resolve().parents[1]
register_components_and_agents()


def _numbers(record):
  """A record's numeric, finite values: what every format keeps of it."""
  return {k: v for k, v in record.items() if isinstance(v, (int, float))
          and not isinstance(v, bool) and math.isfinite(v)}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
  monkeypatch.delenv("WANDB_MODE", raising=False)  # W&B's default here: offline


def test_jsonl_keeps_every_record_with_null_for_nan(tmp_path):
  records = testing.fake_records(4)
  testing.log_records("jsonl", str(tmp_path), records)
  lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert len(lines) == 4 and lines[1]["loss"] is None
  for line, record in zip(lines, records):
    assert _numbers(line).items() >= _numbers(record).items()


def test_csv_has_a_column_per_metric_and_an_empty_cell_for_nan(tmp_path):
  records = testing.fake_records(4)
  records[3]["late_metric"] = 7.0  # a column that appears late widens the header
  testing.log_records("csv", str(tmp_path), records)
  header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
  assert "late_metric" in header and "episode_return" in header
  rows = logs.read_csv(str(tmp_path / "metrics.csv"))
  assert len(rows) == 4 and "loss" not in rows[1] and rows[3]["late_metric"] == 7
  for row, record in zip(rows, records):
    assert _numbers(row).items() >= _numbers(record).items()


def test_tensorboard_keeps_each_finite_value_at_its_env_steps(tmp_path):
  records = testing.fake_records(4)
  testing.log_records("tensorboard", str(tmp_path), records)
  scalars = tensorboard.read_scalars(str(tmp_path))
  assert [step for step, _ in scalars["loss"]] == [1024, 3072, 4096]  # NaN left out
  assert [v for _, v in scalars["episode_return"]] == pytest.approx(
      [r["episode_return"] for r in records])


def test_wandb_writes_an_offline_run_with_the_records_and_the_config(tmp_path):
  records = testing.fake_records(4)
  testing.log_records("wandb", str(tmp_path), records, config=dict(seed=3), project="p",
                      tags=("a",))
  (run_dir,) = wandb_log.offline_runs(str(tmp_path))
  run = wandb_log.read_offline_run(run_dir)
  assert run["config"]["seed"] == 3 and run["group"] == tmp_path.name
  assert [h["_step"] for h in run["history"]] == [r["env_steps"] for r in records]
  for entry, record in zip(run["history"], records):
    expected = {k: v for k, v in _numbers(record).items() if k != "env_steps"}
    assert {k: entry[k] for k in expected} == pytest.approx(expected)
  assert "loss" not in run["history"][1]  # NaN: left out


@pytest.mark.parametrize("name", ["jsonl", "csv", "tensorboard", "wandb"])
def test_a_full_disk_under_each_logger_is_one_disk_error_naming_its_files(
    tmp_path, monkeypatch, name):
  factory = registry.loggers.get(name)
  write = factory.write
  calls = [0]

  def full(self, record):
    calls[0] += 1
    if calls[0] > 2:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return write(self, record)
  monkeypatch.setattr(factory, "write", full)
  with pytest.raises(DiskError) as raised:
    testing.log_records(name, str(tmp_path), testing.fake_records(5))
  message = str(raised.value)
  assert f"Could not write the {factory.what} to " in message
  assert "No space left on device" in message and "\n" not in message.strip()


@pytest.mark.slow
def test_a_run_writes_all_four_and_each_of_its_runs_is_a_wandb_run_of_one_group(tmp_path):
  """PPO CartPole, 4 runs in one program, with every built-in logger: metrics.jsonl,
  metrics.csv, the event files (run_N/) and 4 offline W&B runs, in one group, each
  holding its run's values of metrics.jsonl."""
  result = launch("--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={tmp_path}",
                  "--config.num_runs=4", "--config.total_env_steps=16384",
                  "--config.log.loggers=('jsonl', 'tensorboard', 'csv', 'wandb')",
                  "--config.log.wandb.group=cartpole-seeds", timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert len(logs.read_csv(str(tmp_path / "metrics.csv"))) == len(records)
  assert {"run_0", "run_1", "run_2", "run_3"} <= set(os.listdir(tmp_path))
  runs = [wandb_log.read_offline_run(d) for d in wandb_log.offline_runs(str(tmp_path))]
  assert sorted(r["name"] for r in runs) == ["run_0", "run_1", "run_2", "run_3"]
  assert {r["group"] for r in runs} == {"cartpole-seeds"}
  for run in runs:
    mine = [r for r in records if r["run"] == int(run["name"][4:])]
    assert [h["episode_return"] for h in run["history"]] == pytest.approx(
        [r["episode_return"] for r in mine])
    assert [h["_step"] for h in run["history"]] == [r["env_steps"] for r in mine]


def test_wandb_listed_but_not_installed_exits_2_naming_the_key_and_the_extra(tmp_path):
  blocker = tmp_path / "site" / "wandb"
  blocker.mkdir(parents=True)
  (blocker / "__init__.py").write_text("raise ImportError('No module named wandb')\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
  env.pop("XLA_FLAGS", None)
  result = subprocess.run(
      [sys.executable, "-m", "podracer.launch", "--config=agents/ppo/config.py:cartpole_anakin",
       f"--workdir={tmp_path / 'run'}", "--config.total_env_steps=8192",
       "--config.log.loggers=('jsonl', 'wandb')"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr
  message = " ".join(result.stderr.split())
  assert "Traceback" not in result.stderr and "`log.loggers` names 'wandb'" in message
  assert 'pip install -e ".[wandb]"' in message


def test_an_unknown_logger_or_key_is_refused_naming_it_before_anything_runs():
  from agents.ppo.config import cartpole_anakin
  config = cartpole_anakin()
  config.log.loggers = ("jsonl", "tensorbord")
  with pytest.raises(ConfigError, match="Unknown logger 'tensorbord' .config key "
                                        "`log.loggers`.*Did you mean 'tensorboard'.*"
                                        "Registered loggers: csv, jsonl, tensorboard"):
    builder.build(config)
  config = cartpole_anakin()
  config.log.wandb.unlock()
  config.log.wandb.projct = "x"
  with pytest.raises(ConfigError, match="`log.wandb.projct`"):
    builder.build(config)


@registry.loggers.register("test_list")
class ListLogger(logs.Logger):
  """A user's logger: keeps the records it is given, as its docs example does."""
  what = "the list"

  def __init__(self, workdir, prefix: str = ""):
    self.where, self.prefix, self.records, self.closed = workdir, prefix, [], False

  def write(self, record):
    self.records.append({self.prefix + k: v for k, v in record.items()})

  def close(self):
    self.closed = True


def test_a_users_logger_gets_strict_records_through_the_testing_fakes(tmp_path):
  logger = testing.log_records("test_list", str(tmp_path), testing.fake_records(3),
                               prefix="my/")
  assert logger.closed and len(logger.records) == 3
  assert logger.records[1]["my/loss"] is None  # NaN, as every logger gets it
  assert logger.records[0]["my/env_steps"] == 1024
