"""The learned policy objective: PPO at theta = 0, a drift whatever theta is (never
negative, zero and flat at rho = 1), loaded from an .npz as a registered loss."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from ml_collections import config_dict

from agents.ppo import config as ppo_config
from podracer import builder, registry
from podracer.components.losses import (LearnedPolicyLoss, PolicyGradientBatch, PPOLoss,
                                        first_order_drift, learned_drift, zero_drift)
from podracer.components.losses.learned_policy import objective_form
from podracer.errors import ConfigError
from podracer.launch import register_components_and_agents
from podracer.learning import STEP, Objective, init_opt_state, total_loss
from tests.test_sebulba import one_device


def _random_theta(key, hidden=8, scale=1.0):
  keys = jax.random.split(key, 6)
  shapes = dict(w0=(6, hidden), b0=(hidden,), w1=(hidden, 1), b1=(1,), log_clip=(1,),
                log_value_clip=(1,))
  return {k: scale * jax.random.normal(kk, s) for kk, (k, s) in zip(keys, shapes.items())}


def _batch(key, n=64):
  k1, k2, k3, k4 = jax.random.split(key, 4)
  return PolicyGradientBatch(
      observation=None, action=jax.random.randint(k1, (n,), 0, 3),
      behaviour_log_prob=jnp.log(jax.random.uniform(k2, (n,), minval=0.2, maxval=0.6)),
      behaviour_value=jax.random.normal(k3, (n,)), advantage=jax.random.normal(k4, (n,)),
      value_target=jnp.ones(n), mask=jnp.ones(n))


@pytest.mark.parametrize("form", ["first_order", "squared"])
def test_theta_zero_is_ppo_exactly(form):
  batch = _batch(jax.random.PRNGKey(0))
  logits = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
  value = jnp.zeros(64)
  want = PPOLoss()(logits, value, batch)
  got = LearnedPolicyLoss(drift_form=form)(logits, value, batch)
  chex.assert_trees_all_equal(got, want)


def _policy_term(theta, ratio, advantage, form="first_order"):
  return LearnedPolicyLoss(drift_form=form).with_drift(theta).surrogate(ratio, advantage)


def test_the_first_order_drift_is_a_drift_for_any_theta_and_moves_at_first_order():
  """rho A minus the policy term, relu(f_PPO + d_theta), is never negative, zero and flat
  at rho = 1 for any theta; from a theta with a zero output layer (the search's start
  in it), its gradient in that layer is not zero, where the squared drift's is."""
  ratio = jnp.linspace(0.2, 3.0, 57)[:, None]
  advantage = jnp.linspace(-3.0, 3.0, 57)[None, :]
  ones = jnp.ones((57,))
  for seed in range(5):
    theta = _random_theta(jax.random.PRNGKey(seed))
    drift = ratio * advantage - _policy_term(theta, ratio, advantage)
    assert float(jnp.min(drift)) >= 0.0 and float(jnp.max(drift)) > 0.0
    np.testing.assert_allclose(ones * advantage[0] - _policy_term(theta, ones, advantage[0]),
                               0.0, atol=1e-6)
    slope = jax.vmap(jax.grad(lambda r, a: r * a - _policy_term(theta, r, a)))(
        ones, advantage[0])
    np.testing.assert_allclose(slope, 0.0, atol=1e-5)
  start = dict(_random_theta(jax.random.PRNGKey(7)), w1=jnp.zeros((8, 1)),
               log_clip=jnp.zeros((1,)))
  for form, moves in (("first_order", True), ("squared", False)):
    grad = jax.grad(lambda w1: jnp.mean(_policy_term(
        dict(start, w1=w1), ratio, advantage, form)))(start["w1"])
    assert (float(jnp.abs(grad).max()) > 1e-3) == moves, (form, grad)
  # Its policy gradient at rho = 1 is PPO's for any theta.
  batch = _batch(jax.random.PRNGKey(2))
  batch = batch._replace(behaviour_log_prob=jnp.full(64, jnp.log(1 / 3)))
  logits, value = jnp.zeros((64, 3)), jnp.zeros(64)
  loss = LearnedPolicyLoss().with_drift(_random_theta(jax.random.PRNGKey(3)))
  grad = jax.grad(lambda l: loss(l, value, batch)[0])(logits)
  want = jax.grad(lambda l: PPOLoss(clip_epsilon=0.2)(l, value, batch)[0])(logits)
  np.testing.assert_allclose(grad, want, atol=1e-6)


