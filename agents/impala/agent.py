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
               discount: Annotated[float, Probability] = 0.99):
    super().__init__(spec, network, [Objective("impala", self._loss, optimizer)])
    self.loss = loss
    self.discount = discount

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

  def update(self, nets, opt, experience: Trajectory, key):
    batch = vtrace_batch(experience.timestep, experience.action,
                         experience.extras["log_prob"], discount=self.discount)
    nets, opt, metrics = gradient_step(self.objectives, nets, opt, (experience, batch), key)
    return nets, opt, experience, metrics

  def _loss(self, nets, experience_and_batch, key):
    del key
    experience, batch = experience_and_batch
    time_and_batch = experience.action.shape[:2]
    # Feedforward nets see T+1 steps of B envs as one batch of (T+1)*B observations.
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]),
                        experience.timestep.observation)
    out = self.network.apply(nets, flat)
    logits = legal(out.logits, flat).reshape(*time_and_batch, -1)
    values = out.value.reshape(time_and_batch)
    return self.loss(logits[:-1], values, batch)
