"""Sebulba: CPU environments, actor threads, a learner replicated over learner devices.

The test process has 8 virtual CPU devices (conftest), so the configs' default topology
is Sebulba's 8-device split: 2 actor devices and 6 learner devices. "1 device" runs pin
acting and learning to device 0.
"""

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import pytest

from agents.impala import config as impala_config
from agents.ppo import config as ppo_config
from podracer import builder, mesh, registry, testing, trajectories
from podracer.errors import ConfigError, ThreadFailure
from podracer.logs.metrics import MetricsLogger
from podracer.runtimes.sebulba import ParamsStore
from podracer.runtimes.host.params import PolicyLagBound
from podracer.types import StepType, Trajectory
from tests.processes import with_sigint_ignored
from tests.learning import best_by_run, launch_runs
from tests.test_launch import launch as launch_and_wait

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEBULBA_METRICS = ("sps", "learner_update_time", "learner_wait_time", "queue_depth",
                   "policy_lag", "actor_env", "actor_inference", "actor_wait_params",
                   "actor_wait_queue")


def sebulba_threads():
  return [t.name for t in threading.enumerate()
          if t.is_alive() and (t.name.startswith("actor-") or t.name == "learner")]


def one_device(config):
  config.topology.actor_devices = (0,)
  config.topology.learner_devices = (0,)
  return config


def run_in_process(config):
  """Runs `config`; returns (records, learner state [nets, opt, experience], runtime)."""
  experiment = builder.build(config)
  logger = MetricsLogger(stream=None, stop_at_return=config.get("stop_at_return"))
  state = experiment.runtime.train(logger)
  return logger.records, state, experiment.runtime


# -- pieces ----------------------------------------------------------------------------


def test_split_batch_gives_each_learner_a_contiguous_slice_of_the_batch():
  entries = [Trajectory(timestep=t * 100 + np.arange(6), actor_state=(), action=np.full(6, t),
                        extras={}) for t in range(4)]
  split = mesh.split_batch(3, trajectories.stack(entries))
  assert split.timestep.shape == (3, 4, 2)  # [learners, T+1, B / learners]
  np.testing.assert_array_equal(split.timestep[1, 2], [202, 203])  # learner 1: envs 2, 3
  np.testing.assert_array_equal(split.action[2], np.arange(4)[:, None] * np.ones((1, 2)))


def test_params_store_hands_each_actor_device_its_own_copy_of_the_newest_version():
  devices = jax.devices()[:2]
  store = ParamsStore(devices)
  store.push({"w": np.arange(3.0)}, version=4)
  for d in devices:
    params, version = store.get(d)
    assert version == 4 and params["w"].devices() == {d}
    np.testing.assert_array_equal(params["w"], np.arange(3.0))


def test_default_topology_splits_8_devices_into_2_actors_and_6_learners():
  topology = registry.build(registry.topologies, {"name": "actor_learner"}, key="topology")
  assert [d.id for d in topology.actor_devices] == [0, 1]
  assert [d.id for d in topology.learner_devices] == [2, 3, 4, 5, 6, 7]
  shared = registry.build(registry.topologies, {"name": "actor_learner", "actor_devices": (0,),
                                                "learner_devices": (0,)}, key="topology")
  assert shared.actor_devices == shared.learner_devices == [jax.devices()[0]]


def test_each_runtime_rejects_the_other_kind_of_environment_by_name():
  config = ppo_config.cartpole_anakin()
  config.env = dict(name="envpool", task_id="CartPole-v1")
  with pytest.raises(ConfigError, match="runtime.name=sebulba"):
    builder.build(config)


def test_sebulba_rejects_jax_environments_and_uneven_env_splits():
  config = ppo_config.cartpole_sebulba()
  config.env = dict(name="cartpole")
  with pytest.raises(ConfigError, match="runtime.name=anakin"):
    builder.build(config)
  config = ppo_config.cartpole_sebulba()
  config.runtime.num_envs_per_actor = 8  # 6 learner devices
  with pytest.raises(ConfigError, match="num_envs_per_actor"):
    builder.build(config)


