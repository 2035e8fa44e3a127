"""Meta-gradients (`meta_loss=meta_gradient`): the gradient through one inner update, the
agents and runtimes that take it, bad input, and learning from a poor discount."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from ml_collections import config_dict

from agents.impala import config as impala_config
from agents.impala.agent import IMPALA
from agents.ppo import config as ppo_config
from agents.ppo.agent import PPO
from podracer import registry
from podracer.components.losses import MetaGradient, PPOLoss, VTraceLoss, halves_in_time
from podracer.errors import ConfigError
from podracer.launch import register_components_and_agents
from podracer.learning import META, total_loss
from podracer.types import (REPLICA_AXIS, ArraySpec, DiscreteSpec, EnvSpec, StepType,
                            TimeStep, Trajectory)
from tests import learning
from tests.test_launch import launch
from tests.test_sebulba import one_device, run_in_process


def _trajectory(key, length=6, batch=3):
  """A [length+1, batch] CartPole-shaped trajectory with one episode ending inside."""
  keys = jax.random.split(key, 5)
  step_type = jnp.full((length + 1, batch), StepType.MID).at[0].set(StepType.FIRST)
  step_type = step_type.at[3, 0].set(StepType.LAST).at[4, 0].set(StepType.FIRST)
  timestep = TimeStep(step_type=step_type,
                      reward=jax.random.uniform(keys[0], (length + 1, batch)),
                      discount=jnp.ones((length + 1, batch)).at[3, 0].set(0.0),
                      observation=jax.random.normal(keys[1], (length + 1, batch, 4)))
  extras = dict(log_prob=jnp.log(jax.random.uniform(keys[2], (length + 1, batch),
                                                    minval=0.3, maxval=0.7)),
                value=jax.random.normal(keys[3], (length + 1, batch)))
  action = jax.random.randint(keys[4], (length + 1, batch), 0, 2)
  return Trajectory(timestep=timestep, action=action, extras=extras, actor_state=())


def _agent(kind, **meta_args):
  spec = EnvSpec(ArraySpec((4,), np.float32), DiscreteSpec(2))
  network = registry.networks.get("mlp_actor_critic")(spec=spec, hidden_sizes=(8,))
  meta = MetaGradient(**meta_args)
  if kind == "ppo":
    return PPO(spec, network, PPOLoss(), optax.adam(1e-3), discount=0.9, gae_lambda=0.5,
               meta_loss=meta)
  return IMPALA(spec, network, VTraceLoss(lambda_=0.5, reduction="mean"), optax.adam(1e-3),
                discount=0.9, meta_loss=meta)


def _as_float64(tree):
  return jax.tree.map(lambda x: x.astype(jnp.float64)
                      if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


@pytest.mark.parametrize("kind,validation", [("ppo", "loss"), ("impala", "policy_loss")])
def test_the_meta_gradient_is_the_chain_rule_through_the_inner_update(kind, validation):
  """d/d eta of L(tau', theta'(eta), eta_bar), theta'(eta) = theta - alpha grad L(tau,
  theta, eta), in float64: autodiff against the validation loss's gradient at theta'
  times the finite difference of theta' (the loss's targets are constants in theta, as
  in every update, so the chain is taken through its gradient, not its value)."""
  agent = _agent(kind, inner_learning_rate=0.5, validation=validation)
  meta = agent.meta_loss
  with jax.enable_x64(True):
    nets = _as_float64(agent.init_nets(jax.random.PRNGKey(0)))
    opt = agent.init_opt(nets)
    train, valid = halves_in_time(_as_float64(_trajectory(jax.random.PRNGKey(1))))
    fixed = agent.meta_values()
    validation_batch = agent.learning_batch(valid, meta.reference)  # Both adapted.
    logits = jax.tree.map(lambda v: v.astype(jnp.float64), opt[META].logits)
    grads = _one_replica(jax.grad(meta._validation_loss(
        agent, nets, opt, train, validation_batch, fixed)))(logits)
    theta = _one_replica(lambda lg: meta.inner_step(agent, nets, opt, train,
                                                    meta.values(opt[META]._replace(logits=lg),
                                                                fixed)))
    validation_grad = _one_replica(jax.grad(
        lambda n: total_loss(agent.objectives, n, opt, validation_batch, meta.validation)
    ))(theta(logits))
    eps = 1e-5
    for name in ("discount", "lambda"):
      up, down = (theta({**logits, name: logits[name] + sign * eps}) for sign in (1, -1))
      chain = sum(jnp.vdot(g, (u - d) / (2 * eps)) for g, u, d in zip(
          *(jax.tree.leaves(t) for t in (validation_grad, up, down))))
      assert abs(float(grads[name])) > 1e-6, (name, grads)  # The test can fail.
      np.testing.assert_allclose(float(grads[name]), float(chain), rtol=1e-5)


def _one_replica(f):
  """f, jitted, where the learner's replica axis is bound (one replica)."""
  add, drop = (lambda t: jax.tree.map(lambda v: v[None], t),
               lambda t: jax.tree.map(lambda v: v[0], t))
  return jax.jit(lambda x: drop(jax.vmap(f, axis_name=REPLICA_AXIS)(add(x))))


def test_the_trajectory_splits_in_time_sharing_the_bootstrap_step():
  trajectory = _trajectory(jax.random.PRNGKey(2), length=6)
  train, valid = halves_in_time(trajectory)
  assert train.action.shape == (4, 3) and valid.action.shape == (4, 3)
  np.testing.assert_array_equal(train.timestep.reward[-1], valid.timestep.reward[0])
  with pytest.raises(ConfigError, match="rollout_length` at least 2"):
    halves_in_time(_trajectory(jax.random.PRNGKey(2), length=1))


