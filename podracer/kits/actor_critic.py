"""What the on-policy actor-critic agents share (PPO, recurrent PPO, IMPALA, and yours):
a network that gives a policy's parameters and a value (`policy`), acting by sampling the
agent's action distribution (`act`: categorical over the legal logits by default, a
Gaussian for continuous actions; the log-probability kept for the loss), its mode for
evaluation (`eval_act`), learning from the newest trajectory only (`observe`), and what
the learner's batch goes through first (`prepare`): observation statistics, reward
normalisation, `shape_trajectory`. Their discount and lambda can be meta-learned
(podracer/kits/meta_gradient.py).
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp

from podracer.agent import legal
from podracer.components.distributions import (ActionDistribution, Categorical, Policy,
                                               check_distribution)
from podracer.components.losses import PolicyLoss
from podracer.components.normalizers import (RETURN, ObservationNormalizer,
                                             RewardNormalizer)
from podracer.contracts import actor_critic_outputs
from podracer.errors import ConfigError
from podracer.kits.meta_gradient import MetaGradientAgent
from podracer.learning import Objective
from podracer.types import ActorOutput, EnvSpec, PyTree, TimeStep, Trajectory

REWARD_STATISTICS = "reward_normalizer"  # The reward normaliser's state in the learner state.


class TrackedReturn(NamedTuple):
  """The actor state of an agent whose reward normaliser tracks returns (`return_std`):
  the policy's own state (`init_policy_state`'s) and each environment's discounted
  return [B]."""
  policy: PyTree
  discounted_return: jax.Array


class ActorCriticAgent(MetaGradientAgent):
  """Acts with its action distribution (`distribution`, a categorical by default);
  subclasses write `update` and call their loss with `policy_input`.

  `keeps_value`: whether `act` keeps the value with each step (`extras["value"]`), for
  losses that use the acting value (PPO's GAE); the log-probability is always kept, and
  the raw sample (`extras["raw_action"]`) where the distribution transforms it.
  """

  action_masks = True  # `legal` logits: illegal actions are never sampled.
  action_kind = None  # Either: the distribution's kind is checked against the spec.
  keeps_value = False

  def __init__(self, spec: EnvSpec, network: Any = None,
               objectives: Sequence[Objective] = (), replay: Any = None, *,
               loss: Any = None, distribution: Optional[ActionDistribution] = None,
               observation_normalizer: Any = None, reward_normalizer: Any = None):
    agent = type(self).__name__
    self.distribution = Categorical(spec) if distribution is None else distribution
    check_distribution(self.distribution, spec, agent)
    if (loss is not None and not isinstance(loss, PolicyLoss)
        and not isinstance(self.distribution, Categorical)):
      raise ConfigError(
          f"Agent '{agent}': its loss ({type(loss).__name__}) takes a categorical policy's "
          f"logits, but the `distribution` is '{self.distribution.name}': derive the loss "
          "from podracer.components.losses.PolicyLoss, which is called with a Policy (its "
          "`log_prob(action)` and `entropy()`), or use a built-in loss (ppo, dpo, vtrace).")
    _check_normalizer(observation_normalizer, ObservationNormalizer, "observation", agent)
    _check_normalizer(reward_normalizer, RewardNormalizer, "reward", agent)
    self.loss = loss
    self.observation_normalizer = observation_normalizer
    self.reward_normalizer = reward_normalizer
    if observation_normalizer is not None:
      network = observation_normalizer.wrap(network)
    super().__init__(spec, network, objectives, replay)
    self.tracks_returns = reward_normalizer is not None and reward_normalizer.track_returns()
    if self.tracks_returns and type(self).init_actor is not ActorCriticAgent.init_actor:
      raise ConfigError(
          f"Agent '{agent}': its `reward_normalizer` ({type(reward_normalizer).__name__}) "
          "carries each environment's return in the actor state, but the agent overrides "
          "init_actor: override init_policy_state instead (the kit adds the returns).")

  def init_policy_state(self, key: jax.Array, num_envs: int) -> PyTree:
    """The policy's own per-environment state (an LSTM's); none by default."""
    return super().init_actor(key, num_envs)

  def init_actor(self, key: jax.Array, num_envs: int) -> PyTree:
    """`init_policy_state`'s, with each environment's discounted return beside it
    (`TrackedReturn`) where the reward normaliser tracks returns."""
    state = self.init_policy_state(key, num_envs)
    if self.tracks_returns:
      return TrackedReturn(state, jnp.zeros((num_envs,), jnp.float32))
    return state

  def policy_state(self, actor_state: PyTree) -> PyTree:
    """The policy's own part of an actor state (`init_actor`'s)."""
    return actor_state.policy if self.tracks_returns else actor_state

  def init_opt(self, nets: PyTree) -> PyTree:
    """The kit's learner state, with the reward normaliser's state where it has one."""
    opt = super().init_opt(nets)
    state = None if self.reward_normalizer is None else self.reward_normalizer.init()
    if state is not None:
      opt[REWARD_STATISTICS] = state
    return opt

  def expected_outputs(self, batch_size):
    return actor_critic_outputs(self.spec, batch_size, self.distribution.num_params())

  def policy(self, nets, actor_state, timestep: TimeStep) -> Tuple[jax.Array, jax.Array, PyTree]:
    """(the policy's parameters [B, P]: legal logits for a categorical, value [B], the
    next actor state) for one step; a feed-forward network by default (a recurrent agent
    overrides it)."""
    out = self.network.apply(nets, timestep.observation)
    return legal(out.logits, timestep.observation), out.value, actor_state

  def act(self, nets, actor_state, timestep: TimeStep, key) -> Tuple[ActorOutput, PyTree]:
    params, value, state = self.policy(nets, self.policy_state(actor_state), timestep)
    action, raw = self.distribution.sample(params, key)
    extras = dict(log_prob=self.distribution.log_prob(params, raw))
    if self.distribution.transforms_samples:
      extras["raw_action"] = raw
    if self.keeps_value:
      extras["value"] = value
    if self.tracks_returns:
      extras[RETURN] = self.reward_normalizer.discounted_return(
          actor_state.discounted_return, timestep)
      state = TrackedReturn(state, extras[RETURN])
    return ActorOutput(action, extras), state

  def eval_act(self, nets, actor_state, timestep: TimeStep, key):
    del key  # The distribution's mode.
    params, _, state = self.policy(nets, self.policy_state(actor_state), timestep)
    if self.tracks_returns:
      state = actor_state._replace(policy=state)
    return ActorOutput(self.distribution.mode(params), {}), state

  def policy_input(self, params: jax.Array, key: Optional[jax.Array]) -> Any:
    """What the loss is called with for the policy's parameters [..., P]: a Policy for a
    `PolicyLoss`, the logits for a loss of logits (0.17's form, categorical only)."""
    if isinstance(self.loss, PolicyLoss) or self.loss is None:
      return Policy(params, self.distribution, key)
    return params

  def observe(self, experience, trajectory: Trajectory) -> Trajectory:
    del experience  # On-policy (up to the actors' lag): learn from the newest trajectory.
    return trajectory

  def prepare(self, nets: PyTree, opt: PyTree, experience: Trajectory
              ) -> Tuple[PyTree, PyTree, Trajectory, Dict[str, jax.Array]]:
    """(nets, learner state, the trajectory to learn from, metrics) before an update: the
    observation statistics updated with the batch's observations (of every replica), the
    rewards normalised, then `shape_trajectory`."""
    if self.observation_normalizer is not None:
      rows = jax.tree.map(lambda x: x[:-1].reshape(-1, *x.shape[2:]),
                          experience.timestep.observation)
      nets = self.observation_normalizer.updated(nets, rows)
    trajectory, metrics = experience, {}
    if self.reward_normalizer is not None:
      trajectory, state, metrics = self.reward_normalizer.normalize(
          opt.get(REWARD_STATISTICS), trajectory)
      if state is not None:
        opt = {**opt, REWARD_STATISTICS: state}
    trajectory, opt, shaped = self.shape_trajectory(nets, opt, trajectory)
    return nets, opt, trajectory, {**metrics, **shaped}

  def shape_trajectory(self, nets: PyTree, opt: PyTree, trajectory: Trajectory
                       ) -> Tuple[Trajectory, PyTree, Dict[str, jax.Array]]:
    """(the trajectory the update learns from, the learner state, metrics): where an
    agent rewrites its trajectory with the network's parameters before any target is
    computed (an intrinsic reward, reward shaping), keeping state of its own in the
    learner state `opt` (a dict: running statistics under a key of its own, which
    checkpoints keep and resume). The trajectory as it is by default."""
    del nets
    return trajectory, opt, {}


def _check_normalizer(normalizer: Any, interface: type, what: str, agent: str) -> None:
  if normalizer is None or isinstance(normalizer, interface):
    return
  raise ConfigError(
      f"Agent '{agent}': its `{what}_normalizer` section names {type(normalizer).__name__}, "
      f"which does not normalise {what}s (not a {interface.__name__}): "
      + ("`running_mean_std` normalises observations." if what == "observation" else
         "`reward_scale` and `return_std` normalise rewards."))
