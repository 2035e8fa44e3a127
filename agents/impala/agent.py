"""IMPALA (Espeholt et al., 2018): actor-critic with V-trace off-policy corrections.

Written once for one replica; runs under Anakin and Sebulba unchanged. Actors may act
with slightly stale parameters (Sebulba's actor/learner lag); V-trace corrects for it
using the behaviour log-probabilities stored at acting time.
"""

from __future__ import annotations

from typing import Any, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.agent import Agent
from podracer.components.losses import categorical_log_prob, vtrace_batch
from podracer.types import ActorOutput, EnvSpec, PyTree, TimeStep, Trajectory, replica_mean


@registry.agents.register("impala")
class IMPALA(Agent):
  """One gradient step of a V-trace loss on each [T+1, B] trajectory."""

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: Any,
               optimizer: optax.GradientTransformation, discount: float = 0.99):
    super().__init__(spec)
    self.network = network
    self.loss = loss
    self.optimizer = optimizer
    self.discount = discount

  def init_nets(self, key):
    dummy = jax.tree.map(lambda s: jnp.zeros((1, *s.shape), s.dtype), self.spec.observation)
    return self.network.init(key, dummy)

  def init_opt(self, nets):
    return self.optimizer.init(nets)

  def init_experience(self, trajectory_spec: Trajectory) -> Trajectory:
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), trajectory_spec)

  def act(self, nets, actor_state, timestep: TimeStep, key) -> Tuple[ActorOutput, PyTree]:
    logits = self.network.apply(nets, timestep.observation).logits
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    extras = dict(log_prob=categorical_log_prob(logits, action))
    return ActorOutput(action, extras), actor_state

  def observe(self, experience, trajectory: Trajectory) -> Trajectory:
    del experience  # On-policy up to the actors' lag: learn from the newest trajectory.
    return trajectory

  def update(self, nets, opt, experience: Trajectory, key):
    del key
    batch = vtrace_batch(experience.timestep, experience.action,
                         experience.extras["log_prob"], discount=self.discount)
    time_and_batch = experience.action.shape[:2]

    def loss_fn(params):
      # Feedforward nets see T+1 steps of B envs as one batch of (T+1)*B observations.
      flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]),
                          experience.timestep.observation)
      out = self.network.apply(params, flat)
      logits = out.logits.reshape(*time_and_batch, -1)
      values = out.value.reshape(time_and_batch)
      return self.loss(logits[:-1], values, batch)

    grads, metrics = jax.grad(loss_fn, has_aux=True)(nets)
    grads = replica_mean(grads)
    updates, opt = self.optimizer.update(grads, opt, nets)
    return optax.apply_updates(nets, updates), opt, experience, metrics
