"""AlphaZero (Silver et al. 2018) with Gumbel search (Danihelka et al. 2022), as Pgx's own
example trains it: MuZero's search, targets and replay, but the search steps the
environment's own game (`EnvSpec.simulator`: Pgx's games with `env.simulator=True`)
instead of a learned model, and the network predicts only a policy and a value.

Each node of the search is a true game state: its prior is the network's policy over the
legal moves there, its value the network's (0 past the game's end), the edge's reward
and discount the game's (the mover's result; -1 where the turn passes, so backups are
negamax). Learning: the policy against the search's, the value against the n-step
targets of MuZero's `n_step_value_targets`, at each sampled position; no unroll, so
`num_unroll_steps` is not AlphaZero's to set.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mctx
import optax

from agents.muzero.agent import MuZero, _masked_mean
from podracer import registry
from podracer.agent import legal
from podracer.types import simulator_state
from podracer.errors import load_on_first_use

# Loaded where a loss first reads it: its import brings distrax and TensorFlow Probability.
rlax = load_on_first_use("rlax")


@registry.agents.register("alphazero")
class AlphaZero(MuZero):
  """AlphaZero: MuZero's machinery searching the true game; see the module docstring."""

  @functools.wraps(MuZero.__init__)
  def __init__(self, spec, *args, **kwargs):
    if getattr(spec, "simulator", None) is None:
      raise ValueError(
          "agent 'alphazero' searches the environment's own game, and this environment "
          "lends none (EnvSpec.simulator): Pgx's games do with --config.env.simulator=True; "
          "agent 'muzero' learns a model of the environment instead.")
    if "num_unroll_steps" in kwargs:
      raise ValueError("`agent.num_unroll_steps` is MuZero's: AlphaZero unrolls no model "
                       "(it learns at each sampled position); leave the key out.")
    super().__init__(spec, *args, **kwargs)
    self.num_unroll_steps = 0
    self.trajectory_overlap = self.td_steps

  def evaluate(self, params, observation):
    """The network's prior logits over legal moves and its value, from observations."""
    policy_logits, value_logits = self.network.predict(
        params, self.network.represent(params, observation))
    return legal(policy_logits, observation), value_logits

  def _root(self, params, observation) -> mctx.RootFnOutput:
    logits, value_logits = self.evaluate(params, observation)
    return mctx.RootFnOutput(prior_logits=logits, value=self.scalar(value_logits),
                             embedding=simulator_state(observation))

  def _recurrent(self, params, key, action, games):
    keys = jax.random.split(key, action.shape[0])
    games, reward, discount, observation = jax.vmap(self.spec.simulator)(games, action, keys)
    logits, value_logits = self.evaluate(params, observation)
    value = jnp.where(discount == 0, 0.0, self.scalar(value_logits))  # Past the end.
    return mctx.RecurrentFnOutput(reward=reward.astype(jnp.float32),
                                  discount=discount.astype(jnp.float32),
                                  prior_logits=logits, value=value), games

  def _loss(self, params, batch, key):
    """Importance-weighted mean of the policy's and value's cross-entropies."""
    del key
    targets, weights = batch
    policy_logits, value_logits = self.network.predict(
        params, self.network.represent(params, targets.observation))
    search, mask = targets.policy[:, 0], targets.policy_mask[:, 0]
    policy = optax.softmax_cross_entropy(policy_logits, search) * mask
    value = optax.softmax_cross_entropy(value_logits, self.tx_pair.apply(targets.value[:, 0]))
    total = jnp.mean(weights * (policy + self.value_coef * value))
    prior = jax.nn.log_softmax(policy_logits)
    h = rlax.signed_hyperbolic(targets.value[:, 0])
    return total, dict(
        policy_loss=jnp.mean(policy), value_loss=jnp.mean(value),
        search_value=jnp.mean(targets.search_value),
        search_policy_entropy=_masked_mean(-jnp.sum(search * jnp.log(search + 1e-12), -1), mask),
        search_prior_kl=_masked_mean(
            jnp.sum(search * (jnp.log(search + 1e-12) - prior), -1), mask),
        value_target_clipped=jnp.mean(
            ((h <= self.support[0]) | (h >= self.support[1])).astype(jnp.float32)))
