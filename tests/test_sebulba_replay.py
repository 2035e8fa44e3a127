"""Sebulba with a host replay: actors insert sequences, the learner samples and writes
priorities back. A small in-memory host replay stands in for Reverb here, so the runtime's
side is tested in every lane; Reverb's own tests are in components/test_reverb_replay.py.
"""

import json
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.r2d2 import config as r2d2_config
from podracer import registry
from podracer.components.replay import Sample
from podracer.errors import ReplayTimeout
from podracer.logs.metrics import MetricsLogger, Window
from tests.test_sebulba import one_device, run_in_process, sebulba_threads


@registry.replay.register("test_memory")
class MemoryReplay:
  """A uniform host replay in a Python list: the host-replay API, nothing more."""

  kind = "host"

  def __init__(self, batch_size, max_size=1000, min_size=1, timeout=0.2, **unused):
    del unused
    self.batch_size, self.max_size, self.min_size = batch_size, max_size, min_size
    self.timeout = timeout
    self.items, self.priorities = [], []
    self.inserts = self.samples = 0
    self.written = []  # (keys, priorities) the learner sent back
    self.lock = threading.Condition()
    self.started_with = None
    self.closed = False

  # in-graph side: the state is the sampled batch
  def init(self, item_spec):
    zeros = lambda s: jnp.zeros((self.batch_size, *s.shape), s.dtype)
    n = self.batch_size
    return Sample(jax.tree.map(zeros, item_spec), jnp.zeros(n, jnp.int32),
                  jnp.ones(n, jnp.float32), jnp.zeros((), jnp.int32), jnp.zeros(n))

  def add(self, state, items, priorities=None):
    return state

  def can_sample(self, state):
    return jnp.bool_(True)

  def sample(self, state, key):
    return state

  def update_priorities(self, state, sample, priorities):
    return state._replace(priorities=priorities)

  # host side
  def start(self, item_spec, overlap=0):
    self.started_with = item_spec

  def insert(self, items, priorities=None):
    leaves, treedef = jax.tree.flatten(items)
    with self.lock:
      for i in range(leaves[0].shape[0]):
        self.items.append(jax.tree.unflatten(treedef, [x[i] for x in leaves]))
        self.priorities.append(1.0)
      del self.items[:-self.max_size], self.priorities[:-self.max_size]
      self.inserts += leaves[0].shape[0]
      self.lock.notify_all()

  def sample_batch(self, batch_size=None):
    batch_size = batch_size or self.batch_size
    with self.lock:
      if not self.lock.wait_for(lambda: len(self.items) >= self.min_size, self.timeout):
        raise ReplayTimeout("too few items")
      keys = np.random.randint(0, len(self.items), batch_size).astype(np.uint64)
      items = jax.tree.map(lambda *xs: np.stack(xs), *[self.items[k] for k in keys])
      self.samples += batch_size
      size = len(self.items)
    return items, keys, np.full(batch_size, 1.0 / size, np.float32), size

  def write_priorities(self, keys, priorities):
    self.written.append((np.asarray(keys), np.asarray(priorities)))

  def info(self):
    with self.lock:
      return dict(replay_size=len(self.items), replay_inserts=self.inserts,
                  replay_samples=self.samples)

  def close(self):
    self.closed = True


