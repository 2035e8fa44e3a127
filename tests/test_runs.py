"""Many runs in one Anakin program (podracer/config/runs.py): seeds and sweeps, the vmapped
program against separate runs, per-run records, plots and TensorBoard, bad input."""

import io
import json
import os

import jax
import numpy as np
import pytest

from agents.ppo import config as ppo_config
from podracer import builder, launch
from podracer.logs import metrics, runs as run_records, tensorboard
from podracer.config import runs as runs_lib
from podracer.errors import ConfigError
from tests.test_launch import launch as run_launcher

launch.register_components_and_agents()
# Small calls: 4 envs x 32 steps x 2 updates = 256 env steps a call on one device.
SMALL = dict(num_envs_per_device=4, rollout_length=32, updates_per_call=2)


def small_config(num_runs=1, sweep=None, calls=3, **top):
  c = ppo_config.cartpole_anakin()
  c.topology.num_devices = 1
  c.runtime.update(SMALL)
  c.total_env_steps = calls * 256
  c.checkpoint_interval = 0.0
  c.num_runs = num_runs
  for key, values in (sweep or {}).items():
    head, arg = key.split(".")
    c.sweep[head] = {arg: values}
  c.update(top)
  return c


def steps(runtime, calls):
  """The runtime's state and metrics after `calls` compiled calls."""
  state, out = runtime.init(), []
  for _ in range(calls):
    state, m, episodes = runtime.step(state)
    out.append((m, episodes))
  return state, out


# -- the run grid ---------------------------------------------------------------------

def test_num_runs_gives_consecutive_seeds_and_a_sweep_crosses_them():
  assert runs_lib.from_config(small_config()) is None
  runs = runs_lib.from_config(small_config(num_runs=3, seed=5))
  assert runs.seeds == (5, 6, 7) and runs.swept == {}
  runs = runs_lib.from_config(small_config(
      num_runs=2, sweep={"optimizer.learning_rate": "1e-4,1e-3", "agent.num_epochs": [2, 4]}))
  assert runs.num_runs == 8
  assert runs.seeds == (0, 1) * 4
  # Sections in the config's (sorted) order: agent.num_epochs varies slowest.
  assert runs.swept["agent.num_epochs"] == (2,) * 4 + (4,) * 4
  assert runs.swept["optimizer.learning_rate"] == (1e-4, 1e-4, 1e-3, 1e-3) * 2
  assert runs.labels(5) == {"run": 5, "seed": 1, "optimizer.learning_rate": 1e-4,
                            "agent.num_epochs": 4}


def test_sweeps_on_the_command_line_are_split_off_and_nested_into_the_config():
  sweeps, rest = runs_lib.sweep_args(
      ["prog", "--config.sweep.optimizer.learning_rate=1e-4,1e-3", "--config.seed=2"])
  assert sweeps == {"optimizer.learning_rate": "1e-4,1e-3"}
  assert rest == ["prog", "--config.seed=2"]
  c = small_config()
  runs_lib.add_sweep(c, sweeps)
  assert runs_lib.flatten(c.sweep) == {"optimizer.learning_rate": "1e-4,1e-3"}
  assert runs_lib.parse_values("1e-4, 3,2.5") == [1e-4, 3, 2.5]


@pytest.mark.parametrize("overrides, words", [
    (dict(num_runs=0), "`num_runs`"),
    (dict(sweep={"runtime.rollout_length": "32,64"}), "`sweep.runtime.rollout_length` is structural"),
    (dict(sweep={"network.hidden_sizes": "8,16"}), "`sweep.network.hidden_sizes` is structural"),
    (dict(sweep={"agent.num_epochs": "2,4"}), "`sweep.agent.num_epochs` cannot be swept"),
    (dict(sweep={"agent.num_epochs": "2.5"}), "is an integer"),
    (dict(sweep={"optimizer.learning_rate": "fast"}), "takes numbers"),
    (dict(sweep={"loss.entropy": "0.1"}), "no parameter `entropy`"),
    (dict(sweep={"optimizer.learning_rate": "-1,1e-3"}), "`sweep.optimizer.learning_rate`"),
])
def test_bad_runs_input_is_refused_naming_the_key(overrides, words):
  with pytest.raises(ConfigError) as error:
    builder.build(small_config(num_runs=overrides.get("num_runs", 1),
                               sweep=overrides.get("sweep")))
  assert words in " ".join(str(error.value).split())


