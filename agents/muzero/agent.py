"""MuZero (Schrittwieser et al., 2020) with mctx's search, written once for one replica.

Acting searches with a learned model: `act` runs `mctx.gumbel_muzero_policy` (default;
Danihelka et al. 2022, with mctx's `qtransform_completed_by_mix_value`) or
`mctx.muzero_policy` (Dirichlet noise at the root) on the batch, and returns the search's
policy and root value as extras, so trajectories and replay items carry the targets with
no runtime change.

Learning: each replay item is one environment's [T + K + n] stretch of a trajectory
(`trajectory_overlap = num_unroll_steps + td_steps`, the default `replay_items`), so every
start position t < T has its K unroll steps and their n-step value targets. Each gradient
step samples items, draws one start per item, unrolls the dynamics K steps from the
representation of the observation there (the hidden state's gradient halved at each step,
each step's loss scaled by 1/K: the paper's appendix G) and minimises cross-entropies:
policy against the stored search policy, value and reward against two-hot targets of
rlax's MuZero transform (signed hyperbolic, then a support of bins). Steps past an
episode's end are an absorbing state: reward and value 0, policy masked.

Value targets bootstrap from the search values stored when acting (`value_bootstrap=
search`, the paper's pseudocode) or from a target network at learning time (`target`, as
mctx's authors advise). Priorities are |search value - n-step target|, the largest over an
item's start positions; `replay.priority_exponent=0` samples uniformly.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import optax

from podracer import registry
from podracer.agent import Agent
from podracer.components.networks import MuZeroNetwork
from podracer.experience import importance_weights
from podracer.learning import (Objective, TargetState, gradient_step, update_target,
                               with_target)
from podracer.registry.ranges import NonNegative, Positive, Probability
from podracer.types import (ActorOutput, EnvSpec, PyTree, StepType, TimeStep, Trajectory,
                            action_mask)
from podracer.errors import load_on_first_use

# Loaded where a loss first reads it: its import brings distrax and TensorFlow Probability.
rlax = load_on_first_use("rlax")

SEARCHES = ("gumbel", "muzero")
BOOTSTRAPS = ("search", "target")


class UnrollTargets(NamedTuple):
  """What one unroll of K steps from a start position learns, batch-major."""
  observation: PyTree       # [B, ...] the observation at the start
  action: jax.Array         # [B, K] the actions taken from there
  value: jax.Array          # [B, K+1] n-step value targets (0 past the episode's end)
  reward: jax.Array         # [B, K+1] rewards that arrived at each step (index 0 unused)
  policy: jax.Array         # [B, K+1, A] the search policies
  policy_mask: jax.Array    # [B, K+1] 1 where the step is inside the episode and not LAST
  search_value: jax.Array   # [B] the stored root value at the start


def scale_gradient(x: jax.Array, scale: float) -> jax.Array:
  """x, with its gradient multiplied by `scale`."""
  return x * scale + jax.lax.stop_gradient(x) * (1.0 - scale)


def unroll_model(network: MuZeroNetwork, params: PyTree, observation: PyTree,
                 action: jax.Array, gradient_scale: float = 0.5
                 ) -> Tuple[jax.Array, jax.Array, jax.Array]:
  """Predictions along K = action.shape[1] dynamics steps from `observation` [B, ...]:
  policy logits [B, K+1, A], value logits [B, K+1, bins] and reward logits [B, K, bins].
  The hidden state's gradient is scaled by `gradient_scale` entering each step."""
  embedding = network.represent(params, observation)
  policies, values, rewards = [], [], []
  for k in range(action.shape[1] + 1):
    if k:
      embedding = scale_gradient(embedding, gradient_scale)
      reward_logits, embedding = network.dynamics(params, embedding, action[:, k - 1])
      rewards.append(reward_logits)
    policy_logits, value_logits = network.predict(params, embedding)
    policies.append(policy_logits)
    values.append(value_logits)
  return jnp.stack(policies, 1), jnp.stack(values, 1), jnp.stack(rewards, 1)


