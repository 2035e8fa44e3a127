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

from typing import Annotated, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import rlax

from podracer import registry
from podracer.agent import Agent
from podracer.components.losses import n_step_double_q_targets
from podracer.components.losses.q_learning import taken
from podracer.components.networks import RecurrentQNetwork
from podracer.components.replay import importance_weights
from podracer.learning import (Objective, TargetState, gradient_step, update_target,
                               with_target)
from podracer.registry.ranges import NonNegative, Probability
from podracer.types import ActorOutput, EnvSpec, StepType, TimeStep, Trajectory


# What each update's record carries (`R2D2._diagnostics`); 0 while the replay warms up.
DIAGNOSTICS = ("loss", "q_mean", "q_max", "target_mean", "td_error_abs", "priority_mean",
               "priority_max", "learning")


class R2D2ActorState(NamedTuple):
  core: Any             # LSTM state [B, H], before acting on the current timestep
  epsilon: jax.Array    # [B] each environment's exploration rate (Ape-X schedule)
  steps: jax.Array      # [B] int32: steps acted so far (for `epsilon_anneal_steps`)


def apex_epsilons(num_envs: int, base: float = 0.4, alpha: float = 7.0) -> jax.Array:
  """Ape-X's per-actor exploration: epsilon_i = base^(1 + alpha * i / (N - 1))."""
  i = jnp.arange(num_envs, dtype=jnp.float32)
  return jnp.power(base, 1.0 + alpha * i / max(num_envs - 1, 1))


def annealed_epsilon(epsilon: jax.Array, steps: jax.Array, anneal_steps: int) -> jax.Array:
  """Linearly from 1 (uniformly random) at step 0 to `epsilon` at `anneal_steps`."""
  if not anneal_steps:
    return epsilon
  remaining = jnp.clip(1.0 - steps.astype(jnp.float32) / anneal_steps, 0.0, 1.0)
  return epsilon + (1.0 - epsilon) * remaining


def sequence_priorities(abs_td: jax.Array, mask: jax.Array, eta: float) -> jax.Array:
  """R2D2's priority, eta * max |td| + (1 - eta) * mean |td|, over masked steps [T, B]."""
  count = jnp.maximum(jnp.sum(mask, axis=0), 1.0)
  mean = jnp.sum(abs_td * mask, axis=0) / count
  return eta * jnp.max(abs_td * mask, axis=0) + (1.0 - eta) * mean


