"""Recurrent PPO: PPO with memory. An LSTM (`recurrent_actor_critic`) carries its state
through the rollout, restarting at episode starts; the update replays each
environment's rollout as one sequence from the state it started with, minibatches being
sets of environments, not of steps. The loss, GAE and optimizer are PPO's (agent.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from podracer import registry
from podracer.agent import legal
from podracer.components.losses import policy_gradient_batch
from podracer.types import StepType, TimeStep, Trajectory

from agents.ppo.agent import PPO


def sequences(trajectory: Trajectory, discount: float, gae_lambda: float):
  """A [T+1, B] trajectory as B sequences: PPO's transitions [B, T, ...], the resets
  [B, T] (true at an episode's first step) and the state each sequence started from."""
  steps, envs = trajectory.action.shape[0] - 1, trajectory.action.shape[1]
  env_major = lambda x: jnp.swapaxes(x.reshape(steps, envs, *x.shape[1:]), 0, 1)
  batch = jax.tree.map(env_major, policy_gradient_batch(trajectory, discount, gae_lambda))
  reset = jnp.swapaxes(trajectory.timestep.step_type[:-1] == StepType.FIRST, 0, 1)
  return batch, reset, jax.tree.map(lambda x: x[0], trajectory.actor_state)


@registry.agents.register("ppo_recurrent")
class RecurrentPPO(PPO):
  """PPO over sequences with an LSTM; `num_minibatches` must divide the environments."""

  def init_policy_state(self, key, num_envs):
    del key
    return self.network.initial_state(num_envs)

  def network_outputs(self, nets, observation):
    batch = jax.tree.leaves(observation)[0].shape[0]
    return self.network.step(nets, observation, self.network.initial_state(batch),
                             jnp.zeros((batch,), bool))[0]

  def policy(self, nets, actor_state, timestep: TimeStep):
    """One step of the LSTM (its state restarting at episode starts): the kit's `act`
    and `eval_act` (podracer/kits/actor_critic.py) sample and take the greedy action."""
    out, state = self.network.step(nets, timestep.observation, actor_state,
                                   timestep.step_type == StepType.FIRST)
    return legal(out.logits, timestep.observation), out.value, state

  def learning_batch(self, trajectory: Trajectory, values):
    trajectory = trajectory._replace(actor_state=self.policy_state(trajectory.actor_state))
    return sequences(trajectory, values["discount"], values["lambda"])

  def _loss(self, nets, minibatch, key):
    batch, reset, state = minibatch  # [b, T, ...] sequences of b environments
    batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)
    out, _ = self.network.unroll(nets, batch.observation, state, jnp.swapaxes(reset, 0, 1))
    flat = lambda x: x.reshape(-1, *x.shape[2:])
    logits = legal(out.logits, batch.observation)
    return self.loss(self.policy_input(flat(logits), key), flat(out.value),
                     jax.tree.map(flat, batch))
