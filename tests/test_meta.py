"""podracer.meta: an evolution strategy over the learned policy objective, each
generation's members whole PPO trainings in one compiled program; its records, its
exact resume, its learned objective loaded as a loss; its bad input."""

import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.ppo import config as ppo_config
from podracer import builder, meta
from podracer.components.losses import LearnedPolicyLoss, zero_drift
from podracer.errors import ConfigError, NonFiniteError
from podracer.launch import register_components_and_agents
from tests.learning import ROOT, iqm, last_fifth_means, launch_runs

# 4 members x 2 calls of 8,192 env steps (4 environments x 128 steps x 16 updates).
SMALL = dict(population="4", inner_env_steps="16384", sigma="0.5", hidden="4",
             member_seeds="1")


def _train(workdir, generations, **meta_args):
  register_components_and_agents()
  config = ppo_config.cartpole_anakin()
  args = dict(SMALL, generations=str(generations), **meta_args)
  out = io.StringIO()
  meta.train(config, meta.MetaConfig.from_args(args), str(workdir), stream=out)
  return out.getvalue()


def _records(workdir):
  return [json.loads(l) for l in (workdir / meta.RECORDS_FILE).read_text().splitlines()]


@pytest.mark.slow
def test_generations_train_and_a_resume_is_exact(tmp_path):
  """Two generations in one launch, and one then a relaunch for the second: the same
  fitness figures and the same learned objective, bit for bit."""
  said = _train(tmp_path / "whole", 2)
  assert "meta: 4 PPO trainings of 16,384 env steps a generation in one program" in said
  assert "generation 2: fitness best" in said and "inner env steps/s" in said
  whole = _records(tmp_path / "whole")
  assert [r["generation"] for r in whole] == [1, 2]
  for r in whole:
    assert r["fitness_min"] <= r["fitness_mean"] <= r["fitness_best"]
    assert r["fitness_min"] > 9.0 and r["episodes"] > 0  # CartPole's returns, learning
    assert r["inner_env_steps"] == 4 * 16384
  # Members differ in their objective only: some pair of them trained differently.
  assert any(r["fitness_best"] > r["fitness_min"] for r in whole)
  _train(tmp_path / "halves", 1)
  _train(tmp_path / "halves", 2)
  halves = _records(tmp_path / "halves")
  key = lambda r: (r["generation"], r["fitness_best"], r["fitness_mean"], r["fitness_min"])
  assert [key(r) for r in halves] == [key(r) for r in whole]
  with np.load(tmp_path / "whole" / meta.OBJECTIVE_FILE) as a, \
       np.load(tmp_path / "halves" / meta.OBJECTIVE_FILE) as b:
    assert sorted(a) == ["b0", "b1", "log_clip", "log_value_clip", "w0", "w1"]
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
    assert np.abs(a["w0"]).sum() > 0  # the mean moved from PPO's theta = 0
  # The learned objective is an ordinary loss of the same agent.
  config = ppo_config.cartpole_anakin()
  config.loss.name = "learned_policy"
  config.loss.path = str(tmp_path / "whole" / meta.OBJECTIVE_FILE)
  config.loss.hidden = 4
  agent = builder.build(config).agent
  assert isinstance(agent.loss, LearnedPolicyLoss)
  about = json.loads((tmp_path / "whole" / "learned_objective.json").read_text())
  assert about["hidden"] == 4 and about["loss"] == "learned_policy"
  assert about["form"] == "ppo_value_and_policy_clip_scales_and_first_order_drift"
  assert agent.loss.drift_form == "first_order"


def _meta_command(workdir, generations):
  flags = [f"--config.meta.{k}={v}" for k, v in dict(SMALL, eval_every="0").items()]
  return [sys.executable, "-m", "podracer.meta", "--config=agents/ppo/config.py:cartpole_anakin",
          f"--workdir={workdir}", f"--config.meta.generations={generations}", *flags]


