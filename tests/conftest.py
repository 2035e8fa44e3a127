"""Test-wide setup: 8 virtual CPU devices, so multi-device code is tested without a GPU.

XLA reads the flag once, when JAX first starts a backend, so it is set here, before any
test module imports JAX.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