def n_step_value_targets(step_type: jax.Array, reward: jax.Array, discount: jax.Array,
                         value: jax.Array, gamma: float, n: int) -> jax.Array:
  """n-step bootstrapped value targets [S, B] for every step of [S, B] sequences.

  dm_env's convention: step t carries the reward and discount that arrived with it. A
  target sums up to n rewards and bootstraps from `value` n steps later, truncated at the
  end of the sequence; it stops at a LAST step: there the target is its own value, or 0
  when the episode terminated (discount 0). Discounts may be -1 (a self-play game's turn
  passing: `EnvSpec.zero_sum`): the targets are then negamax returns.
  """
  last = step_type == StepType.LAST
  # Transition t -> t+1; out of a LAST step it is a reset, which carries nothing.
  transition_reward = jnp.where(last[:-1], 0.0, reward[1:])
  transition_discount = jnp.where(last[:-1], 0.0, gamma * discount[1:])
  # Into a LAST step the target stops there and bootstraps from its value (lambda 0), which
  # its discount zeroes when the episode terminated.
  stop_at = jnp.where(last[1:], 0.0, 1.0)
  targets = jax.vmap(
      lambda r, d, v, lam: rlax.n_step_bootstrapped_returns(r, d, v, n, lam),
      in_axes=1, out_axes=1)(transition_reward, transition_discount, value[1:], stop_at)
  targets = jnp.concatenate([targets, value[-1:]])
  return jnp.where(last, jnp.where(discount == 0, 0.0, value), targets)


def unroll_targets(items: Trajectory, start: jax.Array, value_target: jax.Array,
                   num_unroll_steps: int) -> UnrollTargets:
  """The targets of K = `num_unroll_steps` steps from `start` [B] in batch-major items
  [B, S, ...], given the value targets [B, S] of every step. Steps after a LAST step
  (in the same unroll) are absorbing: value and reward 0, policy masked."""
  window = start[:, None] + jnp.arange(num_unroll_steps + 1)[None]          # [B, K+1]
  pick = lambda x: jnp.take_along_axis(x, window.reshape(*window.shape, *([1] * (x.ndim - 2))),
                                       axis=1)
  timestep = items.timestep
  last = pick(timestep.step_type) == StepType.LAST                          # [B, K+1]
  # Inside the episode: no LAST step before this one within the unroll.
  ended_before = jnp.cumsum(last, axis=1) - last
  alive = (ended_before == 0).astype(jnp.float32)
  observation = jax.tree.map(lambda x: jnp.take_along_axis(
      x, start.reshape(-1, *([1] * (x.ndim - 1))), axis=1)[:, 0], timestep.observation)
  return UnrollTargets(
      observation=observation,
      action=pick(items.action)[:, :-1],
      value=pick(value_target) * alive,
      reward=pick(timestep.reward) * alive,
      policy=pick(items.extras["search_policy"]),
      policy_mask=alive * (1.0 - last.astype(jnp.float32)),
      search_value=pick(items.extras["search_value"])[:, 0])


