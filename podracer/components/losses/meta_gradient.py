"""Meta-gradients (Xu, van Hasselt and Silver 2018): discount and lambda adapted online.

An agent's return has meta-parameters eta, its discount gamma and its lambda. Meta-gradient
RL makes them learnable: after each update's trajectory is collected, take one inner
gradient step of the agent's own loss with the targets eta makes,

    theta'(eta) = theta - alpha grad_theta L(tau, theta, eta),

and move eta down the gradient of a validation objective at theta', on the next stretch
of experience tau' with fixed reference meta-parameters eta_bar:

    eta <- eta - beta grad_eta J(tau', theta'(eta), eta_bar)

(the paper's online cross-validation: tau is the first half of the trajectory in time,
tau' the second). J is the agent's own loss by default (`validation="loss"`: its policy,
value and entropy terms); `validation="policy_loss"` takes its policy-gradient term
alone, the paper's choice, which adapted less on CartPole here (docs/meta.md has both
measured). The agent's update then learns with the new eta. Each adapted value is
a sigmoid of a logit that Adam (`learning_rate`) moves; its value after each update is in
the records as `meta_discount` / `meta_lambda`.

This component is the `meta_loss` section of an agent that names one (PPO, IMPALA):

    config.meta_loss = presets.section("meta_gradient", adapt=("lambda",))

The agent supplies `meta_values()` (its eta: {"discount": ..., "lambda": ...}) and
`learning_batch(trajectory, values)` (its loss's batch for those values); everything
else is here, so no agent writes a meta-gradient. Not here: the paper's conditioning
of the networks on eta, and its entropy-cost adaptation.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Dict, NamedTuple, Sequence, Tuple

import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.errors import ConfigError
from podracer.learning import META, STEP, gradient_step, init_opt_state, total_loss
from podracer.registry.ranges import Positive, Probability
from podracer.types import PyTree, replica_mean

ADAPTABLE = ("discount", "lambda")
_EDGE = 1e-4   # A start of exactly 0 or 1 begins this close to it (a finite logit).


class MetaState(NamedTuple):
  """The adapted meta-parameters: a logit each (value = sigmoid) and Adam's state."""
  logits: Dict[str, jax.Array]
  optimizer: PyTree


def halves_in_time(trajectory: PyTree) -> Tuple[PyTree, PyTree]:
  """tau and tau': a [T+1, B] trajectory's first and second halves in time ([h+1, B] and
  [T-h+1, B], h = T // 2; they share step h, the first's bootstrap)."""
  length = jax.tree.leaves(trajectory)[0].shape[0] - 1
  if length < 2:
    raise ConfigError(f"`meta_loss`: the meta-gradient validates on the second half of "
                      f"each trajectory, and a trajectory of {length} step(s) has none: "
                      "make the runtime's `rollout_length` at least 2.")
  half = length // 2
  return (jax.tree.map(lambda x: x[:half + 1], trajectory),
          jax.tree.map(lambda x: x[half:], trajectory))


@registry.losses.register("meta_gradient")
class MetaGradient:
  """Online cross-validation of an agent's discount and/or lambda (module docstring)."""

  def __init__(self, adapt: Sequence[str] = ("discount", "lambda"),
               reference_discount: Annotated[float, Probability] = 0.99,
               reference_lambda: Annotated[float, Probability] = 1.0,
               learning_rate: Annotated[float, Positive] = 0.01,
               inner_learning_rate: Annotated[float, Positive] = 1e-3,
               validation: str = "loss"):
    self.adapt = tuple(adapt)
    unknown = [name for name in self.adapt if name not in ADAPTABLE]
    if unknown or not self.adapt or len(set(self.adapt)) != len(self.adapt):
      raise ConfigError(f"Config key `meta_loss.adapt` is {list(self.adapt)}: name each of "
                        f"{', '.join(ADAPTABLE)} at most once, and at least one.")
    self.reference = {"discount": reference_discount, "lambda": reference_lambda}
    self.optimizer = optax.adam(learning_rate)
    self.inner_learning_rate = inner_learning_rate
    self.validation = None if validation == "loss" else validation

  def init(self, values: Dict[str, float]) -> MetaState:
    """The meta-state of an agent whose meta-parameters start at `values`."""
    missing = [name for name in self.adapt if name not in values]
    if missing:
      raise ConfigError(f"Config key `meta_loss.adapt` names {missing}, which this agent "
                        f"does not have (it has: {', '.join(values) or 'none'}).")
    logits = {name: jax.scipy.special.logit(jnp.clip(
        jnp.asarray(values[name], jnp.float32), _EDGE, 1.0 - _EDGE)) for name in self.adapt}
    return MetaState(logits, self.optimizer.init(logits))

  def values(self, state: MetaState, fixed: Dict[str, Any]) -> Dict[str, Any]:
    """The agent's meta-parameters: the adapted ones from `state`, the rest `fixed`."""
    return _with_logits(fixed, state.logits)

  def step(self, agent: Any, nets: PyTree, opt: Dict[str, Any], trajectory: PyTree
           ) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, jax.Array]]:
    """(the meta-parameters this update learns with, the learner state with the new
    meta-state, their values as metrics): one meta-gradient step on `trajectory`."""
    state, fixed = opt[META], agent.meta_values()
    train, valid = halves_in_time(trajectory)
    # eta_bar: the reference values of the adapted ones; the others as configured.
    reference = {**fixed, **{name: self.reference[name] for name in self.adapt}}
    validation_batch = agent.learning_batch(valid, reference)
    grads = jax.grad(self._validation_loss(agent, nets, opt, train, validation_batch, fixed)
                     )(state.logits)
    updates, optimizer = self.optimizer.update(replica_mean(grads), state.optimizer)
    state = MetaState(optax.apply_updates(state.logits, updates), optimizer)
    values = self.values(state, fixed)
    metrics = {f"meta_{name}": values[name] for name in self.adapt}
    return values, {**opt, META: state}, metrics

  def inner_step(self, agent: Any, nets: PyTree, opt: Dict[str, Any], train: PyTree,
                 values: Dict[str, Any]) -> PyTree:
    """theta'(eta): one SGD step of the agent's objectives on tau with meta-parameters
    `values`, differentiable in them."""
    inner = tuple(o._replace(optimizer=optax.sgd(self.inner_learning_rate))
                  for o in agent.objectives)
    inner_opt = {**init_opt_state(inner, nets), STEP: opt[STEP]}
    return gradient_step(inner, nets, inner_opt, agent.learning_batch(train, values), None)[0]

  def _validation_loss(self, agent: Any, nets: PyTree, opt: Dict[str, Any], train: PyTree,
                       validation_batch: PyTree, fixed: Dict[str, Any]
                       ) -> Callable[[Dict[str, jax.Array]], jax.Array]:
    """logits -> the validation objective at theta'(eta)."""
    def validation_loss(logits):
      after = self.inner_step(agent, nets, opt, train, _with_logits(fixed, logits))
      return total_loss(agent.objectives, after, opt, validation_batch, self.validation)
    return validation_loss


def _with_logits(fixed: Dict[str, Any], logits: Dict[str, jax.Array]) -> Dict[str, Any]:
  return {**fixed, **{name: jax.nn.sigmoid(logit) for name, logit in logits.items()}}
