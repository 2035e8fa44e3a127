"""A2C (Mnih et al. 2016, synchronous): one gradient step per rollout of every environment,
on the policy gradient of n-step advantages plus a value loss and an entropy bonus."""

from typing import Annotated

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.agent import Agent, greedy
from podracer.components.losses import (categorical_entropy, categorical_log_prob,
                                        policy_gradient_batch)
from podracer.contracts import actor_critic_outputs
from podracer.learning import Objective, gradient_step
from podracer.registry.ranges import NonNegative, Probability
from podracer.types import ActorOutput


@registry.losses.register("a2c")
def a2c_loss(value_coef: Annotated[float, NonNegative] = 0.5,
             entropy_coef: Annotated[float, NonNegative] = 0.01):
  """-log pi(a|s) A + value_coef (V(s) - G)^2 / 2 - entropy_coef H(pi(.|s)), masked means."""

  def loss(logits, value, batch):
    mean = lambda x: jnp.sum(x * batch.mask) / jnp.maximum(jnp.sum(batch.mask), 1.0)
    advantage = jax.lax.stop_gradient(batch.advantage)
    policy_loss = -mean(categorical_log_prob(logits, batch.action) * advantage)
    value_loss = 0.5 * mean(jnp.square(value - batch.value_target))
    entropy = mean(categorical_entropy(logits))
    total = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return total, dict(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy)

  return loss


@registry.agents.register("a2c")
class A2C(Agent):
  """Acts by sampling its policy; learns once from each rollout, then forgets it."""

  def __init__(self, spec, network, loss, optimizer,
               discount: Annotated[float, Probability] = 0.99,
               gae_lambda: Annotated[float, Probability] = 1.0):
    super().__init__(spec, network, [Objective("a2c", self._loss, optimizer)])
    self.loss, self.discount, self.gae_lambda = loss, discount, gae_lambda

  def expected_outputs(self, batch_size):  # Checked against the network at build.
    return actor_critic_outputs(self.spec, batch_size)

  def act(self, nets, actor_state, timestep, key):
    out = self.network.apply(nets, timestep.observation)
    action = jax.random.categorical(key, out.logits).astype(jnp.int32)
    return ActorOutput(action, dict(log_prob=categorical_log_prob(out.logits, action),
                                    value=out.value)), actor_state

  def eval_act(self, nets, actor_state, timestep, key):
    return greedy(self.network.apply(nets, timestep.observation).logits), actor_state

  def observe(self, experience, trajectory):
    return trajectory  # On-policy: the newest rollout is all it learns from.

  def update(self, nets, opt, experience, key):
    batch = policy_gradient_batch(experience, self.discount, self.gae_lambda)
    nets, opt, metrics = gradient_step(self.objectives, nets, opt, batch, key)
    return nets, opt, experience, metrics

  def _loss(self, nets, batch, key):
    out = self.network.apply(nets, batch.observation)
    return self.loss(out.logits, out.value, batch)