@pytest.mark.reverb_lane
def test_sebulba_refuses_many_runs_and_the_launcher_exits_2_with_one_paragraph():
  result = run_launcher("--config=agents/ppo/config.py:cartpole_sebulba",
                        "--config.num_runs=2")
  assert result.returncode == 2
  assert "runtime 'sebulba' runs one" in " ".join(result.stderr.split())
  assert "Traceback" not in result.stderr + result.stdout


# -- the program ----------------------------------------------------------------------

@pytest.mark.slow
def test_many_runs_in_one_program_follow_the_separate_runs_of_their_seeds():
  """Run r of one vmapped program starts exactly as a single run of seed r and stays with
  it to float32 rounding. Not bitwise: XLA:CPU compiles a batched matmul with other
  kernels than a single one (about 3e-7 apart after 4 calls)."""
  state, many = steps(builder.build(small_config(num_runs=3)).runtime, 2)
  for r in range(3):
    single_state, single = steps(builder.build(small_config(seed=r)).runtime, 2)
    for (m1, e1), (m3, e3) in zip(single, many):
      np.testing.assert_allclose(m3["loss"][r], m1["loss"], rtol=1e-4)
      np.testing.assert_array_equal(e3[r], e1)  # Same episodes, step for step.
    run_params = jax.tree.map(lambda x: np.asarray(x)[:, r], state.agent.nets)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                 run_params, jax.tree.map(np.asarray, single_state.agent.nets))


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_a_swept_value_traced_gives_bitwise_what_the_same_constant_gives():
  constant = small_config(num_runs=1)
  traced = small_config(num_runs=1, sweep={
      "optimizer.learning_rate": [2.5e-4], "loss.entropy_coef": [0.01],
      "agent.discount": [0.99], "agent.gae_lambda": [0.95]})
  # One run, the same program shape: the constants' run, vmapped over one run too.
  built = builder.build(constant).runtime
  plain = type(built).for_runs()(
      built.agent, builder.EnvironmentFactory(constant.env), built.topology,
      type(built).Options(**SMALL), built.plan, constant.seed,
      runs=runs_lib.Runs((constant.seed,)), agent_for=lambda _: built.agent)
  a, _ = steps(plain, 3)
  b, _ = steps(builder.build(traced).runtime, 3)
  assert all(jax.tree.leaves(jax.tree.map(np.array_equal, a.agent.nets, b.agent.nets)))
  assert all(jax.tree.leaves(jax.tree.map(np.array_equal, a.agent.opt, b.agent.opt)))


@pytest.mark.slow
def test_runs_with_other_learning_rates_stay_apart_and_replicas_agree_within_a_run():
  """Gradients are averaged over the 8 devices, never over runs."""
  c = small_config(sweep={"optimizer.learning_rate": [1e-4, 1e-2]})
  c.topology.num_devices = None  # All 8 host devices of the test process.
  state, _ = steps(builder.build(c).runtime, 2)
  w = np.asarray(jax.tree.leaves(state.agent.nets)[1])  # [devices, runs, ...]
  assert w.shape[:2] == (8, 2)
  assert np.array_equal(w[0], w[7])  # Replicas of a run agree.
  assert not np.allclose(w[:, 0], w[:, 1], atol=1e-4)  # Runs do not.


# -- outputs ----------------------------------------------------------------------------

@pytest.mark.slow
def test_each_run_has_its_records_curve_and_tensorboard_directory(tmp_path):
  c = small_config(num_runs=2, sweep={"optimizer.learning_rate": [2.5e-4, 1e-3]}, calls=4)
  out = io.StringIO()
  result = builder.build(c).train(workdir=str(tmp_path), stream=out, print_interval=0.0)
  lines = [json.loads(l) for l in (tmp_path / metrics.METRICS_FILE).read_text().splitlines()]
  assert len(lines) == 4 * 4
  assert [r["run"] for r in lines[:4]] == [0, 1, 2, 3]
  assert [r["optimizer.learning_rate"] for r in lines[:4]] == [2.5e-4, 2.5e-4, 1e-3, 1e-3]
  assert [r["seed"] for r in lines[:4]] == [0, 1, 0, 1]
  assert "4 runs in one program" in out.getvalue() and "(over 4 runs: min" in out.getvalue()
  assert result["num_runs"] == 4 and len(result["runs"]) == 4
  finals = [r["final_episode_return"] for r in result["runs"]]
  assert result["best_run"]["final_episode_return"] == max(finals)
  assert result["final_episode_return"] == pytest.approx(np.mean(finals))
  for run in range(4):
    written = tensorboard.read_scalars(str(tmp_path / f"run_{run}"))
    assert [s for s, _ in written["episode_return"]] == [256, 512, 768, 1024]
  assert os.path.getsize(tmp_path / metrics.PLOT_FILE) > 10_000


