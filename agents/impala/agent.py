"""IMPALA (Espeholt et al., 2018): actor-critic with V-trace off-policy corrections.

Written once for one replica; runs under Anakin and Sebulba unchanged. Actors may act
with slightly stale parameters (Sebulba's actor/learner lag); V-trace corrects for it
using the behaviour log-probabilities stored at acting time.
"""

from __future__ import annotations

from typing import Annotated, Any, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.agent import Agent, greedy, legal
from podracer.components.losses import categorical_log_prob, vtrace_batch
from podracer.contracts import actor_critic_outputs
from podracer.learning import Objective, gradient_step
from podracer.registry.ranges import Probability
from podracer.types import ActorOutput, EnvSpec, PyTree, TimeStep, Trajectory


@registry.agents.register("impala")
class IMPALA(Agent):
  """One gradient step of a V-trace loss on each [T+1, B] trajectory."""

  action_masks = True  # `legal` logits: illegal actions are never sampled.

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: Any,
               optimizer: optax.GradientTransformation,
               discount: Annotated[float, Probability] = 0.99, meta_loss: Any = None):
    super().__init__(spec, network, [Objective("impala", self._loss, optimizer)])
    self.loss = loss
    self.discount = discount
    self.meta_loss = meta_loss  # Adapts discount and V-trace's lambda online, if given.

  def policy_lag_corrected(self):  # Any: V-trace corrects for the policy that acted.
    return None

  def expected_outputs(self, batch_size):
    return actor_critic_outputs(self.spec, batch_size)

  def act(self, nets, actor_state, timestep: TimeStep, key) -> Tuple[ActorOutput, PyTree]:
    logits = legal(self.network.apply(nets, timestep.observation).logits,
                   timestep.observation)
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    extras = dict(log_prob=categorical_log_prob(logits, action))
    return ActorOutput(action, extras), actor_state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    del key  # Greedy.
    logits = self.network.apply(nets, timestep.observation).logits
    return greedy(legal(logits, timestep.observation)), actor_state

  def observe(self, experience, trajectory: Trajectory) -> Trajectory:
    del experience  # On-policy up to the actors' lag: learn from the newest trajectory.
    return trajectory

  def meta_values(self):
    return {"discount": self.discount, "lambda": self.loss.lambda_}

  def learning_batch(self, trajectory: Trajectory, values):
    return trajectory, vtrace_batch(trajectory.timestep, trajectory.action,
                                    trajectory.extras["log_prob"],
                                    discount=values["discount"]), values["lambda"]

  def update(self, nets, opt, experience: Trajectory, key):
    values, opt, meta = self.adapted(nets, opt, experience)
    nets, opt, metrics = gradient_step(self.objectives, nets, opt,
                                       self.learning_batch(experience, values), key)
    return nets, opt, experience, {**metrics, **meta}

  def _loss(self, nets, learning_batch, key):
    del key
    experience, batch, lambda_ = learning_batch
    time_and_batch = experience.action.shape[:2]
    # Feedforward nets see T+1 steps of B envs as one batch of (T+1)*B observations.
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]),
                        experience.timestep.observation)
    out = self.network.apply(nets, flat)
    logits = legal(out.logits, flat).reshape(*time_and_batch, -1)
    values = out.value.reshape(time_and_batch)
    return self.loss(logits[:-1], values, batch, lambda_=lambda_)