def test_a_file_reads_with_its_own_drift_form(tmp_path):
  """learned_objective.json's form decides: the first-order one (0.19.0's), the squared
  one, or no .json (0.11.0-0.13.0: squared), whatever `loss.drift_form` says."""
  path = tmp_path / "learned_objective.npz"
  np.savez(path, **{k: np.asarray(v) for k, v in _random_theta(jax.random.PRNGKey(1)).items()})
  section = lambda: _section(path=str(path), hidden=8, drift_form="first_order")
  assert registry.build(registry.losses, section(), key="loss").drift_form == "squared"
  about = tmp_path / "learned_objective.json"
  for form, read in (("ppo_clip_scale_and_first_order_drift", "first_order"),
                     ("ppo_clip_scale_and_drift", "squared")):
    about.write_text(json.dumps(dict(form=form)))
    assert registry.build(registry.losses, section(), key="loss").drift_form == read
  with pytest.raises(ConfigError, match="loss.drift_form"):
    LearnedPolicyLoss(drift_form="cubic")


def test_the_learned_drift_is_a_drift_for_any_theta():
  """Never negative, zero at rho = 1 and flat there: at the policy that acted the
  objective's gradient is the policy gradient, whatever theta is."""
  ratio = jnp.linspace(0.2, 3.0, 57)
  advantage = jnp.linspace(-3.0, 3.0, 57)
  for seed in range(5):
    theta = _random_theta(jax.random.PRNGKey(seed))
    drift = learned_drift(theta, ratio[:, None], advantage[None, :])
    assert float(jnp.min(drift)) >= 0.0
    assert float(jnp.max(drift)) > 0.0  # a theta that moves the objective
    at_one = learned_drift(theta, jnp.ones_like(advantage), advantage)
    np.testing.assert_array_equal(at_one, 0.0)
    slope = jax.vmap(jax.grad(lambda r, a: learned_drift(theta, r, a)))(
        jnp.ones_like(advantage), advantage)
    np.testing.assert_allclose(slope, 0.0, atol=1e-6)
  # Its policy gradient at rho = 1 is PPO's for any theta.
  batch = _batch(jax.random.PRNGKey(2))
  batch = batch._replace(behaviour_log_prob=jnp.full(64, jnp.log(1 / 3)))
  logits, value = jnp.zeros((64, 3)), jnp.zeros(64)
  loss = LearnedPolicyLoss().with_drift(_random_theta(jax.random.PRNGKey(3)))
  grad = jax.grad(lambda l: loss(l, value, batch)[0])(logits)
  want = jax.grad(lambda l: PPOLoss()(l, value, batch)[0])(logits)
  np.testing.assert_allclose(grad, want, atol=1e-6)


def _section(**kwargs):
  register_components_and_agents()
  return config_dict.ConfigDict(dict(name="learned_policy", **kwargs))


def test_a_saved_objective_is_loaded_from_its_path_as_a_registered_loss(tmp_path):
  theta = _random_theta(jax.random.PRNGKey(4), hidden=5, scale=0.3)
  path = tmp_path / "learned_objective.npz"
  np.savez(path, **{k: np.asarray(v) for k, v in theta.items()})
  loss = registry.build(registry.losses, _section(path=str(path)), key="loss")
  assert isinstance(loss, LearnedPolicyLoss)
  chex.assert_trees_all_close(loss.drift, theta)
  batch = _batch(jax.random.PRNGKey(5))
  logits = jax.random.normal(jax.random.PRNGKey(6), (64, 3))
  got, _ = loss(logits, jnp.zeros(64), batch)
  ppo, _ = PPOLoss()(logits, jnp.zeros(64), batch)
  assert float(got) > float(ppo)  # the drift is a penalty, here a positive one


def test_log_clip_scales_ppos_clip_range_and_a_file_without_it_is_ppos(tmp_path):
  """c = log(1.5) is PPO with clip_epsilon 0.3; an .npz from before 0.14.0 (no log_clip)
  loads with c = 0."""
  batch = _batch(jax.random.PRNGKey(8))
  logits = jax.random.normal(jax.random.PRNGKey(9), (64, 3))
  theta = dict(zero_drift(4), log_clip=jnp.log(jnp.array([1.5])))
  policy_loss = lambda loss: float(loss(logits, jnp.zeros(64), batch)[1]["policy_loss"])
  wider = policy_loss(LearnedPolicyLoss().with_drift(theta))
  np.testing.assert_allclose(wider, policy_loss(PPOLoss(clip_epsilon=0.3)), rtol=1e-6)
  assert abs(wider - policy_loss(PPOLoss(clip_epsilon=0.2))) > 1e-4  # It changed.
  old = tmp_path / "old.npz"
  np.savez(old, **{k: np.asarray(v) for k, v in zero_drift(4).items() if k != "log_clip"})
  loaded = registry.build(registry.losses, _section(path=str(old)), key="loss")
  np.testing.assert_array_equal(loaded.drift["log_clip"], [0.0])


