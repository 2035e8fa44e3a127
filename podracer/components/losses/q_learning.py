"""n-step Q-learning targets on time-major sequences that may cross episode boundaries.

Transition t takes step t to step t+1 (dm_env's convention, as in `vtrace`): `reward[t]`
and `discount[t]` are r_{t+1} and gamma * d_{t+1}. A sequence cut from a stream of
episodes holds resets: the transition out of a LAST step, which is no transition at all.
An n-step return must stop at the LAST step before it and bootstrap from that step's
value with the discounts gathered so far: they are 0 after a termination (d = 0) and not
after a truncation (a time limit, d = 1), whose return goes on beyond the cut. Zeroing
the reset's discount instead, as rlax's n-step functions need, drops the bootstrap of
the n - 1 transitions before every time limit: their targets become the few rewards
left, the same states elsewhere are worth the whole horizon, and a CartPole agent that
reaches the time limit regularly is pulled back down from it.
"""

from __future__ import annotations

from typing import Annotated, Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.registry.ranges import NonNegative
from podracer.types import ILLEGAL, StepType, TimeStep, action_mask
from podracer.errors import load_on_first_use

# Loaded where a loss first reads it: its import brings distrax and TensorFlow Probability.
rlax = load_on_first_use("rlax")


class TxPair(NamedTuple):
  """A value transform and its inverse: rlax's `TxPair`, defined here so that naming the
  identity does not import rlax (podracer/__init__.py loads rlax on first use)."""
  apply: Callable[[jax.Array], jax.Array]
  apply_inv: Callable[[jax.Array], jax.Array]


def identity(x: jax.Array) -> jax.Array:
  return x


IDENTITY_PAIR = TxPair(identity, identity)


def _padded(x: jax.Array, n: int, value) -> jax.Array:
  return jnp.concatenate([x, jnp.full((n,) + x.shape[1:], value, x.dtype)])


def n_step_returns(reward: jax.Array, discount: jax.Array, bootstrap: jax.Array,
                   cut: jax.Array, n: int) -> jax.Array:
  """Returns [T, ...] of the T transitions of a sequence:

      G_t = sum_{k<m} (prod_{j<k} discount[t+j]) reward[t+k]
            + (prod_{j<m} discount[t+j]) bootstrap[t+m]

  where m = min(n, T - t, the first k >= 1 with cut[t+k]): at most n steps, never past
  the sequence's end or a reset. `reward`, `discount`, `cut` are [T, ...] per transition,
  `bootstrap` is [T + 1, ...], a value for every step.
  """
  length = reward.shape[0]
  reward, discount = _padded(reward, n, 0), _padded(discount, n, 0)
  cut, bootstrap = _padded(cut.astype(bool), n, True), _padded(bootstrap, n - 1, 0)
  window = lambda x, k: x[k:k + length]
  total = jnp.zeros_like(reward[:length])
  scale = jnp.ones_like(total)
  going = jnp.ones(total.shape, bool)
  for k in range(n):
    if k:
      stop = going & window(cut, k)
      total = total + jnp.where(stop, scale * window(bootstrap, k), 0.0)
      going = going & ~stop
    total = total + jnp.where(going, scale * window(reward, k), 0.0)
    scale = jnp.where(going, scale * window(discount, k), scale)
  return total + jnp.where(going, scale * window(bootstrap, n), 0.0)


def n_step_double_q_targets(q: jax.Array, target_q: jax.Array, reward: jax.Array,
                            discount: jax.Array, n: int,
                            tx_pair: TxPair = IDENTITY_PAIR,
                            cut: Optional[jax.Array] = None) -> jax.Array:
  """Targets [S-1, B] of n-step double Q-learning on [S, B] sequences (no gradient):

      h(G_t),  G_t = n_step_returns(reward, discount, b, cut, n),
      b[s] = h^-1(target_q[s, argmax_a q[s, a]])

  The online network picks the bootstrap action, the target network values it; h is
  `tx_pair` (R2D2's value rescaling). `reward`, `discount`, `cut` are [S-1, B] per
  transition; without `cut` only the sequence's end stops a return.
  """
  greedy = jnp.argmax(q, axis=-1)
  bootstrap = tx_pair.apply_inv(jnp.take_along_axis(target_q, greedy[..., None], -1)[..., 0])
  if cut is None:
    cut = jnp.zeros(reward.shape, bool)
  returns = n_step_returns(reward, discount, bootstrap, cut, n)
  return jax.lax.stop_gradient(tx_pair.apply(returns))


