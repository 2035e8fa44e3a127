"""One device mesh (podracer/mesh.py): runs side by side, replicas of a run data-parallel.

The records of small runs equal those 0.8.0 (jax.pmap) wrote, kept in
tests/data/records_0_8_0.json: made by this file run as a script against that version,
`PYTHONPATH=<a 0.8.0 checkout> python tests/test_mesh.py --write`, with 8 host devices.
"""

import json
import os
import pathlib
import sys
import warnings

import jax
import numpy as np
import pytest

from agents.dqn import config as dqn_config
from agents.ppo import config as ppo_config
from podracer import builder, launch, mesh
from podracer.lifecycle import checkpoint
from podracer.errors import ConfigError
from tests.test_launch import launch as run_launcher

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "records_0_8_0.json"
# float32 rounding: the programs are the same XLA computations; on this machine the
# records are bitwise equal. The bound leaves room for another CPU's kernels.
RTOL, ATOL = 1e-5, 1e-6

launch.register_components_and_agents()


def _ppo(calls, num_devices=None, **top):
  c = ppo_config.cartpole_anakin()
  c.topology.num_devices = num_devices
  c.runtime.update(dict(num_envs_per_device=4, rollout_length=32, updates_per_call=2))
  c.total_env_steps = calls * 256 * (num_devices or jax.device_count())
  c.update(top)
  return c


def _dqn(calls):
  c = dqn_config.cartpole_anakin()
  c.network.w_init = "orthogonal"  # The init the golden records were written with (0.8.0).
  c.runtime.update(dict(num_envs_per_device=4, rollout_length=1, updates_per_call=100))
  c.replay.min_size = 64
  c.total_env_steps = calls * 400 * jax.device_count()
  return c


def _sweep():
  c = _ppo(2, num_devices=1, num_runs=2)
  c.sweep["optimizer"] = {"learning_rate": [1e-4, 1e-3]}
  return c


CASES = {
    "ppo_1_device": lambda: _ppo(3, num_devices=1),
    "ppo_8_devices": lambda: _ppo(2),
    "runs_3_data_parallel_on_8": lambda: _ppo(2, num_runs=3),
    "sweep_2_on_1_device": _sweep,
    "dqn_8_devices": lambda: _dqn(2),
}


def records(config):
  """Each call's metrics and episode sums, as lists (per run with many)."""
  runtime = builder.build(config).runtime
  state, out = runtime.init(), []
  for _ in range(runtime.num_calls):
    state, metrics, episodes = runtime.step(state)
    out.append(dict(metrics={k: np.asarray(v).tolist() for k, v in metrics.items()},
                    episodes=np.asarray(episodes).tolist()))
  return out


@pytest.fixture(scope="module")
def golden():
  return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_records_equal_those_of_the_pmap_version(golden, name):
  got = records(CASES[name]())
  want = golden[name]
  assert len(got) == len(want)
  for call, (g, w) in enumerate(zip(got, want)):
    assert sorted(g["metrics"]) == sorted(w["metrics"])
    np.testing.assert_allclose(g["episodes"], w["episodes"], RTOL, ATOL, err_msg=name)
    for key in w["metrics"]:
      np.testing.assert_allclose(g["metrics"][key], w["metrics"][key], RTOL, ATOL,
                                 err_msg=f"{name}, call {call}, {key}")


if __name__ == "__main__":
  if "--write" in sys.argv:
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({name: records(make()) for name, make in CASES.items()}))
    print(f"wrote {GOLDEN}")


# -- runs on the mesh's runs axis ----------------------------------------------------

def _runs_on_devices(num_runs=8, **topology):
  c = _ppo(2, num_runs=num_runs)
  c.total_env_steps = 2 * 256
  c.topology.update(topology)
  return builder.build(c).runtime


def test_runs_spread_over_the_devices_with_no_collective_in_the_update():
  runtime = _runs_on_devices()
  assert (runtime.mesh_runs, runtime.mesh_data, runtime.runs_per_device) == (8, 1, 1)
  hlo = runtime._step.lower(runtime.init(), runtime.many.hparams_of(0)).compile().as_text()
  assert "all-reduce" not in hlo and "all-gather" not in hlo
  # The same runs, each data-parallel over the 8 devices, average their gradients.
  data_parallel = _runs_on_devices(runs=1)
  assert (data_parallel.mesh_runs, data_parallel.mesh_data) == (1, 8)
  hlo = data_parallel._step.lower(data_parallel.init(),
                                  data_parallel.many.hparams_of(0)).compile().as_text()
  assert "all-reduce" in hlo


