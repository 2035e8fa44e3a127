"""benchmarks/scorecard.py: its --quick run writes every section, a failing section is a
row (exit 1), a missing package a skipped row, and Ctrl-C keeps the table so far."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests.processes import with_sigint_ignored

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCORECARD = ROOT / "benchmarks" / "scorecard.py"
SECTIONS = ("anakin", "sebulba", "seed", "muzero", "runs", "learn")


def _env():
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  return env


@pytest.mark.extended  # CI: the sections' rows and skips below, each alone.
@pytest.mark.slow
def test_quick_writes_every_section_and_a_failing_one_is_a_row_and_exit_1(tmp_path):
  """The whole --quick scorecard (about 2 minutes alone on the 2-core CPU), with the `runs`
  section made to fail: every section is in the table, the failure is a row with its
  error's first line, the others still ran, and the exit status is 1. Its caps are
  scaled by 5 so that a busy machine (the suite beside the other lane) does not cut a
  section short: what this asserts must not depend on the machine's speed."""
  result = subprocess.run([sys.executable, str(SCORECARD), "--quick", f"--out={tmp_path}",
                           "--inject_failure=runs", "--cap_scale=5"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=1200)
  assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
  card = json.loads((tmp_path / "scorecard.json").read_text())
  by_name = {s["name"]: s for s in card["sections"]}
  assert tuple(by_name) == SECTIONS
  assert by_name["runs"]["status"] == "failed"
  assert "RuntimeError: injected failure in section runs" in by_name["runs"]["note"]
  for name in ("anakin", "sebulba", "seed", "learn"):
    assert by_name[name]["status"] == "ok" and by_name[name]["rows"], by_name[name]
  assert by_name["muzero"]["status"] == "ok" and by_name["muzero"]["rows"]
  assert card["header"]["backend"] == "cpu" and card["header"]["quick"]
  table = (tmp_path / "scorecard.md").read_text()
  assert "accelerator: none: the CPU is the device" in table
  for name in SECTIONS:
    assert f"| **{name}** |" in table
  assert "podracer / reference" in table and "SEED / Sebulba" in table
  assert (tmp_path / "learn_ppo.png").stat().st_size > 1000


def test_a_section_whose_package_is_missing_is_a_skipped_row(tmp_path, monkeypatch):
  sys.path.insert(0, str(ROOT))
  try:
    from benchmarks import scorecard  # pylint: disable=import-outside-toplevel
  finally:
    sys.path.remove(str(ROOT))
  monkeypatch.setattr(scorecard, "_importable", lambda module: module != "mctx")
  args = scorecard._parse([f"--out={tmp_path}", "--child=muzero", "--quick"])
  assert scorecard.child(args) == 0
  rows = scorecard._read_rows(str(tmp_path / "muzero.rows.jsonl"))
  assert rows == [dict(skipped="mctx is not installed here (the default lane has it)")]


@pytest.mark.slow
def test_ctrl_c_stops_the_running_section_and_writes_the_table_so_far(tmp_path):
  # Started with SIGINT ignored, as the test lanes' background jobs start everything: the
  # script must take Ctrl-C all the same.
  process = subprocess.Popen(with_sigint_ignored([sys.executable, str(SCORECARD), "--quick",
                                                  f"--out={tmp_path}", "--only=anakin,sebulba"]),
                             cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
  lines = []
  for line in process.stdout:  # Interrupt once the second section has started.
    lines.append(line)
    if line.startswith("== sebulba"):
      time.sleep(2)
      process.send_signal(signal.SIGINT)
      break
  rest, _ = process.communicate(timeout=60)
  assert process.returncode == 130, "".join(lines) + rest
  card = json.loads((tmp_path / "scorecard.json").read_text())
  assert card["interrupted"] and [s["name"] for s in card["sections"]] == ["anakin"]
  assert "Interrupted (Ctrl-C)" in (tmp_path / "scorecard.md").read_text()
