"""Helpers for tests that need Reverb, which only the reverb install lane has.

The test suite runs once per install lane (scripts/test.sh), with PODRACER_LANE set to
"default" or "reverb". A Reverb test starts with

    reverb = requires_reverb()

which returns the imported `reverb` module, or skips the test in the default lane. In the
reverb lane a failing `import reverb` fails the test instead, so a broken lane is not
hidden behind skips.
"""

from __future__ import annotations

import os

import pytest

LANES = ("default", "reverb")

SKIP_REASON = ("Reverb is not installed in the default lane; it runs in the reverb lane "
               "(pip install .[reverb] on Python 3.11)")


def current_lane() -> str:
  """The install lane under test: $PODRACER_LANE, "default" when unset or empty."""
  lane = os.environ.get("PODRACER_LANE", "").strip() or "default"
  if lane not in LANES:
    raise ValueError(f"PODRACER_LANE={lane!r}; expected one of {', '.join(LANES)}")
  return lane


def requires_reverb():
  """Returns the `reverb` module; skips the calling test where Reverb is not installed."""
  try:
    import reverb  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    if current_lane() == "reverb":
      pytest.fail(f"PODRACER_LANE=reverb but `import reverb` failed: {e!r}. "
                  "Reinstall the lane with `bash scripts/setup_env.sh reverb`.")
    pytest.skip(SKIP_REASON)
  return reverb
