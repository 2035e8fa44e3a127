"""IMPALA (Espeholt et al., 2018): actor-critic with V-trace off-policy corrections.

Written once for one replica; runs under Anakin and Sebulba unchanged. Actors may act
with slightly stale parameters (Sebulba's actor/learner lag); V-trace corrects for it
using the behaviour log-probabilities stored at acting time.
"""

from __future__ import annotations

from typing import Annotated, Any

import haiku as hk
import jax
import optax

from podracer import registry
from podracer.agent import legal
from podracer.components.losses import learned_action, vtrace_batch
from podracer.kits import ActorCriticAgent
from podracer.learning import Objective, gradient_step
from podracer.registry.ranges import Probability
from podracer.types import EnvSpec, Trajectory


@registry.agents.register("impala")
class IMPALA(ActorCriticAgent):
  """One gradient step of a V-trace loss on each [T+1, B] trajectory. Acting,
  evaluation and observing are the actor-critic kit's (podracer/kits/actor_critic.py)."""

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: Any,
               optimizer: optax.GradientTransformation,
               discount: Annotated[float, Probability] = 0.99, meta_loss: Any = None,
               distribution: Any = None, observation_normalizer: Any = None,
               reward_normalizer: Any = None):
    super().__init__(spec, network, [Objective("impala", self._loss, optimizer)], loss=loss,
                     distribution=distribution, observation_normalizer=observation_normalizer,
                     reward_normalizer=reward_normalizer)
    self.discount = discount
    self.meta_loss = meta_loss  # Adapts discount and V-trace's lambda online, if given.

  def policy_lag_corrected(self):  # Any: V-trace corrects for the policy that acted.
    return None

  def meta_values(self):
    return {"discount": self.discount, "lambda": self.loss.lambda_}

  def learning_batch(self, trajectory: Trajectory, values):
    return trajectory, vtrace_batch(trajectory.timestep, learned_action(trajectory),
                                    trajectory.extras["log_prob"],
                                    discount=values["discount"]), values["lambda"]

  def update(self, nets, opt, experience: Trajectory, key):
    nets, opt, trajectory, shaped = self.prepare(nets, opt, experience)
    values, opt, meta = self.adapted(nets, opt, trajectory)
    nets, opt, metrics = gradient_step(self.objectives, nets, opt,
                                       self.learning_batch(trajectory, values), key)
    return nets, opt, experience, {**metrics, **meta, **shaped}

  def _loss(self, nets, learning_batch, key):
    experience, batch, lambda_ = learning_batch
    time_and_batch = experience.action.shape[:2]
    # Feedforward nets see T+1 steps of B envs as one batch of (T+1)*B observations.
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]),
                        experience.timestep.observation)
    out = self.network.apply(nets, flat)
    logits = legal(out.logits, flat).reshape(*time_and_batch, -1)
    values = out.value.reshape(time_and_batch)
    return self.loss(self.policy_input(logits[:-1], key), values, batch, lambda_=lambda_)