@registry.agents.register("muzero")
class MuZero(Agent):
  """MuZero: a learned model searched with mctx; see the module docstring."""

  action_masks = True  # The search's root never expands an illegal action (mctx).

  def __init__(self, spec: EnvSpec, network: MuZeroNetwork,
               optimizer: optax.GradientTransformation, replay: Any,
               search: str = "gumbel", num_simulations: int = 16,
               max_num_considered_actions: int = 16, num_unroll_steps: int = 5,
               td_steps: int = 5, discount: Annotated[float, Probability] = 0.997,
               value_bootstrap: str = "search",
               target_update_period: int = 100, support_min: float = -300.0,
               support_max: float = 300.0, num_bins: int = 601,
               value_coef: Annotated[float, NonNegative] = 0.25, sgd_steps: int = 1,
               importance_sampling_exponent: Annotated[float, Probability] = 1.0,
               dirichlet_alpha: Annotated[float, Positive] = 0.25,
               dirichlet_fraction: Annotated[float, Probability] = 0.25,
               value_rescaling_eps: float = 1e-3):
    super().__init__(spec, network, [Objective("muzero", self._loss, optimizer)], replay)
    _check_arguments(search=search, num_simulations=num_simulations,
                     max_num_considered_actions=max_num_considered_actions,
                     num_unroll_steps=num_unroll_steps, td_steps=td_steps,
                     value_bootstrap=value_bootstrap, support_min=support_min,
                     support_max=support_max, num_bins=num_bins, sgd_steps=sgd_steps,
                     target_update_period=target_update_period, replay=replay)
    self.search, self.num_simulations = search, num_simulations
    self.max_num_considered_actions = max_num_considered_actions
    self.num_unroll_steps, self.td_steps = num_unroll_steps, td_steps
    self.discount, self.value_bootstrap = discount, value_bootstrap
    self.target_update_period, self.value_coef = target_update_period, value_coef
    self.sgd_steps = sgd_steps
    self.importance_sampling_exponent = importance_sampling_exponent
    self.dirichlet_alpha, self.dirichlet_fraction = dirichlet_alpha, dirichlet_fraction
    self.support = (float(support_min), float(support_max), int(num_bins))
    # rlax's MuZero transform: h (signed hyperbolic), then two-hot over the support.
    self.tx_pair = rlax.muzero_pair(
        support_min, support_max, num_bins,
        rlax.TxPair(lambda x: rlax.signed_hyperbolic(x, value_rescaling_eps),
                    lambda x: rlax.signed_parabolic(x, value_rescaling_eps)))
    self.trajectory_overlap = num_unroll_steps + td_steps
    self.rates_per_env_step = {"simulations_per_s": num_simulations}

  @classmethod
  def gradient_steps_per_update(cls, sgd_steps: int, **config: Any) -> int:
    del config
    return sgd_steps

  # -- state and the network's contract ----------------------------------------------

  def init_opt(self, nets):
    target = nets if self.value_bootstrap == "target" else ()
    # The target network (`value_bootstrap=target`), else () and only the count goes on.
    return with_target(super().init_opt(nets), target)

  def expected_outputs(self, batch_size):
    bins = self.support[2]
    return dict(policy_logits=((batch_size, self.spec.action.num_values), np.floating),
                value_logits=((batch_size, bins), np.floating),
                reward_logits=((batch_size, bins), np.floating))

  def network_outputs(self, nets, observation):
    embedding = self.network.represent(nets, observation)
    policy_logits, value_logits = self.network.predict(nets, embedding)
    action = jnp.zeros(policy_logits.shape[:1], jnp.int32)
    reward_logits, _ = self.network.dynamics(nets, embedding, action)
    return dict(policy_logits=policy_logits, value_logits=value_logits,
                reward_logits=reward_logits)

  # -- acting: search ----------------------------------------------------------------

  def scalar(self, logits: jax.Array) -> jax.Array:
    """A value or reward from its logits over the support."""
    return self.tx_pair.apply_inv(jax.nn.softmax(logits))

  def _root(self, params, observation) -> mctx.RootFnOutput:
    embedding = self.network.represent(params, observation)
    policy_logits, value_logits = self.network.predict(params, embedding)
    return mctx.RootFnOutput(prior_logits=policy_logits, value=self.scalar(value_logits),
                             embedding=embedding)

  def _recurrent(self, params, key, action, embedding):
    del key
    reward_logits, embedding = self.network.dynamics(params, embedding, action)
    policy_logits, value_logits = self.network.predict(params, embedding)
    reward = self.scalar(reward_logits)
    # In a self-play game (EnvSpec.zero_sum) each step passes the turn: the search's
    # backups alternate sign (negamax), as the environment's discount -1 says.
    discount = -self.discount if self.spec.zero_sum else self.discount
    return mctx.RecurrentFnOutput(
        reward=reward, discount=jnp.full_like(reward, discount),
        prior_logits=policy_logits, value=self.scalar(value_logits)), embedding

  def run_search(self, params, observation, key, explore: bool = True) -> mctx.PolicyOutput:
    """The search's policy output for a batch of observations; `explore=False` is the
    evaluation policy (no Gumbel or Dirichlet noise, the best action)."""
    root = self._root(params, observation)
    mask = action_mask(observation)
    invalid = None if mask is None else ~mask
    if self.search == "gumbel":
      return mctx.gumbel_muzero_policy(
          params, key, root, self._recurrent, self.num_simulations, invalid_actions=invalid,
          qtransform=mctx.qtransform_completed_by_mix_value,
          max_num_considered_actions=self.max_num_considered_actions,
          gumbel_scale=1.0 if explore else 0.0)
    return mctx.muzero_policy(
        params, key, root, self._recurrent, self.num_simulations, invalid_actions=invalid,
        dirichlet_fraction=self.dirichlet_fraction if explore else 0.0,
        dirichlet_alpha=self.dirichlet_alpha, temperature=1.0 if explore else 0.0)

  def act(self, nets, actor_state, timestep: TimeStep, key):
    out = self.run_search(nets, timestep.observation, key)
    extras = dict(search_policy=out.action_weights.astype(jnp.float32),
                  search_value=out.search_tree.summary().value.astype(jnp.float32))
    return ActorOutput(out.action.astype(jnp.int32), extras), actor_state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    out = self.run_search(nets, timestep.observation, key, explore=False)
    return ActorOutput(out.action.astype(jnp.int32), {}), actor_state

  # -- experience ----------------------------------------------------------------------

  def observe(self, experience, trajectory: Trajectory):
    return self.replay.add(experience, self.replay_items(trajectory))

  # -- learning ------------------------------------------------------------------------

  def update(self, nets, opt: TargetState, experience, key):
    """`sgd_steps` gradient steps, each on a fresh sample (none until the replay can be
    sampled); metrics are their means."""
    def learn(args, step_key):
      nets, opt, experience = args
      sample_key, start_key = jax.random.split(step_key)
      sample = self.replay.sample(experience, sample_key)
      targets, priorities = self.targets(sample.items, opt.target or nets, start_key)
      weights = importance_weights(sample, self.importance_sampling_exponent)
      nets, optimizer, metrics = gradient_step(self.objectives, nets, opt.optimizer,
                                               (targets, weights), None)
      if self.value_bootstrap == "target":
        opt = update_target(opt, optimizer, nets, period=self.target_update_period)
      else:
        opt = opt._replace(optimizer=optimizer, updates=opt.updates + 1)
      experience = self.replay.update_priorities(experience, sample, priorities)
      metrics.update(priority_mean=jnp.mean(priorities), learning=jnp.float32(1.0))
      return (nets, opt, experience), metrics

    def one_step(args, step_key):
      shapes = jax.eval_shape(learn, args, step_key)[1]
      wait = lambda a, _: (a, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))
      return jax.lax.cond(self.replay.can_sample(args[2]), learn, wait, args, step_key)

    (nets, opt, experience), metrics = jax.lax.scan(
        one_step, (nets, opt, experience), jax.random.split(key, self.sgd_steps))
    metrics = jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)
    size = getattr(self.replay, "size", None)
    if size is not None:
      metrics["replay_size"] = jnp.float32(size(experience))
    return nets, opt, experience, metrics

  def targets(self, items: Trajectory, bootstrap_params, key) -> Tuple[UnrollTargets, jax.Array]:
    """The unroll targets from one random start per item ([B, S, ...] items) and the
    items' priorities, max over start positions of |search value - n-step target|."""
    num_items, length = items.action.shape[:2]
    starts = length - self.num_unroll_steps - self.td_steps
    step_type, reward, discount = (jnp.swapaxes(x, 0, 1) for x in (
        items.timestep.step_type, items.timestep.reward, items.timestep.discount))
    if self.value_bootstrap == "search":
      value = jnp.swapaxes(items.extras["search_value"], 0, 1)
    else:
      observation = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]),
                                 items.timestep.observation)
      _, value_logits = self.network.predict(
          bootstrap_params, self.network.represent(bootstrap_params, observation))
      value = jnp.swapaxes(self.scalar(value_logits).reshape(num_items, length), 0, 1)
    value_target = jnp.swapaxes(jax.lax.stop_gradient(n_step_value_targets(
        step_type, reward, discount, value, self.discount, self.td_steps)), 0, 1)
    errors = jnp.abs(items.extras["search_value"] - value_target)[:, :starts]
    start = jax.random.randint(key, (num_items,), 0, starts)
    return (unroll_targets(items, start, value_target, self.num_unroll_steps),
            jnp.max(errors, axis=1))

  def _loss(self, params, batch, key):
    """Importance-weighted mean over the batch of the unroll's summed losses."""
    del key
    targets, weights = batch
    policy_logits, value_logits, reward_logits = unroll_model(
        self.network, params, targets.observation, targets.action)
    steps = self.num_unroll_steps
    scale = jnp.concatenate([jnp.ones(1), jnp.full(steps, 1.0 / steps)])        # [K+1]
    value_target = self.tx_pair.apply(targets.value)
    policy_loss = optax.softmax_cross_entropy(policy_logits, targets.policy) * targets.policy_mask
    value_loss = optax.softmax_cross_entropy(value_logits, value_target)
    reward_loss = optax.softmax_cross_entropy(reward_logits,
                                              self.tx_pair.apply(targets.reward[:, 1:]))
    per_item = lambda x, s: jnp.sum(x * s, axis=1)
    policy, value = per_item(policy_loss, scale), per_item(value_loss, scale)
    reward = per_item(reward_loss, scale[1:])
    total = jnp.mean(weights * (policy + self.value_coef * value + reward))
    prior = jax.nn.log_softmax(policy_logits[:, 0])
    search = targets.policy[:, 0]
    mask = targets.policy_mask[:, 0]
    low, high, _ = self.support
    h = rlax.signed_hyperbolic(targets.value)
    return total, dict(
        policy_loss=jnp.mean(policy), value_loss=jnp.mean(value),
        reward_loss=jnp.mean(reward), search_value=jnp.mean(targets.search_value),
        search_policy_entropy=_masked_mean(-jnp.sum(search * jnp.log(search + 1e-12), -1), mask),
        search_prior_kl=_masked_mean(
            jnp.sum(search * (jnp.log(search + 1e-12) - prior), -1), mask),
        value_target_clipped=jnp.mean(((h <= low) | (h >= high)).astype(jnp.float32)))