def n_step_double_q_td(q: jax.Array, target_q: jax.Array, action: jax.Array,
                       reward: jax.Array, discount: jax.Array, n: int,
                       tx_pair: TxPair = IDENTITY_PAIR,
                       cut: Optional[jax.Array] = None) -> jax.Array:
  """TD errors [S-1, B]: `n_step_double_q_targets` - q[t, action[t]]."""
  target = n_step_double_q_targets(q, target_q, reward, discount, n, tx_pair, cut)
  return target - taken(q[:-1], action[:-1])


def transitions(timestep: TimeStep, discount: float
                ) -> Tuple[jax.Array, jax.Array, jax.Array]:
  """The T transitions of [T + 1, ...] steps: (reward, gamma, reset), each [T, ...].

  reward[t] = r_{t+1}, gamma[t] = discount * d_{t+1} (0 after a termination, `discount`
  after a time limit), reset[t] whether step t is LAST: transition t is then the reset
  into the next episode, no transition at all (its action was ignored). Every target
  here is masked there and stops before it.
  """
  reset = timestep.step_type[:-1] == StepType.LAST
  return timestep.reward[1:], discount * timestep.discount[1:], reset


def q_lambda_targets(q: jax.Array, reward: jax.Array, gamma: jax.Array, reset: jax.Array,
                     lam) -> jax.Array:
  """Peng's Q(lambda) targets [T, B] of the T transitions of [T + 1, B] steps (no
  gradient), as PQN computes them (Gallici et al. 2025):

      G_t = r_t + gamma_t [(1 - lambda_t) max_a q[t+1, a] + lambda_t G_{t+1}]

  with G_T's place taken by max_a q[T, a] (the bootstrap at the rollout's end) and
  lambda_t = 0 where transition t+1 is a reset (step t+1 is LAST): the return stops at
  the episode's end and bootstraps from its last step with the discount gathered,
  nothing after a termination (gamma 0), the last step's value after a time limit.
  lambda = 0 is one-step Q-learning; lambda = 1 the discounted return to the rollout's
  end or the episode's, bootstrapped there. `q` [T + 1, B, A]; the rest [T, B] from
  `transitions`.
  """
  value = jnp.max(jax.lax.stop_gradient(q[1:]), axis=-1)
  continues = jnp.concatenate([~reset[1:], jnp.zeros_like(reset[:1])], 0)
  lambdas = lam * continues.astype(value.dtype)
  per_env = jax.vmap(rlax.lambda_returns, in_axes=1, out_axes=1)
  return jax.lax.stop_gradient(per_env(reward, gamma, value, lambdas))


def taken(q: jax.Array, action: jax.Array) -> jax.Array:
  """q[..., action]: the values of the actions taken."""
  return jnp.take_along_axis(q, action[..., None], -1)[..., 0]


def value_rescaling(eps: float = 1e-3) -> rlax.TxPair:
  """R2D2's invertible value rescaling h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x."""
  return rlax.TxPair(lambda x: rlax.signed_hyperbolic(x, eps),
                     lambda x: rlax.signed_parabolic(x, eps))