@registry.agents.register("r2d2")
class R2D2(Agent):
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
    self.tx_pair = rlax.TxPair(
        lambda x: rlax.signed_hyperbolic(x, value_rescaling_eps),
        lambda x: rlax.signed_parabolic(x, value_rescaling_eps))
    self.trajectory_overlap = burn_in + n_step

  # -- state -----------------------------------------------------------------------

  def init_opt(self, nets):
    return with_target(super().init_opt(nets), nets)

  def init_actor(self, key, num_envs):
    del key
    return R2D2ActorState(self.network.initial_state(num_envs),
                          apex_epsilons(num_envs, self.epsilon_base, self.epsilon_alpha),
                          jnp.zeros((num_envs,), jnp.int32))

  def init_eval_actor(self, key, num_envs):
    """`eval_epsilon` for every environment, annealing already over."""
    state = self.init_actor(key, num_envs)
    return state._replace(epsilon=jnp.full((num_envs,), self.eval_epsilon, jnp.float32),
                          steps=jnp.full((num_envs,), self.epsilon_anneal_steps, jnp.int32))

  # -- the network's contract (podracer/contracts.py) --------------------------------

  def expected_outputs(self, batch_size):
    return dict(q_values=((batch_size, self.spec.action.num_values), np.floating))

  def network_outputs(self, nets, observation):
    batch_size = jax.tree.leaves(observation)[0].shape[0]
    q, _ = self.network.step(nets, observation, self.network.initial_state(batch_size),
                             jnp.zeros((batch_size,), bool))
    return dict(q_values=q)

  # -- acting ----------------------------------------------------------------------

  def act(self, nets, actor_state: R2D2ActorState, timestep: TimeStep, key):
    q, core = self.network.step(nets, timestep.observation, actor_state.core,
                                timestep.step_type == StepType.FIRST)
    explore_key, action_key = jax.random.split(key)
    greedy = jnp.argmax(q, axis=-1)
    random = jax.random.randint(action_key, greedy.shape, 0, q.shape[-1])
    epsilon = annealed_epsilon(actor_state.epsilon, actor_state.steps,
                               self.epsilon_anneal_steps)
    explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
    action = jnp.where(explore, random, greedy).astype(jnp.int32)
    return ActorOutput(action, {}), actor_state._replace(core=core,
                                                         steps=actor_state.steps + 1)

  def actor_metrics(self, actor_state: R2D2ActorState):
    """The exploration rate the actors act with now, averaged over their environments."""
    epsilon = annealed_epsilon(actor_state.epsilon, actor_state.steps,
                               self.epsilon_anneal_steps)
    return dict(epsilon_mean=jnp.mean(epsilon))

  # -- experience ------------------------------------------------------------------

  def replay_items(self, trajectory: Trajectory) -> Trajectory:
    """One sequence per environment: [B, S, ...] steps, the LSTM state at their start."""
    batch_major = lambda x: jnp.swapaxes(x, 0, 1)
    return Trajectory(timestep=jax.tree.map(batch_major, trajectory.timestep),
                      actor_state=jax.tree.map(lambda x: x[0], trajectory.actor_state.core),
                      action=batch_major(trajectory.action), extras={})

  def observe(self, experience, trajectory: Trajectory):
    return self.replay.add(experience, self.replay_items(trajectory))

  # -- learning --------------------------------------------------------------------

  def update(self, nets, opt: TargetState, experience, key):
    def learn(args):
      nets, opt, experience = args
      sample = self.replay.sample(experience, key)
      weights = importance_weights(sample, self.importance_sampling_exponent)
      nets, optimizer, out = gradient_step(self.objectives, nets, opt.optimizer,
                                           (sample.items, weights, opt.target), None)
      priorities = sequence_priorities(out["abs_td"], out["mask"], self.priority_eta)
      experience = self.replay.update_priorities(experience, sample, priorities)
      metrics = self._diagnostics(out, priorities)
      opt = update_target(opt, optimizer, nets, period=self.target_update_period)
      return (nets, opt, experience), metrics

    def wait(args):
      return args, {k: jnp.float32(0.0) for k in DIAGNOSTICS}

    (nets, opt, experience), metrics = jax.lax.cond(
        self.replay.can_sample(experience), learn, wait, (nets, opt, experience))
    metrics.update(self._replay_metrics(experience))
    return nets, opt, experience, metrics

  def _diagnostics(self, out, priorities):
    """What a record shows of an update: values in return units (h^-1 of the network's),
    max_a Q against the n-step targets, over the learned steps; errors and priorities as
    the loss and the replay see them."""
    mask = out["mask"]
    mean = lambda x: jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    max_q = self.tx_pair.apply_inv(jnp.max(out["q"], axis=-1))
    return dict(loss=out["loss"], q_mean=mean(max_q),
                q_max=jnp.max(jnp.where(mask > 0, max_q, -jnp.inf)),
                target_mean=mean(self.tx_pair.apply_inv(out["target"])),
                td_error_abs=mean(out["abs_td"]), priority_mean=jnp.mean(priorities),
                priority_max=jnp.max(priorities), learning=jnp.float32(1.0))

  def _replay_metrics(self, experience):
    size = getattr(self.replay, "size", None)
    return {} if size is None else dict(replay_size=jnp.float32(size(experience)))

  def _loss(self, params, batch, key):
    """Mean importance-weighted 0.5 td^2 over the learned steps of a [B, S] batch; also
    the absolute TD errors, their mask and the online Q-values, for priorities."""
    del key
    items, weights, target_params = batch
    time_major = lambda x: jnp.swapaxes(x, 0, 1)
    timestep = jax.tree.map(time_major, items.timestep)      # [S, B]
    action = time_major(items.action)
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
    target_q = jax.lax.stop_gradient(target_q)
    step_type = timestep.step_type[burn:]
    # Transitions out of a LAST step are resets (their action was ignored): masked, and
    # n-step returns stop before them, bootstrapping from the LAST step unless the
    # episode terminated (a time limit's return goes on: `q_learning`).
    cut = step_type[:-1] == StepType.LAST
    not_reset = (~cut).astype(jnp.float32)
    reward = timestep.reward[burn:][1:]
    discount = self.discount * timestep.discount[burn:][1:]

    target = n_step_double_q_targets(q, target_q, reward, discount, self.n_step,
                                     self.tx_pair, cut=cut)
    # Learned steps: the first T transitions; later ones lack full n-step targets.
    learned = target.shape[0] - (self.n_step - 1)
    target, mask = target[:learned], not_reset[:learned]
    td = target - taken(q[:learned], action[burn:][:learned])
    loss = jnp.sum(weights[None] * 0.5 * jnp.square(td) * mask) / jnp.maximum(
        jnp.sum(mask), 1.0)
    return loss, dict(abs_td=jnp.abs(td), mask=mask, q=q[:learned], target=target)

