"""TD3 (Fujimoto, van Hoof and Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods"): a deterministic actor mu and twin critics Q1, Q2, with

  target   y = r + gamma d min(Q1', Q2')(s', clip(mu'(s') + clip(e, -c, c), bounds)),
           e ~ N(0, sigma'^2) per dimension (target policy smoothing), primes the targets
  critic   0.5 (Q1 - y)^2 + 0.5 (Q2 - y)^2, every update
  actor    -Q1(s, mu(s)), every `policy_delay` updates, and the targets (actor and
           critic) Polyak-averaged by `tau` at those updates only

acting mu(s) plus N(0, sigma^2) exploration noise, clipped to the bounds. Noise scales
are fractions of the action bounds' half-width, as CleanRL's `td3_continuous_action`
scales them. The replay, its warm-up (`replay.min_size`) and the twin-Q regression are
SAC's (podracer/kits/transition_replay.py, podracer/components/losses/sac.py).
"""

from __future__ import annotations

from typing import Annotated, Any

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.agent import dummy_observation
from podracer.components.losses import twin_q_loss
from podracer.components.networks import DeterministicPolicyNetwork
from podracer.kits.transition_replay import (Transition, TransitionReplayAgent,
                                             gaussian_exploration)
from podracer.learning import STEP, Objective, gradient_step, update_target, with_target
from podracer.registry.ranges import Fraction, NonNegative, Positive, Probability
from podracer.types import ActorOutput, EnvSpec, TimeStep


@registry.agents.register("td3")
class TD3(TransitionReplayAgent):
  """Twin delayed DDPG."""

  def __init__(self, spec: EnvSpec, actor_network: DeterministicPolicyNetwork,
               critic_network: hk.Transformed,
               actor_optimizer: optax.GradientTransformation,
               critic_optimizer: optax.GradientTransformation, replay: Any,
               discount: Annotated[float, Probability] = 0.99,
               tau: Annotated[float, Fraction] = 0.005, policy_delay: int = 2,
               exploration_noise: Annotated[float, NonNegative] = 0.1,
               target_noise: Annotated[float, NonNegative] = 0.2,
               target_noise_clip: Annotated[float, Positive] = 0.5):
    self.critic_objective = Objective("critic", self._critic_loss, critic_optimizer,
                                      owns=("critic",))
    self.actor_objective = Objective("actor", self._actor_loss, actor_optimizer,
                                     owns=("actor",))
    super().__init__(spec, objectives=(self.critic_objective, self.actor_objective),
                     replay=replay)
    self.check_replay(replay)
    if int(policy_delay) < 1:
      raise ValueError(f"`agent.policy_delay` must be at least 1, got {policy_delay}.")
    self.actor, self.critic = actor_network, critic_network
    self.discount, self.tau, self.policy_delay = discount, tau, int(policy_delay)
    self.half_width = jnp.asarray((actor_network.maximum - actor_network.minimum) / 2)
    self.minimum, self.maximum = actor_network.minimum, actor_network.maximum
    self.exploration_noise = exploration_noise
    self.target_noise, self.target_noise_clip = target_noise, target_noise_clip

  def init_nets(self, key):
    actor_key, critic_key = jax.random.split(key)
    observation = dummy_observation(self.spec)
    action = jnp.zeros((1, *self.spec.action.shape), jnp.float32)
    return dict(actor=self.actor.init(actor_key, observation),
                critic=self.critic.init(critic_key, observation, action))

  def init_opt(self, nets):
    """The objectives' optimizer states, and the targets: copies of actor and critic."""
    return with_target(super().init_opt(nets), dict(nets))

  def _noisy(self, action, key, scale, clip=None):
    return gaussian_exploration(action, key, scale, self.minimum, self.maximum, clip)

  def act(self, nets, actor_state, timestep: TimeStep, key):
    action = self.actor.apply(nets["actor"], timestep.observation)
    return ActorOutput(self._noisy(action, key, self.exploration_noise), {}), actor_state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    del key  # mu(s) itself.
    return ActorOutput(self.actor.apply(nets["actor"], timestep.observation), {}), actor_state

  def learn(self, nets, opt, items: Transition, key):
    critic_key, actor_key = jax.random.split(key)
    batch = (items, opt.target)
    nets, optimizer, critic = gradient_step((self.critic_objective,), nets, opt.optimizer,
                                            batch, critic_key)
    delayed = (opt.updates + 1) % self.policy_delay == 0

    def actor_step(args):
      nets, optimizer = args
      new_nets, new_optimizer, metrics = gradient_step((self.actor_objective,), nets,
                                                       optimizer, batch, actor_key)
      new_optimizer[STEP] = optimizer[STEP]  # One gradient step per update, counted once.
      return (new_nets, new_optimizer), metrics

    def no_step(args):
      return args, jax.tree.map(jnp.zeros_like, jax.eval_shape(actor_step, args)[1])

    (nets, optimizer), actor = jax.lax.cond(delayed, actor_step, no_step, (nets, optimizer))
    opt = update_target(opt, optimizer, dict(actor=nets["actor"], critic=nets["critic"]),
                        tau=jnp.where(delayed, self.tau, 0.0))
    metrics = {**{f"critic_{k}": v for k, v in critic.items()},
               **{f"actor_{k}": v for k, v in actor.items()},
               "actor_updated": delayed.astype(jnp.float32)}
    return nets, opt, metrics

  def _critic_loss(self, nets, batch, key):
    items, target = batch
    next_action = self._noisy(self.actor.apply(target["actor"], items.next_observation), key,
                              self.target_noise, self.target_noise_clip)
    next_q1, next_q2 = self.critic.apply(target["critic"], items.next_observation,
                                         next_action)
    y = items.reward + self.discount * items.discount * jnp.minimum(next_q1, next_q2)
    q1, q2 = self.critic.apply(nets["critic"], items.observation, items.action)
    return twin_q_loss(q1, q2, y), dict(q_mean=jnp.mean(jnp.minimum(q1, q2)))

  def _actor_loss(self, nets, batch, key):
    del key  # Deterministic.
    items, _ = batch
    action = self.actor.apply(nets["actor"], items.observation)
    q1, _ = self.critic.apply(nets["critic"], items.observation, action)
    return -jnp.mean(q1), {}
