"""A categorical return distribution (Bellemare, Dabney and Munos 2017): K atoms z on a
fixed support [v_min, v_max], probabilities p = softmax(logits), and its n-step
distributional Bellman target, for any agent that names these losses:

  target   Phi(r_t^(m) + gamma_t^(m) z, p'_{t+m})    (projected onto z)
  loss     - sum_k target_k log p_k(s_t, a_t)         (cross-entropy)

where r^(m) and gamma^(m) are the rewards and discounts of `n_step_returns` (at most n
steps, stopping at a reset and bootstrapping from the step before it unless the episode
terminated) and Phi rlax's `categorical_l2_project` (the Cramer projection). By
linearity, r^(m) + gamma^(m) z is `n_step_returns` of the rewards with bootstrap 0 plus
`n_step_returns` of zero rewards with bootstrap 1 times z, and p'_{t+m} is
`n_step_returns` of zero rewards, discount 1 and bootstrap p': the same cut, so the
distributional target stops exactly where DQN's scalar one does.

`categorical_td` is the critic's loss (D4PG's: the distribution of the taken action's
value, the bootstrap's from the target actor and critic); `categorical_q_learning` is
C51's, a loss of the DQN family on the same code (the `q_learning` loss's interface:
Q-values are the distributions' means, the bootstrap action the online or target
network's argmax).
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.losses.q_learning import n_step_returns, transitions
from podracer.types import ILLEGAL, TimeStep, action_mask
from podracer.errors import load_on_first_use

# Loaded where a loss first reads it: its import brings distrax and TensorFlow Probability.
rlax = load_on_first_use("rlax")


def categorical_support(v_min: float, v_max: float, num_atoms: int) -> np.ndarray:
  """The atoms z [num_atoms] (float32), evenly from v_min to v_max; a ValueError naming
  the key that is wrong (`v_min`, `v_max`, `num_atoms`) otherwise."""
  if isinstance(num_atoms, bool) or not isinstance(num_atoms, numbers.Integral) \
      or num_atoms < 2:
    raise ValueError(f"`num_atoms` must be an integer of at least 2 (the support's two "
                     f"ends), got {num_atoms!r}; C51 and D4PG use 51.")
  if not (np.isfinite(v_min) and np.isfinite(v_max) and v_min < v_max):
    raise ValueError(f"`v_min` ({v_min!r}) must be below `v_max` ({v_max!r}), both finite: "
                     "they bound the returns the distribution can hold.")
  return np.linspace(v_min, v_max, int(num_atoms), dtype=np.float32)


def categorical_projection(atoms: jax.Array, probs: jax.Array, support: jax.Array
                           ) -> jax.Array:
  """Distributions (atoms [..., K'], probs [..., K']) projected onto the fixed `support`
  [K]: rlax's `categorical_l2_project` over every leading axis. Returns probs [..., K]."""
  lead = probs.shape[:-1]
  flat = lambda x: x.reshape(-1, x.shape[-1])
  project = jax.vmap(rlax.categorical_l2_project, in_axes=(0, 0, None))
  out = project(flat(jnp.broadcast_to(atoms, probs.shape)), flat(probs), support)
  return out.reshape(*lead, support.shape[0])


def mean_value(logits: jax.Array, support: jax.Array) -> jax.Array:
  """The distributions' means sum_k softmax(logits)_k z_k: [..., K] -> [...]."""
  return jnp.sum(jax.nn.softmax(logits, axis=-1) * support, axis=-1)


def n_step_categorical_targets(next_probs: jax.Array, reward: jax.Array,
                               gamma: jax.Array, cut: jax.Array, support: jax.Array,
                               n: int) -> jax.Array:
  """Projected n-step targets [T, B, K] (no gradient) of the T transitions of [T + 1, B]
  steps: the bootstrap distributions `next_probs` [T + 1, B, K] (one per step), rewards,
  discounts and cuts [T, B] per transition (`transitions`)."""
  zeros = jnp.zeros_like(reward)
  shift = n_step_returns(reward, gamma, jnp.zeros_like(next_probs[..., 0]), cut, n)
  scale = n_step_returns(zeros, gamma, jnp.ones_like(next_probs[..., 0]), cut, n)
  expand = lambda x: jnp.broadcast_to(x[..., None], x.shape + next_probs.shape[-1:])
  bootstrap = n_step_returns(expand(zeros), jnp.ones_like(expand(zeros)), next_probs,
                             expand(cut), n)
  atoms = shift[..., None] + scale[..., None] * support
  return jax.lax.stop_gradient(categorical_projection(atoms, bootstrap, support))


def cross_entropy(target: jax.Array, logits: jax.Array) -> jax.Array:
  """- sum_k target_k log softmax(logits)_k: [..., K] -> [...]."""
  return -jnp.sum(target * jax.nn.log_softmax(logits, axis=-1), axis=-1)


