"""Checkpoints and resume: an Anakin run stopped by SIGTERM and relaunched gives the
records an uninterrupted run gives, on 8 devices; a Sebulba run goes on from its learner's
state and counters (and its Reverb table, in the reverb lane); typed PRNG keys survive."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from agents.ppo import config as ppo_config
from podracer.logs import tensorboard
from podracer.lifecycle import workdir
from podracer.lifecycle.checkpoint import Checkpointer
from podracer.errors import ConfigError
from tests.reverb_support import requires_reverb
from tests.test_preemption import wait_for_records
from tests.test_tensorboard import assert_same, scalars_of

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Times and rates differ between runs; everything else must not.
UNEQUAL = {"sps", "wall_time", "includes_compilation", "compile_s", "replay_inserts_per_s",
           "replay_samples_per_s", "sample_to_insert_ratio", "replay_ratio"}

CASES = {
    # 8 devices x 4 envs x 32 steps x 4 updates = 4,096 env steps a call; 12 calls.
    "ppo_cartpole": ["--config=agents/ppo/config.py:cartpole_anakin",
                     "--config.runtime.num_envs_per_device=4",
                     "--config.runtime.rollout_length=32",
                     "--config.runtime.updates_per_call=4", "--config.total_env_steps=49152"],
    # The device replay is part of the state; 8 x 4 x 8 x 4 = 1,024 a call; 12 calls.
    "r2d2_catch": ["--config=agents/r2d2/config.py:catch_anakin",
                   "--config.runtime.num_envs_per_device=4",
                   "--config.runtime.updates_per_call=4", "--config.total_env_steps=12288",
                   "--config.replay.min_size=8"],
    # Many runs (podracer/config/runs.py): 2 seeds x 2 learning rates, 4 records a call.
    "ppo_runs": ["--config=agents/ppo/config.py:cartpole_anakin",
                 "--config.runtime.num_envs_per_device=4", "--config.runtime.rollout_length=32",
                 "--config.runtime.updates_per_call=4", "--config.total_env_steps=49152",
                 "--config.num_runs=2", "--config.sweep.optimizer.learning_rate=2.5e-4,1e-3"],
    # ... as a population (podracer/runtimes/population.py): an exploit/explore step
    # every call, its values and fitness in the checkpoint.
    "ppo_pbt": ["--config=agents/ppo/config.py:cartpole_anakin",
                "--config.runtime.num_envs_per_device=4", "--config.runtime.rollout_length=32",
                "--config.runtime.updates_per_call=4", "--config.total_env_steps=49152",
                "--config.num_runs=2", "--config.sweep.optimizer.learning_rate=2.5e-4,1e-3",
                "--config.population.kind=pbt", "--config.population.interval=4",
                "--config.population.bounds.optimizer.learning_rate=1e-4,2e-3"],
    # Meta-gradients (podracer/components/losses/meta_gradient.py): the adapted discount
    # and lambda, and their Adam state, are learner state.
    "ppo_meta_gradient": ["--config=agents/ppo/config.py:cartpole_anakin",
                          "--config.runtime.num_envs_per_device=4",
                          "--config.runtime.rollout_length=32",
                          "--config.runtime.updates_per_call=4",
                          "--config.total_env_steps=49152", "--config.agent.discount=0.9",
                          "--config.meta_loss=meta_gradient"],
    # Continuous PPO: the observation statistics in the parameters, the return statistics
    # in the learner state and the returns in the actor state, the raw samples of a
    # tanh-normal kept with the trajectory; 8 x 4 x 32 x 2 = 2,048 a call; 12 calls.
    "ppo_pendulum_normalized": ["--config=agents/ppo/config.py:pendulum_anakin",
                                "--config.distribution.name=tanh_normal",
                                "--config.reward_normalizer=return_std",
                                "--config.runtime.num_envs_per_device=4",
                                "--config.runtime.rollout_length=32",
                                "--config.runtime.updates_per_call=2",
                                "--config.total_env_steps=24576"],
}
RECORDS_PER_CALL = {"ppo_runs": 4, "ppo_pbt": 4}
# The reverb lane resumes PPO CartPole (orbax and typed keys of its JAX) and no more.
REVERB_LANE = {"ppo_cartpole"}
# Many runs resume as a population does (its case is PBT's and many runs' both): CI runs
# `ppo_pbt`; the extended tier (scripts/test.sh --all) both. A meta-gradient's state is
# one more entry of the learner state `ppo_cartpole` resumes: extended too.
# Continuous PPO's normalisers are entries of the state trees `ppo_cartpole` resumes whole
# (parameters, learner and actor state): extended too (CI time, 2026-12-08).
EXTENDED = {"ppo_runs", "ppo_meta_gradient", "ppo_pendulum_normalized"}


def start(args, run_dir, devices=8):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu")
  return subprocess.Popen(
      [sys.executable, "-m", "podracer.launch", *args, "--config.checkpoint_interval=0",
       f"--workdir={run_dir}"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def records(run_dir):
  lines = (run_dir / "metrics.jsonl").read_text().splitlines()
  return [{k: v for k, v in json.loads(l).items() if k not in UNEQUAL} for l in lines]


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.reverb_lane) if c in REVERB_LANE
    else pytest.param(c, marks=pytest.mark.extended) if c in EXTENDED else c
    for c in CASES])
@pytest.mark.slow
def test_sigterm_then_relaunch_gives_the_records_of_an_uninterrupted_run(case, tmp_path):
  pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint is a dependency "
                      "(setup.py): reinstall the lane with scripts/setup_env.sh")
  args, per_call = CASES[case], RECORDS_PER_CALL.get(case, 1)
  whole = start(args, tmp_path / "whole")
  _, stderr = whole.communicate(timeout=300)
  assert whole.returncode == 0, stderr
  expected = records(tmp_path / "whole")
  assert len(expected) == 12 * per_call

  run_dir = tmp_path / "stopped"
  first = start(args, run_dir)
  wait_for_records(first, run_dir / "metrics.jsonl", 4 * per_call, timeout=300, poll=0.05)
  first.send_signal(signal.SIGTERM)
  stdout, stderr = first.communicate(timeout=60)
  assert first.returncode == 143, stderr
  assert "saved a checkpoint at env steps" in stdout
  stopped_at = len(records(run_dir))
  assert 4 * per_call <= stopped_at < 12 * per_call, \
      "the run must stop mid-way for the test to mean anything"

  again = start(args, run_dir)
  stdout, stderr = again.communicate(timeout=300)
  assert again.returncode == 0, stderr
  assert "resuming the run" in stdout
  assert records(run_dir) == expected
  # TensorBoard holds each step once, with the values metrics.jsonl has.
  written = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
  if per_call == 1:
    assert_same(tensorboard.read_scalars(str(run_dir)), scalars_of(written))
  for run in range(per_call if per_call > 1 else 0):  # Many runs: a directory each.
    assert_same(tensorboard.read_scalars(str(run_dir / f"run_{run}")),
                scalars_of([r for r in written if r["run"] == run]))


def stop_once(process, run_dir, reached, timeout=180):
  """SIGTERMs the launcher `process` once a record is `reached`; the env steps of the
  checkpoint it says it saved."""
  return stop_and_read(process, run_dir, reached, timeout)[0]


def stop_and_read(process, run_dir, reached, timeout=180):
  """stop_once's env steps, and the `result:` line the launcher printed, as a dict."""

  def done():
    try:
      return any(reached(r) for r in records(run_dir))
    except (OSError, ValueError):  # Not written yet, or a line half written.
      return False

  deadline = time.monotonic() + timeout
  while not done():
    assert process.poll() is None, process.communicate()[1]
    assert time.monotonic() < deadline, f"no record reached the mark in {timeout} s"
    time.sleep(0.2)
  process.send_signal(signal.SIGTERM)
  stdout, stderr = process.communicate(timeout=60)
  assert process.returncode == 143, stderr
  saved = int(re.search(r"saved a checkpoint at env steps ([\d,]+)", stdout)[1]
              .replace(",", ""))
  return saved, json.loads(re.search(r"^result: (.*)$", stdout, re.M)[1])