@pytest.mark.slow
@pytest.mark.reverb_lane
def test_actors_insert_sequences_and_the_learner_writes_priorities_back():
  config = one_device(r2d2_config.cartpole_sebulba())
  config.replay = dict(name="test_memory", batch_size=16, max_size=2000, min_size=64)
  config.runtime.max_policy_lag = None  # The learner samples while the actors insert.
  config.total_env_steps = 20_000
  config.runtime.log_interval = 0.5
  records, _, runtime = run_in_process(config)
  replay = runtime.agent.replay

  assert sebulba_threads() == [] and replay.closed
  spec = replay.started_with  # one sequence: burn-in + rollout + n-step entries
  length = config.agent.burn_in + config.runtime.rollout_length + config.agent.n_step
  assert spec.timestep.observation.shape == (length, 4)
  assert spec.actor_state.hidden.shape == (config.network.lstm_size,)  # stored LSTM state
  # Every actor trajectory became one sequence per environment (some may be inserted
  # after the learner's last count).
  assert replay.inserts % config.runtime.num_envs_per_actor == 0
  assert replay.inserts >= records[-1]["env_steps"] // config.runtime.rollout_length
  assert replay.written, "the learner never wrote priorities back"
  keys, priorities = replay.written[-1]
  assert keys.shape == priorities.shape == (16,) and np.all(priorities >= 0)
  assert np.any(priorities > 0)
  for key in ("replay_size", "replay_inserts_per_s", "replay_samples_per_s",
              "sample_to_insert_ratio", "priority_mean", "policy_lag", "replay_ratio",
              "epsilon_mean"):
    assert key in records[-1], key
  assert records[-1]["env_steps"] >= 20_000
  # The actors' exploration, annealing from 1 over each environment's first 2000 steps
  # to Ape-X's epsilons (under 0.01 here). By the 20k env steps the learner counts, the
  # 2 threads x 12 environments have acted about 833 steps each, so about 0.58 of the way
  # is left; actors that ran ahead of the count (this replay does not hold them back;
  # how far depends on the machine: 0.19-0.59 seen) have less.
  epsilons = [r["epsilon_mean"] for r in records if "epsilon_mean" in r]
  assert len(epsilons) >= 2 and 1.0 >= epsilons[0] > epsilons[-1], epsilons
  assert 0.0 < epsilons[-1] < 0.75, epsilons


def test_a_host_replay_warming_up_writes_records_and_a_run_that_ends_there_says_so():
  """Before the learner's first update: a record every log_interval with what the actors
  did and how full the replay is; a run whose budget ends first keeps them all."""
  config = one_device(r2d2_config.cartpole_sebulba())
  config.replay = dict(name="test_memory", batch_size=16, max_size=5000, min_size=4000)
  config.runtime.max_policy_lag = None  # The learner samples while the actors insert.
  config.total_env_steps = 8_000  # about 800 sequences of 10 steps: short of 4000
  config.runtime.log_interval = 0.1
  records, _, _ = run_in_process(config)
  assert sebulba_threads() == []
  assert len(records) >= 2 and records[-1]["env_steps"] >= 8_000
  for record in records:
    assert record["learning_started"] is False and record["updates"] == 0
    assert record["replay_min_size"] == 4000 and 0 <= record["replay_size"] < 4000
    assert record["replay_fill"] == record["replay_size"] / 4000
    assert record["sps"] >= 0 and "loss" not in record
  sizes = [r["replay_size"] for r in records]
  assert sizes == sorted(sizes) and sizes[-1] > sizes[0] and records[-1]["sps"] > 0
  assert any("episode_return" in r for r in records)  # The actors' episodes, seen early.
  logger = MetricsLogger(stream=None)
  logger.records = records
  summary = logger.summary()
  assert summary["learning_started"] is False and summary["replay_min_size"] == 4000
  assert "warming up replay" in logger.format(records[-1])


@pytest.mark.slow
def test_a_run_ending_in_warm_up_exits_0_with_one_line_saying_how_far_the_replay_got(tmp_path):
  from tests.test_launch import launch
  result = launch("--config=agents/r2d2/config.py:cartpole_sebulba",
                  "--config.replay.name=host", "--config.replay.min_size=4000",
                  "--config.total_env_steps=5000", "--config.runtime.log_interval=0.5",
                  f"--workdir={tmp_path}", timeout=240)
  assert result.returncode == 0, result.stderr
  assert "warming up replay" in result.stdout
  assert "the run ended before learning started: its replay held " in result.stdout
  assert "of the 4,000 items (`replay.min_size`)" in result.stdout
  assert "Warning: replay.min_size=4,000 items will not be reached" in result.stdout
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert lines and all('"learning_started": false' in line for line in lines)
  # The budget (5,040: 42 batches of 120) holds while the replay fills, give or take
  # what the actors step between two of the learner's counts (it once overshot by 80 %).
  assert 5_040 <= json.loads(lines[-1])["env_steps"] <= 1.25 * 5_040