def test_a_run_of_many_is_the_single_run_of_its_seed_on_as_many_devices():
  runtime = _runs_on_devices(num_runs=8, runs=4, data=2)
  assert runtime.runs_per_device == 2
  _, metrics, episodes = runtime.step(runtime.init())
  for run in (0, 5):
    one = builder.build(_ppo(1, num_devices=2, seed=run)).runtime
    _, single_metrics, single_episodes = one.step(one.init())
    np.testing.assert_allclose(episodes[run], single_episodes, RTOL, ATOL)
    for key, value in single_metrics.items():
      np.testing.assert_allclose(metrics[key][run], value, RTOL, ATOL, err_msg=key)


# -- faults and bad input -------------------------------------------------------------

@pytest.mark.parametrize("devices, num_runs, runs, data, words", [
    (8, 3, 2, None, "`topology.runs` is 2: the 3 run(s) of `num_runs` do not divide"),
    (8, 8, 3, None, "split the mesh into 3 x 0 devices, but the run has 8"),
    (8, 8, 4, 4, "product must be 8"),
    (8, 1, None, 3, "`topology.data` (3)"),
])
def test_a_mesh_that_does_not_fit_is_one_paragraph_naming_keys_and_numbers(
    devices, num_runs, runs, data, words):
  with pytest.raises(ConfigError) as error:
    mesh.mesh_shape(devices, num_runs, runs, data)
  assert words in str(error.value) and "\n" not in str(error.value)


def test_the_default_mesh_spreads_runs_only_when_they_divide_over_the_devices():
  assert mesh.mesh_shape(8) == (1, 8)
  assert mesh.mesh_shape(8, 16) == (8, 1)
  assert mesh.mesh_shape(8, 12) == (1, 8)
  assert mesh.mesh_shape(8, 8, data=2) == (4, 2)
  assert mesh.mesh_shape(1, 5) == (1, 1)


def test_the_launcher_exits_2_on_a_mesh_that_does_not_fit_before_compiling(tmp_path):
  result = run_launcher("--config=agents/ppo/config.py:cartpole_anakin",
                        "--config.topology.runs=2", f"--workdir={tmp_path}")
  assert result.returncode == 2, result.stderr
  assert "`topology.runs` (2)" in result.stderr and "Traceback" not in result.stderr


def test_a_run_resumes_only_on_the_mesh_it_was_saved_on(tmp_path):
  config = _ppo(1, num_runs=8)
  config.total_env_steps = 256
  launch.launch(config, str(tmp_path), stream=None)
  config.topology.runs = 1
  # A changed `topology` key is refused by the workdir, naming it.
  with pytest.raises(ConfigError, match=r"differs in `topology.runs`"):
    launch.launch(config, str(tmp_path), stream=None)
  # A mesh that changed with the machine (the same config on other devices) is refused by
  # the runtime, naming both.
  runtime = builder.build(config).runtime
  with pytest.raises(ConfigError, match=r"saved on a mesh of runs=8 x data=1 devices; this "
                     r"run's is runs=1 x data=8"):
    runtime._resume(runtime.init(), checkpoint.Checkpointer(str(tmp_path)))


def test_a_deprecation_warning_from_podracer_code_fails_the_default_lane():
  with pytest.raises(DeprecationWarning):
    warnings.warn_explicit("probe", DeprecationWarning, "podracer/mesh.py", 1,
                           module="podracer.mesh")


@pytest.mark.reverb_lane  # How a compiled call writes its outputs' shardings is JAX's.
@pytest.mark.parametrize("devices,runs", [(1, 1), (8, 1), (8, 2), (8, 8)])
def test_placed_rows_have_the_shardings_a_compiled_call_gives_its_outputs(devices, runs):
  """A resumed run places its state with `mesh.put`: the same shardings as the step's
  outputs, or its first step lowers another program and misses the compilation cache the
  first launch wrote."""
  grid = mesh.device_mesh(jax.devices()[:devices], runs=runs)
  rows = np.zeros((devices, 3), np.float32)
  out = mesh.spmd(lambda x: x + 1, grid)(mesh.put(grid, rows))
  assert mesh.put(grid, rows).sharding == out.sharding


def test_a_process_s_rows_are_joined_from_the_pieces_a_model_axis_splits_them_into():
  """`mesh.local`'s rows of an array not wholly on this process: each row split over two
  devices (a `model` axis, columns 0-2 and 3-5), one piece held twice (a replicated
  part), rows 2-3 of 0-5 here: the two rows put together, in order (issue 78)."""
  import types  # pylint: disable=import-outside-toplevel
  from podracer.mesh import _rows_of  # pylint: disable=import-outside-toplevel
  full = np.arange(36.0).reshape(6, 6)
  piece = lambda r, c: types.SimpleNamespace(index=(slice(r, r + 1), slice(c, c + 3)),
                                             data=full[r:r + 1, c:c + 3])
  shards = [piece(3, 3), piece(2, 0), piece(3, 0), piece(2, 3), piece(2, 3)]
  np.testing.assert_array_equal(_rows_of(shards, full.shape, full.dtype), full[2:4])