# -- runs ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.reverb_lane
def test_short_run_reports_metrics_splits_trajectories_over_learners_and_stops_threads():
  config = ppo_config.cartpole_sebulba()
  config.total_env_steps = 20_000
  config.runtime.log_interval = 0.0  # a record per batch
  records, (nets, _, experience), runtime = run_in_process(config)

  assert sebulba_threads() == []
  assert records[-1]["env_steps"] >= 20_000
  for key in SEBULBA_METRICS:
    assert all(key in r for r in records), key
  assert all(r["policy_lag"] >= 0 for r in records)
  # 2 actor devices x 2 threads, each trajectory [65, 12] split into 6 slices of 2 envs.
  assert runtime.num_actor_threads == 4
  assert experience.action.shape == (6, 65, 2)
  learners = set(runtime.topology.learner_devices)
  assert experience.action.sharding.device_set == learners
  # Every learner replica holds the same (gradient-averaged) parameters.
  leaf = jax.tree.leaves(nets)[0]
  assert leaf.shape[0] == 6
  np.testing.assert_allclose(np.asarray(leaf)[0], np.asarray(leaf)[5], rtol=1e-6)


@pytest.mark.parametrize("max_lag", [0, 1])
def test_max_policy_lag_bounds_the_lag_of_every_trajectory(max_lag):
  config = ppo_config.cartpole_sebulba()
  config.total_env_steps = 12_000
  config.runtime.log_interval = 0.0  # a record per batch, so each lag is seen alone
  config.runtime.max_policy_lag = max_lag
  records, _, _ = run_in_process(config)
  lags = [r["policy_lag"] for r in records if "policy_lag" in r]
  assert len(lags) >= 10 and max(lags) <= max_lag, lags
  if max_lag == 1:  # Acting overlaps learning: not every trajectory is on-policy.
    assert max(lags) == 1
  assert sebulba_threads() == []


@pytest.mark.reverb_lane
def test_with_max_policy_lag_0_two_runs_of_a_seed_are_the_same():
  """Acting and learning take turns, and each trajectory's ticket (the update that learns
  from it) belongs to a fixed actor thread: two actor threads, the same records."""
  runs = []
  for _ in range(2):
    config = ppo_config.cartpole_sebulba()
    config.total_env_steps = 8_000
    config.runtime.log_interval = 0.0  # a record per batch
    config.runtime.max_policy_lag = 0
    assert config.runtime.actor_threads_per_device == 2
    records, _, _ = run_in_process(config)
    kept = ("env_steps", "episode_return", "policy_loss", "value_loss", "policy_lag")
    runs.append([{k: v for k, v in r.items() if k in kept} for r in records])
  assert len(runs[0]) >= 8 and any("episode_return" in r for r in runs[0])
  assert runs[0] == runs[1]


def test_policy_lag_bound_queues_trajectories_in_ticket_order():
  bound = PolicyLagBound(max_lag=1, first_update=5, producers=3)
  stop = threading.Event()
  # Each producer's tickets are fixed: round robin from the first update.
  each = [bound.tickets(p) for p in range(3)]
  assert [next(each[p]) for p in (2, 0, 1, 0)] == [7, 5, 6, 8]
  with pytest.raises(ValueError, match="producer 3 of 3"):
    bound.tickets(3)
  order = []

  def hand_over(ticket):
    assert bound.wait_turn(ticket, stop)
    order.append(ticket)
    bound.queued(ticket)

  late = [threading.Thread(target=hand_over, args=(t,)) for t in (7, 6)]
  for t in late:
    t.start()
  time.sleep(0.3)
  assert order == []  # 6 and 7 wait for 5
  hand_over(5)
  for t in late:
    t.join(timeout=5)
  assert order == [5, 6, 7]
  stop.set()
  assert not bound.wait_turn(99, stop)  # A stopped run never waits.
  store = ParamsStore(jax.devices()[:1])
  store.push({"w": np.zeros(1)}, version=3)
  params, version = store.get(jax.devices()[0], at_least=3)
  assert version == 3
  assert store.get(jax.devices()[0], at_least=4, stop=stop) is None
  store.advance(4)  # A turn that changed no parameters: the same copies, a new version.
  assert store.get(jax.devices()[0], at_least=4) == (params, 4)


