"""DQN (Mnih et al., 2015) as peers ship it: double Q-learning (van Hasselt et al., 2016),
n-step returns, an optional dueling head (`network.dueling`, Wang et al., 2016) and
prioritized replay (`replay.priority_exponent`; 0 is uniform).

Written once for one replica, like every agent here, and built from registered parts:
the `q_network` network, the `q_learning` loss (its `n_step`, `double` and `huber_delta`
keys), any replay (`device`, `host`, `reverb`), and the acting and learning steps it
shares with R2D2 (podracer/kits/q_learning.py). Each trajectory repeats the loss's `n_step`
entries of the previous one (`trajectory_overlap`), so one environment's [T + n] stretch
of it is one replay item: T transitions, each completed by the n steps after it (the
n-step view of a trajectory, made by the loss). A sample of B items is B * T transitions.

C51 (Bellemare et al. 2017) is this agent with the `categorical_q_learning` loss and the
`categorical_q_network` network (logits [B, A, K]): the loss says what the network
gives (`output_shape`), its Q-values (`q_values`, the distributions' means) and how
illegal actions are masked (`legal`); config `c51_cartpole_anakin`.
"""

from __future__ import annotations

from typing import Annotated, Any

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.components.losses import QLearningLoss
from podracer.learning import Objective
from podracer.kits.q_learning import (QActorState, QLearningAgent, epsilon_greedy,
                                      eval_exploration, huber_target_warning,
                                      init_exploration, warn_once)
from podracer.registry.ranges import NonNegative, Probability
from podracer.types import ActorOutput, EnvSpec, TimeStep, action_mask


@registry.agents.register("dqn")
class DQN(QLearningAgent):
  """Q-learning from a replay with a periodically copied target network; acts
  epsilon-greedily, annealed from random over each environment's first steps."""

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: QLearningLoss,
               optimizer: optax.GradientTransformation, replay: Any,
               discount: Annotated[float, Probability] = 0.99,
               target_update_period: int = 100,
               importance_sampling_exponent: Annotated[float, Probability] = 0.6,
               priority_eta: Annotated[float, Probability] = 0.9,
               epsilon: Annotated[float, Probability] = 0.05,
               epsilon_alpha: Annotated[float, NonNegative] = 0.0,
               epsilon_anneal_steps: int = 0,
               eval_epsilon: Annotated[float, Probability] = 0.0):
    super().__init__(spec, network, [Objective("dqn", self._loss, optimizer)], replay)
    self.q_loss, self.tx_pair = loss, loss.tx_pair
    self.discount = discount
    self.target_update_period = target_update_period
    self.importance_sampling_exponent = importance_sampling_exponent
    self.priority_eta = priority_eta
    # Every environment acts with `epsilon` (Ape-X's spread of rates with
    # `epsilon_alpha` > 0), after `epsilon_anneal_steps` of its own from random.
    self.epsilon = epsilon
    self.epsilon_alpha = epsilon_alpha
    self.epsilon_anneal_steps = epsilon_anneal_steps
    self.eval_epsilon = eval_epsilon
    self.trajectory_overlap = loss.n_step  # each item's n steps completing its targets
    warn_once(huber_target_warning(loss.huber_delta, target_update_period))

  def init_actor(self, key, num_envs):
    del key
    return init_exploration(num_envs, self.epsilon, self.epsilon_alpha)

  def init_eval_actor(self, key, num_envs):
    """`eval_epsilon` (0: greedy) for every environment."""
    del key
    return eval_exploration(num_envs, self.eval_epsilon, self.epsilon_anneal_steps)

  def network_outputs(self, nets, observation):
    return dict(q_values=self.network.apply(nets, observation))

  def act(self, nets, actor_state: QActorState, timestep: TimeStep, key):
    q = self.q_loss.q_values(self.network.apply(nets, timestep.observation))
    action, actor_state = epsilon_greedy(q, actor_state, key, self.epsilon_anneal_steps,
                                         action_mask(timestep.observation))
    return ActorOutput(action, {}), actor_state

  def _loss(self, params, batch, key):
    """The `q_learning` loss (or C51's) on a [B, S] batch of items, its Q-values from one pass of
    the online and one of the target network over all S * B observations."""
    del key
    items, weights, target_params = batch
    timestep = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), items.timestep)  # [S, B]
    steps, batch_size = timestep.step_type.shape
    flat = jax.tree.map(lambda x: x.reshape(steps * batch_size, *x.shape[2:]),
                        timestep.observation)
    values = lambda p: self.q_loss.legal(self.network.apply(p, flat), flat).reshape(
        steps, batch_size, *self.q_loss.output_shape(self.spec.action.num_values))
    return self.q_loss(values(params), values(target_params), timestep,
                       jnp.swapaxes(items.action, 0, 1), weights, self.discount)
