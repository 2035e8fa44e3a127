"""Actor-critic losses and the advantage estimates they use, as pure functions.

Trajectories follow dm_env's convention (see `podracer.types`): entry t holds the
timestep s_t, the action a_t taken from it, and the reward r_{t+1} and discount d_{t+1}
arrive with entry t+1. The action taken on a LAST step is ignored by the environment
(the next step is a reset), so that "transition" is masked out of every loss.
"""

from __future__ import annotations

from typing import Annotated, Any, Dict, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.distributions import (CATEGORICAL, Policy, categorical_entropy,
                                               categorical_log_prob)
from podracer.registry.ranges import NonNegative, Positive
from podracer.types import StepType, TimeStep, Trajectory


class PolicyGradientBatch(NamedTuple):
  """A flat batch of transitions for an actor-critic loss; every field is [N, ...].

  `mask` is 0 at an episode's LAST step: its observation is the episode's terminal one,
  and the action taken there is never stepped (the next step is the next episode's
  FIRST, which ignores it), so a policy or value loss leaves that row out. The
  observation itself is real: a loss of observations alone (a predictor, RND's novelty,
  a world model's reconstruction) should average over every row, unmasked, or it never
  sees the states that end episodes (a goal, a trap)."""
  observation: jax.Array
  action: jax.Array
  behaviour_log_prob: jax.Array
  behaviour_value: jax.Array
  advantage: jax.Array
  value_target: jax.Array
  mask: jax.Array  # 1 for real transitions, 0 for the step after LAST


def transition_mask(timestep: TimeStep) -> jax.Array:
  """[T, B]: 1 where the action of entry t led to a real transition (s_t not LAST)."""
  return (timestep.step_type[:-1] != StepType.LAST).astype(jnp.float32)


def truncated_gae(r_t: jax.Array, discount_t: jax.Array, lambda_t: jax.Array,
                  values: jax.Array) -> jax.Array:
  """A_t = delta_t + discount_t lambda_t A_{t+1}, delta_t = r_t + discount_t v_{t+1} - v_t,
  over [k] steps (values [k+1]), from the last step back: rlax's
  `truncated_generalized_advantage_estimation`, the same operations in the same order
  (tests/components/test_losses.py holds them equal), written here because PPO's launch
  would otherwise import rlax and with it TensorFlow Probability (about 0.5 s)."""
  delta_t = r_t + discount_t * values[1:] - values[:-1]

  def back(acc, xs):
    delta, discount, lam = xs
    acc = delta + discount * lam * acc
    return acc, acc

  _, advantage_t = jax.lax.scan(back, 0.0, (delta_t, discount_t, lambda_t), reverse=True)
  return advantage_t


def generalized_advantages(timestep: TimeStep, values: jax.Array, *, discount: float,
                           gae_lambda: float, window: int = 0, form: str = "gae"
                           ) -> Tuple[jax.Array, jax.Array]:
  """GAE(lambda) advantages and value targets for a [T+1, B] trajectory, both [T, B].

  Truncated episodes (LAST with discount 1) bootstrap from the value of their last
  observation; terminated ones (discount 0) do not. No advantage flows across an
  episode boundary: lambda is zeroed where the next step is LAST. With `window` w > 0,
  also at the end of every w steps: each window's advantages bootstrap from the value
  after it, as Brax's PPO computes GAE over unrolls of its `unroll_length`. With
  `form="brax"` the advantages are Brax's `compute_gae`'s, r + gamma v_{t+1} - V(s_t),
  v the lambda-return targets (the targets are GAE's either way).
  """
  mask = transition_mask(timestep)
  next_is_last = (timestep.step_type[1:] == StepType.LAST).astype(jnp.float32)
  discount_t = discount * timestep.discount[1:] * mask
  lambda_t = gae_lambda * (1.0 - next_is_last)
  if window:
    ends = (jnp.arange(1, mask.shape[0] + 1) % window == 0).astype(jnp.float32)
    lambda_t = lambda_t * (1.0 - ends)[:, None]
  reward_t = timestep.reward[1:] * mask
  gae = jax.vmap(truncated_gae, in_axes=(1, 1, 1, 1), out_axes=1)
  advantages = gae(reward_t, discount_t, lambda_t, values) * mask
  targets = advantages + values[:-1]
  if form == "brax":
    next_targets = jnp.concatenate([targets[1:], values[-1:]], axis=0)
    if window:  # A window's last step bootstraps from the value after it.
      next_targets = jnp.where(ends[:, None] > 0, values[1:], next_targets)
    advantages = (reward_t + discount_t * next_targets - values[:-1]) * mask
  elif form != "gae":
    raise ValueError(f"Advantage form {form!r}: 'gae' or 'brax'.")
  return advantages, targets


def policy_gradient_batch(trajectory: Trajectory, discount: float,
                          gae_lambda: float, gae_window: int = 0,
                          advantage_form: str = "gae") -> PolicyGradientBatch:
  """Flattens a [T+1, B] trajectory into the [T*B] transitions an actor-critic loss sees:
  GAE(lambda) advantages and value targets from the acting values (`extras["value"]`),
  and the acting log-probabilities (`extras["log_prob"]`)."""
  # The acting values are data: targets take no gradient in the network's parameters,
  # and keep one in the discount and lambda (a meta-gradient's).
  values = jax.lax.stop_gradient(trajectory.extras["value"])
  advantages, targets = generalized_advantages(
      trajectory.timestep, values, discount=discount, gae_lambda=gae_lambda,
      window=gae_window, form=advantage_form)
  head = lambda x: x[:-1].reshape(-1, *x.shape[2:])
  return PolicyGradientBatch(
      observation=jax.tree.map(head, trajectory.timestep.observation),
      action=head(learned_action(trajectory)),
      behaviour_log_prob=head(trajectory.extras["log_prob"]),
      behaviour_value=head(values),
      advantage=advantages.reshape(-1),
      value_target=targets.reshape(-1),
      mask=transition_mask(trajectory.timestep).reshape(-1))


