"""The gradient step, owned by the framework: losses in, updated parameters out.

An agent describes what it learns as one or more `Objective`s: a loss, the optimizer
that applies its gradients, and which parameters that optimizer owns. `gradient_step`
takes every objective's gradient, averages it over the replicas that learn
(`replica_mean`, the cross-replica sum of TF-Replicator and Anakin) and applies it, so no
agent repeats `value_and_grad`, `replica_mean` and the optax update, and an agent with
several losses and optimizers (actor and critic, as in D4PG or SAC) is just a list.

With one objective (`owns=None`), `nets` are the network's parameters and the optimizer
owns all of them. With several, `nets` is a dict and each objective owns some of its
top-level keys; keys no objective owns (target networks) are the agent's to update.

Training progress: the optimizer state counts gradient steps (`opt_state[STEP]`), and
while `gradient_step` calls the losses, `step()` returns that count, so any loss, or a
component a loss calls, can follow a schedule without the agent passing anything on. A
loss component that declares a `total_steps` parameter gets the run's gradient steps from
the builder (as optimizers do); `step() / total_steps` is the fraction of training done.
"""

from __future__ import annotations

import threading
from typing import (Any, Callable, Dict, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

import jax
import jax.numpy as jnp
import optax

from podracer.errors import ConfigError, minibatches_do_not_divide
from podracer.types import PyTree, replica_mean

Metrics = Dict[str, jax.Array]

# The optimizer-state key counting gradient steps; no objective may take this name.
STEP = "gradient_steps"
# The learner-state key of an agent's meta-parameters, where it has a `meta_loss`
# (podracer/components/losses/meta_gradient.py); no objective may take it either.
META = "meta"

_bound = threading.local()  # The count `step()` returns while gradient_step runs.


def step() -> jax.Array:
  """Gradient steps taken before this one (an int32 scalar), inside a loss that
  `gradient_step` calls: schedules (entropy, clipping, exploration) read it."""
  current = getattr(_bound, "step", None)
  if current is None:
    raise RuntimeError("podracer.learning.step() is only defined while gradient_step calls "
                       "the losses (with an optimizer state from init_opt_state).")
  return current


class Objective(NamedTuple):
  """One loss and the optimizer that applies its gradients to the parameters it owns.

  loss(nets, batch, key) -> (scalar, metrics): `nets` is the WHOLE nets pytree; the
  gradient is taken only with respect to the owned part, the rest held constant.
  Clipping and schedules live inside the optax `optimizer`.
  """
  name: str
  loss: Callable[..., Tuple[jax.Array, Metrics]]
  optimizer: optax.GradientTransformation
  owns: Optional[Tuple[str, ...]] = None  # top-level keys of nets; None: all of nets


def _owned(objective: Objective, nets: PyTree) -> PyTree:
  if objective.owns is None:
    return nets
  missing = [k for k in objective.owns if k not in nets]
  if missing:
    raise KeyError(f"Objective '{objective.name}' owns {missing}, which nets (keys "
                   f"{sorted(nets)}) does not have.")
  return {k: nets[k] for k in objective.owns}


def _with_owned(objective: Objective, nets: PyTree, owned: PyTree) -> PyTree:
  if objective.owns is None:
    return owned
  return {**nets, **owned}


def init_opt_state(objectives: Sequence[Objective], nets: PyTree) -> Dict[str, PyTree]:
  """{objective.name: its optimizer's state for the parameters it owns}."""
  names = [o.name for o in objectives]
  if len(set(names)) != len(names) or STEP in names or META in names:
    raise ValueError(f"Objective names must be unique and not '{STEP}' or '{META}', got "
                     f"{names}.")
  return {STEP: jnp.zeros((), jnp.int32),
          **{o.name: o.optimizer.init(_owned(o, nets)) for o in objectives}}


def gradient_step(objectives: Sequence[Objective], nets: PyTree, opt_state: Dict[str, PyTree],
                  batch: PyTree, key: Optional[jax.Array]
                  ) -> Tuple[PyTree, Dict[str, PyTree], Metrics]:
  """One optimizer step per objective, in order; each sees the nets the ones before it left.

  Must run where `podracer.types.REPLICA_AXIS` is bound (both runtimes bind it).
  With one objective, the loss gets `key` itself and the metrics are its own plus
  `loss`; with several, each gets its own split of `key` and every metric is prefixed
  with the objective's name and an underscore: `critic_loss`, `critic_q_mean`,
  `actor_entropy`. Metrics are returned as the loss gave them (any shape), so an agent
  can also pass out per-example values (TD errors for priorities) and pop them.
  """
  objectives = tuple(objectives)
  if len(objectives) == 1:
    keys = (key,)
  else:
    keys = (None,) * len(objectives) if key is None else tuple(
        jax.random.split(key, len(objectives)))
  opt_state = dict(opt_state)
  metrics: Metrics = {}
  _bound.step = opt_state.get(STEP)
  try:
    for objective, objective_key in zip(objectives, keys):
      nets = _apply(objective, nets, opt_state, batch, objective_key, metrics,
                    several=len(objectives) > 1)
  finally:
    _bound.step = None
  if STEP in opt_state:
    opt_state[STEP] = opt_state[STEP] + 1
  return nets, opt_state, metrics


def total_loss(objectives: Sequence[Objective], nets: PyTree, opt_state: Dict[str, PyTree],
               batch: PyTree, term: Optional[str] = None) -> jax.Array:
  """The sum of the objectives' losses at `nets` on `batch`, taking no step: a validation
  objective (meta-gradients). With `term`, the sum of that metric of theirs instead (a
  loss's `policy_loss`). `step()` is the count in `opt_state`, as in gradient_step."""
  _bound.step = opt_state.get(STEP)
  try:
    outputs = [objective.loss(nets, batch, None) for objective in objectives]
  finally:
    _bound.step = None
  if term is None:
    return sum(loss for loss, _ in outputs)
  missing = [o.name for o, (_, metrics) in zip(objectives, outputs) if term not in metrics]
  if missing:
    raise ConfigError(f"The validation objective is the term `{term}`, which the loss of "
                      f"objective(s) {missing} does not report (it reports: "
                      f"{', '.join(sorted(outputs[0][1]))}).")
  return sum(metrics[term] for _, metrics in outputs)


def _apply(objective: Objective, nets: PyTree, opt_state: Dict[str, PyTree], batch: PyTree,
           objective_key: Optional[jax.Array], metrics: Metrics, several: bool) -> PyTree:
  """One objective's optimizer step: updates `opt_state` and `metrics`, returns the nets."""
  params = _owned(objective, nets)

  def loss_of_owned(owned):
    return objective.loss(_with_owned(objective, nets, owned), batch, objective_key)

  try:
    (loss, objective_metrics), grads = jax.value_and_grad(loss_of_owned, has_aux=True)(params)
  except TypeError as e:
    why = _loss_output_error(jax.eval_shape(loss_of_owned, params))
    if why is None:
      raise
    raise ConfigError(f"Objective '{objective.name}': its loss "
                      f"({_describe(objective.loss)}) {why}") from e
  if not isinstance(objective_metrics, Mapping):
    raise ConfigError(f"Objective '{objective.name}': its loss ({_describe(objective.loss)}) "
                      f"returns (loss, {type(objective_metrics).__name__}), but the second "
                      "value must be a dict of metrics: return `loss, {}` for none.")
  grads = replica_mean(grads)
  updates, opt_state[objective.name] = objective.optimizer.update(
      grads, opt_state[objective.name], params)
  objective_metrics = dict(objective_metrics, loss=loss)
  if several:
    objective_metrics = {f"{objective.name}_{k}": v for k, v in objective_metrics.items()}
  metrics.update(objective_metrics)
  return _with_owned(objective, nets, optax.apply_updates(params, updates))


def _loss_output_error(output: Any) -> Optional[str]:
  """Why a loss's output (its shapes) is not the (scalar, metrics) gradient_step takes;
  None when it is (the TypeError came from elsewhere)."""
  if not isinstance(output, (tuple, list)) or len(output) != 2:
    what = (f"a single array of shape {list(output.shape)}" if hasattr(output, "shape")
            else f"{type(output).__name__} of {len(output)} values"
            if isinstance(output, (tuple, list)) else type(output).__name__)
    return (f"returns {what}, but gradient_step takes a pair: the scalar to minimise and "
            "a dict of metrics to record. Return `loss, {}` for no metrics, or "
            "`loss, dict(policy_loss=..., entropy=...)`.")
  shape = getattr(output[0], "shape", None)
  if shape is not None and shape != ():
    return (f"returns an array of shape {list(shape)}, but gradient_step differentiates a "
            "scalar: reduce it over the batch (its mean or sum) and return per-example "
            "values as metrics.")
  return None


def _describe(fn: Any) -> str:
  owner = getattr(fn, "__self__", None)
  name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
  return f"{type(owner).__qualname__}.{fn.__name__}" if owner is not None else name


def periodic_update(online: PyTree, target: PyTree, steps: jax.Array, period: int) -> PyTree:
  """A target network after `steps` gradient steps: `online` copied in every `period`
  steps (DQN's and R2D2's target), else unchanged."""
  copy = steps % period == 0
  return jax.tree.map(lambda o, t: jnp.where(copy, o, t), online, target)


class TargetState(NamedTuple):
  """The learner state of an agent with a target network, in one named place for every
  such agent (R2D2, MuZero, SAC; Acme's TrainingState): what `init_opt` returns."""
  optimizer: PyTree     # the objectives' optimizer states (`Agent.init_opt`'s)
  target: PyTree        # the target network's parameters
  updates: jax.Array    # [] int32: learner updates so far (what a periodic copy counts)


def with_target(optimizer: PyTree, target: PyTree) -> TargetState:
  """The learner state before any update: `target` starts as a copy of the online net."""
  return TargetState(optimizer, target, jnp.zeros((), jnp.int32))


def update_target(state: TargetState, optimizer: PyTree, online: PyTree, *,
                  period: Optional[int] = None, tau: Optional[float] = None) -> TargetState:
  """The learner state after one update: the new `optimizer` state, one more update, and
  the target either copied from `online` every `period` updates (DQN, R2D2, MuZero) or
  moved towards it by `tau` at every update (Polyak averaging: SAC)."""
  if (period is None) == (tau is None):
    raise ValueError("update_target takes one of `period` (a periodic copy) and `tau` "
                     "(Polyak averaging).")
  updates = state.updates + 1
  if period is not None:
    target = periodic_update(online, state.target, updates, period)
  else:
    target = optax.incremental_update(online, state.target, tau)
  return TargetState(optimizer, target, updates)


def minibatch_epochs(objectives: Sequence[Objective], nets: PyTree, opt_state: Dict[str, PyTree],
                     batch: PyTree, key: jax.Array, *, num_epochs: int, num_minibatches: int
                     ) -> Tuple[PyTree, Dict[str, PyTree], Metrics]:
  """`num_epochs` passes over `batch` ([N, ...] leaves), each in `num_minibatches` shuffled
  gradient steps (PPO's update), each step's loss with a key of its own; metrics are
  their means over all the steps.

  The metrics are summed in the loop's carry as one vector rather than stacked per step:
  on small batches each extra op in the loop body costs as much as the math.
  """
  num_examples = jax.tree.leaves(batch)[0].shape[0]
  if num_examples % num_minibatches:
    # Met when first traced: under Sebulba and SEED the batch an update gets follows
    # from the actors, learners and rollouts, so this is where it is known.
    raise minibatches_do_not_divide(
        num_examples, num_minibatches, "examples (its environments x rollout steps on one "
        "learner device)", "the environments or the rollout")
  metrics_shape = jax.eval_shape(
      lambda: gradient_step(objectives, nets, opt_state,
                            jax.tree.map(lambda x: x[:num_examples // num_minibatches], batch),
                            key)[2])
  names = sorted(metrics_shape)
  if any(metrics_shape[k].shape for k in names):
    raise ValueError(f"minibatch_epochs averages scalar metrics; the loss returned shapes "
                     f"{ {k: metrics_shape[k].shape for k in names} }.")

  def minibatch_step(carry, inputs):
    nets, opt_state, total = carry
    minibatch, step_key = inputs
    nets, opt_state, metrics = gradient_step(objectives, nets, opt_state, minibatch, step_key)
    total = total + jax.numpy.stack([metrics[k].astype(total.dtype) for k in names])
    return (nets, opt_state, total), None

  def epoch(carry, epoch_key):
    order = jax.random.permutation(epoch_key, num_examples)
    minibatches = jax.tree.map(
        lambda x: x[order].reshape(num_minibatches, -1, *x.shape[1:]), batch)
    # Each step's key (a loss's sampled estimate: a tanh-normal's entropy), apart from
    # the permutation's.
    step_keys = jax.random.split(jax.random.fold_in(epoch_key, 1), num_minibatches)
    return jax.lax.scan(minibatch_step, carry, (minibatches, step_keys))[0], None

  total = jax.numpy.zeros((len(names),), jax.numpy.float32)
  (nets, opt_state, total), _ = jax.lax.scan(epoch, (nets, opt_state, total),
                                             jax.random.split(key, num_epochs))
  total = total / (num_epochs * num_minibatches)
  return nets, opt_state, {k: total[i] for i, k in enumerate(names)}
