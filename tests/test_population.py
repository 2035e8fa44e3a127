"""Population-based training inside one compiled Anakin program (podracer/runtimes/population.py)."""

import contextlib
import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.ppo import config as ppo_config
from podracer import builder, report
from podracer.errors import ConfigError
from podracer.logs.metrics import MetricsLogger
from podracer.runtimes import population as population_lib
from tests.learning import last_fifth_means, launch_runs


def _population(size=8, truncation=0.25, explore="perturb", **kw):
  return population_lib.Population(
      interval=1, truncation=truncation, explore=explore, perturb_factors=(0.8, 1.25),
      bounds=kw.get("bounds", {"lr": (1e-4, 1e-2)}),
      choices=kw.get("choices", {"lr": (1e-4, 1e-3, 1e-2)}),
      integer=kw.get("integer", {"lr": False}), size=size, seed=0)


def test_the_bottom_quarter_copies_the_top_quarter_and_the_rest_continue():
  pop = _population(size=8)
  fit = jnp.array([5.0, 1.0, 7.0, 3.0, 0.0, 6.0, 2.0, 4.0])  # best: 2, 5; worst: 4, 1
  for seed in range(20):
    parents = np.asarray(population_lib.parents(pop, fit, jax.random.PRNGKey(seed)))
    assert set(parents[[4, 1]]) <= {2, 5}
    np.testing.assert_array_equal(np.delete(parents, [4, 1]), np.delete(np.arange(8), [4, 1]))
  # A member none of whose episodes ended ranks last.
  fit = population_lib.fitness(jnp.array([10.0, 0.0, 4.0, 8.0]), jnp.array([2.0, 0.0, 1.0, 1.0]))
  np.testing.assert_array_equal(fit, [5.0, -np.inf, 4.0, 8.0])
  assert int(population_lib.parents(_population(size=4), fit, jax.random.PRNGKey(0))[1]) == 3


def test_fitness_is_the_mean_return_of_the_episodes_that_ended_since_the_last_step():
  from podracer.logs.metrics import episode_sums  # pylint: disable=import-outside-toplevel
  from podracer.types import EpisodeStats  # pylint: disable=import-outside-toplevel
  # Two updates: episodes of return 10 and 30 end in the first, one of 200 in the second.
  stats = [EpisodeStats(episode_return=jnp.array(r, jnp.float32),
                        episode_length=jnp.array(l, jnp.int32), done=jnp.array(d))
           for r, l, d in (([10.0, 30.0, 7.0], [5, 15, 7], [True, True, False]),
                           ([200.0, 8.0, 9.0], [100, 8, 9], [True, False, False]))]
  episodes = jnp.stack([episode_sums(s, jnp) for s in stats])
  state = population_lib.accumulate(population_lib.init_state({"lr": 1e-3}), episodes)
  assert float(state.episodes) == 3.0 and float(state.score_sum) == 240.0
  assert float(population_lib.fitness(state.score_sum, state.episodes)) == 80.0
  # population.fitness: the episodes' length (40 on average), or the length negated.
  for measure, mean in (("episode_length", 40.0), ("neg_episode_length", -40.0)):
    state = population_lib.accumulate(population_lib.init_state({"lr": 1e-3}), episodes,
                                      measure)
    assert float(population_lib.fitness(state.score_sum, state.episodes)) == mean


def test_explore_moves_only_the_copied_values_within_bounds_or_to_the_sweeps_values():
  values = {"lr": jnp.full((64,), 1e-2, jnp.float32)}
  copied = jnp.arange(64) % 2 == 0
  moved = population_lib.explore(_population(size=64), values, copied, jax.random.PRNGKey(0))
  lr = np.asarray(moved["lr"])
  np.testing.assert_array_equal(lr[1::2], np.float32(1e-2))  # not copied: kept
  # Copied: x0.8 or x1.25 clipped at the upper bound 1e-2; both happen.
  assert set(np.round(lr[::2].astype(np.float64) / 1e-2, 4).tolist()) == {0.8, 1.0}
  resampled = population_lib.explore(_population(size=64, explore="resample"), values,
                                     copied, jax.random.PRNGKey(0))["lr"]
  assert set(np.asarray(resampled[::2]).tolist()) == set(
      np.float32([1e-4, 1e-3, 1e-2]).tolist())
  ints = population_lib.explore(
      _population(size=8, bounds={"n": (1, 100)}, integer={"n": True}),
      {"n": jnp.full((8,), 10, jnp.int32)}, jnp.ones(8, bool), jax.random.PRNGKey(1))["n"]
  assert ints.dtype == jnp.int32 and set(np.asarray(ints).tolist()) <= {8, 12}