def _host_replay_in_turns(total_env_steps):
  config = one_device(r2d2_config.cartpole_sebulba())
  config.replay.name = "host"
  config.replay.min_size = 64
  config.runtime.max_policy_lag = 0
  config.total_env_steps = total_env_steps
  config.runtime.log_interval = 0.0  # a record per turn
  assert config.runtime.actor_threads_per_device == 2
  return config


def test_a_record_shows_the_last_update_that_learned_not_one_the_rate_limiter_held():
  """Under Sebulba a device replay's update can learn nothing (the rate limiter holds it:
  `learning` 0, zeros); the window keeps the last one that learned, so a record whose
  last update waited does not show a loss of 0. A window where none learned shows so."""
  learned = dict(loss=1.5, learning=1.0, replay_size=300.0)
  held = dict(loss=0.0, learning=0.0, replay_size=308.0)
  window = Window()
  window.add_metrics(held)
  assert window.record(0, 1)["learning"] == 0.0
  window.add_metrics(learned)
  window.add_metrics(held)
  record = window.record(0, 3)
  assert (record["loss"], record["learning"]) == (1.5, 1.0)
  later = dict(learned, loss=0.5)
  window.add_metrics(later)
  assert window.record(0, 4)["loss"] == 0.5
  fresh = Window()
  fresh.add_metrics(dict(loss=2.0))  # metrics without `learning` always replace
  fresh.add_metrics(dict(loss=3.0))
  assert fresh.record(0, 2)["loss"] == 3.0


def test_with_a_host_replay_and_max_policy_lag_0_two_runs_are_the_same():
  """Each trajectory goes into the replay, then the learner takes the updates its
  `samples_per_insert` allows, then the next is acted with the new parameters: two
  actor threads, the same records and the same sampled batches twice."""
  runs = []
  for _ in range(2):
    config = _host_replay_in_turns(6_000)
    records, _, runtime = run_in_process(config)
    kept = ("env_steps", "updates", "episode_return", "loss", "priority_mean",
            "policy_lag", "gradient_steps")  # replay_size: read as the next goes in
    runs.append([{k: v for k, v in r.items() if k in kept} for r in records])
  per_turn = config.runtime.num_envs_per_actor * config.runtime.rollout_length
  assert len(runs[0]) == 6_000 // per_turn and runs[0] == runs[1]
  learned = [r for r in runs[0] if "loss" in r]
  assert learned and all(r["policy_lag"] == 0 for r in runs[0])
  # Turns count trajectories; gradient steps are what samples_per_insert allows, to
  # within one batch: 4 samples per inserted item beyond the 64 the replay needs first.
  last = runs[0][-1]
  assert last["updates"] == 6_000 // per_turn
  items = last["updates"] * config.runtime.num_envs_per_actor
  allowed = config.replay.samples_per_insert * (items - config.replay.min_size)
  assert 0 <= allowed - last["gradient_steps"] * config.replay.batch_size < config.replay.batch_size
  assert sebulba_threads() == [] and runtime.agent.replay.info()["replay_samples"] > 0


@pytest.mark.parametrize("change,named", [
    (dict(max_policy_lag=1), "is 0 (acting and learning take turns) or None here; got 1"),
    (dict(samples_per_insert=None), "--config.replay.samples_per_insert=1.0"),
    # A trajectory's 12 sequences at 64 / 12 samples each, and a batch of 64 left.
    (dict(error_buffer=60.0), "--config.replay.error_buffer=128"),
])
def test_a_host_replay_refuses_a_lag_it_cannot_keep_at_build(change, named):
  from podracer import builder
  from podracer.errors import ConfigError
  config = _host_replay_in_turns(6_000)
  for key, value in change.items():
    (config.runtime if key == "max_policy_lag" else config.replay)[key] = value
  with pytest.raises(ConfigError) as e:
    builder.build(config)
  assert named in " ".join(str(e.value).split())
