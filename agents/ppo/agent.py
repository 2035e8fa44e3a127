"""PPO (Schulman et al., 2017): on-policy actor-critic with a clipped surrogate objective.

Written once for one replica; runs under Anakin, Sebulba and SEED unchanged. The loss is
a component (`config.loss.name`): new clipped objectives plug in without touching this file.
"""

from __future__ import annotations

from typing import Annotated, Any, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.agent import Agent, greedy, legal
from podracer.components.losses import (PolicyGradientBatch, categorical_log_prob,
                                        policy_gradient_batch)
from podracer.contracts import actor_critic_outputs
from podracer.learning import Objective, minibatch_epochs
from podracer.registry.ranges import Probability
from podracer.types import ActorOutput, EnvSpec, PyTree, TimeStep, Trajectory


@registry.agents.register("ppo")
class PPO(Agent):
  """PPO with GAE, several epochs of minibatch updates per trajectory batch."""

  action_masks = True  # `legal` logits: illegal actions are never sampled.

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: Any,
               optimizer: optax.GradientTransformation,
               discount: Annotated[float, Probability] = 0.99,
               gae_lambda: Annotated[float, Probability] = 0.95,
               num_epochs: int = 4, num_minibatches: int = 4, meta_loss: Any = None):
    super().__init__(spec, network, [Objective("ppo", self._loss, optimizer)])
    self.loss = loss
    self.discount = discount
    self.gae_lambda = gae_lambda
    self.num_epochs = num_epochs
    self.num_minibatches = num_minibatches
    self.meta_loss = meta_loss  # Adapts discount and lambda online, if given.

  def policy_lag_corrected(self):  # Any: the ratio is to the policy that acted.
    return None

  @classmethod
  def gradient_steps_per_update(cls, num_epochs: int, num_minibatches: int,
                                **unused: Any) -> int:
    return num_epochs * num_minibatches

  def expected_outputs(self, batch_size):
    return actor_critic_outputs(self.spec, batch_size)

  def act(self, nets, actor_state, timestep: TimeStep, key) -> Tuple[ActorOutput, PyTree]:
    out = self.network.apply(nets, timestep.observation)
    logits = legal(out.logits, timestep.observation)
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    extras = dict(log_prob=categorical_log_prob(logits, action), value=out.value)
    return ActorOutput(action, extras), actor_state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    del key  # Greedy.
    logits = self.network.apply(nets, timestep.observation).logits
    return greedy(legal(logits, timestep.observation)), actor_state

  def observe(self, experience, trajectory: Trajectory) -> Trajectory:
    del experience  # On-policy: learn from the newest trajectory only.
    return trajectory

  def meta_values(self):
    return {"discount": self.discount, "lambda": self.gae_lambda}

  def learning_batch(self, trajectory: Trajectory, values) -> PolicyGradientBatch:
    return policy_gradient_batch(trajectory, values["discount"], values["lambda"])

  def update(self, nets, opt, experience: Trajectory, key):
    values, opt, meta = self.adapted(nets, opt, experience)
    nets, opt, metrics = minibatch_epochs(
        self.objectives, nets, opt, self.learning_batch(experience, values), key,
        num_epochs=self.num_epochs, num_minibatches=self.num_minibatches)
    return nets, opt, experience, {**metrics, **meta}

  def _loss(self, nets, minibatch: PolicyGradientBatch, key):
    del key
    out = self.network.apply(nets, minibatch.observation)
    return self.loss(legal(out.logits, minibatch.observation), out.value, minibatch)