def test_gymnasium_environments_run_under_sebulba():
  config = ppo_config.cartpole_sebulba()
  config.env = dict(name="gymnasium", env_id="CartPole-v1")  # one subprocess per env
  config.runtime.num_envs_per_actor = 2
  config.total_env_steps = 4_000
  records, _, _ = run_in_process(one_device(config))
  assert records[-1]["env_steps"] >= 4_000
  assert any(r.get("episodes", 0) > 0 for r in records)
  assert sebulba_threads() == []


def test_async_env_mode_keeps_each_half_in_its_own_columns_with_true_episode_stats():
  """runtime.env_mode=async: each actor thread steps two EnvPools of 6 CartPoles in turns;
  the trajectories are still [T+1, 12], one fixed environment per column."""
  config = ppo_config.cartpole_sebulba()
  config.runtime.env_mode = "async"
  config.total_env_steps = 12_000
  records, (_, _, experience), runtime = run_in_process(config)

  assert sebulba_threads() == []
  assert records[-1]["env_steps"] >= 12_000
  assert experience.action.shape == (6, 65, 2)  # [learners, T+1, 12 envs / 6 learners]
  episodes = [r for r in records if "episode_return" in r]
  assert episodes
  for r in episodes:  # CartPole pays 1 per step: returns are lengths, within 1..500.
    assert r["episode_return"] == pytest.approx(r["episode_length"])
    assert 1 <= r["episode_return"] <= 500
  step_type = np.asarray(experience.timestep.step_type)
  x, x_dot, theta, theta_dot = np.moveaxis(np.asarray(experience.timestep.observation), -1, 0)
  # Within each column a new episode starts after a LAST step only, and each step follows
  # CartPole's Euler physics (position += 0.02 * velocity) from the column's previous
  # one: a column fed by two environments would break both.
  starts = step_type[:, 1:] == StepType.FIRST
  assert np.array_equal(starts, step_type[:, :-1] == StepType.LAST)
  for position, velocity in ((x, x_dot), (theta, theta_dot)):
    expected = position[:, :-1] + 0.02 * velocity[:, :-1]
    np.testing.assert_allclose(position[:, 1:][~starts], expected[~starts], atol=1e-5)


