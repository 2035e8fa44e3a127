"""One run is built apart from many: the builder builds one run's runtime in one straight
line, and enters the many-runs machinery (config/population.py, runtimes/many_runs.py,
runtimes/population.py) only when `num_runs`, `sweep`, `population` or `schedule_from`
ask for many runs; those get the runtime's `for_runs()` class (benchmarks/rooms.py
counts the modules a build walks through)."""

import os
import sys

import pytest

from podracer import builder
from podracer.runtimes.anakin import Anakin, AnakinRuns

from agents.ppo.config import cartpole_sebulba, catch_anakin

MANY_RUNS = {"podracer/config/population.py", "podracer/runtimes/many_runs.py",
             "podracer/runtimes/population.py"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _build_entering(config):
  """(the built experiment, the repository files whose functions the build called)."""
  builder.register_builtin_components()
  entered = set()

  def profile(frame, event, _):
    if event == "call" and frame.f_code.co_name != "<module>":
      entered.add(os.path.relpath(frame.f_code.co_filename, ROOT))

  sys.setprofile(profile)
  try:
    experiment = builder.build(config)
  finally:
    sys.setprofile(None)
  return experiment, entered


def _small_anakin(**extra):
  c = catch_anakin()
  c.topology.num_devices = 1
  c.runtime.num_envs_per_device, c.runtime.rollout_length = 4, 8
  c.runtime.updates_per_call = 1
  c.total_env_steps = 64
  c.update(extra)
  return c


def _small_sebulba():
  c = cartpole_sebulba()
  c.total_env_steps = 4096
  return c


@pytest.mark.parametrize("config", [_small_anakin, _small_sebulba], ids=["anakin", "sebulba"])
def test_a_one_run_config_never_enters_the_many_runs_machinery(config):
  experiment, entered = _build_entering(config())
  assert "podracer/builder.py" in entered and "podracer/runtime.py" in entered
  assert entered & MANY_RUNS == set()
  assert experiment.runs is None and experiment.many is None
  assert type(experiment.runtime) is not AnakinRuns  # pylint: disable=unidiomatic-typecheck


def test_many_runs_are_built_with_the_runtimes_for_runs_class():
  config = _small_anakin(num_runs=2)
  one = builder.build(_small_anakin()).runtime
  many = builder.build(config).runtime
  assert type(one) is Anakin and type(many) is AnakinRuns  # pylint: disable=unidiomatic-typecheck
  assert Anakin.for_runs() is AnakinRuns and (one.num_runs, many.num_runs) == (1, 2)
  assert one.runs is None and many.runs.seeds == (config.seed, config.seed + 1)
