"""Discovered Policy Optimisation (Lu et al., "Discovered Policy Optimisation", NeurIPS
2022, arXiv:2210.05639): the closed form of the drift their evolution found, in place of
PPO's clipping. In mirror-learning form the policy ascends rho A - f(rho, A) with

    f(rho, A) = relu((rho - 1) A - alpha tanh((rho - 1) A / alpha))   where A >= 0,
                relu(A log rho - beta tanh(A log rho / beta))          where A < 0,

alpha = 2 and beta = 0.6 in the paper (PureJaxRL's dpo_continuous_action.py). There is no
clipping of the ratio: the drift is zero at rho = 1 and grows once the ratio has moved
the advantage's way further than alpha (or beta) allows. The value and entropy terms are
PPO's (its value clipping keeps `clip_epsilon`).

    --config.loss=dpo [--config.loss.alpha=2.0 --config.loss.beta=0.6]

`with_drift({"log_alpha": [a], "log_beta": [b]})` scales alpha and beta by exp(a) and
exp(b) (traced arrays too): `python -m podracer.meta --config.meta.objective=dpo`
searches these two numbers, DPO as a low-dimensional search target.
"""

from __future__ import annotations

import copy
from typing import Annotated, Dict

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.losses.actor_critic import PPOLoss
from podracer.registry.ranges import NonNegative, Positive


def dpo_drift(ratio: jax.Array, advantage: jax.Array, alpha, beta) -> jax.Array:
  """DPO's drift f(rho, A) >= 0 (zero at rho = 1), elementwise."""
  positive = (ratio - 1.0) * advantage
  negative = jnp.log(ratio) * advantage
  return jnp.where(advantage >= 0,
                   jax.nn.relu(positive - alpha * jnp.tanh(positive / alpha)),
                   jax.nn.relu(negative - beta * jnp.tanh(negative / beta)))


@registry.losses.register("dpo")
class DPOLoss(PPOLoss):
  """PPO's loss with DPO's drift for its clipping; called as `loss(policy, value, batch)`
  wherever PPO's loss is (PPO, recurrent PPO; Anakin, Sebulba and SEED; categorical and
  Gaussian policies, the ratio from the distribution's log-probabilities)."""

  def __init__(self, alpha: Annotated[float, Positive] = 2.0,
               beta: Annotated[float, Positive] = 0.6,
               clip_epsilon: Annotated[float, Positive] = 0.2,
               value_coef: Annotated[float, NonNegative] = 0.5,
               entropy_coef: Annotated[float, NonNegative] = 0.01, clip_value: bool = True,
               normalize_advantages: bool = True):
    super().__init__(clip_epsilon, value_coef, entropy_coef, clip_value,
                     normalize_advantages)
    self.alpha, self.beta = alpha, beta

  def with_drift(self, theta: Dict[str, jax.Array]) -> "DPOLoss":
    """The loss with alpha and beta scaled by exp(theta["log_alpha"]), exp(theta["log_beta"])."""
    other = copy.copy(self)
    other.alpha = self.alpha * jnp.exp(theta["log_alpha"][0])
    other.beta = self.beta * jnp.exp(theta["log_beta"][0])
    return other

  def surrogate(self, ratio: jax.Array, advantage: jax.Array) -> jax.Array:
    """rho A - f(rho, A): the per-step objective the policy ascends."""
    return ratio * advantage - dpo_drift(ratio, advantage, self.alpha, self.beta)


DPO_KEYS = ("log_alpha", "log_beta")  # theta of DPO as a search target: log scales.
DPO_FORM = "dpo_log_scales"  # Its form, in learned_objective.json.


def dpo_theta() -> Dict[str, jax.Array]:
  """theta = 0: DPO at the loss's own alpha and beta."""
  return {k: jnp.zeros((1,), jnp.float32) for k in DPO_KEYS}