def test_async_env_mode_refuses_environments_without_send_and_recv(tmp_path):
  config = tmp_path / "config.py"
  config.write_text(
      "from agents.ppo.config import cartpole_sebulba\n"
      "def get_config():\n"
      "  c = cartpole_sebulba()\n"
      "  c.env = dict(name='gymnasium', env_id='CartPole-v1')\n"
      "  c.runtime.env_mode = 'async'\n"
      "  return c\n")
  result = launch_and_wait(f"--config={config}", f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  assert result.stderr.startswith("Config error: ") and result.stderr.count("\n\n") == 0
  message = result.stderr.replace("\n", " ")
  assert "`runtime.env_mode=async`" in message and "'gymnasium'" in message


# -- learning ---------------------------------------------------------------------------

# With `max_policy_lag=0` acting and learning take turns and each actor thread holds fixed
# tickets, so a run is fixed by its seed: a learning figure a test can assert. The
# configs' own lags (PPO 1, IMPALA unbounded) overlap acting and learning, so their runs
# depend on thread timing: `benchmarks/draws.py` measures those (docs/agents.md), and the
# tests above assert their mechanism (the lag bound, the split over learners, shutdown).
LEARNING_CASES = {"ppo": ppo_config.cartpole_sebulba, "impala": impala_config.cartpole_sebulba}


@pytest.mark.learning
@pytest.mark.parametrize("agent", [  # CI: PPO's; IMPALA's learns on pixels in CI.
    a if a == "ppo" else pytest.param(a, marks=pytest.mark.extended) for a in LEARNING_CASES])
def test_cartpole_sebulba_in_turns_reaches_450_within_2m_steps(agent, tmp_path):
  """EnvPool CartPole, one host device as a user's command has it, seed 0, acting and
  learning in turns; the run ends once a record's mean return reaches 450 (2026-11-27:
  PPO 469 by 333K env steps in 18 s, IMPALA 456 by 490K in 23 s)."""
  config = LEARNING_CASES[agent]()
  assert config.seed == 0 and config.total_env_steps <= 2_000_000
  records = launch_runs(f"agents/{agent}/config.py:cartpole_sebulba", tmp_path,
                        "--config.runtime.max_policy_lag=0", "--config.stop_at_return=450")
  assert max(r["policy_lag"] for r in records if "policy_lag" in r) == 0
  best = max(best_by_run(records))
  assert best >= 450, f"best mean episode return {best:.1f} < 450"


# -- Pong ------------------------------------------------------------------------------


PONG_CONFIGS = {"impala": impala_config.pong_sebulba, "ppo": ppo_config.pong_sebulba}


@pytest.mark.slow
@pytest.mark.parametrize("agent", PONG_CONFIGS)
def test_pong_config_builds_the_impala_papers_network_on_84x84_frames(agent):
  config = PONG_CONFIGS[agent]()
  experiment = builder.build(config)
  spec = experiment.runtime.spec
  assert spec.observation.shape == (4, 84, 84) and spec.observation.dtype == np.uint8
  assert spec.action.num_values == 6
  nets = experiment.agent.init_nets(jax.random.PRNGKey(0))
  shapes = {k: v["w"].shape for k, v in nets.items() if "w" in v}
  assert shapes["torso/section_0_conv"] == (3, 3, 4, 16)
  assert shapes["torso/section_2_block_1_conv_1"] == (3, 3, 32, 32)
  assert shapes["torso/linear"] == (11 * 11 * 32, 256)


@pytest.mark.extended  # CI: Sebulba's CartPole tests
@pytest.mark.slow
@pytest.mark.parametrize("agent", PONG_CONFIGS)
def test_pong_runs_20k_steps_with_true_episode_stats_and_clean_shutdown(agent):
  """A smoke test, not learning. Frames and ResNet widths are shrunk so that 20k steps fit
  the CPU's time (the full 84x84 network's shapes are checked above); 20k steps over 6
  environments end several games of a near-random policy in each (about 800 steps)."""
  config = PONG_CONFIGS[agent]()
  config.total_env_steps = 20_000
  config.env.img_height = config.env.img_width = 36
  config.network.channels = (4, 8, 8)
  config.network.hidden_size = 32
  config.runtime.num_envs_per_actor = 6  # one env per learner device
  # Not PPO's one-update bound: here it would make actors wait for every CPU update of
  # the ResNet (tests of the bound are above).
  config.runtime.max_policy_lag = None
  if agent == "ppo":
    config.agent.num_epochs = 1  # 4 minibatch steps per update, not 16: a smoke test.
  records, (nets, _, experience), runtime = run_in_process(config)

  assert records[-1]["env_steps"] >= 20_000
  assert sebulba_threads() == []
  for key in SEBULBA_METRICS + ("policy_loss", "value_loss", "entropy"):
    assert key in records[-1], key
  assert all(np.isfinite(r["policy_loss"]) for r in records)
  # [learners, T+1, envs per learner, stacked frames, H, W]
  unroll = config.runtime.rollout_length + 1
  assert experience.timestep.observation.shape == (6, unroll, 1, 4, 36, 36)
  assert experience.timestep.observation.dtype == np.uint8
  episodes = [r for r in records if "episode_return" in r]
  assert episodes, "no Pong game finished in 20k steps"
  for r in episodes:
    # Whole games: -21..21 points, and far longer than one point (episodic_life ends a
    # "life" at every lost point, which must not end the reported episode).
    assert -21 <= r["episode_return"] <= 21
    assert r["episode_length"] > 500


# -- failures and Ctrl-C -----------------------------------------------------------------


@registry.environments.register("test_crashing_simulator")
def crashing_simulator(num_envs: int, seed: int = 0, crash_at: int = 100):
  """podracer.testing's fake host environment, whose simulator dies at step `crash_at`
  of actor seed 0."""
  return testing.FakeHostEnvironment(num_envs=num_envs, seed=seed, episode_length=50,
                                     fail_at=crash_at if seed == 0 else None)


def test_environment_crash_stops_every_thread_with_its_traceback():
  config = one_device(ppo_config.cartpole_sebulba())
  config.env = dict(name="test_crashing_simulator", crash_at=200)
  config.total_env_steps = 10_000_000
  experiment = builder.build(config)
  start = time.monotonic()
  with pytest.raises(ThreadFailure) as failure:
    experiment.runtime.train(MetricsLogger(stream=None))
  assert time.monotonic() - start < 30.0  # compilation included
  assert "FakeHostEnvironment failed at step 200 (fail_at)" in str(failure.value)
  assert "actor-0-0 failed" in str(failure.value) and "Traceback" in str(failure.value)
  assert sebulba_threads() == []


# Through the launcher, as a user runs it.


def launch(*args, sigint_ignored=False):
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  command = [sys.executable, "-m", "podracer.launch", *args]
  return subprocess.Popen(with_sigint_ignored(command) if sigint_ignored else command,
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


@pytest.mark.slow
@pytest.mark.parametrize("where", [  # The reverb lane: the actor (TF's threads at the exit).
    pytest.param("actor", marks=pytest.mark.reverb_lane), "learner"])
def test_injected_thread_failure_ends_the_run_within_10s_with_its_traceback(where, tmp_path):
  process = launch("--config=agents/ppo/config.py:cartpole_sebulba",
                   f"--config.runtime.inject_failure={where}", f"--workdir={tmp_path}")
  _, stderr = process.communicate(timeout=120)
  ended = time.time()
  assert process.returncode == 1, stderr
  match = re.search(rf"RuntimeError: injected {where} failure .* at unix time ([\d.]+)", stderr)
  assert match, stderr
  assert "Traceback (most recent call last)" in stderr
  assert ended - float(match.group(1)) < 10.0
  # orbax is loaded (checkpoints are on): none of asyncio's reports reach the user.
  assert "Event loop is closed" not in stderr and "never retrieved" not in stderr


@pytest.mark.slow
def test_ctrl_c_stops_threads_and_environments_and_exits_130(tmp_path):
  """Also from a launcher started with SIGINT ignored, as a background job of a script
  inherits it (a CI run started with `&` trained on through the signal until killed)."""
  process = launch("--config=agents/ppo/config.py:cartpole_sebulba",
                   "--config.total_env_steps=100000000", f"--workdir={tmp_path}",
                   sigint_ignored=True)
  metrics = tmp_path / "metrics.jsonl"
  deadline = time.monotonic() + 120
  while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
    assert process.poll() is None and time.monotonic() < deadline
    time.sleep(0.2)
  interrupted = time.monotonic()
  process.send_signal(signal.SIGINT)
  _, stderr = process.communicate(timeout=60)
  assert process.returncode == 130, stderr
  assert time.monotonic() - interrupted < 20.0  # the plot is written too; CPU may be busy
  assert "Interrupted; all threads and environments were stopped." in stderr
  assert "Traceback" not in stderr
  assert (tmp_path / "learning_curve.png").exists()


def test_a_partial_overlap_of_actor_and_learner_devices_is_said(capsys):
  from podracer.components.topologies import ActorLearner
  ActorLearner(actor_devices=(0,), learner_devices=(0,))  # one device: said nothing
  assert capsys.readouterr().err == ""
  topology = ActorLearner(actor_devices=(0,), learner_devices=(0, 1))
  assert len(topology.learner_devices) == 2
  assert "Warning: devices [0] both act and learn" in capsys.readouterr().err