def test_log_value_clip_scales_the_value_losss_clip_only_and_old_files_have_ppos(tmp_path):
  """c_v = log(1.5) is PPO's value loss at clip 0.3 with its policy term at 0.2; a huge c_v
  is PPO without value clipping; a file from before 0.20.0 (no c_v) loads with c_v = 0."""
  batch = _batch(jax.random.PRNGKey(10))
  logits = jax.random.normal(jax.random.PRNGKey(11), (64, 3))
  value = batch.behaviour_value + jax.random.normal(jax.random.PRNGKey(12), (64,))
  metrics = lambda loss: loss(logits, value, batch)[1]
  scaled = lambda c_v: metrics(LearnedPolicyLoss().with_drift(
      dict(zero_drift(4), log_value_clip=jnp.array([c_v]))))
  wider = scaled(float(np.log(1.5)))
  np.testing.assert_allclose(wider["value_loss"], metrics(PPOLoss(clip_epsilon=0.3))[
      "value_loss"], rtol=1e-6)
  np.testing.assert_allclose(wider["policy_loss"], metrics(PPOLoss())["policy_loss"],
                             rtol=1e-6)
  assert abs(float(wider["value_loss"] - metrics(PPOLoss())["value_loss"])) > 1e-3
  np.testing.assert_allclose(scaled(20.0)["value_loss"], metrics(PPOLoss(
      clip_value=False))["value_loss"], rtol=1e-6)
  old = tmp_path / "old.npz"
  np.savez(old, **{k: np.asarray(v) for k, v in zero_drift(4, value_clip=False).items()})
  loaded = registry.build(registry.losses, _section(path=str(old)), key="loss")
  np.testing.assert_array_equal(loaded.drift["log_value_clip"], [0.0])
  chex.assert_trees_all_close(metrics(loaded), metrics(PPOLoss()))


