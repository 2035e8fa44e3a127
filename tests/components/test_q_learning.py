"""n-step Q-learning targets across episode boundaries, against rlax and by hand."""

import pytest
import jax
import jax.numpy as jnp
import numpy as np
import rlax

from podracer.components.losses.q_learning import n_step_double_q_td, n_step_returns


def test_without_cuts_the_returns_are_rlax_n_step_returns_truncated_at_the_end():
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  length, n = 7, 3
  reward = jax.random.normal(keys[0], (length,))
  discount = jax.random.uniform(keys[1], (length,))
  bootstrap = jax.random.normal(keys[2], (length + 1,))
  ours = n_step_returns(reward, discount, bootstrap, jnp.zeros(length, bool), n)
  # rlax bootstraps transition t from v_t = the value after it, i.e. our bootstrap[t+1].
  theirs = rlax.n_step_bootstrapped_returns(reward, discount, bootstrap[1:], n)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_a_return_stops_at_a_reset_and_bootstraps_from_the_last_step_unless_terminated():
  # Steps 0..5: s3 is LAST, 3 -> 4 a reset, s4 the next episode's FIRST. n = 3.
  reward = jnp.array([1.0, 2.0, 3.0, 0.0, 5.0])
  bootstrap = jnp.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
  cut = jnp.array([False, False, False, True, False])
  g = 0.9

  def returns(last_discount):
    discount = g * jnp.array([1.0, 1.0, last_discount, 1.0, 1.0])
    return np.asarray(n_step_returns(reward, discount, bootstrap, cut, 3))

  truncated = returns(1.0)  # a time limit: the episode's return goes on past s3
  np.testing.assert_allclose(truncated[:3], [1 + g * 2 + g * g * 3 + g ** 3 * 40,
                                             2 + g * 3 + g * g * 40,
                                             3 + g * 40], rtol=1e-6)
  np.testing.assert_allclose(truncated[4], 5 + g * 60, rtol=1e-6)  # the sequence's end
  terminated = returns(0.0)
  np.testing.assert_allclose(terminated[:3], [1 + g * 2 + g * g * 3, 2 + g * 3, 3],
                             rtol=1e-6)


def test_double_q_errors_take_the_online_argmax_valued_by_the_target_net_under_h():
  q = jnp.array([[1.0, 2.0], [3.0, 0.5], [0.0, 4.0], [2.0, 1.0]])[:, None]
  target_q = jnp.array([[9.0, 9.0], [5.0, 7.0], [6.0, 8.0], [10.0, 20.0]])[:, None]
  action = jnp.array([1, 0, 1, 0])[:, None]
  reward = jnp.array([1.0, 2.0, 3.0])[:, None]
  discount = jnp.array([0.9, 0.0, 0.9])[:, None]  # the episode terminates at step 2
  td = n_step_double_q_td(q, target_q, action, reward, discount, 2)[:, 0]
  # Online argmax at steps 1, 2, 3: actions 0, 1, 0 -> target values 5, 8, 10.
  expected_target = [1.0 + 0.9 * 2.0 + 0.9 * 0.0 * 8.0,   # t=0: two rewards, cut by d=0
                     2.0 + 0.0 * (3.0 + 0.9 * 10.0),      # t=1: terminal
                     3.0 + 0.9 * 10.0]                    # t=2: the sequence's end
  q_taken = np.array([2.0, 3.0, 4.0])
  np.testing.assert_allclose(td, np.array(expected_target) - q_taken, rtol=1e-6)

  tx = rlax.SIGNED_HYPERBOLIC_PAIR
  td = n_step_double_q_td(q, target_q, action, reward, discount, 1, tx)[:, 0]
  expected = tx.apply(reward[:, 0] + discount[:, 0] * tx.apply_inv(jnp.array([5.0, 8.0, 10.0])))
  np.testing.assert_allclose(td, expected - q_taken, rtol=1e-5)
  # rlax's own n-step double Q-learning agrees where no reset is inside the sequence.
  theirs = rlax.transformed_n_step_q_learning(q[:-1, 0], action[:-1, 0], target_q[1:, 0],
                                              jnp.argmax(q[1:, 0], -1), reward[:, 0],
                                              discount[:, 0], 2, tx_pair=tx)
  np.testing.assert_allclose(n_step_double_q_td(q, target_q, action, reward, discount, 2,
                                                tx)[:, 0], theirs, rtol=1e-5)