def test_a_copy_takes_the_parents_parameters_and_values_and_starts_a_new_window():
  pop = _population(size=4)
  members = {"w": jnp.arange(4.0)[:, None] * jnp.ones((4, 3))}
  state = population_lib.PopulationState(
      hparams={"lr": jnp.array([1e-3, 2e-3, 3e-3, 4e-3])},
      score_sum=jnp.array([1.0, 9.0, 4.0, 2.0]), episodes=jnp.ones(4),
      parent=jnp.full(4, -1, jnp.int32))
  new_members, new = population_lib.exploit_explore(pop, members, state,
                                                    jax.random.PRNGKey(0), None)
  np.testing.assert_array_equal(new.parent, [1, 1, 2, 3])  # member 0 (worst) copies 1
  np.testing.assert_array_equal(new_members["w"][0], members["w"][1])
  np.testing.assert_array_equal(new_members["w"][1:], members["w"][1:])
  assert float(new.hparams["lr"][0]) in (pytest.approx(2e-3 * 0.8), pytest.approx(2.5e-3))
  np.testing.assert_array_equal(new.hparams["lr"][1:], state.hparams["lr"][1:])
  np.testing.assert_array_equal(new.score_sum, 0.0)
  np.testing.assert_array_equal(new.episodes, 0.0)


def _pbt_config(calls=6, interval_calls=2):
  config = ppo_config.cartpole_anakin()
  config.topology.num_devices = 1
  config.num_runs = 2
  config.sweep.optimizer = dict(learning_rate="3e-4,1e-3")
  config.runtime.num_envs_per_device = 8
  config.runtime.rollout_length = 16
  config.runtime.updates_per_call = 4
  config.population.kind = "pbt"
  config.population.interval = 4 * interval_calls
  config.total_env_steps = calls * 4 * 8 * 16
  return config


@pytest.mark.slow
def test_pbt_runs_in_one_compiled_program_and_its_records_carry_values_and_parents():
  """4 members, an exploit/explore step every 2 calls, inside the program: it compiles
  once (the values change as data), a member that copied holds its parent's parameters
  right after the step, and each record carries the member's values (and `parent` at a
  step)."""
  config = _pbt_config()
  experiment = builder.build(config)
  runtime = experiment.runtime
  state = runtime.init()
  for _ in range(2):  # The second call ends with a step.
    state, _, _ = runtime.step(state)
  parent = np.asarray(runtime.per_run(state.population.parent))
  nets = runtime.per_run(state.agent.nets)
  for member, source in enumerate(parent):
    for leaf in jax.tree.leaves(nets):
      np.testing.assert_array_equal(leaf[member], leaf[source])
  assert (parent != np.arange(4)).sum() == 1  # 4 x 0.25: one member copied
  logger = MetricsLogger(stream=None)
  runtime.train(logger)
  records = logger.records
  by_call = [records[i:i + 4] for i in range(0, len(records), 4)]
  assert len(by_call) == 6
  for call, group in enumerate(by_call):
    assert [r["run"] for r in group] == [0, 1, 2, 3]
    assert all(3e-4 <= r["optimizer.learning_rate"] <= 1e-3 for r in group)
    assert all(("parent" in r) == (call % 2 == 1) for r in group), group
  lrs = {(r["run"], r["optimizer.learning_rate"]) for r in records}
  assert len(lrs) > 4  # some member's value moved


