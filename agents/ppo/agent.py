"""PPO (Schulman et al., 2017): on-policy actor-critic with a clipped surrogate objective.

Written once for one replica; runs under Anakin, Sebulba and SEED unchanged. The loss is
a component (`config.loss.name`): new clipped objectives plug in without touching this file.
"""

from __future__ import annotations

from typing import Annotated, Any

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from podracer import registry
from podracer.agent import legal
from podracer.components.losses import PPOLoss, PolicyGradientBatch, policy_gradient_batch
from podracer.errors import ConfigError
from podracer.kits import ActorCriticAgent
from podracer.learning import Objective, minibatch_epochs
from podracer.registry.ranges import Probability
from podracer.types import EnvSpec, Trajectory


@registry.agents.register("ppo")
class PPO(ActorCriticAgent):
  """PPO with GAE, several epochs of minibatch updates per trajectory batch. Acting,
  evaluation and observing are the actor-critic kit's (podracer/kits/actor_critic.py)."""

  keeps_value = True  # GAE bootstraps from the values the actors saw.

  def __init__(self, spec: EnvSpec, network: hk.Transformed, loss: Any,
               optimizer: optax.GradientTransformation,
               discount: Annotated[float, Probability] = 0.99,
               gae_lambda: Annotated[float, Probability] = 0.95,
               num_epochs: int = 4, num_minibatches: int = 4, meta_loss: Any = None,
               distribution: Any = None, observation_normalizer: Any = None,
               reward_normalizer: Any = None, gae_window: int = 0,
               advantage_form: str = "gae", fresh_advantages: bool = False):
    super().__init__(spec, network, [Objective("ppo", self._loss, optimizer)], loss=loss,
                     distribution=distribution, observation_normalizer=observation_normalizer,
                     reward_normalizer=reward_normalizer)
    self.discount = discount
    self.gae_lambda = gae_lambda
    self.gae_window = gae_window  # >0: GAE over windows of that many steps (Brax's unrolls).
    self.advantage_form = advantage_form  # "gae", or "brax": r + gamma v' - V (docs/agents.md)
    self.num_epochs = num_epochs
    self.num_minibatches = num_minibatches
    self.meta_loss = meta_loss  # Adapts discount and lambda online, if given.
    # Brax's PPO: minibatches of whole windows, their advantages taken in the loss from
    # the values of the network being learned (not the actors').
    self.fresh_advantages = fresh_advantages
    if fresh_advantages:
      _check_fresh(gae_window, meta_loss, loss)
      if type(self).learning_batch is not PPO.learning_batch:  # Recurrent PPO's sequences.
        raise ConfigError(f"`agent.fresh_advantages` is PPO's, over windows of steps; "
                          f"{type(self).__name__} builds its own batches.")

  def policy_lag_corrected(self):  # Any: the ratio is to the policy that acted.
    return None

  @classmethod
  def gradient_steps_per_update(cls, num_epochs: int, num_minibatches: int,
                                **unused: Any) -> int:
    return num_epochs * num_minibatches

  def meta_values(self):
    return {"discount": self.discount, "lambda": self.gae_lambda}

  def learning_batch(self, trajectory: Trajectory, values) -> PolicyGradientBatch:
    if self.fresh_advantages:  # [B * T / w, w + 1] windows, advantages in the loss.
      return windows(trajectory, self.gae_window)
    return policy_gradient_batch(trajectory, values["discount"], values["lambda"],
                                 self.gae_window, self.advantage_form)

  def update(self, nets, opt, experience: Trajectory, key):
    nets, opt, trajectory, shaped = self.prepare(nets, opt, experience)
    values, opt, meta = self.adapted(nets, opt, trajectory)
    nets, opt, metrics = minibatch_epochs(
        self.objectives, nets, opt, self.learning_batch(trajectory, values), key,
        num_epochs=self.num_epochs, num_minibatches=self.num_minibatches)
    return nets, opt, experience, {**metrics, **meta, **shaped}

  def _loss(self, nets, minibatch: PolicyGradientBatch, key):
    if self.fresh_advantages:
      return self._fresh_loss(nets, minibatch, key)
    out = self.network.apply(nets, minibatch.observation)
    policy = self.policy_input(legal(out.logits, minibatch.observation), key)
    return self.loss(policy, out.value, minibatch)

  def _fresh_loss(self, nets, minibatch: Trajectory, key):
    """The loss of [n, w + 1] windows, each a trajectory of its own: GAE over it from the
    current network's values (no gradient through the advantages or targets, as in
    Brax's compute_gae), the policy's and value's losses on its first w steps."""
    window = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), minibatch)  # [w + 1, n]
    steps, n = window.action.shape[:2]
    flat = lambda x: x.reshape(steps * n, *x.shape[2:])
    observation = jax.tree.map(flat, window.timestep.observation)
    out = self.network.apply(nets, observation)
    value = out.value.reshape(steps, n)
    batch = policy_gradient_batch(
        window._replace(extras={**window.extras, "value": value}), self.discount,
        self.gae_lambda, 0, self.advantage_form)
    head = lambda x: x.reshape(steps, n, *x.shape[1:])[:-1].reshape(-1, *x.shape[1:])
    logits = legal(head(out.logits), batch.observation)
    return self.loss(self.policy_input(logits, key), head(out.value), batch)


def windows(trajectory: Trajectory, window: int) -> Trajectory:
  """A [T+1, B] trajectory as [B * T / w, w + 1] windows of w steps, each with the step
  after it (to bootstrap from), window-major: the units Brax's PPO shuffles."""
  steps, envs = trajectory.action.shape[0] - 1, trajectory.action.shape[1]
  if steps % window:
    raise ConfigError(f"`agent.gae_window` ({window}) must divide the rollout of {steps} "
                      f"steps with `agent.fresh_advantages`: its windows are its examples.")
  index = (jnp.arange(steps // window)[:, None] * window + jnp.arange(window + 1)[None])

  def cut(x):
    cuts = jnp.moveaxis(x[index], 2, 1)  # [T / w, B, w + 1, ...]
    return cuts.reshape(-1, window + 1, *x.shape[2:])
  return jax.tree.map(cut, trajectory)


def _check_fresh(gae_window: int, meta_loss: Any, loss: Any) -> None:
  """`fresh_advantages` takes windows, fixed discount and lambda, unclipped values."""
  if gae_window <= 0:
    raise ConfigError("`agent.fresh_advantages` takes its advantages over windows: set "
                      "`agent.gae_window` (Brax's unroll_length, e.g. 5).")
  if meta_loss is not None:
    raise ConfigError("`agent.fresh_advantages` takes its advantages in the loss at the "
                      "configured discount and lambda: a `meta_loss` cannot adapt them.")
  if isinstance(loss, PPOLoss) and loss.clip_value:
    raise ConfigError("`agent.fresh_advantages` with `loss.clip_value`: the clipped value "
                      "loss needs the acting values, which windows do not keep; set "
                      "--config.loss.clip_value=False (Brax's).")