def _masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def _check_arguments(*, search, num_simulations, max_num_considered_actions,
                     num_unroll_steps, td_steps, value_bootstrap, support_min, support_max,
                     num_bins, sgd_steps, target_update_period, replay) -> None:
  """ValueErrors naming the `agent.*` key (the builder turns them into exit 2)."""
  def choose(key, value, options):
    if value not in options:
      near = difflib.get_close_matches(str(value), options, n=1)
      hint = f" (did you mean '{near[0]}'?)" if near else ""
      raise ValueError(f"`agent.{key}` must be one of {', '.join(options)}, got "
                       f"{value!r}{hint}.")
  choose("search", search, SEARCHES)
  choose("value_bootstrap", value_bootstrap, BOOTSTRAPS)
  at_least = dict(num_simulations=(num_simulations, 1),
                  max_num_considered_actions=(max_num_considered_actions, 2),
                  num_unroll_steps=(num_unroll_steps, 1), td_steps=(td_steps, 1),
                  num_bins=(num_bins, 3), sgd_steps=(sgd_steps, 1),
                  target_update_period=(target_update_period, 1))
  for key, (value, low) in at_least.items():
    if not isinstance(value, (int, np.integer)) or value < low:
      raise ValueError(f"`agent.{key}` must be an integer >= {low}, got {value!r}.")
  if not support_min < support_max:
    raise ValueError(f"The value support needs `agent.support_min` < `agent.support_max`, "
                     f"got {support_min} and {support_max}.")
  if getattr(replay, "kind", None) == "host" and sgd_steps != 1:
    raise ValueError(f"`agent.sgd_steps={sgd_steps}` takes several samples from a device "
                     f"replay; a host replay samples once per update: set its ratio with "
                     f"`replay.samples_per_insert` and leave sgd_steps at 1.")