@pytest.mark.slow
def test_members_spread_over_devices_step_as_members_on_one_device(devices):
  """The same population on a mesh of 4 run groups (its step gathers fitness and
  parameters over the `runs` axis) gives the records of one device holding all four."""
  devices(4)
  records = []
  for count in (1, 4):
    config = _pbt_config(calls=4)
    config.topology.num_devices = count
    config.topology.runs = count
    logger = MetricsLogger(stream=None)
    builder.build(config).runtime.train(logger)
    records.append(logger.records)
  # The same decisions and values; the floats to XLA:CPU's rounding (a device holding 4
  # members runs batched kernels of its own: docs/runs.md).
  keys = ("run", "parent", "optimizer.learning_rate")
  assert [{k: r.get(k) for k in keys} for r in records[0]] == [
      {k: r.get(k) for k in keys} for r in records[1]]
  assert any(r.get("parent") not in (None, r["run"]) for r in records[0])
  for key in ("episode_return", "loss"):
    np.testing.assert_allclose([r[key] for r in records[0]], [r[key] for r in records[1]],
                               rtol=1e-4)


@pytest.mark.parametrize("override, key", [
    (dict(kind="pbtt"), "population.kind"),
    (dict(kind="pbt", interval=3), "population.interval"),
    (dict(kind="pbt", truncation=0.75), "population.truncation"),
    (dict(kind="pbt", explore="mutate"), "population.explore"),
    (dict(kind="pbt", fitness="eval_return"), "population.fitness"),
    (dict(kind="pbt", perturb_factors=(0.8, -1.0)), "population.perturb_factors"),
])
def test_bad_population_keys_are_refused_naming_the_key(override, key):
  config = _pbt_config()
  config.population.update(override)
  with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
    builder.build(config)


def test_pbt_needs_members_swept_values_bounds_around_them_and_a_step_in_the_run():
  config = _pbt_config()
  config.num_runs, config.sweep = 1, {}
  with pytest.raises(ConfigError, match="num_runs"):
    builder.build(config)
  config = _pbt_config()
  config.num_runs, config.sweep = 4, {}
  with pytest.raises(ConfigError, match="sweeps none"):
    builder.build(config)
  config = _pbt_config(calls=6)
  config.population.interval = 4 * 7
  with pytest.raises(ConfigError, match=r"`population\.interval` is 28 updates, more than "
                                        r"the run's 24"):
    builder.build(config)
  config = _pbt_config()
  config.population.bounds = {"optimizer": {"learning_rate": "5e-4,1e-2"}}
  with pytest.raises(ConfigError, match=r"excludes starting values of "
                                        r"`sweep\.optimizer\.learning_rate` \(0\.0003, 0\.001\)"):
    builder.build(config)
  config = _pbt_config()
  config.runtime = ppo_config.cartpole_sebulba().runtime
  config.topology = ppo_config.cartpole_sebulba().topology
  config.env = ppo_config.cartpole_sebulba().env
  with pytest.raises(ConfigError, match=r"`population\.kind`.*runtime 'sebulba'"):
    builder.build(config)
  config = _pbt_config()
  config.population.bounds = {"loss": {"entropy_coef": "0,1"}}
  with pytest.raises(ConfigError, match=r"population\.bounds\.loss\.entropy_coef"):
    builder.build(config)