def test_a_truncated_file_or_another_form_is_refused_naming_the_file(tmp_path):
  path = tmp_path / "learned_objective.npz"
  np.savez(path, **{k: np.asarray(v) for k, v in zero_drift(4).items()})
  whole = path.read_bytes()
  path.write_bytes(whole[:len(whole) // 2])
  with pytest.raises(ConfigError, match=r"`loss\.path`.*not a learned objective"):
    registry.build(registry.losses, _section(path=str(path)), key="loss")
  path.write_bytes(whole)
  about = tmp_path / "learned_objective.json"
  about.write_text(json.dumps(dict(hidden=4)))  # 0.11.0-0.13.0 wrote no form: loads.
  registry.build(registry.losses, _section(path=str(path)), key="loss")
  about.write_text(json.dumps(dict(form="lpg_full", version="0.99.0")))
  with pytest.raises(ConfigError, match=r"form 'lpg_full' \(written by podracer 0\.99\.0\)"):
    registry.build(registry.losses, _section(path=str(path)), key="loss")


def test_a_bad_path_or_bad_arrays_are_config_errors_naming_loss_path(tmp_path):
  with pytest.raises(ConfigError, match=r"`loss\.path`.*not a file"):
    registry.build(registry.losses, _section(path=str(tmp_path / "none.npz")), key="loss")
  bad = tmp_path / "bad.npz"
  np.savez(bad, **{k: np.asarray(v) for k, v in zero_drift(4).items() if k != "b1"})
  with pytest.raises(ConfigError, match=r"`loss\.path`.*w0, b0, w1, b1"):
    registry.build(registry.losses, _section(path=str(bad)), key="loss")
  theta = dict(zero_drift(4), w1=jnp.zeros((3, 1)))
  np.savez(bad, **{k: np.asarray(v) for k, v in theta.items()})
  with pytest.raises(ConfigError, match=r"shapes"):
    registry.build(registry.losses, _section(path=str(bad)), key="loss")


@pytest.mark.parametrize("name", ["cartpole_anakin", "cartpole_sebulba", "cartpole_seed"])
def test_ppo_takes_it_under_every_runtime_with_no_special_case(name, tmp_path):
  theta = _random_theta(jax.random.PRNGKey(7), hidden=4, scale=0.1)
  path = tmp_path / "learned_objective.npz"
  np.savez(path, **{k: np.asarray(v) for k, v in theta.items()})
  register_components_and_agents()
  config = getattr(ppo_config, name)()
  if name != "cartpole_anakin":
    one_device(config)  # Not the suite's 8 virtual devices' split.
  config.loss = _section(path=str(path), entropy_coef=config.loss.entropy_coef)
  experiment = builder.build(config)
  assert isinstance(experiment.agent.loss, LearnedPolicyLoss)
  chex.assert_trees_all_close(experiment.agent.loss.drift, theta)


def _lifetime_theta(key, hidden=8, scale=1.0):
  theta = _random_theta(key, hidden, scale)
  return dict(theta, w0=scale * jax.random.normal(jax.random.fold_in(key, 7), (7, hidden)))


def _policy_loss_at(loss, batch, logits, steps):
  """The loss's policy term as gradient_step's losses see it, `steps` gradient steps in
  (podracer.learning's step(), bound from the optimizer state by total_loss)."""
  objective = Objective("ppo", lambda nets, b, key: loss(nets, jnp.zeros(64), b),
                        optax.sgd(0.0))
  opt = dict(init_opt_state([objective], logits), **{STEP: jnp.int32(steps)})
  return float(total_loss([objective], logits, opt, batch, term="policy_loss"))


def test_a_lifetime_conditioned_drift_reads_the_training_progress_and_stays_a_drift():
  """TA-LPO's lifetime conditioning: the drift's seventh feature is t = step() /
  total_steps, so the same theta's policy loss differs early and late in the training
  (and not past the end: t is clipped to 1); at every t it is a drift (never negative,
  zero and flat at rho = 1), and theta 0 is PPO at every step."""
  batch = _batch(jax.random.PRNGKey(0))
  logits = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
  zero = LearnedPolicyLoss(lifetime=True, total_steps=100)
  assert zero.lifetime and zero.drift["w0"].shape == (7, 16)
  ppo = _policy_loss_at(PPOLoss(), batch, logits, 0)
  for steps in (0, 50, 100):
    assert _policy_loss_at(zero, batch, logits, steps) == pytest.approx(ppo, abs=1e-7)
  theta = _lifetime_theta(jax.random.PRNGKey(3))
  loss = zero.with_drift(theta)
  early, late, past = (_policy_loss_at(loss, batch, logits, s) for s in (0, 100, 300))
  assert abs(early - late) > 1e-3 and late == pytest.approx(past, abs=1e-7)
  ratio = jnp.linspace(0.2, 3.0, 57)[:, None]
  advantage = jnp.linspace(-3.0, 3.0, 57)[None, :]
  ones = jnp.ones((57,))
  for t in (0.0, 0.5, 1.0):
    d = first_order_drift(theta, ratio, advantage, jnp.float32(t))
    assert float(jnp.max(jnp.abs(d))) > 1e-3
    np.testing.assert_allclose(first_order_drift(theta, ones, advantage[0], jnp.float32(t)),
                               0.0, atol=1e-6)
    slope = jax.vmap(jax.grad(lambda r, a: first_order_drift(theta, r, a, jnp.float32(t))))(
        ones, advantage[0])
    np.testing.assert_allclose(slope, 0.0, atol=1e-5)
  with pytest.raises(ConfigError,
                     match=r"`loss` \(learned_policy\) is lifetime-conditioned.*total_steps is 0"):
    LearnedPolicyLoss(lifetime=True)


def test_a_lifetime_conditioned_file_loads_by_its_form_and_a_mismatch_is_refused(tmp_path):
  """A file whose form ends `_lifetime_conditioned` has w0 [7, H] and builds with the
  run's gradient steps as total_steps (the builder's); its form without the suffix, or
  a 6-row w0 under it, is refused naming `loss.path` and the shapes."""
  path = tmp_path / "learned_objective.npz"
  about = tmp_path / "learned_objective.json"
  np.savez(path, **{k: np.asarray(v) for k, v in _lifetime_theta(jax.random.PRNGKey(1)).items()})
  form = objective_form("first_order", True, lifetime=True)
  assert form == "ppo_value_and_policy_clip_scales_and_first_order_drift_lifetime_conditioned"
  about.write_text(json.dumps(dict(form=form)))
  config = ppo_config.cartpole_anakin()
  config.loss = _section(path=str(path), hidden=8)
  experiment = builder.build(config)
  loss, plan = experiment.agent.loss, experiment.plan
  assert loss.lifetime and loss.drift_form == "first_order"
  assert loss.total_steps == plan.num_updates * 4 * 4  # PPO's epochs x minibatches
  about.write_text(json.dumps(dict(form=objective_form("first_order", True))))
  with pytest.raises(ConfigError, match=r"`loss\.path.*shapes"):
    registry.build(registry.losses, _section(path=str(path)), key="loss", total_steps=10)
  np.savez(path, **{k: np.asarray(v) for k, v in _random_theta(jax.random.PRNGKey(1)).items()})
  about.write_text(json.dumps(dict(form=form)))
  with pytest.raises(ConfigError, match=r"`loss\.path.*shapes.*conditioned on the lifetime"):
    registry.build(registry.losses, _section(path=str(path)), key="loss", total_steps=10)
