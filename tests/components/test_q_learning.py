"""n-step Q-learning targets across episode boundaries, against rlax and by hand."""

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