# PPO learns CartPole in about 40k env steps at this learning rate; a record every second.
SEBULBA = ["--config=agents/ppo/config.py:cartpole_sebulba",
           "--config.optimizer.learning_rate=1e-3", "--config.checkpoint_interval=1"]


@pytest.mark.slow
def test_sebulba_resumes_its_learner_and_counters_after_sigterm(tmp_path):
  pytest.importorskip("orbax.checkpoint")
  run_dir = tmp_path / "run"
  first = start(SEBULBA + ["--config.total_env_steps=1000000"], run_dir, devices=1)
  saved, result = stop_and_read(first, run_dir, lambda r: r.get("episode_return", 0) >= 150)
  # The interrupted run's result says what its checkpoint holds, not its last record.
  assert result["env_steps"] == saved and result["stopped_by"] == "SIGTERM", result
  before = records(run_dir)
  trained = [r["episode_return"] for r in before if "episode_return" in r][-2:]

  # Only the step budget may change: 20 more trajectories of 12 x 64 steps.
  again = start(SEBULBA + [f"--config.total_env_steps={saved + 20 * 768}"], run_dir,
                devices=1)
  stdout, stderr = again.communicate(timeout=180)
  assert again.returncode == 0, stderr
  assert "resuming the run" in stdout
  resumed = records(run_dir)
  assert resumed[:len(before)] == before  # Appended to the first run's records.
  after = resumed[len(before):]
  # No null values: records before the restarted environments end an episode carry no
  # return at all, as at a run's start (docs/runs.md).
  assert all(v is not None for r in after for v in r.values()), after[:3]
  # The env-step counter goes on from the checkpoint's (one trajectory is 768 steps).
  assert saved < after[0]["env_steps"] <= saved + 3 * 768, (saved, after[0])
  assert [r["env_steps"] for r in after] == sorted(r["env_steps"] for r in after)
  assert after[-1]["env_steps"] >= saved + 20 * 768
  # The resumed policy is the trained one. Its first update's entropy is not a fresh
  # network's (ln 2 = 0.69: even odds).
  assert after[0]["entropy"] < 0.67, after[0]
  # Its return, over episodes that all started at the restart (so the short ones end
  # first: over 20 trajectories every environment plays 1280 steps), is the run's.
  episodes = sum(r.get("episodes", 0) for r in after)
  mean = sum(r.get("episode_return", 0) * r.get("episodes", 0) for r in after) / episodes
  assert mean >= 0.5 * sum(trained) / len(trained), (trained, mean)