@pytest.mark.slow
def test_a_pbt_run_names_its_best_member_and_its_schedule_and_plots_the_values(tmp_path):
  """What a user sees: the start line says what the population does, the result names
  the best member with the schedule its lineage held, and learning_curve.png has a panel
  of every member's values coloured by its final return."""
  config = _pbt_config(calls=6, interval_calls=1)
  out = io.StringIO()
  summary = builder.build(config).train(workdir=str(tmp_path), stream=out)
  said = out.getvalue()
  assert ("population-based training: 4 members, every 4 updates the bottom 1 copy the "
          "top 1 by episode_return, then perturb x{0.8, 1.25} within "
          "optimizer.learning_rate [0.0003, 0.001]") in said, said
  best = summary["best_run"]
  records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  finals = {r["run"]: r["episode_return"] for r in records if r.get("episode_return")}
  assert best["final_episode_return"] == max(finals.values())
  schedule = best["schedule"]
  assert schedule[0][0] == 0  # from the start
  assert [s[0] for s in schedule] == sorted(s[0] for s in schedule)
  assert all(3e-4 <= s[1]["optimizer.learning_rate"] <= 1e-3 for s in schedule)
  # The schedule ends with the values the best member ended with.
  assert schedule[-1][1]["optimizer.learning_rate"] == best["optimizer.learning_rate"]
  assert (tmp_path / "learning_curve.png").stat().st_size > 10_000
  # podracer.report names the same member (its last record is the last 10 % here) and
  # the same schedule.
  said = io.StringIO()
  with contextlib.redirect_stdout(said):
    assert report.main([str(tmp_path), f"--out={tmp_path / 'report'}"]) == 0
  assert f"best member {best['run']} " in said.getvalue(), said.getvalue()
  text = (tmp_path / "report" / "report.md").read_text()
  assert f"schedule_from={tmp_path}:{best['run']}" in text
  assert text.count("- from ") == len(schedule), text


def _pbt_records(lrs_by_call, parents_by_call):
  """Records of 3 members over calls of 100 env steps: each call's values and parents."""
  records = []
  for call, (lrs, parents) in enumerate(zip(lrs_by_call, parents_by_call)):
    for run, lr in enumerate(lrs):
      record = dict(run=run, env_steps=100 * (call + 1), episode_return=float(run + call))
      record["optimizer.learning_rate"] = lr
      if parents is not None:
        record["parent"] = parents[run]
      records.append(record)
  return records


def test_a_members_schedule_follows_its_lineage_back_through_its_copies():
  from podracer.logs import runs as runs_records  # pylint: disable=import-outside-toplevel
  # Call 1 (env steps 200): member 0 copies 2 and perturbs 3e-3 to 2.4e-3.
  # Call 3 (400): member 2 copies 1 and perturbs 2e-3 to 2.5e-3.
  records = _pbt_records(
      [(1e-3, 2e-3, 3e-3), (2.4e-3, 2e-3, 3e-3), (2.4e-3, 2e-3, 3e-3), (2.4e-3, 2e-3, 2.5e-3)],
      [None, (2, 1, 2), None, (0, 1, 1)])
  key = ["optimizer.learning_rate"]
  assert runs_records.schedule(records, key, 0) == [
      [0, {key[0]: 3e-3}], [200, {key[0]: 2.4e-3}]]
  assert runs_records.schedule(records, key, 2) == [
      [0, {key[0]: 2e-3}], [400, {key[0]: 2.5e-3}]]
  assert runs_records.schedule(records, key, 1) == [[0, {key[0]: 2e-3}]]
  schedule = population_lib.Schedule(((0, {"lr": 1.0}), (200, {"lr": 2.0})), "x:0")
  assert [schedule.at(s)["lr"] for s in (0, 100, 199, 200, 500)] == [1, 1, 1, 2, 2]


