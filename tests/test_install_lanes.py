"""Checks that the install lane under test is the one it claims to be (see scripts/test.sh).

PODRACER_LANE=default (or unset): current JAX (>= 0.5) on numpy 2, no Reverb.
PODRACER_LANE=reverb: JAX 0.4.34 on numpy < 2, with dm-reverb (TensorFlow) in the same process.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import runpy
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from tests.reverb_support import current_lane, requires_reverb

# Reverb, and the lanes themselves: the reverb lane runs this whole module.
pytestmark = pytest.mark.reverb_lane

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _major_minor(version: str) -> tuple[int, int]:
  major, minor = version.split(".")[:2]
  return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _setup_py_kwargs(monkeypatch) -> dict:
  """Runs setup.py with a stand-in `setuptools` and returns what it passed to setup()."""
  captured = {}
  fake = types.ModuleType("setuptools")
  fake.setup = lambda **kwargs: captured.update(kwargs)
  fake.find_packages = lambda *args, **kwargs: []
  monkeypatch.setitem(sys.modules, "setuptools", fake)
  runpy.run_path(str(REPO_ROOT / "setup.py"), run_name="__main__")
  return captured


# Both lanes.


def test_lane_name_is_known():
  assert current_lane() in ("default", "reverb")


def test_podracer_imports_from_this_checkout():
  import podracer  # pylint: disable=import-outside-toplevel

  assert pathlib.Path(podracer.__file__).resolve().parent == REPO_ROOT / "podracer"
  assert isinstance(podracer.__version__, str) and podracer.__version__


def test_version_matches_setup_py(monkeypatch):
  import podracer  # pylint: disable=import-outside-toplevel

  kwargs = _setup_py_kwargs(monkeypatch)
  assert kwargs["name"] == "podracer"
  assert kwargs["version"] == podracer.__version__


def test_installed_distribution_matches_version():
  import podracer  # pylint: disable=import-outside-toplevel

  try:
    installed = importlib.metadata.version("podracer")
  except importlib.metadata.PackageNotFoundError:
    if os.environ.get("PODRACER_LANE"):
      pytest.fail("podracer is not installed in this lane's venv; run scripts/setup_env.sh")
    pytest.skip("podracer is not pip-installed here (run via scripts/test.sh to check)")
  assert installed == podracer.__version__, (
      "installed metadata is stale; rerun scripts/setup_env.sh to reinstall")


def test_core_stack_imports_and_runs():
  import chex  # pylint: disable=import-outside-toplevel,unused-import
  import dm_env  # pylint: disable=import-outside-toplevel,unused-import
  import envpool  # pylint: disable=import-outside-toplevel,unused-import
  import haiku as hk  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import ml_collections  # pylint: disable=import-outside-toplevel,unused-import
  import optax  # pylint: disable=import-outside-toplevel
  import rlax  # pylint: disable=import-outside-toplevel,unused-import
  import tree  # pylint: disable=import-outside-toplevel,unused-import

  net = hk.without_apply_rng(hk.transform(lambda x: hk.Linear(2)(x)))
  params = net.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
  grads = jax.grad(lambda p: jnp.sum(net.apply(p, jnp.ones((1, 3))) ** 2))(params)
  updates, _ = optax.sgd(0.1).update(grads, optax.sgd(0.1).init(params))
  new_params = optax.apply_updates(params, updates)
  assert jax.tree_util.tree_structure(new_params) == jax.tree_util.tree_structure(params)


# Lane-specific versions.


def test_lane_versions():
  import jax  # pylint: disable=import-outside-toplevel

  if current_lane() == "reverb":
    assert sys.version_info[:2] == (3, 11), sys.version
    assert jax.__version__.startswith("0.4.34"), jax.__version__
    assert _major_minor(np.__version__)[0] < 2, np.__version__
  else:
    assert sys.version_info[:2] >= (3, 11), sys.version
    assert _major_minor(jax.__version__) >= (0, 5), jax.__version__
    assert _major_minor(np.__version__)[0] >= 2, np.__version__


# Reverb: runs in the reverb lane, skipped in the default lane.


def test_reverb_imports_alongside_jax():
  reverb = requires_reverb()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  assert hasattr(reverb, "Server") and hasattr(reverb, "Client")
  assert float(jax.jit(lambda x: jnp.sum(x * 2))(jnp.arange(4.0))) == 12.0


def test_reverb_then_jax_in_a_fresh_process():
  """Import order matters when two native stacks share a process: Reverb (TF) first here."""
  requires_reverb()
  code = textwrap.dedent("""
      import reverb
      import jax, jax.numpy as jnp
      print(jax.__version__, float(jnp.arange(4.0).sum()))
  """)
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-4000:]
  assert result.stdout.split()[-1] == "6.0", result.stdout


def test_reverb_server_round_trip():
  reverb = requires_reverb()
  table = reverb.Table(
      name="replay",
      sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(),
      max_size=100,
      rate_limiter=reverb.rate_limiters.MinSize(1))
  server = reverb.Server(tables=[table], port=None)  # port=None: an unused port.
  try:
    assert server.port > 0
    client = reverb.Client(f"localhost:{server.port}")
    observation = np.arange(6, dtype=np.float32).reshape(2, 3)
    action = np.int32(4)
    client.insert([observation, action], priorities={"replay": 1.0})
    assert client.server_info()["replay"].current_size == 1

    samples = list(client.sample("replay", num_samples=1))
    assert len(samples) == 1
    (sample,) = samples[0]  # One timestep per item.
    np.testing.assert_array_equal(sample.data[0], observation)
    assert sample.data[1] == action
    assert sample.info.probability == pytest.approx(1.0)
  finally:
    server.stop()


def test_the_tensorboard_viewer_is_an_extra_the_readme_names(monkeypatch):
  extras = _setup_py_kwargs(monkeypatch)["extras_require"]
  assert extras["tensorboard"] == ["tensorboard"]
  readme = (REPO_ROOT / "README.md").read_text()
  assert 'pip install -e ".[tensorboard]"' in readme
  assert "tensorboard" not in " ".join(extras["test"])  # Neither lane installs it.