def test_a_sweep_plot_has_one_mean_and_band_per_value():
  runs = runs_lib.Runs((0, 1, 0, 1), {"optimizer.learning_rate": (1e-4, 1e-4, 1e-3, 1e-3)})
  records = [dict(runs.labels(r), env_steps=s, episode_return=float(r + s))
             for s in (1, 2) for r in range(4)]
  lines, bands = run_records.curves(records, runs)
  assert len(lines) == 4
  assert [b[0] for b in bands] == ["optimizer.learning_rate=0.0001",
                                   "optimizer.learning_rate=0.001"]
  label, xs, mean, low, high = bands[1]
  assert xs == [1, 2] and mean == [3.5, 4.5] and low == [3.0, 4.0] and high == [4.0, 5.0]


def test_stop_at_return_waits_for_every_run():
  runs = runs_lib.Runs((0, 1))
  logger = metrics.MetricsLogger(stream=None, stop_at_return=100.0, runs=runs)
  logger.write_runs([dict(run=0, seed=0, env_steps=10, episode_return=120.0),
                     dict(run=1, seed=1, env_steps=10, episode_return=50.0)])
  assert not logger.target_reached
  assert [r["target_reached"] for r in logger.records] == [True, False]
  # Run 0 falls back, but it reached the target once; run 1 reaches it now.
  logger.write_runs([dict(run=0, seed=0, env_steps=20, episode_return=90.0),
                     dict(run=1, seed=1, env_steps=20, episode_return=101.0)])
  assert logger.target_reached
  assert logger.summary()["stopped_at_return"] == 100.0


@pytest.mark.extended  # CI: test_learning's 5 seeds
@pytest.mark.learning
def test_sixteen_runs_of_ppo_cartpole_each_reach_475_within_500k_env_steps(tmp_path):
  """16 seeds in one program, one host device: the program stops once every run has
  reached 475 (about 220K env steps each)."""
  from tests.learning import launch_runs  # pylint: disable=import-outside-toplevel
  records = launch_runs("agents/ppo/config.py:cartpole_anakin", tmp_path,
                        "--config.num_runs=16", "--config.stop_at_return=475")
  reached = {}
  for r in records:
    if r.get("episode_return", 0.0) >= 475 and r["env_steps"] <= 500_000:
      reached.setdefault(r["run"], r["env_steps"])
  assert sorted(reached) == list(range(16)), reached
  assert records[-1]["env_steps"] <= 500_000


@pytest.mark.extended  # CI: PPO's and DQN's runs tests
@pytest.mark.parametrize("agent, name", [("impala", "cartpole_anakin"), ("r2d2", "catch_anakin"),
                                         ("sac", "pendulum_anakin"), ("dqn", "cartpole_anakin")])
@pytest.mark.slow
def test_every_anakin_agent_trains_two_runs_that_differ(agent, name):
  """Runs of one program keep their own parameters and metrics (seeds 0 and 1)."""
  module = __import__(f"agents.{agent}.config", fromlist=["CONFIGS"])
  c = getattr(module, name)()
  c.topology.num_devices = 1
  c.runtime.num_envs_per_device = 4
  c.runtime.updates_per_call = 2
  c.total_env_steps = 1
  c.checkpoint_interval = 0.0
  c.num_runs = 2
  if "replay" in c:
    c.replay.min_size = 1
  state, [(m, episodes)] = steps(builder.build(c).runtime, 1)
  leaf = np.asarray(jax.tree.leaves(state.agent.nets)[0])
  assert leaf.shape[:2] == (1, 2) and not np.array_equal(leaf[0, 0], leaf[0, 1])
  assert all(np.shape(v)[:2] == (2, 2) for v in m.values())  # [runs, updates]
  assert np.shape(episodes) == (2, 2, 3)
