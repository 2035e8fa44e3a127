"""D4PG (Barth-Maron et al. 2018, "Distributed Distributional Deterministic Policy
Gradients"): a deterministic actor mu and a distributional critic Z(s, a), a
categorical distribution over `critic_loss.num_atoms` atoms from `v_min` to `v_max`:

  critic   CE(Phi(r^(m) + gamma^(m) z, p'(s_{t+m}, mu'(s_{t+m}))), p(s_t, a_t)), the
           n-step distributional target of the `categorical_td` loss (primes the target
           networks), weighted by the prioritized replay's importance weights
  actor    -E[Z(s, mu(s))] = -sum_k p_k(s, mu(s)) z_k (the deterministic policy gradient
           through the critic's mean)

acting mu(s) plus N(0, (sigma_i h)^2) per environment i, clipped to the bounds (h the
bounds' half-width): sigma_i = sigma^(1 + alpha i / (N - 1)), Ape-X's spread of rates
(`exploration_alpha` 0: sigma everywhere, Acme's D4PG).

Made of shared parts, none copied: the actor is TD3's (`deterministic_policy`, its noise
`gaussian_exploration` from podracer/kits/transition_replay.py); the critic's loss is
the categorical one C51 shares (podracer/components/losses/categorical.py); the replay
(prioritized, any of `device`, `host`, `reverb`: one environment's [T + n] stretch an
item, as DQN's, which n-step targets need and TD3's single transitions cannot give),
its warm-up (no update before `replay.min_size`), the priorities written back and the
target networks (actor and critic, copied every `target_update_period` updates) are
DQN's (`SequenceReplayAgent`, `replay_q_update` in podracer/kits/q_learning.py).

From pixels (`encoder_network`, TF-Replicator's `replicator_resnet`) actor and critic
take one shared embedding e(s) as their observation. The critic's loss trains the
encoder (its objective owns `critic` and `encoder`; the target networks have its copy);
the actor's loss reads e(s) through `stop_gradient`, as TF-Replicator's and Acme's D4PG
do (podracer/components/networks/encoders.py says why).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.agent import dummy_observation
from podracer.components.losses import CategoricalTDLoss
from podracer.components.networks import DeterministicPolicyNetwork
from podracer.kits.q_learning import SequenceReplayAgent, apex_epsilons
from podracer.kits.transition_replay import gaussian_exploration
from podracer.learning import Objective
from podracer.registry.ranges import NonNegative, Probability
from podracer.types import ActorOutput, EnvSpec, StepType, TimeStep


def time_major(items: Any) -> Any:
  """A replayed batch of items [B, S, ...] as [S, B, ...]."""
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), items)


def merged(x: jax.Array) -> jax.Array:
  """[S, B, ...] -> [S * B, ...], for one pass of a network over every step."""
  return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


@registry.agents.register("d4pg")
class D4PG(SequenceReplayAgent):
  """Deterministic policy gradients through a distributional critic, from a prioritized
  replay of n-step sequences."""

  action_kind = "continuous"
  outputs_of = "critic"

  def __init__(self, spec: EnvSpec, actor_network: DeterministicPolicyNetwork,
               critic_network: hk.Transformed,
               actor_optimizer: optax.GradientTransformation,
               critic_optimizer: optax.GradientTransformation,
               critic_loss: CategoricalTDLoss, replay: Any,
               discount: Annotated[float, Probability] = 0.99,
               target_update_period: int = 100,
               importance_sampling_exponent: Annotated[float, Probability] = 0.6,
               priority_eta: Annotated[float, Probability] = 0.9,
               exploration_noise: Annotated[float, NonNegative] = 0.3,
               exploration_alpha: Annotated[float, NonNegative] = 0.0,
               encoder_network: Optional[hk.Transformed] = None):
    critic_owns = ("critic",) if encoder_network is None else ("critic", "encoder")
    objectives = [Objective("critic", self._critic_loss, critic_optimizer, owns=critic_owns),
                  Objective("actor", self._actor_loss, actor_optimizer, owns=("actor",))]
    super().__init__(spec, objectives=objectives, replay=replay)
    self.actor, self.critic, self.critic_loss = actor_network, critic_network, critic_loss
    self.encoder = encoder_network
    self.discount, self.target_update_period = discount, int(target_update_period)
    self.importance_sampling_exponent = importance_sampling_exponent
    self.priority_eta = priority_eta
    self.exploration_noise, self.exploration_alpha = exploration_noise, exploration_alpha
    self.trajectory_overlap = critic_loss.n_step  # the n steps completing each target

  def init_nets(self, key):
    actor_key, critic_key = jax.random.split(key)
    observation, nets = dummy_observation(self.spec), {}
    if self.encoder is not None:
      nets["encoder"] = self.encoder.init(jax.random.fold_in(key, 2), observation)
      observation = self.encoder.apply(nets["encoder"], observation)
    actor = self.actor.init(actor_key, observation)
    action = self.actor.apply(actor, observation)
    return dict(nets, actor=actor, critic=self.critic.init(critic_key, observation, action))

  def embedded(self, nets, observation):
    """e(s), the shared encoder's embedding, or the observation itself without one."""
    return observation if self.encoder is None else self.encoder.apply(nets["encoder"],
                                                                        observation)

  def init_actor(self, key, num_envs):
    """Each environment's noise scale sigma_i (Ape-X's spread with `exploration_alpha`)."""
    del key
    return apex_epsilons(num_envs, self.exploration_noise, self.exploration_alpha)

  def init_eval_actor(self, key, num_envs):
    """No noise: mu(s) itself."""
    del key
    return jnp.zeros((num_envs,), jnp.float32)

  def act(self, nets, actor_state, timestep: TimeStep, key):
    action = self.actor.apply(nets["actor"], self.embedded(nets, timestep.observation))
    noisy = gaussian_exploration(action, key, actor_state, self.actor.minimum,
                                 self.actor.maximum)
    return ActorOutput(noisy, {}), actor_state

  def actor_metrics(self, actor_state):
    return dict(exploration_noise_mean=jnp.mean(actor_state))

  def _critic_loss(self, nets, batch, key):
    """The `categorical_td` loss on a [B, S] batch of items: the online critic at the
    taken actions, the target critic at the target actor's, over all S * B steps."""
    del key
    items, weights, target = batch
    timestep, action = time_major(items.timestep), time_major(items.action)
    steps, batch_size = timestep.step_type.shape
    observation = jax.tree.map(merged, timestep.observation)
    unmerged = lambda x: x.reshape(steps, batch_size, -1)
    online, next_embedding = (self.embedded(nets, observation),
                              self.embedded(target, observation))
    logits = unmerged(self.critic.apply(nets["critic"], online, merged(action)))
    next_action = self.actor.apply(target["actor"], next_embedding)
    next_logits = unmerged(self.critic.apply(target["critic"], next_embedding, next_action))
    return self.critic_loss(logits, next_logits, timestep, weights, self.discount)

  def _actor_loss(self, nets, batch, key):
    """-E[Z(s, mu(s))] over the learned steps (the first T of each item, not resets)."""
    del key
    items, _, _ = batch
    timestep = time_major(items.timestep)
    learned = timestep.step_type.shape[0] - self.trajectory_overlap
    observation = jax.tree.map(lambda x: merged(x[:learned]), timestep.observation)
    observation = jax.lax.stop_gradient(self.embedded(nets, observation))
    action = self.actor.apply(nets["actor"], observation)
    critic = jax.lax.stop_gradient(nets["critic"])
    q = self.critic_loss.mean(self.critic.apply(critic, observation, action))
    mask = merged(timestep.step_type[:learned] != StepType.LAST).astype(jnp.float32)
    return -jnp.sum(q * mask) / jnp.maximum(jnp.sum(mask), 1.0), {}
