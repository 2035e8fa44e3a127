"""podracer.report: runs read alike from many-runs and separate directories, grouped by
config or a key, final scores and rliable's interval estimates, curves and profiles,
and bad input as one paragraph (exit 2)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from podracer import report

CONFIG = {"agent": {"name": "ppo", "discount": 0.99}, "env": {"name": "cartpole"},
          "optimizer": {"name": "adam", "learning_rate": 2.5e-4}, "seed": 0,
          "num_runs": 1, "sweep": {}, "total_env_steps": 1000}


def _write(directory, records, config=None):
  directory.mkdir(parents=True, exist_ok=True)
  (directory / "config.json").write_text(json.dumps(config or CONFIG))
  (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  return str(directory)


def _run_records(final, steps=1000, run=None, seed=0):
  """Ten records rising linearly to `final` at `steps` env steps."""
  out = []
  for i in range(1, 11):
    record = dict(env_steps=steps * i // 10, episode_return=final * i / 10, loss=0.1)
    if run is not None:
      record.update(run=run, seed=seed)
    out.append(record)
  return out


def _separate(tmp_path, finals, name="ppo", prefix="a"):
  config = dict(CONFIG, agent=dict(CONFIG["agent"], name=name))
  return [_write(tmp_path / f"{prefix}{i}", _run_records(f), dict(config, seed=i))
          for i, f in enumerate(finals)]


def test_separate_launches_and_a_many_runs_directory_are_read_alike(tmp_path):
  finals = [10.0, 20.0, 30.0, 40.0]
  separate = report.read_runs(_separate(tmp_path, finals), "episode_return")
  many = sum((_run_records(f, run=i, seed=i) for i, f in enumerate(finals)), [])
  together = report.read_runs([_write(tmp_path / "many", many, dict(CONFIG, num_runs=4))],
                              "episode_return")
  for runs in (separate, together):
    groups = report.group_runs(runs, None)
    assert list(groups) == ["ppo"] and len(groups["ppo"]) == 4
    scores = [report.final_score(r, 1000, 0.1).final for r in groups["ppo"]]
    assert scores == finals  # the last 10 % of 1,000 env steps: the last record alone
  assert [r.config["seed"] for r in together] == [0, 1, 2, 3]


def test_final_scores_give_rliables_iqm_and_intervals_computed_by_hand(tmp_path):
  from rliable import library as rly, metrics  # pylint: disable=import-outside-toplevel
  finals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
  result = report.report(_separate(tmp_path, finals), str(tmp_path / "out"))
  figures = result["groups"]["ppo"]
  # The IQM of 1..8: the mean of the middle half, 3..6.
  assert figures["estimates"]["IQM"] == pytest.approx(4.5)
  assert figures["estimates"]["median"] == pytest.approx(4.5)
  matrix = np.array(finals)[:, None]
  np.random.seed(0)  # rliable's bootstrap draws from it too
  points, intervals = rly.get_interval_estimates(
      {"ppo": matrix}, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=report.REPS,
      random_state=np.random.RandomState(0))
  assert figures["estimates"]["IQM"] == pytest.approx(points["ppo"][0])
  # rliable's percentile interval, from other draws of the same bootstrap: within the
  # noise of 2,000 replications (0.25 on a 4.5-wide range here).
  low, high = figures["intervals"][0]
  assert (low, high) == pytest.approx((intervals["ppo"][0, 0], intervals["ppo"][1, 0]),
                                      abs=0.25)
  assert low < 4.5 < high and np.isnan(figures["estimates"]["optimality gap"])
  for png in ("aggregates.png", "curves.png"):
    assert (tmp_path / "out" / png).stat().st_size > 5000
  text = (tmp_path / "out" / "report.md").read_text()
  assert "| ppo | 8 | 4.5 [" in text and "the optimality gap needs --normalize" in text


def test_groups_by_config_or_key_normalize_and_profile_across_tasks(tmp_path):
  directories = []
  for task, scale in (("Breakout-MinAtar", 10.0), ("Asterix-MinAtar", 20.0)):
    for name, better in (("ppo", 1.0), ("pqn", 2.0)):
      config = dict(CONFIG, agent=dict(CONFIG["agent"], name=name),
                    env=dict(name="gymnax", env_id=task))
      many = sum((_run_records(scale * better * (1 + r / 10), run=r, seed=r)
                  for r in range(3)), [])
      directories.append(_write(tmp_path / f"{name}-{task}", many, config))
  norm = tmp_path / "norm.json"
  norm.write_text(json.dumps({"Breakout-MinAtar": [0.0, 20.0], "Asterix-MinAtar": [0, 40]}))
  result = report.report(directories, str(tmp_path / "out"), normalize=str(norm))
  assert sorted(result["groups"]) == ["ppo", "pqn"]
  ppo, pqn = result["groups"]["ppo"], result["groups"]["pqn"]
  assert ppo["tasks"] == ["Asterix-MinAtar", "Breakout-MinAtar"] and ppo["runs"] == 3
  # Normalized: ppo scores 0.5 x (1.0, 1.1, 1.2) on each task, pqn twice that.
  np.testing.assert_allclose(ppo["matrix"], [[0.5, 0.5], [0.55, 0.55], [0.6, 0.6]])
  assert pqn["estimates"]["mean"] == pytest.approx(2 * ppo["estimates"]["mean"])
  assert ppo["estimates"]["optimality gap"] == pytest.approx(1 - 0.55)
  assert "profiles.png" in result["plots"]
  by_key = report.report(directories, str(tmp_path / "out2"), group_by="agent.name")
  assert sorted(by_key["groups"]) == ["agent.name=ppo", "agent.name=pqn"]


def test_a_run_that_stopped_early_counts_as_what_it_reached_and_one_run_has_no_width(
    tmp_path):
  full = _separate(tmp_path, [50.0, 60.0], prefix="f")
  short = _write(tmp_path / "short", _run_records(30.0, steps=400), dict(CONFIG, seed=9))
  other = _write(tmp_path / "dqn", _run_records(70.0, steps=2000),
                 dict(CONFIG, agent=dict(name="dqn")))
  result = report.report(full + [short, other], str(tmp_path / "out"))
  assert result["groups"]["ppo"]["runs"] == 3
  assert result["common_end"] == 1000  # ppo's range; dqn's 2,000 compared on it
  notes = " ".join(result["notes"])
  assert "different env-step ranges" in notes and "up to 1,000 env steps" in notes
  assert "short (ppo) stopped at 400 env steps" in notes
  assert "dqn has one run: its intervals have width 0" in notes
  low, high = result["groups"]["dqn"]["intervals"][0]
  assert low == high == result["groups"]["dqn"]["estimates"]["IQM"]
  # dqn compared at 1,000 of its 2,000: its record there (35.0) and the one before.
  assert result["groups"]["dqn"]["estimates"]["mean"] == pytest.approx(35.0)


@pytest.mark.parametrize("case", ["no metrics", "no such metric", "no such key"])
def test_bad_input_is_one_paragraph_exit_2(tmp_path, case):
  run = _separate(tmp_path, [1.0])[0]
  args = {"no metrics": [str(tmp_path)],
          "no such metric": [run, "--metric=eval_return"],
          "no such key": [run, "--group-by=agent.lambda"]}[case]
  result = subprocess.run([sys.executable, "-m", "podracer.report", *args,
                           f"--out={tmp_path / 'out'}"], capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
  message = " ".join(result.stderr.split())
  assert message.startswith("Report error: ")
  assert {"no metrics": f"{tmp_path} holds no metrics.jsonl",
          "no such metric": "have no `eval_return` (--metric); they have: env_steps",
          "no such key": "--group-by=agent.lambda: the config of"}[case] in message


def test_the_vectorized_bootstrap_is_rliables_statistics_per_replication():
  from rliable import metrics  # pylint: disable=import-outside-toplevel
  matrix = np.random.default_rng(3).normal(size=(7, 3))  # 7 runs x 3 tasks
  boot = report.resampled(matrix, reps=50, seed=0)
  assert boot.shape == (50, 7, 3)
  for task in range(3):  # Strata: each task's runs resampled from its own column.
    assert np.isin(boot[..., task], matrix[:, task]).all()
  normalized = report.aggregates(boot, normalized=True)
  for rep in range(50):
    expected = [metrics.aggregate_iqm(boot[rep]), metrics.aggregate_median(boot[rep]),
                metrics.aggregate_mean(boot[rep]),
                metrics.aggregate_optimality_gap(boot[rep], 1.0)]
    np.testing.assert_allclose(normalized[rep], expected, rtol=1e-12)
  assert np.isnan(report.aggregates(boot, normalized=False)[:, 3]).all()
  # Curves: the IQM over runs x tasks at each point, one call for every point.
  series = np.random.default_rng(4).normal(size=(6, 2, 5))
  flat = series.reshape(12, 5)
  np.testing.assert_allclose(report.iqm(flat, axis=0),
                             [metrics.aggregate_iqm(flat[:, k]) for k in range(5)])
