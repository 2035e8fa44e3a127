"""PQN (Gallici et al., "Simplifying Deep Temporal Difference Learning", ICLR 2025):
Q-learning over many environments with no replay and no target network.

Each rollout's Q(lambda) targets are computed once, before the update (the `q_lambda`
loss), from the Q-values the actors computed while acting (`acting_q_targets`, as
purejaxql; else from the learner's network, one more forward pass over the rollout).
Then `num_epochs` x `num_minibatches` gradient steps regress the taken actions' values
on them, as PPO's epochs do; LayerNorm in the network (`network.layer_norm`) stands in
for the target network. Acting is epsilon-greedy with epsilon annealed linearly from
`eps_start` to `eps_finish` over the first `eps_decay` of the run's updates (purejaxql's
EPS_DECAY); `eval_act` is greedy. The update count the schedule reads travels with the
parameters (`nets["updates"]`), so Sebulba's and SEED's actors see the learner's.

Written once for one replica; runs under Anakin, Sebulba and SEED unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from podracer import registry
from podracer.agent import Agent, dummy_observation, legal
from podracer.components.losses import QLambdaLoss
from podracer.learning import Objective, minibatch_epochs
from podracer.kits.q_learning import epsilon_greedy_actions
from podracer.registry.ranges import Fraction, NonNegative, Positive, Probability
from podracer.types import ActorOutput, EnvSpec, TimeStep, Trajectory, action_mask


@registry.agents.register("pqn")
class PQN(Agent):
  """Epsilon-greedy acting; Q(lambda) regression in minibatch epochs over each rollout."""

  action_masks = True  # Acting, argmax and the lambda-returns' max over legal actions.

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: QLambdaLoss,
               optimizer: optax.GradientTransformation, total_updates: int,
               discount: Annotated[float, Probability] = 0.99,
               lam: Annotated[float, Probability] = 0.65,
               eps_start: Annotated[float, Probability] = 1.0,
               eps_finish: Annotated[float, Probability] = 0.05,
               eps_decay: Annotated[float, Fraction] = 0.1,
               num_epochs: int = 2, num_minibatches: int = 32,
               reward_scale: Annotated[float, Positive] = 1.0,
               eval_epsilon: Annotated[float, NonNegative] = 0.0,
               acting_q_targets: bool = True):
    if eps_start < eps_finish:
      raise ValueError(f"`agent.eps_start` ({eps_start}) must be at least `agent.eps_finish` "
                       f"({eps_finish}): epsilon anneals down from one to the other.")
    super().__init__(spec, network, [Objective("pqn", self._loss, optimizer, owns=("q",))])
    self.q_lambda = loss
    self.discount, self.lam, self.reward_scale = discount, lam, reward_scale
    self.eps_start, self.eps_finish, self.eval_epsilon = eps_start, eps_finish, eval_epsilon
    self.decay_updates = max(1.0, eps_decay * total_updates)
    self.num_epochs, self.num_minibatches = num_epochs, num_minibatches
    self.acting_q_targets = acting_q_targets

  def policy_lag_corrected(self):  # Any: Q-learning's targets are off-policy.
    return None

  @classmethod
  def gradient_steps_per_update(cls, num_epochs: int, num_minibatches: int,
                                **unused: Any) -> int:
    return num_epochs * num_minibatches

  def init_nets(self, key):
    return dict(q=self.network.init(key, dummy_observation(self.spec)),
                updates=jnp.zeros((), jnp.int32))

  def expected_outputs(self, batch_size):
    return dict(q_values=((batch_size, self.spec.action.num_values), np.floating))

  def network_outputs(self, nets, observation):
    return dict(q_values=self.network.apply(nets["q"], observation))

  def epsilon(self, updates: jax.Array) -> jax.Array:
    """eps_start -> eps_finish linearly over the first eps_decay of the run's updates."""
    done = jnp.clip(updates.astype(jnp.float32) / self.decay_updates, 0.0, 1.0)
    return self.eps_start + (self.eps_finish - self.eps_start) * done

  def act(self, nets, actor_state, timestep: TimeStep, key):
    q = legal(self.network.apply(nets["q"], timestep.observation), timestep.observation)
    action = epsilon_greedy_actions(q, self.epsilon(nets["updates"]), key,
                                    action_mask(timestep.observation))
    extras = dict(q_values=q) if self.acting_q_targets else {}
    return ActorOutput(action, extras), actor_state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    """Greedy (`eval_epsilon` 0, the default), else epsilon-greedy at that rate."""
    q = self.network.apply(nets["q"], timestep.observation)
    action = epsilon_greedy_actions(q, self.eval_epsilon, key,
                                    action_mask(timestep.observation))
    return ActorOutput(action, {}), actor_state

  def observe(self, experience, trajectory: Trajectory) -> Trajectory:
    del experience  # No replay: learn from the newest rollout only.
    return trajectory

  def update(self, nets, opt, experience: Trajectory, key):
    timestep = experience.timestep._replace(
        reward=experience.timestep.reward * self.reward_scale)
    steps, batch = timestep.step_type.shape
    target, mask = self.q_lambda.targets(self._rollout_q(nets, experience), timestep,
                                         self.discount, self.lam)
    learned = lambda x: x[:-1].reshape((steps - 1) * batch, *x.shape[2:])
    transitions = (jax.tree.map(learned, timestep.observation), learned(experience.action),
                   target.reshape(-1), mask.reshape(-1))
    nets, opt, metrics = minibatch_epochs(
        self.objectives, nets, opt, transitions, key, num_epochs=self.num_epochs,
        num_minibatches=self.num_minibatches)
    metrics = dict(metrics, epsilon=self.epsilon(nets["updates"]))
    return dict(nets, updates=nets["updates"] + 1), opt, experience, metrics

  def _rollout_q(self, nets, experience: Trajectory) -> jax.Array:
    """Q-values [T+1, B, A] of the rollout's steps for its targets: those acted with, or
    the learner's. Under Anakin the two are the same network (the targets read steps 1 to
    T, acted after the last update); under Sebulba and SEED the actors' parameters lag
    the learner's by at most `max_policy_lag` updates, a target network that young."""
    if self.acting_q_targets:
      return experience.extras["q_values"]
    observation = experience.timestep.observation
    steps, batch = experience.action.shape[:2]
    flat = jax.tree.map(lambda x: x.reshape(steps * batch, *x.shape[2:]), observation)
    return legal(self.network.apply(nets["q"], flat), flat).reshape(steps, batch, -1)

  def _loss(self, nets, minibatch, key):
    del key
    observation, action, target, mask = minibatch
    q = self.network.apply(nets["q"], observation)
    q_taken = jnp.take_along_axis(q, action[:, None], -1)[:, 0]
    return self.q_lambda(q_taken, target, mask)
