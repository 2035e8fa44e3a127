"""JAX's persistent compilation cache (podracer/lifecycle/compile_cache.py) and the
compile seconds records report (podracer/logs/compile_time.py): the folder a config
names, a second launch reading the programs the first wrote (counted by JAX's cache-hit
event, not timed), an unwritable folder, a corrupt entry."""

import io
import json
import os

import jax
import pytest

from agents.ppo import config as ppo_config
from podracer import launch
from podracer.errors import ConfigError
from podracer.lifecycle import compile_cache

launch.register_components_and_agents()


def small_config(cache):
  """PPO on CartPole, 2 calls of 4 envs x 32 steps x 2 updates, in the cache `cache`."""
  c = ppo_config.cartpole_anakin()
  c.topology.num_devices = 1
  c.runtime.update(num_envs_per_device=4, rollout_length=32, updates_per_call=2)
  c.total_env_steps = 512
  c.checkpoint_interval = 0.0
  c.compile_cache = cache
  return c


@pytest.fixture(name="restore_cache")
def _restore_cache():
  """Puts the session's cache (tests/conftest.py) back after a test moved it."""
  yield
  compile_cache.use(None)


def test_the_folder_a_config_names():
  env = {"HOME": "/home/u"}
  assert compile_cache.folder(None, env).endswith(os.path.join("podracer", "xla"))
  assert compile_cache.default_folder({"XDG_CACHE_HOME": "/c"}) == "/c/podracer/xla"
  assert compile_cache.default_folder({compile_cache.ENV: "/j"}) == "/j"
  assert compile_cache.default_folder({compile_cache.ENV: "", "XDG_CACHE_HOME": "/c"}) is None
  assert compile_cache.folder("") is None  # Off.
  assert compile_cache.folder("~/x") == os.path.expanduser("~/x")
  with pytest.raises(ConfigError, match="compile_cache"):
    compile_cache.folder(3)


def test_an_unwritable_folder_is_said_once_and_the_run_goes_on_without(tmp_path,
                                                                         restore_cache):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a folder")
  stream = io.StringIO()
  assert compile_cache.use(str(blocker / "cache"), stream) is None
  assert compile_cache.use(str(blocker / "cache"), stream) is None
  assert stream.getvalue().count("cannot be written") == 1
  assert "--config.compile_cache" in stream.getvalue()
  assert not jax.config.jax_enable_compilation_cache
  assert float(jax.jit(lambda x: x + 1)(1.0)) == 2.0


def _launch(config, workdir):
  jax.clear_caches()  # In-memory programs aside: what is not on disk compiles again.
  return launch.launch(config, str(workdir), stream=None)


def _first_record(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return json.loads(f.readline())


@pytest.mark.slow  # Three launches, two compiling afresh: about a minute on 2 cores.
def test_a_second_launch_reads_the_programs_the_first_wrote_and_a_corrupt_one_recompiles(
    tmp_path, restore_cache, monkeypatch):
  # Programs compiling in over 0.2 s, as the suite's cache keeps (tests/conftest.py), also
  # when the suite runs without it: the smallest are not compiled again in this process.
  monkeypatch.setenv(compile_cache.MIN_COMPILE_ENV, "0.2")
  before = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
  try:
    _second_launch_reads_the_first(tmp_path)
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def _second_launch_reads_the_first(tmp_path):
  cache = tmp_path / "cache"
  first = _launch(small_config(str(cache)), tmp_path / "a")
  assert first["compile_cache_hits"] == 0 and first["compile_s"] > 0
  entries = [cache / name for name in os.listdir(cache) if name.endswith("-cache")]
  assert entries
  second = _launch(small_config(str(cache)), tmp_path / "b")
  assert second["compile_cache_hits"] >= len(entries)
  assert second["final_episode_return"] == first["final_episode_return"]
  record = _first_record(tmp_path / "b")
  assert record["includes_compilation"] and 0 < record["compile_s"] <= record["wall_time"]
  for entry in entries:  # Corrupt: JAX says so and compiles them again.
    entry.write_bytes(b"not a program")
  with pytest.warns(UserWarning, match="persistent compilation cache"):
    again = _launch(small_config(str(cache)), tmp_path / "c")
  assert again["compile_cache_hits"] == second["compile_cache_hits"] - len(entries)
  assert again["final_episode_return"] == first["final_episode_return"]


def test_an_empty_folder_turns_the_cache_off(tmp_path, restore_cache):
  assert compile_cache.use("") is None
  assert not jax.config.jax_enable_compilation_cache
  assert compile_cache.use(str(tmp_path)) == str(tmp_path)
  assert jax.config.jax_enable_compilation_cache


def test_on_the_reverb_lanes_jax_the_cache_is_off_unless_a_folder_is_named(monkeypatch):
  """JAX 0.4.34 crashed reading a cached Sebulba learner program back (OLD_JAX)."""
  monkeypatch.setattr(compile_cache, "jax_older_than", lambda major, minor: True)
  assert compile_cache.default_folder({"XDG_CACHE_HOME": "/c"}) is None
  assert compile_cache.default_folder({compile_cache.ENV: "/j"}) == "/j"
  assert compile_cache.folder("/p") == "/p"
  monkeypatch.undo()
  assert compile_cache.jax_older_than(0, 5) is False  # This lane's JAX is newer.
  assert compile_cache.jax_older_than(99, 0) is True
