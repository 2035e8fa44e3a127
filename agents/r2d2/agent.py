"""R2D2 (Kapturowski et al., 2019): recurrent experience replay in distributed RL.

Written once for one replica, like every agent here. Its replay is a component
(`config.replay.name`): `device` keeps sequences inside the compiled program (Anakin, or on
Sebulba's learner devices); `reverb` keeps them in a Reverb server that Sebulba's actors
write to. The agent only calls the replay's in-graph interface, so nothing here changes.

Sequences: each trajectory repeats `burn_in + n_step` entries of the previous one
(`trajectory_overlap`), so a trajectory of T = rollout_length new steps is one
sequence per environment: `burn_in` steps that only warm up the LSTM from the stored
state, T steps that are learned from, and `n_step` steps that complete their n-step
targets. Consecutive sequences' learned steps tile the stream exactly.
"""

from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.agent import legal
from podracer.components.losses import QLearningLoss
from podracer.components.networks import RecurrentQNetwork
from podracer.learning import Objective
from podracer.kits.q_learning import (QActorState, QLearningAgent, epsilon_greedy,
                                      eval_exploration, init_exploration)
from podracer.registry.ranges import NonNegative, Probability
from podracer.types import (ActorOutput, EnvSpec, StepType, TimeStep, Trajectory,
                            action_mask)

# R2D2's actor state: the LSTM state before acting on the current timestep (`core`),
# each environment's exploration rate (Ape-X's) and its steps so far.
R2D2ActorState = QActorState


@registry.agents.register("r2d2")
class R2D2(QLearningAgent):
  """Recurrent Q-learning from prioritized sequence replay, with burn-in and n-step
  double Q-learning targets under the invertible value rescaling h."""

  def __init__(self, spec: EnvSpec, network: RecurrentQNetwork,
               optimizer: optax.GradientTransformation, replay: Any,
               discount: Annotated[float, Probability] = 0.997, n_step: int = 5, burn_in: int = 40,
               target_update_period: int = 2500,
               importance_sampling_exponent: Annotated[float, Probability] = 0.6,
               priority_eta: Annotated[float, Probability] = 0.9,
               epsilon_base: Annotated[float, Probability] = 0.4,
               epsilon_alpha: Annotated[float, NonNegative] = 7.0, epsilon_anneal_steps: int = 0,
               value_rescaling_eps: Annotated[float, NonNegative] = 1e-3,
               eval_epsilon: Annotated[float, Probability] = 0.001):
    super().__init__(spec, network, [Objective("r2d2", self._loss, optimizer)], replay)
    if n_step < 1 or burn_in < 0:
      raise ValueError(f"`agent.n_step` must be >= 1 and `agent.burn_in` >= 0, got "
                       f"{n_step} and {burn_in}.")
    self.discount = discount
    self.n_step = n_step
    self.burn_in = burn_in
    self.target_update_period = target_update_period
    self.importance_sampling_exponent = importance_sampling_exponent
    self.priority_eta = priority_eta
    self.epsilon_base = epsilon_base
    self.epsilon_alpha = epsilon_alpha
    # Ape-X's hundreds of actors explore plenty with fixed epsilons; a few dozen
    # environments may first need a spell of mostly random actions (0: the paper's).
    self.epsilon_anneal_steps = epsilon_anneal_steps
    # The evaluation policy keeps a small exploration rate (`eval_return` includes it).
    self.eval_epsilon = eval_epsilon
    # n-step double Q-learning under the value rescaling h: DQN's `q_learning` loss.
    self.q_loss = QLearningLoss(n_step=n_step, double=True,
                                value_rescaling_eps=value_rescaling_eps)
    self.tx_pair = self.q_loss.tx_pair
    self.trajectory_overlap = burn_in + n_step

  # -- state -----------------------------------------------------------------------

  def init_actor(self, key, num_envs):
    del key
    return init_exploration(num_envs, self.epsilon_base, self.epsilon_alpha,
                            core=self.network.initial_state(num_envs))

  def init_eval_actor(self, key, num_envs):
    """`eval_epsilon` for every environment, annealing already over."""
    del key
    return eval_exploration(num_envs, self.eval_epsilon, self.epsilon_anneal_steps,
                            core=self.network.initial_state(num_envs))

  # -- the network's contract (podracer/contracts.py) --------------------------------

  def network_outputs(self, nets, observation):
    batch_size = jax.tree.leaves(observation)[0].shape[0]
    q, _ = self.network.step(nets, observation, self.network.initial_state(batch_size),
                             jnp.zeros((batch_size,), bool))
    return dict(q_values=q)

  # -- acting ----------------------------------------------------------------------

  def act(self, nets, actor_state: R2D2ActorState, timestep: TimeStep, key):
    q, core = self.network.step(nets, timestep.observation, actor_state.core,
                                timestep.step_type == StepType.FIRST)
    action, actor_state = epsilon_greedy(q, actor_state._replace(core=core), key,
                                         self.epsilon_anneal_steps,
                                         action_mask(timestep.observation))
    return ActorOutput(action, {}), actor_state

  # -- experience ------------------------------------------------------------------

  def item_actor_state(self, trajectory: Trajectory):
    """Each sequence keeps the LSTM state at its start, to burn in from."""
    return jax.tree.map(lambda x: x[0], trajectory.actor_state.core)

  # -- learning --------------------------------------------------------------------

  def _loss(self, params, batch, key):
    """Mean importance-weighted 0.5 td^2 over the learned steps of a [B, S] batch; also
    the absolute TD errors, their mask and the online Q-values, for priorities."""
    del key
    items, weights, target_params = batch
    time_major = lambda x: jnp.swapaxes(x, 0, 1)
    timestep = jax.tree.map(time_major, items.timestep)      # [S, B]
    reset = timestep.step_type == StepType.FIRST
    burn = self.burn_in
    rest = jax.tree.map(lambda x: x[burn:], timestep.observation)

    def burned_in(p):
      # Burn-in warms the stored state up without learning through it (R2D2 section 3).
      if not burn:
        return items.actor_state
      _, state = self.network.unroll(
          p, jax.tree.map(lambda x: x[:burn], timestep.observation), items.actor_state,
          reset[:burn])
      return jax.lax.stop_gradient(state)

    q, _ = self.network.unroll(params, rest, burned_in(params), reset[burn:])
    target_q, _ = self.network.unroll(target_params, rest, burned_in(target_params),
                                      reset[burn:])
    q, target_q = legal(q, rest), legal(target_q, rest)
    action = time_major(items.action)[burn:]
    return self.q_loss(q, target_q, jax.tree.map(lambda x: x[burn:], timestep), action,
                       weights, self.discount)
