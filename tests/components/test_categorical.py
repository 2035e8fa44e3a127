"""The categorical return distribution's components: the projection (by hand and against
rlax), the n-step distributional targets and C51's loss against a numpy reference, the
support refused where it cannot hold returns, and C51 inside DQN (built, acting on the
distributions' means, an update learning)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from agents.dqn import config as dqn_config
from tests.learning import one_call_learning
from podracer import builder, registry
from podracer.components.losses import (CategoricalQLearningLoss, CategoricalTDLoss,
                                        categorical_projection, categorical_support)
from podracer.errors import ConfigError
from podracer.testing import fake_spec
from podracer.types import ArraySpec, EnvSpec, StepType, TimeStep


def test_projection_of_a_hand_computed_case():
  """Atoms 0.5 and 1.5 split evenly between their neighbours; 3.0 is clipped to 2."""
  support = jnp.array([0.0, 1.0, 2.0])
  out = categorical_projection(jnp.array([0.5, 1.5, 3.0]), jnp.array([0.2, 0.3, 0.5]),
                               support)
  np.testing.assert_allclose(out, [0.1, 0.25, 0.65], atol=1e-6)


def test_projection_is_rlaxs_over_every_leading_axis():
  support = jnp.linspace(-3.0, 4.0, 11)
  atoms = jax.random.uniform(jax.random.PRNGKey(0), (2, 3, 7), minval=-5.0, maxval=6.0)
  probs = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(1), (2, 3, 7)))
  out = categorical_projection(atoms, probs, support)
  assert out.shape == (2, 3, 11)
  for i in range(2):
    for j in range(3):
      np.testing.assert_allclose(
          out[i, j], rlax.categorical_l2_project(atoms[i, j], probs[i, j], support),
          atol=1e-6)
  np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("kwargs, key", [(dict(v_min=1.0, v_max=1.0), "v_min"),
                                         (dict(v_min=2.0, v_max=-1.0), "v_max"),
                                         (dict(num_atoms=1), "num_atoms")])
def test_a_support_that_cannot_hold_returns_is_refused_naming_the_key(kwargs, key):
  with pytest.raises(ValueError, match=f"`{key}`"):
    CategoricalTDLoss(**kwargs)


def test_the_registry_refuses_it_as_a_config_error_naming_the_section():
  config = dqn_config.c51_cartpole_anakin()
  config.loss.v_min = 100.0
  with pytest.raises(ConfigError, match=r"`loss`.*`v_min` \(100.0\) must be below"):
    builder.build(config)


def _project_np(atoms, probs, support):
  """C51's projection, written out: each atom's mass split between its neighbours."""
  out = np.zeros(len(support))
  dz = support[1] - support[0]
  for z, p in zip(np.clip(atoms, support[0], support[-1]), probs):
    b = (z - support[0]) / dz
    lo, hi = int(np.floor(b)), int(np.ceil(b))
    if lo == hi:
      out[lo] += p
    else:
      out[lo] += p * (hi - b)
      out[hi] += p * (b - lo)
  return out


def categorical_td_loss_np(logits, next_logits, step_type, reward, discount, weights,
                           gamma, n, support):
  """The n-step categorical TD loss over [S, B] sequences, one transition at a time:
  `logits` [S, B, K] the online distribution of the taken actions, `next_logits` the
  bootstrap's at every step. Returns the loss and each transition's cross-entropy."""
  softmax = lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(
      x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)
  steps, batch = step_type.shape
  total, count, per = 0.0, 0.0, np.zeros((steps - n, batch))
  for t in range(steps - n):
    for b in range(batch):
      if step_type[t, b] == StepType.LAST:
        continue
      ret, scale, k = 0.0, 1.0, 0
      while True:
        ret += scale * reward[t + k + 1, b]
        scale *= gamma * discount[t + k + 1, b]
        k += 1
        if k == n or step_type[t + k, b] == StepType.LAST:
          break
      target = _project_np(ret + scale * support, softmax(next_logits[t + k, b]), support)
      log_p = np.log(softmax(logits[t, b]))
      per[t, b] = -(target * log_p).sum()
      total += weights[b] * per[t, b]
      count += 1
  return total / max(count, 1), per


def _c51_loss_np(logits, target_logits, step_type, reward, discount, action, weights,
                 gamma, n, support, double):
  """C51's n-step loss: the categorical TD loss of the taken actions' distributions, the
  bootstrap the target's at the online (double) or target network's greedy action."""
  softmax = lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)
  q = (softmax(logits if double else target_logits) * support).sum(-1)
  greedy = q.argmax(-1)
  pick = lambda x, a: np.take_along_axis(x, a[..., None, None], -2)[..., 0, :]
  return categorical_td_loss_np(pick(logits, action), pick(target_logits, greedy),
                                step_type, reward, discount, weights, gamma, n, support)


def tiny_sequences(steps, batch, seed=0):
  """[S, B] steps with a termination (discount 0) in environment 0 and a time limit
  (LAST, discount 1) in environment 1; rewards in [-1, 2]."""
  rng = np.random.default_rng(seed)
  step_type = np.full((steps, batch), StepType.MID, np.int32)
  discount = np.ones((steps, batch), np.float32)
  step_type[2, 0], discount[2, 0] = StepType.LAST, 0.0    # terminated
  step_type[3, 0] = StepType.FIRST
  step_type[1, 1] = StepType.LAST                          # truncated: discount stays 1
  step_type[2, 1] = StepType.FIRST
  reward = rng.uniform(-1, 2, size=(steps, batch)).astype(np.float32)
  return step_type, discount, reward


@pytest.mark.parametrize("double", [True, False])
def test_c51_loss_on_a_tiny_batch_is_numpys(double):
  """[S=6, B=3] with a termination (discount 0) and a time limit (discount 1) inside,
  3-step targets, 5 atoms, 2 actions."""
  n, steps, batch, actions = 3, 6, 3, 2
  loss_fn = CategoricalQLearningLoss(n_step=n, double=double, v_min=-2.0, v_max=6.0,
                                     num_atoms=5)
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(steps, batch, actions, 5)).astype(np.float32)
  target_logits = rng.normal(size=(steps, batch, actions, 5)).astype(np.float32)
  step_type, discount, reward = tiny_sequences(steps, batch)
  action = rng.integers(0, actions, size=(steps, batch)).astype(np.int32)
  weights = rng.uniform(0.5, 1.0, size=batch).astype(np.float32)
  timestep = TimeStep(jnp.asarray(step_type), jnp.asarray(reward), jnp.asarray(discount),
                      jnp.zeros((steps, batch, 1)))
  loss, out = loss_fn(jnp.asarray(logits), jnp.asarray(target_logits), timestep,
                      jnp.asarray(action), jnp.asarray(weights), 0.9)
  expected, per = _c51_loss_np(logits, target_logits, step_type, reward, discount, action,
                               weights, 0.9, n, np.linspace(-2, 6, 5), double)
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(out["abs_td"]) * np.asarray(out["mask"]), per,
                             rtol=1e-5, atol=1e-6)
  assert out["q"].shape == (steps - n, batch, actions)


def test_categorical_networks_give_logits_per_action_and_per_state_action():
  builder.register_builtin_components()
  spec = fake_spec((4,), num_actions=3)
  network = registry.networks.get("categorical_q_network")(spec, hidden_sizes=(8,),
                                                           num_atoms=7)
  obs = jnp.ones((5, 4))
  assert network.apply(network.init(jax.random.PRNGKey(0), obs), obs).shape == (5, 3, 7)
  continuous = EnvSpec(ArraySpec((3,), np.dtype(np.float32)),
                       ArraySpec((2,), np.dtype(np.float32), minimum=-1.0, maximum=1.0))
  critic = registry.networks.get("categorical_critic")(continuous, hidden_sizes=(8,),
                                                       num_atoms=11)
  obs, action = jnp.ones((5, 3)), jnp.zeros((5, 2))
  params = critic.init(jax.random.PRNGKey(0), obs, action)
  assert critic.apply(params, obs, action).shape == (5, 11)


def test_c51_acts_on_the_distributions_means():
  """DQN with the C51 loss: its network's logits [B, A, K]; greedy on their means."""
  config = dqn_config.c51_cartpole_anakin()
  agent = builder.build(config).agent
  nets = agent.init_nets(jax.random.PRNGKey(0))
  n = 64
  obs = jax.random.normal(jax.random.PRNGKey(1), (n, 4))
  logits = agent.network.apply(nets, obs)
  assert logits.shape == (n, 2, 51)
  means = jnp.sum(jax.nn.softmax(logits) * jnp.linspace(0.0, 100.0, 51), -1)
  timestep = TimeStep(jnp.full(n, StepType.MID), jnp.zeros(n), jnp.ones(n), obs)
  out, _ = agent.eval_act(nets, agent.init_eval_actor(None, n), timestep,
                          jax.random.PRNGKey(3))
  np.testing.assert_array_equal(out.action, jnp.argmax(means, -1))


