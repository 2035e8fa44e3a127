"""IMPALA's V-trace actor-critic loss (Espeholt et al., 2018) on time-major sequences.

Unlike PPO's flat batch, V-trace needs whole sequences: its value targets are an
off-policy corrected n-step return computed backwards in time. Trajectories follow
dm_env's convention (see `podracer.types` and `actor_critic`): transition t takes s_t
with a_t to s_{t+1}, whose entry carries r_{t+1} and d_{t+1}.

Episode boundaries inside a sequence (rlax's recursion knows nothing of them):
  * a terminated episode (LAST, d=0) does not bootstrap: its discount is 0;
  * a truncated episode (LAST, d=1) bootstraps from V(s_LAST): its discount stays;
  * the transition out of a LAST step is a reset, not a transition: it is masked out,
    with discount 0, and the trace is cut before it (per-step lambda = 0 at t when
    s_{t+1} is LAST), so neither its error nor the next episode leaks backwards.
"""

from __future__ import annotations

from typing import Annotated, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.distributions import Policy
from podracer.components.losses.actor_critic import (Metrics, PolicyLoss, _masked_mean,
                                                     as_policy, transition_mask)
from podracer.registry.ranges import NonNegative, Positive, Probability
from podracer.types import TimeStep
from podracer.errors import load_on_first_use

# Loaded where a loss first reads it: its import brings distrax and TensorFlow Probability.
rlax = load_on_first_use("rlax")


class VTraceBatch(NamedTuple):
  """The sequence a V-trace loss sees; every field is time-major [T, B]."""
  behaviour_log_prob: jax.Array  # log mu(a_t|s_t) of the policy that acted
  action: jax.Array
  reward: jax.Array    # r_{t+1}, 0 where masked
  discount: jax.Array  # gamma * d_{t+1} * mask_t
  mask: jax.Array      # 1 for real transitions, 0 for the step after LAST


def vtrace_batch(timestep: TimeStep, action: jax.Array, behaviour_log_prob: jax.Array,
                 *, discount: float) -> VTraceBatch:
  """The [T, B] batch of a [T+1, B] trajectory (dm_env convention, as in `types`)."""
  mask = transition_mask(timestep)
  return VTraceBatch(behaviour_log_prob=behaviour_log_prob[:-1], action=action[:-1],
                     reward=timestep.reward[1:] * mask,
                     discount=discount * timestep.discount[1:] * mask, mask=mask)


@registry.losses.register("vtrace")
class VTraceLoss(PolicyLoss):
  """Policy gradient with V-trace advantages, a V-trace baseline loss and entropy bonus.

  L = -S[log pi(a|s) A_pg] + c_b S[(v_s - V(s))^2] / 2 - c_H S[H(pi)] over unmasked
  transitions, with v_s and A_pg = clip(rho, rho_pg) (r + gamma v_{s+1} - V(s)) from
  `rlax.vtrace_td_error_and_advantage` and held constant. Called as
  `loss(policy [T, B], values [T+1, B], batch)` (a `Policy`, or a categorical policy's
  logits [T, B, A]); values[T] is the bootstrap.

  `reduction` is S: "sum" over time and batch, as in the IMPALA paper, whose optimizer
  settings (RMSProp eps 0.01 inside the square root, gradient norm clipped at 40) are
  absolute scales calibrated for summed losses; or "mean", for settings tuned that way.
  The reported metrics are means either way, so they compare across batch sizes.
  """

  REDUCTIONS = ("sum", "mean")

  def __init__(self, baseline_coef: Annotated[float, NonNegative] = 0.5,
               entropy_coef: Annotated[float, NonNegative] = 0.01,
               clip_rho_threshold: Annotated[float, Positive] = 1.0,
               clip_pg_rho_threshold: Annotated[float, Positive] = 1.0,
               lambda_: Annotated[float, Probability] = 1.0, reduction: str = "sum"):
    if reduction not in self.REDUCTIONS:
      raise ValueError(f"Unknown reduction {reduction!r} for loss 'vtrace'; options: "
                       f"{', '.join(self.REDUCTIONS)}.")
    self.reduction = reduction
    self.baseline_coef = baseline_coef
    self.entropy_coef = entropy_coef
    self.clip_rho_threshold = clip_rho_threshold
    self.clip_pg_rho_threshold = clip_pg_rho_threshold
    self.lambda_ = lambda_

  def __call__(self, policy: Policy, values: jax.Array, batch: VTraceBatch,
               lambda_: Optional[jax.Array] = None) -> Tuple[jax.Array, Metrics]:
    """`lambda_` replaces the configured one (a meta-gradient's adapted lambda)."""
    policy = as_policy(policy)
    mask = batch.mask
    lambda_ = self.lambda_ if lambda_ is None else lambda_
    log_prob = policy.log_prob(batch.action)
    rho = jnp.exp(jax.lax.stop_gradient(log_prob) - batch.behaviour_log_prob)
    # mask[t+1] = 0 exactly where s_{t+1} is LAST: cut the trace before the reset
    # transition. The last step's lambda is unused by rlax (it bootstraps from values[T]).
    lambda_t = lambda_ * jnp.concatenate([mask[1:], jnp.ones_like(mask[:1])])
    # rlax 0.1.7 and 0.1.9 agree on these arguments (0.1.9 adds `sample_mask`, unused).
    # Its targets take no gradient in the network's parameters (their inputs are held
    # constant here), and keep one in the discount and lambda: a meta-gradient's.
    vtrace = jax.vmap(
        lambda v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_:
        rlax.vtrace_td_error_and_advantage(
            v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_,
            clip_rho_threshold=self.clip_rho_threshold,
            clip_pg_rho_threshold=self.clip_pg_rho_threshold, stop_target_gradients=False),
        in_axes=1, out_axes=1)
    v_tm1, constant_v_tm1 = values[:-1], jax.lax.stop_gradient(values[:-1])
    out = vtrace(constant_v_tm1, jax.lax.stop_gradient(values[1:]), batch.reward,
                 batch.discount, rho, lambda_t)
    value_target = out.errors + constant_v_tm1
    pg_advantage = out.pg_advantage

    policy_loss = -_masked_mean(log_prob * pg_advantage, mask)
    value_loss = 0.5 * _masked_mean(jnp.square(value_target - v_tm1), mask)
    entropy = _masked_mean(policy.entropy(), mask)
    loss = policy_loss + self.baseline_coef * value_loss - self.entropy_coef * entropy
    if self.reduction == "sum":  # The same loss, times the number of real transitions.
      loss = loss * jnp.sum(mask)
    return loss, dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                      rho=_masked_mean(rho, mask))