@pytest.mark.slow
def test_schedule_from_replays_a_members_values_as_plain_runs(tmp_path):
  """`schedule_from=RUN_DIR:MEMBER`: a plain run (2 seeds here) whose values follow the
  member's schedule call by call, changed as data (it compiles once); RUN_DIR alone
  takes the best member; a run that was not PBT, or a member it did not have, is
  refused naming the key."""
  run_dir = tmp_path / "pbt"
  run_dir.mkdir()
  records = _pbt_records([(3e-4, 1e-3), (3e-4, 1e-3), (8e-4, 1e-3), (8e-4, 1e-3)],
                         [None, None, (1, 1), None])
  (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  (run_dir / "config.json").write_text(_pbt_config().to_json_best_effort())
  config = ppo_config.cartpole_anakin()
  config.topology.num_devices = 1
  config.runtime.update(dict(num_envs_per_device=4, rollout_length=25, updates_per_call=1))
  config.total_env_steps = 500  # calls of 100 env steps, as the records'
  config.num_runs = 2
  config.schedule_from = f"{run_dir}:0"
  out = io.StringIO()
  summary = builder.build(config).train(stream=out)
  assert "replaying the hyperparameter schedule of PBT member" in out.getvalue()
  lrs = [(r["env_steps"], r["run"], r["optimizer.learning_rate"]) for r in summary["records"]]
  assert lrs == [(100 * c, run, lr) for c, lr in
                 [(1, 1e-3), (2, 1e-3), (3, 1e-3), (4, 8e-4), (5, 8e-4)] for run in (0, 1)]
  assert population_lib.load_schedule(str(run_dir)).source.endswith(":1")  # best: member 1
  for spec, match in ((f"{run_dir}:7", "member '7'"), (str(tmp_path), "could not be read")):
    config.schedule_from = spec
    with pytest.raises(ConfigError, match=match):
      builder.build(config)


@pytest.mark.learning
def test_pbt_rescues_the_members_started_at_bad_learning_rates(tmp_path):
  """PPO `cartpole_anakin`, 8 members as a user's command runs them (one device, 500K
  env steps each): seeds 0-1 x learning rates 1e-6, 3e-6 (bad: as a plain sweep those
  four held 24.7-34.2 over the last 20 %, 2026-11-28), 2.5e-4 and 1e-3 (held 497.8-500),
  an exploit/explore step every 64 updates. Every member started at a bad rate ends
  holding 450 or more, and the median member 475 (the sweep's median: 266.0):
  `python benchmarks/pbt.py` prints both side by side."""
  records = launch_runs(
      "agents/ppo/config.py:cartpole_anakin", tmp_path, "--config.num_runs=2",
      "--config.sweep.optimizer.learning_rate=1e-6,3e-6,2.5e-4,1e-3",
      "--config.population.kind=pbt", "--config.population.interval=64",
      "--config.population.bounds.optimizer.learning_rate=1e-6,3e-3")
  held = last_fifth_means(records)
  assert len(held) == 8 and records[-1]["env_steps"] >= 500_000
  assert min(held[:4]) >= 450, held
  assert float(np.median(held)) >= 475, held
  copies = [r for r in records if r.get("parent") not in (None, r["run"])]
  assert copies and {r["run"] for r in copies} & {0, 1, 2, 3}


@pytest.mark.slow
def test_a_member_gone_non_finite_is_replaced_from_the_top_unless_all_are():
  """Members started at a learning rate of 1e30 go non-finite in their first updates:
  each is replaced by a finite member of the top at once (between exploit steps too),
  its record says `replaced`, and the run goes on to its end. When every member goes
  non-finite the guard stops the run as for any run, naming them all."""
  from podracer.errors import NonFiniteError  # pylint: disable=import-outside-toplevel
  from podracer.lifecycle.guards import NonFiniteWatch  # pylint: disable=import-outside-toplevel
  config = _pbt_config(calls=4, interval_calls=3)
  config.sweep.optimizer = dict(learning_rate="3e-4,1e30")
  runtime = builder.build(config).runtime
  logger = NonFiniteWatch(MetricsLogger(stream=None))
  state = runtime.train(logger)
  records = logger.records
  replaced = [r for r in records if r.get("replaced")]
  assert replaced and {r["run"] for r in replaced} <= {2, 3}  # the 1e30 members
  assert all(r["parent"] in (0, 1) for r in replaced)
  assert replaced[0]["env_steps"] < 3 * 4 * 8 * 16  # before the first exploit step
  assert records[-1]["env_steps"] == 4 * 4 * 8 * 16
  from podracer.lifecycle.guards import all_finite  # pylint: disable=import-outside-toplevel
  assert bool(all_finite(runtime.per_run(state.agent.nets)))
  config.sweep.optimizer = dict(learning_rate="1e30,1e35")
  with pytest.raises(NonFiniteError, match=r"Runs 0, 1, 2, 3: Non-finite"):
    builder.build(config).runtime.train(NonFiniteWatch(MetricsLogger(stream=None)))