@registry.losses.register("categorical_td")
class CategoricalTDLoss:
  """The distributional critic's loss on time-major sequences [S, B] of S = T + n steps:

      L = sum_{t<T, b} w_b CE(Phi(r^(m) + gamma^(m) z, p'_{t+m}), p(s_t, a_t)) m_t / sum m_t

  (module docstring), over `num_atoms` atoms from `v_min` to `v_max`. Called as
  `loss(logits, next_logits, timestep, weights, discount)`: the online distribution of
  the taken actions [S, B, K] and the target's at the bootstrap [S, B, K], the steps
  [S, B], importance weights [B]; returns (loss, dict(abs_td, mask, q, target)) as the
  `q_learning` loss does: `abs_td` is each transition's cross-entropy (the priority, as
  Acme's D4PG and Rainbow write it), `q` [T, B, 1] and `target` [T, B] the means.
  """

  def __init__(self, v_min: float = -150.0, v_max: float = 150.0, num_atoms: int = 51,
               n_step: int = 5):
    if isinstance(n_step, bool) or not isinstance(n_step, int) or n_step < 1:
      raise ValueError(f"`n_step` must be an integer >= 1, got {n_step!r}.")
    self.support = jnp.asarray(categorical_support(v_min, v_max, num_atoms))
    self.num_atoms, self.n_step = int(num_atoms), n_step
    self.tx_pair = rlax.IDENTITY_PAIR

  def mean(self, logits: jax.Array) -> jax.Array:
    """The distributions' means: [..., K] -> [...]."""
    return mean_value(logits, self.support)

  def regression(self, logits: jax.Array, next_logits: jax.Array, timestep: TimeStep,
                 weights: jax.Array, discount: float) -> Tuple[jax.Array, Dict[str, Any]]:
    """The loss and its per-transition outputs, `logits` [S, B, K] the online one's."""
    reward, gamma, cut = transitions(timestep, discount)
    next_probs = jax.nn.softmax(jax.lax.stop_gradient(next_logits), axis=-1)
    target = n_step_categorical_targets(next_probs, reward, gamma, cut, self.support,
                                        self.n_step)
    learned = target.shape[0] - (self.n_step - 1)
    target, mask = target[:learned], (~cut[:learned]).astype(jnp.float32)
    per_step = cross_entropy(target, logits[:learned])
    loss = jnp.sum(weights[None] * per_step * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return loss, dict(abs_td=per_step, mask=mask, target=jnp.sum(target * self.support, -1))

  def __call__(self, logits: jax.Array, next_logits: jax.Array, timestep: TimeStep,
               weights: jax.Array, discount: float) -> Tuple[jax.Array, Dict[str, Any]]:
    loss, out = self.regression(logits, next_logits, timestep, weights, discount)
    return loss, dict(out, q=self.mean(logits[:out["mask"].shape[0]])[..., None])


@registry.losses.register("categorical_q_learning")
class CategoricalQLearningLoss(CategoricalTDLoss):
  """C51 (Bellemare et al. 2017) with n-step returns and double Q-learning: the
  `categorical_td` loss on the taken actions' distributions, the bootstrap
  distribution the target network's at the online network's greedy action (`double`)
  or its own (`double=False`, C51's). The network gives logits [B, A, K]
  (`categorical_q_network`); Q-values are their means (`q_values`).

  Called as the `q_learning` loss is, `loss(logits, target_logits, timestep, action,
  weights, discount)` with logits [S, B, A, K]; returns its outputs (`q` [T, B, A]).
  """

  huber_delta = 0.0  # Cross-entropy, not a Huber regression (DQN's warning reads it).

  def __init__(self, n_step: int = 3, double: bool = True,
               v_min: float = -10.0, v_max: float = 10.0,
               num_atoms: int = 51):
    super().__init__(v_min=v_min, v_max=v_max, num_atoms=num_atoms, n_step=n_step)
    self.double = double

  def output_shape(self, num_actions: int) -> Tuple[int, ...]:
    """What the network gives per observation: logits [A, K]."""
    return (num_actions, self.num_atoms)

  def q_values(self, logits: jax.Array) -> jax.Array:
    """Q-values [..., A] of logits [..., A, K]: the means."""
    return self.mean(logits)

  def legal(self, logits: jax.Array, observation: Any) -> jax.Array:
    """Logits whose illegal actions put all mass on v_min (the lowest value) where the
    observation carries an action mask: argmax and max pick legal actions only."""
    mask = action_mask(observation)
    if mask is None:
      return logits
    floor = jnp.full(logits.shape[-1:], ILLEGAL, logits.dtype).at[0].set(0.0)
    return jnp.where(mask[..., None], logits, floor)

  def __call__(self, logits: jax.Array, target_logits: jax.Array, timestep: TimeStep,
               action: jax.Array, weights: jax.Array, discount: float
               ) -> Tuple[jax.Array, Dict[str, Any]]:
    target_logits = jax.lax.stop_gradient(target_logits)
    selector = self.q_values(jax.lax.stop_gradient(logits) if self.double else target_logits)
    greedy = jnp.argmax(selector, axis=-1)
    next_logits = jnp.take_along_axis(target_logits, greedy[..., None, None], -2)[..., 0, :]
    taken_logits = jnp.take_along_axis(logits, action[..., None, None], -2)[..., 0, :]
    loss, out = self.regression(taken_logits, next_logits, timestep, weights, discount)
    learned = out["mask"].shape[0]
    return loss, dict(out, q=self.q_values(logits[:learned]))