@registry.losses.register("q_learning")
class QLearningLoss:
  """n-step (double) Q-learning on time-major sequences [S, B] of S = T + n steps:

      L = sum_{t<T, b} w_b l(h(G_t) - q[t, b, a_t]) m_t / sum m_t

  with G_t the n-step return (`n_step_returns`: at most `n_step` steps, stopping at a
  reset and bootstrapping from the step before it unless the episode terminated), its
  bootstrap valued by the target network at the online network's argmax (`double`) or at
  its own (`double=False`, DQN's max), h the value rescaling (`value_rescaling`, R2D2's;
  off by default), l a half square or, with `huber_delta` > 0, the Huber loss, w the
  replay's importance weights and m 0 on a reset's transition. Learned are the first T
  transitions; the last n steps only complete their targets. So a replay item that
  repeats n steps of the one before it (`Agent.trajectory_overlap`) is T n-step
  transitions: this is the n-step view of a trajectory that Acme's
  NStepTransitionAdder writes, made at learning time from sequences the replays share.

  Called as `loss(q, target_q, timestep, action, weights, discount)`: Q-values [S, B, A]
  of the online and target networks, the steps and actions [S, B], weights [B] and the
  agent's discount; returns (loss, dict(abs_td, mask, q, target)), each [T, B] ([T, B,
  A] for q) for priorities and diagnostics (podracer/kits/q_learning.py).
  """

  def __init__(self, n_step: int = 3, double: bool = True,
               huber_delta: Annotated[float, NonNegative] = 0.0,
               value_rescaling_eps: Annotated[Optional[float], NonNegative] = None):
    if isinstance(n_step, bool) or not isinstance(n_step, int) or n_step < 1:
      raise ValueError(f"`n_step` must be an integer >= 1, got {n_step!r}.")
    self.n_step = n_step
    self.double = double
    self.huber_delta = huber_delta
    self.tx_pair = (IDENTITY_PAIR if value_rescaling_eps is None
                    else value_rescaling(value_rescaling_eps))

  def output_shape(self, num_actions: int) -> Tuple[int, ...]:
    """What the network gives per observation: Q-values [A]."""
    return (num_actions,)

  def q_values(self, q: jax.Array) -> jax.Array:
    """The network's output is its Q-values."""
    return q

  def legal(self, q: jax.Array, observation) -> jax.Array:
    """Q-values with each illegal action's at `ILLEGAL` (`podracer.agent.legal`)."""
    mask = action_mask(observation)
    return q if mask is None else jnp.where(mask, q, jnp.asarray(ILLEGAL, q.dtype))

  def __call__(self, q: jax.Array, target_q: jax.Array, timestep: TimeStep,
               action: jax.Array, weights: jax.Array, discount: float
               ) -> Tuple[jax.Array, Dict[str, jax.Array]]:
    target_q = jax.lax.stop_gradient(target_q)
    reward, gamma, cut = transitions(timestep, discount)
    not_reset = (~cut).astype(jnp.float32)
    selector = q if self.double else target_q
    target = n_step_double_q_targets(selector, target_q, reward, gamma, self.n_step,
                                     self.tx_pair, cut=cut)
    learned = target.shape[0] - (self.n_step - 1)
    target, mask = target[:learned], not_reset[:learned]
    td = target - taken(q[:learned], action[:learned])
    if self.huber_delta:
      per_step = rlax.huber_loss(td, self.huber_delta)
    else:
      per_step = 0.5 * jnp.square(td)
    loss = jnp.sum(weights[None] * per_step * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return loss, dict(abs_td=jnp.abs(td), mask=mask, q=q[:learned], target=target)


@registry.losses.register("q_lambda")
class QLambdaLoss:
  """PQN's loss: Q(lambda) targets over a rollout, then a regression of the taken
  actions' values on them,

      L = sum_i m_i l(G_i - q(s_i, a_i)) / sum_i m_i

  over a minibatch of transitions i, G the Q(lambda) targets (`q_lambda_targets`),
  computed once per rollout from the network before the update, m 0 on reset
  transitions, l a half square or, with `huber_delta` > 0, the Huber loss.

  `targets(q, timestep, discount, lam)` gives (G, m), each [T, B], from the Q-values
  [T + 1, B, A] of the rollout's steps; `loss(q_taken, target, mask)` the loss and its
  metrics on a minibatch ([N] each).
  """

  def __init__(self, huber_delta: Annotated[float, NonNegative] = 0.0):
    self.huber_delta = huber_delta

  def targets(self, q: jax.Array, timestep: TimeStep, discount: float, lam
              ) -> Tuple[jax.Array, jax.Array]:
    reward, gamma, reset = transitions(timestep, discount)
    return (q_lambda_targets(q, reward, gamma, reset, lam),
            (~reset).astype(jnp.float32))

  def __call__(self, q_taken: jax.Array, target: jax.Array, mask: jax.Array
               ) -> Tuple[jax.Array, Dict[str, jax.Array]]:
    td = jax.lax.stop_gradient(target) - q_taken
    per_step = (rlax.huber_loss(td, self.huber_delta) if self.huber_delta
                else 0.5 * jnp.square(td))
    count = jnp.maximum(jnp.sum(mask), 1.0)
    loss = jnp.sum(per_step * mask) / count
    return loss, dict(q_mean=jnp.sum(q_taken * mask) / count,
                      target_mean=jnp.sum(target * mask) / count,
                      abs_td=jnp.sum(jnp.abs(td) * mask) / count)