@pytest.mark.slow
def test_sigterm_mid_search_stops_cleanly_keeping_the_generations_and_their_objective(tmp_path):
  """SIGTERM once a generation is recorded (of 10,000 asked): exit 143 within seconds, one
  line saying what was kept, no traceback; the state, the records and the objective of the
  last whole generation, the same objective a relaunch for those generations writes."""
  process = subprocess.Popen(_meta_command(tmp_path, 10000), cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  records = tmp_path / meta.RECORDS_FILE
  deadline = time.monotonic() + 600
  while not (records.exists() and records.read_text().count("\n") >= 1):
    assert process.poll() is None and time.monotonic() < deadline, process.communicate()
    time.sleep(0.2)
  process.send_signal(signal.SIGTERM)
  out, err = process.communicate(timeout=120)
  assert process.returncode == 143, err
  assert "Traceback" not in err and "podracer.meta: stopped by SIGTERM" in err
  with np.load(tmp_path / meta.STATE_FILE) as saved:
    done = int(saved["generation"])
  assert 1 <= done < 10000 and f"keeps {done} generation" in err
  assert len(_records(tmp_path)) == done and f"generation {done}: fitness" in out
  stopped = dict(np.load(tmp_path / meta.OBJECTIVE_FILE))
  again = subprocess.run(_meta_command(tmp_path, done), cwd=ROOT, capture_output=True,
                         text=True, check=False)
  assert again.returncode == 0, again.stderr
  with np.load(tmp_path / meta.OBJECTIVE_FILE) as rewritten:
    assert sorted(rewritten) == sorted(stopped)
    for k in stopped:
      np.testing.assert_array_equal(stopped[k], rewritten[k])


def test_a_resume_with_other_settings_is_refused_naming_them(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(dict(
      json.loads(ppo_config.cartpole_anakin().to_json_best_effort()),
      meta=dict(meta.MetaConfig(population=4).__dict__))))
  write = meta.write_config
  with pytest.raises(ConfigError, match=r"meta\.sigma"):
    write(str(tmp_path), ppo_config.cartpole_anakin(), meta.MetaConfig(population=4, sigma=0.3))
  # More generations: a resume that goes on.
  write(str(tmp_path), ppo_config.cartpole_anakin(), meta.MetaConfig(population=4, generations=99))
  # A meta-training from before 0.20.0 (no c_v) resumes with --config.meta.value_clip=False.
  before = dict(meta.MetaConfig(population=4).__dict__)
  del before["value_clip"]
  (tmp_path / "config.json").write_text(json.dumps(dict(
      json.loads(ppo_config.cartpole_anakin().to_json_best_effort()), meta=before)))
  with pytest.raises(ConfigError, match=r"meta\.value_clip"):
    write(str(tmp_path), ppo_config.cartpole_anakin(), meta.MetaConfig(population=4))
  old = meta.MetaConfig.from_args(dict(population="4", value_clip="False"))
  write(str(tmp_path), ppo_config.cartpole_anakin(), old)
  assert "log_value_clip" not in meta.initial_theta(old)
  # One from 0.20.0 (no lifetime, Adam's steps not in each std) resumes with
  # --config.meta.steps_in_std=False; without it, refused naming the key.
  before = dict(meta.MetaConfig(population=4).__dict__)
  del before["lifetime"], before["steps_in_std"]
  (tmp_path / "config.json").write_text(json.dumps(dict(
      json.loads(ppo_config.cartpole_anakin().to_json_best_effort()), meta=before)))
  with pytest.raises(ConfigError, match=r"meta\.steps_in_std"):
    write(str(tmp_path), ppo_config.cartpole_anakin(), meta.MetaConfig(population=4))
  write(str(tmp_path), ppo_config.cartpole_anakin(),
        meta.MetaConfig.from_args(dict(population="4", steps_in_std="False")))


@pytest.mark.parametrize("args, named", [
    (dict(population="5"), "meta.population"),
    (dict(sigma="0"), "meta.sigma"),
    (dict(member_seeds="0"), "meta.member_seeds"),
    (dict(fitness_fraction="1.5"), "meta.fitness_fraction"),
    (dict(generatons="3"), "meta.generatons"),
    (dict(hidden="many"), "meta.hidden"),
    (dict(drift_form="cubic"), "meta.drift_form"),
    (dict(value_clip="maybe"), "meta.value_clip"),
])
def test_bad_meta_keys_are_one_paragraph_naming_them(args, named):
  with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
    meta.MetaConfig.from_args(args)


@pytest.mark.parametrize("override, named", [
    (("--config=agents/dqn/config.py:cartpole_anakin",), "agent is 'dqn'"),
    (("--config=agents/ppo/config.py:cartpole_sebulba",), "runtime.name=anakin"),
    (("--config=agents/ppo/config.py:cartpole_anakin", "--config.meta.population=3"),
     "meta.population"),
    # Before compiling: a budget under one update (4 environments x 128 steps), and a
    # population whose members' states do not fit the device.
    (("--config=agents/ppo/config.py:cartpole_anakin", "--config.meta.inner_env_steps=500"),
     "`meta.inner_env_steps` is 500: less than one update"),
    (("--config=agents/ppo/config.py:cartpole_anakin",
      "--config.meta.population=100000000"), "`meta.population`"),
    (("--config=agents/ppo/config.py:cartpole_anakin",
      "--config.meta.tasks=agents/ppo/config.py:catch_anakin|total_env_steps=1"),
     "is not a --config.KEY=VALUE override"),
    (("--config=agents/ppo/config.py:cartpole_anakin",
      "--config.meta.tasks=agents/ppo/config.py:no_such_config"), "`meta.tasks`"),
])
def test_the_command_exits_2_with_one_paragraph(override, named, tmp_path, capsys):
  assert meta.main(["podracer.meta", *override, f"--workdir={tmp_path}"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("Config error: ") and "Traceback" not in err
  assert named in " ".join(err.split()), err


def test_a_nonfinite_member_ranks_last_and_every_member_nonfinite_stops():
  fitness = np.array([10.0, 30.0, np.nan, 20.0])
  finite = np.array([True, False, True, True])
  told = meta.worst_where_nonfinite(fitness, finite & np.isfinite(fitness), generation=3)
  np.testing.assert_array_equal(told, [10.0, 9.0, 9.0, 20.0])
  with pytest.raises(NonFiniteError, match="every one of the 4 members of generation 3"):
    meta.worst_where_nonfinite(fitness, np.zeros(4, bool), generation=3)


@pytest.mark.slow
def test_several_tasks_each_train_every_member_their_fitness_over_the_starts(tmp_path):
  """CartPole and gymnax's CartPole-v1 in each generation: the start's (PPO's) return
  measured on each, each member's fitness the mean of its returns divided by those
  (about 1 near the start, not a raw return), each task's members' mean return in the
  records. A task whose start returns nothing positive (Catch at this budget) has no
  ratio: refused, naming it."""
  out = _train(tmp_path / "two", 1, eval_every="1", inner_env_steps="8192",
               tasks="agents/ppo/config.py:cartpole_anakin|--config.env=gymnax"
                     "|--config.env.env_id=CartPole-v1")
  assert "tasks (the start's return" in out and "1_gymnax_CartPole-v1" in out, out
  record = _records(tmp_path / "two")[0]
  assert record["return_mean_0_cartpole"] > 5, record
  assert record["return_mean_1_gymnax_CartPole-v1"] > 5, record
  for key in ("fitness_mean", "mean_theta_fitness"):
    assert 0.3 < record[key] < 3.0, record  # A ratio to the start, not a raw return.
  with pytest.raises(ConfigError, match="on task 1_catch the start's return"):
    _train(tmp_path / "catch", 1, inner_env_steps="8192",
           tasks="agents/ppo/config.py:catch_anakin|--config.runtime.rollout_length=64")


# Extended (CI time): in CI a lifetime-conditioned file loads by its form, builds with
# the run's gradient steps and reads the training progress
# (tests/components/test_learned_policy.py), and the search trains (above).
@pytest.mark.extended
def test_a_lifetime_conditioned_search_trains_and_writes_its_form(tmp_path):
  """`meta.lifetime`: the members' drift sees the fraction of their training done
  (w0 [7, H]); the file says so by its form, and loads as a loss that gets the run's
  gradient steps from the builder. With `meta.objective=dpo` it is refused."""
  said = _train(tmp_path, 1, lifetime="true")
  assert "generation 1: fitness best" in said
  about = json.loads((tmp_path / "learned_objective.json").read_text())
  assert about["form"].endswith("_first_order_drift_lifetime_conditioned"), about
  with np.load(tmp_path / meta.OBJECTIVE_FILE) as saved:
    assert saved["w0"].shape == (7, 4) and np.abs(saved["w0"][6]).sum() > 0
  config = ppo_config.cartpole_anakin()
  config.loss.name = "learned_policy"
  config.loss.path = str(tmp_path / meta.OBJECTIVE_FILE)
  experiment = builder.build(config)
  assert experiment.agent.loss.lifetime
  assert experiment.agent.loss.total_steps == experiment.plan.num_updates * 16
  with pytest.raises(ConfigError, match=r"`meta\.lifetime`.*dpo"):
    meta.MetaConfig.from_args(dict(lifetime="true", objective="dpo"))


@pytest.mark.slow
@pytest.mark.parametrize("member_seeds", ["1", "2"])
def test_a_diverging_members_training_is_flagged_not_finite(member_seeds):
  """One generation with PPO's theta and a theta whose drift is astronomically large:
  the second's parameters end non-finite, and the program says so (the driver then
  ranks it last, above); with two trainings a member, the same, and each member's
  fitness is the mean of its two trainings'."""
  register_components_and_agents()
  config = ppo_config.cartpole_anakin()
  settings = meta.MetaConfig.from_args(dict(SMALL, population="2", inner_env_steps="8192",
                                            member_seeds=member_seeds, drift_form="squared"))
  experiment = builder.build(meta.inner_config(config, settings))
  zero = zero_drift(4)
  huge = dict(zero, w0=jnp.full_like(zero["w0"], 1e3), w1=jnp.full_like(zero["w1"], 1e30))
  thetas = jax.tree.map(lambda a, b: jnp.stack([a, b]), zero, huge)
  fitness, _, finite = meta.generation_program(experiment, settings)(
      thetas, jax.random.PRNGKey(0))
  assert list(np.asarray(finite)) == [True, False], (fitness, finite)
  assert np.asarray(fitness).shape == (2,) and np.isfinite(fitness[0]) and fitness[0] > 0


# -- the search on a synthetic profile (issue 62): a known optimum away from the start --

def _profile(c):
  """A CartPole-like fitness of c, the learned log clip scale: PPO's 238.6 at c = 0, a
  dip near clip 0.3 (c = 0.4) and the gain far out (docs/meta.md's measured points: 223.2
  at c = 0.41, 306.2 at c = 0.92), peaked near c = 1.3."""
  return (238.6 - 25.0 * jnp.exp(-jnp.square((c - 0.4) / 0.25))
          + 120.0 * jnp.exp(-jnp.square((c - 1.3) / 0.6)))


def _searched(config, repetitions, generations, noise):
  """c of the strategy's mean after each generation, [repetitions, generations]."""
  from podracer.components.losses import zero_drift  # pylint: disable=import-outside-toplevel
  strategy = meta.Strategy(config, zero_drift(config.hidden))

  def repetition(key):
    init_key, key = jax.random.split(key)

    def one(state, g):
      ask, tell, noisy = jax.random.split(jax.random.fold_in(key, g), 3)
      thetas, state = strategy.ask(ask, state)
      fitness = _profile(thetas["log_clip"][:, 0])
      fitness += noise * jax.random.normal(noisy, fitness.shape)
      state = strategy.tell(tell, thetas, fitness, state)
      return state, strategy.mean(state)["log_clip"][0]
    return jax.lax.scan(one, strategy.init(init_key), jnp.arange(generations))[1]
  return np.asarray(jax.jit(jax.vmap(repetition))(
      jax.random.split(jax.random.PRNGKey(0), repetitions)))


def test_the_default_search_reaches_a_known_optimum_through_noise():
  """30 seeded repetitions of 20 generations on the noisy profile: the defaults' mean
  passes c = 0.5 (toward the optimum at 1.3) in at least 90 %; one sigma for every
  parameter (before 0.17: 0.1 on c too) in far fewer, so the test fails a search that
  only moves."""
  defaults = meta.MetaConfig()
  passed = (_searched(defaults, 30, 20, noise=30.0) > 0.5).any(axis=1).mean()
  narrow = (_searched(dataclasses.replace(defaults, sigma_clip=0.1), 30, 20, noise=30.0)
            > 0.5).any(axis=1).mean()
  assert passed >= 0.9 and narrow <= 0.5, (passed, narrow)


def test_without_noise_the_search_converges_near_the_optimum():
  ends = _searched(meta.MetaConfig(), 4, 60, noise=0.0)[:, -10:]
  assert np.all(np.abs(ends - 1.3) < 0.3), ends


def _drift_walk(config, generations=30, noise=30.0):
  """The largest |drift weight| of the mean after `generations` on the noisy profile,
  whose fitness the drift's weights do not touch: where they end is pure noise."""
  from podracer.components.losses import zero_drift  # pylint: disable=import-outside-toplevel
  strategy = meta.Strategy(config, zero_drift(config.hidden))
  state = strategy.init(jax.random.PRNGKey(1))
  for g in range(generations):
    ask, tell, noisy = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(2), g), 3)
    thetas, state = strategy.ask(ask, state)
    fitness = _profile(thetas["log_clip"][:, 0])
    state = strategy.tell(tell, thetas, fitness + noise * jax.random.normal(
        noisy, fitness.shape), state)
  mean = strategy.mean(state)
  return max(float(jnp.abs(mean[k]).max()) for k in ("w0", "b0", "w1", "b1")), mean


def test_narrow_parameters_step_in_their_own_std_so_noise_does_not_walk_them():
  """Adam steps every coordinate about `learning_rate` whatever its signal: before
  0.21.0 the drift's weights (std 0.01) walked to 0.5-1 in 30 generations on noise alone
  (their objective then diverged on MinAtar, docs/meta.md). With `steps_in_std` each step
  is in the parameter's own std: the weights stay within a few of their sigmas, and c,
  the widest, still moves as before."""
  walked, before = _drift_walk(meta.MetaConfig(steps_in_std=False))
  kept, now = _drift_walk(meta.MetaConfig())
  assert walked > 0.5 and kept < 0.05, (walked, kept)
  assert float(now["log_clip"][0]) == pytest.approx(float(before["log_clip"][0]), abs=0.3)
  assert float(now["log_clip"][0]) > 0.5


# -- DPO as a low-dimensional search target (meta.objective=dpo) -------------------------

def test_dpo_search_theta_scales_alpha_and_beta_and_zero_is_dpo_itself():
  from podracer.components.losses import DPOLoss  # pylint: disable=import-outside-toplevel
  from podracer.components.losses.dpo import dpo_theta  # pylint: disable=import-outside-toplevel
  loss = DPOLoss(alpha=2.0, beta=0.6)
  same = loss.with_drift(dpo_theta())
  assert float(same.alpha) == 2.0 and float(same.beta) == pytest.approx(0.6)
  theta = dict(log_alpha=jnp.array([np.log(2.0)]), log_beta=jnp.array([-np.log(3.0)]))
  moved = loss.with_drift(theta)
  assert float(moved.alpha) == pytest.approx(4.0) and float(moved.beta) == pytest.approx(0.2)
  ratio, advantage = jnp.array([1.5, 0.7]), jnp.array([1.0, -2.0])
  assert not np.allclose(loss.surrogate(ratio, advantage), moved.surrogate(ratio, advantage))
  config = meta.MetaConfig(objective="dpo")
  std = meta.search_std(config, meta.initial_theta(config))
  assert {k: float(v[0]) for k, v in std.items()} == dict(log_alpha=1.0, log_beta=1.0)
  with pytest.raises(ConfigError, match=r"`meta.objective` is 'lpo'"):
    meta.MetaConfig.from_args(dict(objective="lpo"))


def test_a_dpo_search_reaches_a_known_optimum_of_alpha_and_beta_without_noise():
  """A noise-free profile over (log alpha, log beta) peaked at (0.7, -0.5): from DPO's
  constants (0, 0) the defaults' mean ends within 0.15 of it in each of 4 repetitions."""
  config = meta.MetaConfig(objective="dpo")
  strategy = meta.Strategy(config, meta.initial_theta(config))
  peak = jnp.array([0.7, -0.5])

  def repetition(key):
    def one(state, g):
      ask, tell = jax.random.split(jax.random.fold_in(key, g))
      thetas, state = strategy.ask(ask, state)
      point = jnp.concatenate([thetas["log_alpha"], thetas["log_beta"]], axis=-1)
      fitness = 300.0 * jnp.exp(-jnp.sum(jnp.square(point - peak), -1))
      state = strategy.tell(tell, thetas, fitness, state)
      mean = strategy.mean(state)
      return state, jnp.concatenate([mean["log_alpha"], mean["log_beta"]])
    return jax.lax.scan(one, strategy.init(key), jnp.arange(60))[1]
  ends = np.asarray(jax.jit(jax.vmap(repetition))(
      jax.random.split(jax.random.PRNGKey(0), 4)))[:, -1]
  assert np.all(np.abs(ends - np.asarray(peak)) < 0.15), ends


@pytest.mark.slow
def test_a_dpo_search_trains_and_writes_the_alpha_and_beta_it_found(tmp_path):
  said = _train(tmp_path, 1, objective="dpo")
  assert "alpha" in said and "beta" in said
  record = _records(tmp_path)[-1]
  about = json.loads((tmp_path / "learned_objective.json").read_text())
  assert about["loss"] == "dpo" and about["form"] == "dpo_log_scales"
  assert about["alpha"] == pytest.approx(record["alpha"])
  saved = np.load(tmp_path / meta.OBJECTIVE_FILE)
  assert set(saved.files) == {"log_alpha", "log_beta"}
  assert about["alpha"] == pytest.approx(2.0 * float(np.exp(saved["log_alpha"][0])), rel=1e-5)
  with pytest.raises(ConfigError, match=r"holds the alpha and beta a DPO search found.*"
                     r"--config.loss=dpo --config.loss.alpha="):
    LearnedPolicyLoss(path=str(tmp_path / meta.OBJECTIVE_FILE))



# The search of docs/meta.md (0.21.0): the clip scales wide, the drift narrow, each
# member's fitness the mean of two trainings; its budget a parameter of the test.
SEARCH = ("--config.meta.generations=30", "--config.meta.population=16",
          "--config.meta.member_seeds=2", "--config.meta.sigma=0.01",
          "--config.meta.sigma_clip=1.0")


@pytest.mark.extended
@pytest.mark.parametrize("inner_env_steps,held_out_seeds", [(65536, 64), (32768, 16)],
                         ids=["65536_steps_64_seeds", "32768_steps_16_seeds"])
def test_a_real_search_on_cartpole_saves_an_objective_at_least_1_15x_ppos(
    tmp_path, inner_env_steps, held_out_seeds):
  """30 generations of 16 members x 2 PPO trainings of `inner_env_steps` (about 7
  minutes at 65,536 here, 5 at 32,768), then the saved objective against PPO's on
  `held_out_seeds` seeds the search never used (from 100) at the same budget: the IQM of
  the last-20 % means at least 1.15x, and the mean theta's fitness over the generations
  rising. On 16 held-out seeds the IQM's standard error at 65,536 steps is about 6.5 %
  of it (a bootstrap), as wide as the margin the bar asks for, so that budget's bar is
  read on 64 seeds; at 32,768 the gain is 1.5x and the bar is read on 16, as the issue
  asks. Measured (docs/meta.md): at 65,536 steps, meta seeds 0, 1, 2, 1.24x, 1.19x and
  1.19x on 64 seeds (1.10x, 1.08x and 1.10x on a 16-seed launch; a 16-seed launch of
  such an objective shows 1.15x in 68-86 % of draws); at 32,768 steps, 1.50x, 1.44x and
  1.53x on 16 seeds (1.50x, 1.51x, 1.51x on 64; 2026-12-04, a 2-core AMD EPYC)."""
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  result = subprocess.run([sys.executable, "-m", "podracer.meta",
                           "--config=agents/ppo/config.py:cartpole_anakin",
                           f"--workdir={tmp_path / 'meta'}", *SEARCH,
                           f"--config.meta.inner_env_steps={inner_env_steps}"],
                          cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  curve = [r["mean_theta_fitness"] for r in _records(tmp_path / "meta")
           if r.get("mean_theta_fitness") is not None]
  assert len(curve) == 6 and np.mean(curve[-2:]) > curve[0] + 10, curve
  held = {}
  for name, overrides in (("ppo", ()), ("learned", (
      "--config.loss=learned_policy",
      f"--config.loss.path={tmp_path / 'meta' / meta.OBJECTIVE_FILE}"))):
    records = launch_runs("agents/ppo/config.py:cartpole_anakin", tmp_path / name,
                          f"--config.num_runs={held_out_seeds}", "--config.seed=100",
                          f"--config.total_env_steps={inner_env_steps}", *overrides)
    held[name] = iqm(last_fifth_means(records))
  assert held["learned"] >= 1.15 * held["ppo"], held


def test_the_pass_rate_of_a_launch_of_fewer_seeds():
  """benchmarks/meta.py's pass_rate: how often a launch of 16 of the runs a side shows
  the bar, from draws of each side's runs."""
  from benchmarks import meta as bench  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  ppo = 240 + 25 * rng.standard_normal(64)
  assert bench.pass_rate(ppo, 1.5 * ppo) == 1.0
  assert bench.pass_rate(ppo, ppo + 1e-3) == 0.0
  wide = 1.15 * 240 + 75 * rng.standard_normal(64)  # at the bar, three times the spread
  assert 0.2 < bench.pass_rate(ppo, wide) < 0.8
  with pytest.raises(ValueError, match="16 of each side"):
    bench.pass_rate(ppo[:16], ppo)


def test_a_zero_drift_objective_is_the_loss_at_those_clip_scales(tmp_path):
  """benchmarks/meta.py --zero_drift_profile's objectives load as the learned_policy loss
  with those clip scales and no drift."""
  from benchmarks import meta as bench  # pylint: disable=import-outside-toplevel
  from podracer.components.losses.learned_policy import LearnedPolicyLoss  # pylint: disable=import-outside-toplevel
  loss = LearnedPolicyLoss(path=bench.zero_drift_objective(str(tmp_path), 0.5, -2.0))
  assert float(loss.value_clip_epsilon()) == pytest.approx(0.2 * np.exp(-2.0), rel=1e-6)
  assert float(loss._scaled_clip("log_clip")) == pytest.approx(0.2 * np.exp(0.5), rel=1e-6)  # pylint: disable=protected-access
  assert all(not np.any(loss.drift[k]) for k in ("w0", "b0", "w1", "b1"))


def test_the_transfer_benchmarks_ratio_and_its_bootstrap_interval():
  """benchmarks/meta.py --transfer: the learned IQM over PPO's (PPO's cost over the
  learned one's where both are negative), inside its 95 % interval."""
  from benchmarks import meta as bench  # pylint: disable=import-outside-toplevel
  ratio, (low, high) = bench.ratio_interval([100.0] * 8, [120.0] * 8)
  assert ratio == pytest.approx(1.2) and low == pytest.approx(1.2) == high
  assert bench.ratio_interval([-150.0] * 4, [-120.0] * 4)[0] == pytest.approx(1.25)
  rng = np.random.default_rng(0)
  ratio, (low, high) = bench.ratio_interval(100 + 10 * rng.standard_normal(16),
                                            110 + 10 * rng.standard_normal(16))
  assert low < ratio < high and high - low > 0.05


def test_docs_meta_table_gives_the_commands_defaults():
  """docs/meta.md's table of `meta.*` keys says each default `python -m podracer.meta`
  runs with (issue 81: the defaults are the settings behind docs/results/meta.md's
  figures, two trainings a member and 30 generations)."""
  page = (ROOT / "docs" / "meta.md").read_text()
  rows = dict(re.findall(r"^\| `meta\.(\w+)` \| ([^|]+?) \|", page, re.M))
  defaults = dataclasses.asdict(meta.MetaConfig())
  assert len(rows) >= 10
  for key, text in rows.items():
    if key == "inner_env_steps":  # 0: the config's total_env_steps, as the page says
      assert defaults[key] == 0 and "total_env_steps" in text
      continue
    value = defaults[key]
    said = text.lower() == "true" if isinstance(value, bool) else type(value)(text)
    assert said == value, (key, text, value)
  assert (defaults["member_seeds"], defaults["generations"]) == (2, 30)