def test_c51_updates_learn_under_anakin():
  """One compiled call of 20 updates once the replay can sample: finite losses, values
  within the support, and the cross-entropy of the first learned batch above the last's
  (the distributions move toward their targets)."""
  config = dqn_config.c51_cartpole_anakin()
  config.runtime.updates_per_call = 60
  config.replay.min_size = 64
  learned = one_call_learning(config)
  loss = learned["loss"]
  assert loss.size > 20 and np.all(np.isfinite(loss))
  assert loss[:5].mean() > loss[-5:].mean()
  q = learned["q_mean"]
  assert np.all((q >= 0.0) & (q <= 100.0))


@pytest.mark.extended
@pytest.mark.learning
def test_c51_on_cartpole_holds_at_least_095x_dqns_iqm_at_the_same_settings(tmp_path):
  """Seeds 0-4 in one program each, the configs' whole 500K env steps, as a user's
  command runs them: the issue's bar, C51's IQM of the last-20 % means at least 0.95x
  DQN's (`c51_cartpole_anakin` is `cartpole_anakin` but for the loss and the output
  layer). 2026-12-07: C51 461.6, DQN 492.3, 0.94x: failing (docs/results/d4pg.md)."""
  from tests.learning import iqm, last_fifth_means, launch_runs
  figures = {}
  for name in ("c51_cartpole_anakin", "cartpole_anakin"):
    records = launch_runs(f"agents/dqn/config.py:{name}", tmp_path / name,
                          "--config.num_runs=5", timeout=2400)
    figures[name] = iqm(last_fifth_means(records))
  assert figures["c51_cartpole_anakin"] >= 0.95 * figures["cartpole_anakin"], figures