def learned_action(trajectory: Trajectory) -> jax.Array:
  """The actions a policy's log-probability is taken of: the raw samples where the
  distribution transformed them for the environment (`extras["raw_action"]`: a tanh
  squash, a clip), the actions themselves otherwise."""
  return trajectory.extras.get("raw_action", trajectory.action)


def _masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def normalize(x: jax.Array, mask: jax.Array, eps: float = 1e-8) -> jax.Array:
  mean = _masked_mean(x, mask)
  std = jnp.sqrt(_masked_mean(jnp.square(x - mean), mask))
  return (x - mean) / (std + eps)


Metrics = Dict[str, jax.Array]

class PolicyLoss:
  """A loss of a policy: actor-critic agents call it with a
  `podracer.components.distributions.Policy` (its log-probabilities and entropy, whatever
  the action distribution), so it learns discrete and continuous actions alike. A loss
  that does not derive from it is called with the policy's logits, as before 0.18, and
  takes categorical policies only (the builder says so for any other)."""


def as_policy(policy) -> Policy:
  """A Policy as it is; logits [..., A] as the categorical policy they parameterise (a
  PolicyLoss called with logits, as a 0.17 loss wrapping PPO's was)."""
  return policy if isinstance(policy, Policy) else Policy(policy, CATEGORICAL)



@registry.losses.register("ppo")
class PPOLoss(PolicyLoss):
  """PPO's clipped surrogate objective with a value loss and an entropy bonus.

  L = -E[min(rho A, clip(rho, 1-eps, 1+eps) A)] + c_v E[(V - G)^2] / 2 - c_H E[H(pi)]
  with rho = pi(a|s) / mu(a|s). With `normalize_advantages` (on by default) A is
  normalised to zero mean and unit variance over the minibatch first; with `clip_value`
  the value loss is PPO's clipped one. Called as `loss(policy, value, batch)` (a
  `Policy`, or a categorical policy's logits).
  """

  def __init__(self, clip_epsilon: Annotated[float, Positive] = 0.2,
               value_coef: Annotated[float, NonNegative] = 0.5,
               entropy_coef: Annotated[float, NonNegative] = 0.01, clip_value: bool = True,
               normalize_advantages: bool = True):
    self.clip_epsilon = clip_epsilon
    self.value_coef = value_coef
    self.entropy_coef = entropy_coef
    self.clip_value = clip_value
    self.normalize_advantages = normalize_advantages

  def __call__(self, policy: Policy, value: jax.Array,
               batch: PolicyGradientBatch) -> Tuple[jax.Array, Metrics]:
    policy = as_policy(policy)
    mask = batch.mask
    advantage = batch.advantage
    if self.normalize_advantages:
      advantage = normalize(advantage, mask)
    log_prob = policy.log_prob(batch.action)
    ratio = jnp.exp(log_prob - batch.behaviour_log_prob)
    policy_loss = -_masked_mean(self.surrogate(ratio, advantage), mask)

    value_error = jnp.square(value - batch.value_target)
    if self.clip_value:
      epsilon = self.value_clip_epsilon()
      clipped_value = batch.behaviour_value + jnp.clip(
          value - batch.behaviour_value, -epsilon, epsilon)
      value_error = jnp.maximum(value_error, jnp.square(clipped_value - batch.value_target))
    value_loss = 0.5 * _masked_mean(value_error, mask)

    entropy = _masked_mean(policy.entropy(), mask)
    loss = policy_loss + self.value_coef * value_loss - self.entropy_coef * entropy
    approx_kl = _masked_mean((ratio - 1.0) - jnp.log(ratio), mask)
    clip_fraction = _masked_mean(
        (jnp.abs(ratio - 1.0) > self.clip_epsilon).astype(jnp.float32), mask)
    return loss, dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                      approx_kl=approx_kl, clip_fraction=clip_fraction)

  def value_clip_epsilon(self) -> Any:
    """How far the clipped value loss lets V move from the behaviour's value: PPO's
    `clip_epsilon`, the policy's own clip range."""
    return self.clip_epsilon

  def surrogate(self, ratio: jax.Array, advantage: jax.Array) -> jax.Array:
    """The per-step objective the policy ascends: min(rho A, clip(rho) A), which is
    rho A - relu((rho - clip(rho)) A), PPO's drift (Lu et al. 2022's mirror-learning form)."""
    return clipped_surrogate(ratio, advantage, self.clip_epsilon)


def clipped_surrogate(ratio: jax.Array, advantage: jax.Array, epsilon) -> jax.Array:
  """PPO's per-step surrogate min(rho A, clip(rho, 1 - eps, 1 + eps) A)."""
  clipped_ratio = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
  return jnp.minimum(ratio * advantage, clipped_ratio * advantage)
