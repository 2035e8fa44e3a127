"""pytest fixtures for testing components alone; in a conftest.py:

    pytest_plugins = ["podracer.testing_fixtures"]

then ask for them by name:
  registered     registers podracer's components and the agents in `agents/`; returns
                 `podracer.registry`.
  devices        a function `devices(n)`: n devices of the default backend, or a clear
                 failure saying how to get them (XLA's host device flag, set before JAX
                 starts: `podracer.testing_fixtures.force_host_devices(8)` at the top of
                 conftest.py, before anything imports JAX).
  fake_spec      `podracer.testing.fake_spec()`: [4] float32 observations, 2 actions.
  fake_env       a `FakeEnvironment` of `fake_spec` with episodes of 5 steps.
"""

from __future__ import annotations

import os

import pytest

HOST_DEVICE_FLAG = "--xla_force_host_platform_device_count"


def force_host_devices(count: int) -> None:
  """Gives the CPU backend `count` devices; call it before JAX starts a backend."""
  flags = os.environ.get("XLA_FLAGS", "")
  if HOST_DEVICE_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICE_FLAG}={count}".strip()


@pytest.fixture
def registered():
  from podracer import launch, registry  # pylint: disable=import-outside-toplevel
  launch.register_components_and_agents()
  return registry


@pytest.fixture
def devices():
  import jax  # pylint: disable=import-outside-toplevel

  def take(count: int):
    found = jax.devices()
    if len(found) < count:
      pytest.fail(f"this test needs {count} devices and JAX has {len(found)} "
                  f"({found[0].platform}); on the CPU call "
                  f"podracer.testing_fixtures.force_host_devices({count}) at the top of "
                  "conftest.py, before anything imports JAX.")
    return found[:count]
  return take


@pytest.fixture
def fake_spec():
  from podracer import testing  # pylint: disable=import-outside-toplevel
  return testing.fake_spec()


@pytest.fixture
def fake_env(fake_spec):  # pylint: disable=redefined-outer-name
  from podracer import testing  # pylint: disable=import-outside-toplevel
  return testing.FakeEnvironment(fake_spec, episode_length=5)
