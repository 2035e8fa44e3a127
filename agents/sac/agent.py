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

Experience is single transitions in a uniform replay (`replay.priority_exponent=0`).
Transitions out of a LAST step (whose action the environment ignored) go in with
priority 0, so they are never sampled.
"""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from podracer import registry
from podracer.agent import Agent, dummy_observation
from podracer.components.losses import (soft_policy_loss, soft_q_target, temperature_loss,
                                        twin_q_loss)
from podracer.components.networks import GaussianPolicyNetwork
from podracer.learning import Objective, gradient_step, update_target, with_target
from podracer.registry.ranges import Fraction, Positive, Probability
from podracer.types import ActorOutput, EnvSpec, PyTree, StepType, TimeStep, Trajectory


class Transition(NamedTuple):
  """One step of one environment, as the replay keeps it."""
  observation: Any
  action: jax.Array
  reward: jax.Array         # the reward that arrived with next_observation
  discount: jax.Array       # the environment's: 0 at termination, else 1
  next_observation: Any


def transitions(trajectory: Trajectory):
  """A [T+1, B] trajectory -> T*B transitions, and whether each is real ([T*B] bool).

  A transition out of a LAST step is not: the next step is a reset that ignored the action.
  """
  flat = lambda x: x.reshape(-1, *x.shape[2:])
  timestep = trajectory.timestep
  items = Transition(
      observation=jax.tree.map(lambda x: flat(x[:-1]), timestep.observation),
      action=flat(trajectory.action[:-1]),
      reward=flat(timestep.reward[1:]),
      discount=flat(timestep.discount[1:]),
      next_observation=jax.tree.map(lambda x: flat(x[1:]), timestep.observation))
  return items, flat(timestep.step_type[:-1] != StepType.LAST)


@registry.agents.register("sac")
class SAC(Agent):
  """Soft actor-critic with twin Q critics and a learned temperature."""

  action_kind = "continuous"

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
    if getattr(replay, "kind", None) != "device" or replay.priority_exponent != 0:
      raise ValueError("SAC replays transitions uniformly from the device replay: use "
                       "`replay.name=device` with `replay.priority_exponent=0`.")
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

  def replay_items(self, trajectory: Trajectory) -> Transition:
    return transitions(trajectory)[0]

  def observe(self, experience, trajectory: Trajectory):
    items, real = transitions(trajectory)
    return self.replay.add(experience, items, priorities=real.astype(jnp.float32))

  # -- learning --------------------------------------------------------------------

  def update(self, nets, opt, experience, key):
    def learn(args):
      nets, opt, experience = args
      sample_key, step_key = jax.random.split(key)
      sample = self.replay.sample(experience, sample_key)
      nets, optimizer, metrics = gradient_step(self.objectives, nets, opt.optimizer,
                                               (sample.items, opt.target), step_key)
      opt = update_target(opt, optimizer, nets["critic"], tau=self.tau)
      # Priorities stay 1 (uniform replay); this counts the samples for the replay's
      # rate metrics.
      experience = self.replay.update_priorities(
          experience, sample, jnp.ones_like(sample.probabilities))
      metrics = dict(metrics, alpha=jnp.exp(nets["log_alpha"]), learning=jnp.float32(1.0))
      return (nets, opt, experience), metrics

    def wait(args):
      shapes = jax.eval_shape(learn, args)[1]
      return args, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    (nets, opt, experience), metrics = jax.lax.cond(
        self.replay.can_sample(experience), learn, wait, (nets, opt, experience))
    metrics["replay_size"] = self.replay.size(experience).astype(jnp.float32)
    return nets, opt, experience, metrics

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
