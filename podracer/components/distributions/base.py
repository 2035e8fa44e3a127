"""What an action distribution is to an agent: a family of distributions over the
environment's actions, parameterised by the network's policy output, as pure functions.

An agent acts, scores and regularises its policy through its distribution only, so one
actor-critic agent (PPO, IMPALA) runs discrete and continuous tasks: the network gives
`num_params(spec)` numbers per observation (logits for a categorical; a mean and a scale
for a Gaussian) and the distribution says what they mean.

Sampling returns two arrays: the action the environment gets and the `raw` sample the
log-probability is taken of. They differ where the family transforms its sample (a tanh
squash, a clip to the bounds): the raw sample is what makes the log-probability exact
(atanh of a saturated tanh is not), so agents keep it with the trajectory
(`extras["raw_action"]`) and learn from it.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import jax

from podracer.errors import ConfigError
from podracer.types import DiscreteSpec, EnvSpec


class ActionDistribution:
  """A family of action distributions; subclasses define the methods below.

  `params` is the network's policy output [..., num_params]; `raw` a sample as `sample`
  returns it. All methods are pure and batch over the leading axes.
  """

  name = "?"  # its registered name, for messages
  kind = "discrete"  # or "continuous": the action spec it takes (checked at build)
  transforms_samples = False  # True: the env's action is a function of the raw sample

  def num_params(self) -> int:
    """Numbers per observation the network's policy output must have."""
    raise NotImplementedError

  def sample(self, params: jax.Array, key: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """(the action for the environment, the raw sample to score) [..., action shape]."""
    raise NotImplementedError

  def log_prob(self, params: jax.Array, raw: jax.Array) -> jax.Array:
    """log pi(raw) [...], the change of variables included."""
    raise NotImplementedError

  def entropy(self, params: jax.Array, key: Optional[jax.Array]) -> jax.Array:
    """The entropy [...] (a one-sample estimate where it has no closed form: `key`)."""
    raise NotImplementedError

  def mode(self, params: jax.Array) -> jax.Array:
    """The deterministic action [..., action shape], for evaluation."""
    raise NotImplementedError


class Policy:
  """One batch of a policy: the network's parameters for it, its family, and a key for
  estimates that need one. What an actor-critic agent hands its loss (`PolicyLoss`)."""

  def __init__(self, params: jax.Array, family: ActionDistribution,
               key: Optional[jax.Array] = None):
    self.params, self.family, self.key = params, family, key

  def log_prob(self, raw: jax.Array) -> jax.Array:
    return self.family.log_prob(self.params, raw)

  def entropy(self) -> jax.Array:
    return self.family.entropy(self.params, self.key)

  def map(self, fn) -> "Policy":
    """The same policy with `fn` applied to its parameters (a reshape, a slice)."""
    return Policy(fn(self.params), self.family, self.key)


def _flatten(policy: Policy):
  return (policy.params, policy.key), policy.family


def _unflatten(family, children):
  return Policy(children[0], family, children[1])


jax.tree_util.register_pytree_node(Policy, _flatten, _unflatten)


def check_distribution(distribution: Any, spec: EnvSpec, agent: str) -> None:
  """The distribution must take the environment's kind of action: a ConfigError naming
  the section and the fix otherwise."""
  if not isinstance(distribution, ActionDistribution):
    raise ConfigError(f"Agent '{agent}': `distribution` must be an action distribution "
                      f"(podracer.components.distributions.ActionDistribution), got "
                      f"{type(distribution).__name__}.")
  discrete = isinstance(spec.action, DiscreteSpec)
  if distribution.kind == ("discrete" if discrete else "continuous"):
    return
  has = (f"{spec.action.num_values} discrete actions" if discrete else
         f"continuous actions of shape {list(spec.action.shape)}")
  fix = ("`--config.distribution.name=categorical`" if discrete else
         "`--config.distribution.name=tanh_normal` (Brax's) or `normal` (CleanRL's, "
         "clipped to the bounds), with a network that gives its parameters "
         "(`--config.network.name=gaussian_actor_critic`)")
  raise ConfigError(f"Agent '{agent}': its `distribution` section ('{distribution.name}') "
                    f"is a {distribution.kind} distribution, but the environment has {has}; "
                    f"set {fix}.")
