"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"): maximum
entropy off-policy actor-critic for continuous actions, with an automatic temperature.

Three objectives, each with its own optimizer and parameters, applied in this order by
the framework's gradient step (`podracer.learning`):
  critic  twin Q regression to the soft target, using the target critic and the policy
  actor   minimise alpha log pi - min(Q1, Q2) through reparameterised actions
  alpha   keep the policy's entropy near `target_entropy` (default -|A|)
The target critic is a Polyak average of the critic (rate `tau`), owned by no optimizer:
it lives in the learner state (`podracer.learning.TargetState`), as R2D2's and MuZero's
target networks do, and the critic's loss gets it with the batch.

Experience is single transitions in a uniform replay (`replay.priority_exponent=0`), the
transition-replay kit's (podracer/kits/transition_replay.py), as TD3's.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from podracer import registry
from podracer.agent import dummy_observation
from podracer.components.losses import (soft_policy_loss, soft_q_target, temperature_loss,
                                        twin_q_loss)
from podracer.components.networks import GaussianPolicyNetwork
from podracer.kits.transition_replay import Transition, TransitionReplayAgent, transitions
from podracer.learning import Objective, gradient_step, update_target, with_target
from podracer.registry.ranges import Fraction, Positive, Probability
from podracer.types import ActorOutput, EnvSpec, PyTree, TimeStep

__all__ = ["SAC", "Transition", "transitions"]


@registry.agents.register("sac")
class SAC(TransitionReplayAgent):
  """Soft actor-critic with twin Q critics and a learned temperature."""

  def __init__(self, spec: EnvSpec, actor_network: GaussianPolicyNetwork,
               critic_network: hk.Transformed,
               actor_optimizer: optax.GradientTransformation,
               critic_optimizer: optax.GradientTransformation,
               alpha_optimizer: optax.GradientTransformation, replay: Any,
               discount: Annotated[float, Probability] = 0.99,
               tau: Annotated[float, Fraction] = 0.005,
               initial_alpha: Annotated[float, Positive] = 1.0,
               target_entropy: Optional[float] = None):
    objectives = (
        Objective("critic", self._critic_loss, critic_optimizer, owns=("critic",)),
        Objective("actor", self._actor_loss, actor_optimizer, owns=("actor",)),
        Objective("alpha", self._alpha_loss, alpha_optimizer, owns=("log_alpha",)))
    super().__init__(spec, objectives=objectives, replay=replay)
    self.check_replay(replay)
    if not 0 < tau <= 1 or not initial_alpha > 0:
      raise ValueError(f"`agent.tau` must be in (0, 1] and `agent.initial_alpha` > 0, got "
                       f"{tau} and {initial_alpha}.")
    self.actor, self.critic = actor_network, critic_network
    self.discount, self.tau, self.initial_alpha = discount, tau, initial_alpha
    # Haarnoja et al.'s heuristic: minus the number of action dimensions.
    self.target_entropy = (-float(np.prod(spec.action.shape)) if target_entropy is None
                           else float(target_entropy))

  # -- state -----------------------------------------------------------------------

  # init_experience (the replay's, for `replay_items`) is the base class's.

  def init_nets(self, key):
    actor_key, critic_key = jax.random.split(key)
    observation = dummy_observation(self.spec)
    action = jnp.zeros((1, *self.spec.action.shape), jnp.float32)
    critic = self.critic.init(critic_key, observation, action)
    return dict(actor=self.actor.init(actor_key, observation), critic=critic,
                log_alpha=jnp.asarray(np.log(self.initial_alpha), jnp.float32))

  def init_opt(self, nets):
    """One optimizer state per objective, and the target critic: a copy of the critic."""
    return with_target(super().init_opt(nets), nets["critic"])

  # -- acting and experience -------------------------------------------------------

  def act(self, nets, actor_state, timestep: TimeStep, key):
    action, _ = self.actor.sample(nets["actor"], timestep.observation, key)
    return ActorOutput(action, {}), actor_state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    del key  # The squashed Gaussian's mean.
    return ActorOutput(self.actor.mode(nets["actor"], timestep.observation), {}), actor_state

  # -- learning (replay and its pace: the kit's) -----------------------------------

  def learn(self, nets, opt, items: Transition, key):
    nets, optimizer, metrics = gradient_step(self.objectives, nets, opt.optimizer,
                                             (items, opt.target), key)
    opt = update_target(opt, optimizer, nets["critic"], tau=self.tau)
    return nets, opt, dict(metrics, alpha=jnp.exp(nets["log_alpha"]))

  def _critic_loss(self, nets, batch: Tuple[Transition, PyTree], key):
    batch, target_critic = batch
    alpha = jnp.exp(nets["log_alpha"])
    next_action, next_log_prob = self.actor.sample(nets["actor"], batch.next_observation,
                                                   key)
    next_q1, next_q2 = self.critic.apply(target_critic, batch.next_observation,
                                         next_action)
    target = soft_q_target(batch.reward, self.discount * batch.discount, next_q1, next_q2,
                           next_log_prob, alpha)
    q1, q2 = self.critic.apply(nets["critic"], batch.observation, batch.action)
    return twin_q_loss(q1, q2, target), dict(q_mean=jnp.mean(jnp.minimum(q1, q2)))

  def _actor_loss(self, nets, batch: Tuple[Transition, PyTree], key):
    batch, _ = batch
    action, log_prob = self.actor.sample(nets["actor"], batch.observation, key)
    q1, q2 = self.critic.apply(nets["critic"], batch.observation, action)
    loss = soft_policy_loss(log_prob, q1, q2, jnp.exp(nets["log_alpha"]))
    return loss, dict(entropy=-jnp.mean(log_prob))

  def _alpha_loss(self, nets, batch: Tuple[Transition, PyTree], key):
    batch, _ = batch
    _, log_prob = self.actor.sample(nets["actor"], batch.observation, key)
    return temperature_loss(nets["log_alpha"], log_prob, self.target_entropy), {}
