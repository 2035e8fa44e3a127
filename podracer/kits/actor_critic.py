"""What the on-policy actor-critic agents share (PPO, recurrent PPO, IMPALA, and yours):
a network that gives a policy's logits and a value (`policy`), acting by sampling the
legal logits (`act`, the log-probability kept for the loss), greedy evaluation
(`eval_act`), and learning from the newest trajectory only (`observe`). Their discount
and lambda can be meta-learned (podracer/kits/meta_gradient.py).
"""

from __future__ import annotations

from typing import Dict, Tuple

import jax
import jax.numpy as jnp

from podracer.agent import greedy, legal
from podracer.components.losses import categorical_log_prob
from podracer.contracts import actor_critic_outputs
from podracer.kits.meta_gradient import MetaGradientAgent
from podracer.types import ActorOutput, PyTree, TimeStep, Trajectory


class ActorCriticAgent(MetaGradientAgent):
  """Acts with a categorical policy over the legal actions; subclasses write `update`.

  `keeps_value`: whether `act` keeps the value with each step (`extras["value"]`), for
  losses that use the acting value (PPO's GAE); the log-probability is always kept.
  """

  action_masks = True  # `legal` logits: illegal actions are never sampled.
  keeps_value = False

  def expected_outputs(self, batch_size):
    return actor_critic_outputs(self.spec, batch_size)

  def policy(self, nets, actor_state, timestep: TimeStep) -> Tuple[jax.Array, jax.Array, PyTree]:
    """(legal logits [B, A], value [B], the next actor state) for one step; a
    feed-forward network by default (a recurrent agent overrides it)."""
    out = self.network.apply(nets, timestep.observation)
    return legal(out.logits, timestep.observation), out.value, actor_state

  def act(self, nets, actor_state, timestep: TimeStep, key) -> Tuple[ActorOutput, PyTree]:
    logits, value, actor_state = self.policy(nets, actor_state, timestep)
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    extras = dict(log_prob=categorical_log_prob(logits, action))
    if self.keeps_value:
      extras["value"] = value
    return ActorOutput(action, extras), actor_state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    del key  # Greedy.
    logits, _, actor_state = self.policy(nets, actor_state, timestep)
    return greedy(logits), actor_state

  def observe(self, experience, trajectory: Trajectory) -> Trajectory:
    del experience  # On-policy (up to the actors' lag): learn from the newest trajectory.
    return trajectory

  def shape_trajectory(self, nets: PyTree, opt: PyTree, trajectory: Trajectory
                       ) -> Tuple[Trajectory, PyTree, Dict[str, jax.Array]]:
    """(the trajectory the update learns from, the learner state, metrics): where an
    agent rewrites its trajectory with the network's parameters before any target is
    computed (an intrinsic reward, reward shaping), keeping state of its own in the
    learner state `opt` (a dict: running statistics under a key of its own, which
    checkpoints keep and resume). The trajectory as it is by default."""
    del nets
    return trajectory, opt, {}
