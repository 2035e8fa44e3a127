"""DPO's loss (podracer/components/losses/dpo.py): its drift against the closed form Lu
et al. give (as PureJaxRL's dpo_continuous_action.py writes it), and the loss under
every runtime PPO's loss runs under."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import builder, registry
from podracer.components.losses import DPOLoss, PPOLoss, dpo_drift
from podracer.logs.metrics import MetricsLogger


def closed_form(ratio, advantage, alpha=2.0, beta=0.6):
  """The drift as the paper's code writes it: both branches, mixed by the sign of A."""
  ratio, advantage = np.asarray(ratio, np.float64), np.asarray(advantage, np.float64)
  relu = lambda x: np.maximum(x, 0.0)
  first = relu((ratio - 1) * advantage - alpha * np.tanh((ratio - 1) * advantage / alpha))
  second = relu(np.log(ratio) * advantage - beta * np.tanh(np.log(ratio) * advantage / beta))
  positive = (advantage >= 0).astype(np.float64)
  return first * positive + second * (1 - positive)


def test_the_drift_is_the_closed_form_on_a_grid_of_ratios_and_advantages():
  ratio, advantage = np.meshgrid(np.linspace(0.05, 4.0, 81), np.linspace(-6.0, 6.0, 61))
  got = np.asarray(dpo_drift(jnp.asarray(ratio, jnp.float32),
                             jnp.asarray(advantage, jnp.float32), 2.0, 0.6))
  np.testing.assert_allclose(got, closed_form(ratio, advantage), rtol=2e-5, atol=2e-6)
  assert (got >= 0).all()
  at_one = dpo_drift(jnp.ones(61), jnp.linspace(-6.0, 6.0, 61), 2.0, 0.6)
  assert float(jnp.abs(at_one).max()) == 0.0  # No drift at the policy that acted.
  # Another alpha and beta: the same formula.
  np.testing.assert_allclose(
      np.asarray(dpo_drift(jnp.asarray(ratio, jnp.float32), jnp.asarray(advantage, jnp.float32),
                           0.5, 1.5)), closed_form(ratio, advantage, 0.5, 1.5),
      rtol=2e-5, atol=2e-6)


def test_at_the_acting_policy_its_gradient_is_the_policy_gradient():
  """d/drho (rho A - f(rho, A)) at rho = 1 is A, as PPO's: the drift is flat there."""
  surrogate = lambda r, a: DPOLoss().surrogate(r, a)
  for advantage in (-3.0, -0.2, 0.0, 0.4, 5.0):
    grad = jax.grad(surrogate)(jnp.float32(1.0), jnp.float32(advantage))
    assert float(grad) == pytest.approx(advantage, abs=1e-6)
  # Where PPO clips (rho 1.5, A > 0), DPO still moves: its drift grows smoothly.
  assert float(jax.grad(PPOLoss().surrogate)(jnp.float32(1.5), jnp.float32(1.0))) == 0.0
  assert 0.0 < float(jax.grad(surrogate)(jnp.float32(1.5), jnp.float32(1.0))) < 1.0


def _tiny(config, steps):
  config.loss = dict(name="dpo", alpha=2.0, beta=0.6, clip_epsilon=0.2, value_coef=0.5,
                     entropy_coef=0.01, clip_value=True, normalize_advantages=True)
  config.total_env_steps = steps
  return config


@pytest.mark.slow
@pytest.mark.parametrize("name", ["catch_anakin", "cartpole_sebulba", "cartpole_seed",
                                  "pendulum_anakin", "mujoco_sebulba", "mujoco_seed"])
def test_dpo_at_its_constants_trains_under_every_runtime(name):
  from agents.ppo import config as ppo_config  # pylint: disable=import-outside-toplevel
  from tests.test_sebulba import one_device  # pylint: disable=import-outside-toplevel
  config = getattr(ppo_config, name)()
  if config.runtime.name == "anakin":
    config.topology.num_devices = 1
  else:
    one_device(config)
  experiment = builder.build(_tiny(config, 8192))
  assert isinstance(experiment.agent.loss, DPOLoss)
  # Continuous actions too: a Gaussian policy's (Pendulum in JAX; MuJoCo on EnvPool).
  assert ("distribution" in config) == (name.startswith(("pendulum", "mujoco")))
  assert registry.losses.get("dpo") is DPOLoss
  logger = MetricsLogger(stream=None)
  experiment.runtime.train(logger)
  learned = [r for r in logger.records if "policy_loss" in r]
  assert learned and all(np.isfinite(r["policy_loss"]) for r in learned)
  assert logger.records[-1]["env_steps"] >= 8192
