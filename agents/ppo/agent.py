"""PPO (Schulman et al., 2017): on-policy actor-critic with a clipped surrogate objective.

Written once for one replica; runs under Anakin, Sebulba and SEED unchanged. The loss is
a component (`config.loss.name`): new clipped objectives plug in without touching this file.
"""

from __future__ import annotations

from typing import Annotated, Any

import haiku as hk
import optax

from podracer import registry
from podracer.agent import legal
from podracer.components.losses import PolicyGradientBatch, policy_gradient_batch
from podracer.kits import ActorCriticAgent
from podracer.learning import Objective, minibatch_epochs
from podracer.registry.ranges import Probability
from podracer.types import EnvSpec, Trajectory


@registry.agents.register("ppo")
class PPO(ActorCriticAgent):
  """PPO with GAE, several epochs of minibatch updates per trajectory batch. Acting,
  evaluation and observing are the actor-critic kit's (podracer/kits/actor_critic.py)."""

  keeps_value = True  # GAE bootstraps from the values the actors saw.

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: Any,
               optimizer: optax.GradientTransformation,
               discount: Annotated[float, Probability] = 0.99,
               gae_lambda: Annotated[float, Probability] = 0.95,
               num_epochs: int = 4, num_minibatches: int = 4, meta_loss: Any = None,
               distribution: Any = None, observation_normalizer: Any = None,
               reward_normalizer: Any = None, gae_window: int = 0,
               advantage_form: str = "gae"):
    super().__init__(spec, network, [Objective("ppo", self._loss, optimizer)], loss=loss,
                     distribution=distribution, observation_normalizer=observation_normalizer,
                     reward_normalizer=reward_normalizer)
    self.discount = discount
    self.gae_lambda = gae_lambda
    self.gae_window = gae_window  # >0: GAE over windows of that many steps (Brax's unrolls).
    self.advantage_form = advantage_form  # "gae", or "brax": r + gamma v' - V (docs/agents.md)
    self.num_epochs = num_epochs
    self.num_minibatches = num_minibatches
    self.meta_loss = meta_loss  # Adapts discount and lambda online, if given.

  def policy_lag_corrected(self):  # Any: the ratio is to the policy that acted.
    return None

  @classmethod
  def gradient_steps_per_update(cls, num_epochs: int, num_minibatches: int,
                                **unused: Any) -> int:
    return num_epochs * num_minibatches

  def meta_values(self):
    return {"discount": self.discount, "lambda": self.gae_lambda}

  def learning_batch(self, trajectory: Trajectory, values) -> PolicyGradientBatch:
    return policy_gradient_batch(trajectory, values["discount"], values["lambda"],
                                 self.gae_window, self.advantage_form)

  def update(self, nets, opt, experience: Trajectory, key):
    nets, opt, trajectory, shaped = self.prepare(nets, opt, experience)
    values, opt, meta = self.adapted(nets, opt, trajectory)
    nets, opt, metrics = minibatch_epochs(
        self.objectives, nets, opt, self.learning_batch(trajectory, values), key,
        num_epochs=self.num_epochs, num_minibatches=self.num_minibatches)
    return nets, opt, experience, {**metrics, **meta, **shaped}

  def _loss(self, nets, minibatch: PolicyGradientBatch, key):
    out = self.network.apply(nets, minibatch.observation)
    policy = self.policy_input(legal(out.logits, minibatch.observation), key)
    return self.loss(policy, out.value, minibatch)