def test_a_checkpointed_run_with_another_config_is_refused(tmp_path):
  config = ppo_config.cartpole_anakin()
  (tmp_path / "metrics.jsonl").write_text('{"env_steps": 1}\n')
  (tmp_path / "checkpoints" / "3").mkdir(parents=True)
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  config.total_env_steps *= 2  # The budget may change.
  assert "resuming" in workdir.prepare(str(tmp_path), config=config)
  config.optimizer.learning_rate = 1.0
  with pytest.raises(ConfigError, match="`optimizer.learning_rate`"):
    workdir.prepare(str(tmp_path), config=config)
  assert "moved" in workdir.prepare(str(tmp_path), fresh=True, config=config)
  assert not (tmp_path / "checkpoints").exists()


def test_resuming_a_run_that_already_ran_its_budget_says_nothing_more_is_trained(tmp_path):
  config = ppo_config.cartpole_anakin()
  (tmp_path / "metrics.jsonl").write_text(f'{{"env_steps": {config.total_env_steps}}}\n')
  (tmp_path / "checkpoints" / "3").mkdir(parents=True)
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  said = workdir.prepare(str(tmp_path), config=config)
  assert "already ran its" in said and "nothing more is trained" in said, said
  config.total_env_steps *= 2
  assert "already ran" not in workdir.prepare(str(tmp_path), config=config)


@pytest.mark.reverb_lane
def test_sebulba_checkpoints_the_reverb_table_and_resumes_from_it(tmp_path):
  reverb = requires_reverb()
  pytest.importorskip("orbax.checkpoint")
  from podracer.components.replay.reverb_server import make_table  # Imports Reverb.
  args = ["--config=agents/r2d2/config.py:cartpole_sebulba", "--config.replay.checkpoint=True",
          "--config.replay.max_size=1000", "--config.checkpoint_interval=1"]
  run_dir = tmp_path / "run"
  first = start(args + ["--config.total_env_steps=10000000"], run_dir, devices=1)
  saved = stop_once(first, run_dir, lambda r: r.get("replay_size", 0) >= 1000)
  before = records(run_dir)

  # The table as the run saved it: full, with the priorities the learner wrote back.
  server = reverb.Server(tables=[make_table(max_size=1000)], port=None,
                         checkpointer=reverb.checkpointers.DefaultCheckpointer(
                             path=str(run_dir / "checkpoints" / "reverb")))
  try:
    client = reverb.Client(f"localhost:{server.port}")
    assert client.server_info()["replay"].current_size == 1000
    priorities = {int(s.info.key): float(s.info.priority) for s in client.sample(
        "replay", num_samples=200, emit_timesteps=False)}
  finally:
    server.stop()
  assert len(set(priorities.values())) > 10, priorities  # Not the initial 1.0 for all.

  again = start(args + [f"--config.total_env_steps={saved + 2400}"], run_dir, devices=1)
  stdout, stderr = again.communicate(timeout=180)
  assert again.returncode == 0, stderr
  assert "resuming the run" in stdout
  after = records(run_dir)[len(before):]
  # The full table lets the learner update before any new env step arrives.
  assert after and saved <= after[0]["env_steps"] < after[-1]["env_steps"], (saved, after)
  # A new table would start empty and hold a few hundred items at the first update.
  assert all(r["replay_size"] == 1000 for r in after), [r["replay_size"] for r in after]


