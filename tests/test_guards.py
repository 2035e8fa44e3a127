"""Non-finite losses and parameters stop the run (or, if asked, their updates are skipped)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.lifecycle import guards
from podracer.errors import NonFiniteError
from podracer.logs.metrics import MetricsLogger
from tests.test_launch import launch


class ScaledStep:
  """An agent whose update multiplies the parameters by `scale`."""

  trajectory_overlap = 1

  def __init__(self, scale):
    self.scale = scale

  def update(self, nets, opt, experience, key):
    del key
    nets = jax.tree.map(lambda x: x * self.scale, nets)
    return nets, dict(opt, count=opt["count"] + 1), experience, dict(loss=jnp.sum(nets["w"]))


def run_update(agent):
  nets, opt = dict(w=jnp.ones(3)), dict(count=jnp.int32(0), mu=jnp.zeros(3))
  return jax.jit(agent.update)(nets, opt, None, jax.random.PRNGKey(0))


def test_guarded_update_flags_non_finite_parameters_and_delegates_the_rest():
  agent = guards.GuardedAgent(ScaledStep(2.0))
  assert agent.trajectory_overlap == 1 and agent.scale == 2.0
  nets, _, _, metrics = run_update(agent)
  np.testing.assert_array_equal(nets["w"], [2.0, 2.0, 2.0])
  assert float(metrics[guards.PARAMS_METRIC]) == 0.0

  nets, _, _, metrics = run_update(guards.GuardedAgent(ScaledStep(jnp.inf)))
  assert float(metrics[guards.PARAMS_METRIC]) == 1.0
  assert np.isinf(nets["w"]).all()  # "stop" leaves the update alone; the host stops.


@pytest.mark.reverb_lane
def test_skip_update_keeps_the_previous_parameters():
  agent = guards.GuardedAgent(ScaledStep(jnp.nan), nan_policy="skip_update")
  nets, opt, _, metrics = run_update(agent)
  np.testing.assert_array_equal(nets["w"], [1.0, 1.0, 1.0])
  assert int(opt["count"]) == 0
  assert float(metrics[guards.SKIPPED_METRIC]) == 1.0
  assert guards.PARAMS_METRIC not in metrics

  nets, opt, _, metrics = run_update(guards.GuardedAgent(ScaledStep(3.0), "skip_update"))
  np.testing.assert_array_equal(nets["w"], [3.0, 3.0, 3.0])
  assert float(metrics[guards.SKIPPED_METRIC]) == 0.0


def test_watch_raises_once_after_writing_the_record_and_names_metric_and_updates():
  logger = MetricsLogger(stream=None)
  watch = guards.NonFiniteWatch(logger)
  watch.write(dict(env_steps=100, updates=4, loss=1.0, nonfinite_params=0.0))
  with pytest.raises(NonFiniteError, match=r"updates 5-8 .*`loss` is nan"):
    watch.write(dict(env_steps=200, updates=8, loss=float("nan"), nonfinite_params=0.0))
  assert len(logger.records) == 2  # Written first, so metrics.jsonl shows it.
  watch.write(dict(env_steps=300, updates=12, loss=float("nan")))  # Once only.
  assert watch.target_reached is False  # The logger's attributes pass through.

  watch = guards.NonFiniteWatch(MetricsLogger(stream=None))
  with pytest.raises(NonFiniteError, match="parameters or optimizer state"):
    watch.write(dict(env_steps=100, updates=4, loss=1.0, nonfinite_params=0.25))
  resumed = MetricsLogger(stream=None)  # As a resumed run's logger: records so far.
  resumed.records.append(dict(env_steps=100, updates=8))
  with pytest.raises(NonFiniteError, match=r"updates 9-12 "):
    guards.NonFiniteWatch(resumed).write(dict(env_steps=150, updates=12, loss=float("inf")))
  skipping = guards.NonFiniteWatch(MetricsLogger(stream=None), "skip_update")
  skipping.write(dict(env_steps=100, updates=4, loss=float("nan")))


@pytest.mark.slow
def test_an_exploding_learning_rate_exits_1_naming_the_metric_and_update(tmp_path):
  # A NaN learning rate is refused at build now (its declared range); 1e30 is in range
  # and blows the parameters up in the first update.
  result = launch("--config=agents/ppo/config.py:cartpole_anakin",
                  "--config.optimizer.learning_rate=1e30", "--config.total_env_steps=40000",
                  f"--workdir={tmp_path}")
  assert result.returncode == 1, result.stderr
  assert "Traceback" not in result.stderr
  assert "`policy_loss` is nan" in result.stderr
  assert "updates 1-16" in result.stderr  # The first record: the run stopped there.
  assert "result: " not in result.stdout
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 1


def test_unknown_nan_policy_is_a_config_error():
  result = launch("--config=agents/ppo/config.py:cartpole_anakin",
                  "--config.nan_policy=ignore")
  assert result.returncode == 2 and "`nan_policy`" in result.stderr
  assert "Traceback" not in result.stderr


def test_all_finite_checks_every_float_dtype_and_ignores_integers():
  finite = {"w": jnp.ones((3, 2)), "h": jnp.zeros(4, jnp.bfloat16),
            "count": jnp.array(2**31 - 1, jnp.int32)}
  assert bool(guards.all_finite(finite))
  for name, bad in (("w", jnp.ones((3, 2)).at[1, 1].set(jnp.nan)),
                    ("h", jnp.zeros(4, jnp.bfloat16).at[3].set(jnp.inf))):
    assert not bool(guards.all_finite(dict(finite, **{name: bad}))), name
  assert bool(guards.all_finite({"count": jnp.array(1)}))