def test_the_meta_state_starts_at_the_agents_values_and_names_bad_keys():
  agent = _agent("ppo", adapt=("lambda",))
  opt = agent.init_opt(agent.init_nets(jax.random.PRNGKey(0)))
  assert list(opt[META].logits) == ["lambda"]
  values = agent.meta_loss.values(opt[META], agent.meta_values())
  np.testing.assert_allclose(float(values["lambda"]), 0.5, rtol=1e-6)
  assert values["discount"] == 0.9  # Not adapted: the agent's own.
  with pytest.raises(ConfigError, match=r"`meta_loss.adapt` is \['gamma'\]"):
    MetaGradient(adapt=("gamma",))
  with pytest.raises(ConfigError, match="`meta_loss.adapt` names"):
    MetaGradient(adapt=("lambda",)).init({"discount": 0.99})


def test_only_the_adapted_values_take_the_reference_in_validation():
  """adapt=("lambda",): the validation's lambda is the reference 1.0, its discount the
  agent's own 0.9; the inner step's lambda is the adapted one, and the step moves it."""
  agent = _agent("ppo", adapt=("lambda",))
  seen = []
  build = agent.learning_batch
  agent.learning_batch = lambda trajectory, values: seen.append(values) or build(
      trajectory, values)
  nets = agent.init_nets(jax.random.PRNGKey(0))
  opt = agent.init_opt(nets)
  values, opt, metrics = _one_replica(
      lambda o: agent.meta_loss.step(agent, nets, o, _trajectory(jax.random.PRNGKey(1))))(opt)
  validation = [v for v in seen if isinstance(v["lambda"], float)]
  assert validation == [{"discount": 0.9, "lambda": 1.0}], seen
  assert all(v["discount"] == 0.9 for v in seen)
  assert list(metrics) == ["meta_lambda"] and float(values["lambda"]) != 0.5


def _with_meta(config, **args):
  config.meta_loss = config_dict.ConfigDict(dict(name="meta_gradient", **args))
  config.total_env_steps = 16_384
  return config


@pytest.mark.parametrize("agent,runtime", [("ppo", "anakin"), ("ppo", "sebulba"),
                                           ("impala", "anakin"), ("impala", "sebulba")])
def test_ppo_and_impala_adapt_under_anakin_and_sebulba(agent, runtime):
  """The same agents, no runtime special case: the adapted values move, and are in the
  records."""
  register_components_and_agents()
  config = getattr({"ppo": ppo_config, "impala": impala_config}[agent],
                   f"cartpole_{runtime}")()
  if runtime == "sebulba":
    one_device(config)  # Not the suite's 8 virtual devices' split.
  config.agent.discount = 0.9
  records, _, _ = run_in_process(_with_meta(config, learning_rate=0.05))
  discounts = [r["meta_discount"] for r in records if "meta_discount" in r]
  lambdas = [r["meta_lambda"] for r in records if "meta_lambda" in r]
  assert discounts and len(lambdas) == len(discounts)
  assert np.all(np.isfinite(discounts + lambdas))
  assert discounts[-1] > 0.92, discounts  # Up from 0.9, towards the reference 0.99.


@pytest.mark.parametrize("override,named", [
    ("--config.meta_loss.adapt=('gamma',)", "`meta_loss.adapt`"),
    ("--config.runtime.rollout_length=1", "`rollout_length`"),
    ("--config.meta_loss.validation=returns", "the term `returns`"),
])
def test_bad_meta_gradient_settings_exit_2_naming_them(override, named, tmp_path):
  result = launch("--config=agents/ppo/config.py:cartpole_anakin", f"--workdir={tmp_path}",
                  "--config.meta_loss=meta_gradient", override,
                  "--config.total_env_steps=4096")
  assert result.returncode == 2, result.stdout + result.stderr
  assert named in result.stderr and "Traceback" not in result.stderr


def test_an_agent_without_meta_parameters_refuses_the_section(tmp_path):
  result = launch("--config=agents/dqn/config.py:cartpole_anakin", f"--workdir={tmp_path}",
                  "--config.meta_loss=meta_gradient")
  assert result.returncode == 2 and "meta_loss" in result.stderr, result.stderr
  assert "Traceback" not in result.stderr


@pytest.mark.extended
def test_from_discount_0_9_the_adapted_discount_holds_1_2x_the_fixed_one(tmp_path):
  """Xu et al. 2018's claim on CartPole, over 5 seeds in one program each, as a user's
  command runs them: PPO started at discount 0.9 learns little of CartPole's 500 steps;
  adapting it (towards the reference 0.99) holds at least 1.2x as much."""
  common = ("--config.num_runs=5", "--config.agent.discount=0.9",
            "--config.log.loggers=('jsonl',)")
  config = "agents/ppo/config.py:cartpole_anakin"
  fixed = learning.launch_runs(config, tmp_path / "fixed", *common)
  adapted = learning.launch_runs(config, tmp_path / "adapted", *common,
                                 "--config.meta_loss=meta_gradient")
  fixed_iqm = learning.iqm(learning.last_fifth_means(fixed))
  adapted_iqm = learning.iqm(learning.last_fifth_means(adapted))
  assert adapted_iqm >= 1.2 * fixed_iqm, (adapted_iqm, fixed_iqm)
  final = {r.get("run", 0): r["meta_discount"] for r in adapted if "meta_discount" in r}
  assert len(final) == 5 and min(final.values()) > 0.98, final