@pytest.mark.reverb_lane
def test_typed_prng_keys_come_back_typed_with_their_impl_and_data(tmp_path):
  pytest.importorskip("orbax.checkpoint")
  state = dict(key=jax.random.key(7), keys=jax.random.split(jax.random.key(1), 3),
               rbg=jax.random.key(2, impl="rbg"), raw=jax.random.PRNGKey(3),
               params=np.arange(4.0, dtype=np.float32))
  Checkpointer(str(tmp_path)).save(5, state, num_records=2, env_steps=640)
  like = dict(state, key=jax.random.key(0), keys=jax.random.split(jax.random.key(0), 3),
              rbg=jax.random.key(0, impl="rbg"))
  restored, step = Checkpointer(str(tmp_path)).restore(like)
  assert step == 5
  for name in ("key", "keys", "rbg"):
    assert jax.dtypes.issubdtype(restored[name].dtype, jax.dtypes.prng_key), name
    assert jax.random.key_impl(restored[name]) == jax.random.key_impl(state[name])
    np.testing.assert_array_equal(jax.random.key_data(restored[name]),
                                  jax.random.key_data(state[name]))
  # A restored key draws what the saved one drew.
  np.testing.assert_array_equal(jax.random.normal(restored["key"], (3,)),
                                jax.random.normal(state["key"], (3,)))
  np.testing.assert_array_equal(restored["raw"], state["raw"])
  np.testing.assert_array_equal(restored["params"], state["params"])


def _truncate_largest_file(checkpoint_dir: pathlib.Path) -> None:
  files = [p for p in (checkpoint_dir / "state").rglob("*") if p.is_file()]
  largest = max(files, key=lambda p: p.stat().st_size)
  largest.write_bytes(largest.read_bytes()[: largest.stat().st_size // 2])


@pytest.mark.slow
def test_a_damaged_latest_checkpoint_is_skipped_and_the_run_resumes_from_an_older_one(tmp_path):
  pytest.importorskip("orbax.checkpoint")
  from tests.test_launch import launch
  run = tmp_path / "run"
  args = ["--config=agents/ppo/config.py:cartpole_anakin", "--config.topology.num_devices=1",
          "--config.runtime.num_envs_per_device=4", "--config.runtime.rollout_length=32",
          "--config.runtime.updates_per_call=4", "--config.checkpoint_interval=0",
          f"--workdir={run}"]
  first = launch(*args, "--config.total_env_steps=4096", timeout=240)  # 8 calls of 512
  assert first.returncode == 0, first.stderr
  steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
  assert len(steps) == 3, steps  # checkpoints_to_keep
  before = (run / "metrics.jsonl").read_text().splitlines()
  _truncate_largest_file(run / "checkpoints" / str(steps[-1]))
  second = launch(*args, "--config.total_env_steps=6144", timeout=240)
  assert second.returncode == 0, second.stderr
  assert "Traceback" not in second.stderr + second.stdout
  skipped = [l for l in second.stderr.splitlines() if l.startswith("Skipping checkpoint")]
  assert len(skipped) == 1 and f"Skipping checkpoint {steps[-1]} in " in skipped[0]
  after = (run / "metrics.jsonl").read_text().splitlines()
  # Rewound to the older checkpoint's records (one record a call), then on to 12 calls.
  assert after[:steps[-2]] == before[:steps[-2]] and len(after) == 12
  assert json.loads(after[-1])["env_steps"] == 6144
  # Every checkpoint damaged: exit 2, one paragraph naming the directory and --fresh.
  for step in sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()):
    _truncate_largest_file(run / "checkpoints" / str(step))
  third = launch(*args, "--config.total_env_steps=8192", timeout=240)
  assert third.returncode == 2, third.stderr
  message = " ".join(third.stderr.split())
  assert "No checkpoint in " in message and "--fresh" in message
  assert "Traceback" not in third.stderr
