"""TensorBoard event files beside metrics.jsonl hold the same values."""

import importlib.util
import json
import math

import pytest

from podracer.logs import tensorboard
from podracer.logs.metrics import MetricsLogger
from tests.test_launch import launch

pytest.importorskip("tensorboardX", reason="tensorboardX is a dependency (setup.py): "
                    "reinstall the lane with scripts/setup_env.sh")


def scalars_of(records):
  """What the event files must hold: every finite number but env_steps, at env_steps."""
  expected = {}
  for r in records:
    for k, v in r.items():
      if k != "env_steps" and isinstance(v, (int, float)) and not isinstance(v, bool):
        if math.isfinite(v):
          expected.setdefault(k, []).append((r["env_steps"], v))
  return expected


def assert_same(found, expected):
  assert set(found) == set(expected)
  for tag, points in expected.items():
    assert [s for s, _ in found[tag]] == [s for s, _ in points], tag
    # Event files store float32.
    assert [v for _, v in found[tag]] == pytest.approx([v for _, v in points], rel=1e-6)


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_a_run_writes_event_files_with_the_values_of_metrics_jsonl(tmp_path):
  result = launch("--config=agents/ppo/config.py:cartpole_anakin",
                  "--config.total_env_steps=24576", f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr
  records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert len(records) == 3
  expected = scalars_of(records)
  assert {"episode_return", "sps", "policy_loss", "updates"} <= set(expected)
  assert_same(tensorboard.read_scalars(str(tmp_path)), expected)

  if importlib.util.find_spec("tensorboard") is None:
    return  # TensorBoard itself is in the reverb lane (TensorFlow's dependency).
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  accumulator = event_accumulator.EventAccumulator(str(tmp_path))
  accumulator.Reload()
  found = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
           for tag in accumulator.Tags()["scalars"]}
  assert_same(found, expected)


def test_non_finite_values_are_left_out_and_the_rest_written(tmp_path):
  logger = MetricsLogger(str(tmp_path), stream=None)
  logger.write(dict(env_steps=10, loss=float("nan"), sps=5.0))
  logger.write(dict(env_steps=20, loss=1.5, sps=6.0))
  logger.close()
  assert tensorboard.read_scalars(str(tmp_path)) == {
      "loss": [(20, 1.5)], "sps": [(10, 5.0), (20, 6.0)],
      "wall_time": [(10, pytest.approx(logger.records[0]["wall_time"], rel=1e-6)),
                    (20, pytest.approx(logger.records[1]["wall_time"], rel=1e-6))]}


def test_a_resumed_run_rewrites_no_step_and_keeps_the_values_of_metrics_jsonl(tmp_path):
  first = MetricsLogger(str(tmp_path), stream=None)
  for step in range(1, 6):
    first.write(dict(env_steps=10 * step, loss=float(step)))
  first.close()
  # Resumed from a checkpoint taken after 3 records: steps 40 and 50 are taken again.
  resumed = MetricsLogger(str(tmp_path), stream=None, resume_records=3)
  for step in (4, 5, 6):
    resumed.write(dict(env_steps=10 * step, loss=-float(step)))
  resumed.close()
  records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [r["loss"] for r in records] == [1, 2, 3, -4, -5, -6]
  found = tensorboard.read_scalars(str(tmp_path))
  assert found["loss"] == [(10, 1), (20, 2), (30, 3), (40, -4), (50, -5), (60, -6)]
  assert_same(found, scalars_of(records))