def _sequence(seed=0, steps=6, batch=3, actions=4, resets=()):
  """Q-values [S, B, A] of two networks, steps and actions [S, B], no resets unless
  `resets` names the LAST steps (each followed by a FIRST)."""
  from podracer.types import StepType, TimeStep  # pylint: disable=import-outside-toplevel
  keys = jax.random.split(jax.random.PRNGKey(seed), 5)
  q = jax.random.normal(keys[0], (steps, batch, actions))
  target_q = jax.random.normal(keys[1], (steps, batch, actions))
  step_type = np.full((steps, batch), int(StepType.MID), np.int32)
  discount = np.ones((steps, batch), np.float32)
  for last in resets:
    step_type[last], step_type[last + 1], discount[last] = StepType.LAST, StepType.FIRST, 0
  timestep = TimeStep(jnp.asarray(step_type), jax.random.normal(keys[2], (steps, batch)),
                      jnp.asarray(discount), jnp.zeros((steps, batch, 1)))
  action = jax.random.randint(keys[3], (steps, batch), 0, actions)
  return q, target_q, timestep, action


@pytest.mark.reverb_lane
def test_the_q_learning_loss_with_one_step_is_rlax_double_q_learning_and_q_learning():
  from podracer.components.losses import QLearningLoss  # pylint: disable=import-outside-toplevel
  q, target_q, ts, action = _sequence()
  weights, gamma = jnp.ones(q.shape[1]), 0.9
  for double, theirs in ((True, rlax.double_q_learning), (False, rlax.q_learning)):
    loss, out = QLearningLoss(n_step=1, double=double)(q, target_q, ts, action, weights, gamma)
    args = lambda t, b: ((q[t, b], action[t, b], ts.reward[t + 1, b],
                          gamma * ts.discount[t + 1, b], target_q[t + 1, b])
                         + ((q[t + 1, b],) if double else ()))
    expected = np.array([[theirs(*args(t, b)) for b in range(q.shape[1])]
                         for t in range(q.shape[0] - 1)])
    np.testing.assert_allclose(out["abs_td"], np.abs(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, np.mean(0.5 * expected ** 2), rtol=1e-5)


@pytest.mark.reverb_lane
def test_the_q_learning_loss_learns_t_transitions_with_n_step_targets_and_masks_resets():
  from podracer.components.losses import QLearningLoss  # pylint: disable=import-outside-toplevel
  n, steps = 3, 8                                   # S = T + n: T = 5 learned transitions
  q, target_q, ts, action = _sequence(steps=steps, resets=(2,))
  weights = jnp.array([1.0, 2.0, 0.5])
  loss_fn = QLearningLoss(n_step=n, double=True, huber_delta=0.5)
  loss, out = loss_fn(q, target_q, ts, action, weights, 0.9)
  assert out["abs_td"].shape == out["mask"].shape == (steps - n, 3)
  np.testing.assert_array_equal(out["mask"][:, 0], [1, 1, 0, 1, 1])  # 2 -> 3 is the reset
  # Transition 0's target: r1 + g r2, then the episode ends (terminated at step 2).
  expected_0 = ts.reward[1] + 0.9 * ts.reward[2]
  taken_0 = jnp.take_along_axis(q[0], action[0][:, None], -1)[:, 0]
  np.testing.assert_allclose(out["abs_td"][0], jnp.abs(expected_0 - taken_0), rtol=1e-5)
  # Transition 3 (after the reset): three rewards and the target net's value at step 6 of
  # the online net's argmax.
  boot = jnp.take_along_axis(target_q[6], jnp.argmax(q[6], -1)[:, None], -1)[:, 0]
  expected_3 = ts.reward[4] + 0.9 * ts.reward[5] + 0.81 * ts.reward[6] + 0.729 * boot
  taken_3 = jnp.take_along_axis(q[3], action[3][:, None], -1)[:, 0]
  np.testing.assert_allclose(out["abs_td"][3], jnp.abs(expected_3 - taken_3), rtol=1e-5)
  td = out["target"] - jnp.take_along_axis(q[:5], action[:5][..., None], -1)[..., 0]
  expected = jnp.sum(weights * rlax.huber_loss(td, 0.5) * out["mask"]) / jnp.sum(out["mask"])
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  # Only the online Q-values of the learned steps get a gradient.
  grads = jax.grad(lambda q: loss_fn(q, target_q, ts, action, weights, 0.9)[0])(q)
  assert float(jnp.abs(grads[:5]).sum()) > 0
  np.testing.assert_array_equal(grads[5:], 0.0)
