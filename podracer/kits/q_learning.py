"""What the agents that learn Q-values from a prioritized replay share (R2D2, DQN).

Acting: epsilon-greedy (`epsilon_greedy`) with a rate per environment, Ape-X's spread
base^(1 + alpha i / (N - 1)) (`apex_epsilons`; alpha 0 gives every environment the same
rate), optionally annealed from uniformly random over each environment's first steps
(`annealed_epsilon`). Each environment carries its rate and step count in a
`QActorState`, beside a recurrent core where the network has one (R2D2's LSTM).

`QLearningAgent` is the Agent both are: it acts with `epsilon_greedy` on its network's
Q-values, writes one item per environment and learns with `replay_q_update`.

Learning (`replay_q_update`): once the replay can sample, a batch with its importance
weights, one gradient step of the agent's objective against the target network
(`learning.TargetState`), the items' priorities written back (`sequence_priorities`) and
the target network stepped; every update's record carries the same diagnostics
(`DIAGNOSTICS`), zeros while the replay warms up. The objective is the agent's: it
returns the `q_learning` loss's outputs (podracer/components/losses/q_learning.py).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.agent import Agent, random_legal
from podracer.components.losses.q_learning import IDENTITY_PAIR, TxPair
from podracer.experience import importance_weights
from podracer.learning import Objective, TargetState, gradient_step, update_target, with_target
from podracer.types import ILLEGAL, PyTree, Trajectory

# What each update's record carries (`q_diagnostics`); 0 while the replay warms up.
DIAGNOSTICS = ("loss", "q_mean", "q_max", "target_mean", "td_error_abs", "priority_mean",
               "priority_max", "learning")


class QActorState(NamedTuple):
  core: Any             # a recurrent core's state [B, ...] (R2D2's LSTM), or ()
  epsilon: jax.Array    # [B] each environment's exploration rate
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


def init_exploration(num_envs: int, base: float, alpha: float, core: Any = ()) -> QActorState:
  """Actors that have not acted yet: Ape-X's rates from `base` and `alpha`."""
  return QActorState(core, apex_epsilons(num_envs, base, alpha),
                     jnp.zeros((num_envs,), jnp.int32))


def eval_exploration(num_envs: int, epsilon: float, anneal_steps: int,
                     core: Any = ()) -> QActorState:
  """The evaluation policy's actors: `epsilon` everywhere, annealing already over."""
  return QActorState(core, jnp.full((num_envs,), epsilon, jnp.float32),
                     jnp.full((num_envs,), anneal_steps, jnp.int32))


def epsilon_greedy_actions(q: jax.Array, epsilon: jax.Array, key: jax.Array,
                           mask: Any = None) -> jax.Array:
  """Actions [B] int32 for Q-values [B, A]: uniformly random with probability `epsilon`
  (a scalar or [B]), else the argmax; with an action mask [B, A], random among the
  legal actions and the argmax of the legal ones."""
  explore_key, action_key = jax.random.split(key)
  if mask is None:
    greedy = jnp.argmax(q, axis=-1)
    random = jax.random.randint(action_key, greedy.shape, 0, q.shape[-1])
  else:
    greedy = jnp.argmax(jnp.where(mask, q, ILLEGAL), axis=-1)
    random = random_legal(action_key, mask)
  explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
  return jnp.where(explore, random, greedy).astype(jnp.int32)


def epsilon_greedy(q: jax.Array, state: QActorState, key: jax.Array,
                   anneal_steps: int, mask: Any = None) -> Tuple[jax.Array, QActorState]:
  """Actions [B] int32 for Q-values [B, A]: uniformly random (among the legal ones,
  with a `mask`) with each environment's (annealed) rate, else greedy; the state counts
  one more step."""
  epsilon = annealed_epsilon(state.epsilon, state.steps, anneal_steps)
  action = epsilon_greedy_actions(q, epsilon, key, mask)
  return action, state._replace(steps=state.steps + 1)


def epsilon_mean(state: QActorState, anneal_steps: int) -> Dict[str, jax.Array]:
  """The exploration rate the actors act with now, averaged over their environments."""
  return dict(epsilon_mean=jnp.mean(annealed_epsilon(state.epsilon, state.steps,
                                                     anneal_steps)))


def sequence_priorities(abs_td: jax.Array, mask: jax.Array, eta: float) -> jax.Array:
  """R2D2's priority, eta * max |td| + (1 - eta) * mean |td|, over masked steps [T, B]."""
  count = jnp.maximum(jnp.sum(mask, axis=0), 1.0)
  mean = jnp.sum(abs_td * mask, axis=0) / count
  return eta * jnp.max(abs_td * mask, axis=0) + (1.0 - eta) * mean


def q_diagnostics(out: Dict[str, jax.Array], priorities: jax.Array,
                  tx_pair: TxPair) -> Dict[str, jax.Array]:
  """What a record shows of an update: values in return units (h^-1 of the network's),
  max_a Q against the n-step targets, over the learned steps; errors and priorities as
  the loss and the replay see them."""
  mask = out["mask"]
  mean = lambda x: jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)
  max_q = tx_pair.apply_inv(jnp.max(out["q"], axis=-1))
  return dict(loss=out["loss"], q_mean=mean(max_q),
              q_max=jnp.max(jnp.where(mask > 0, max_q, -jnp.inf)),
              target_mean=mean(tx_pair.apply_inv(out["target"])),
              td_error_abs=mean(out["abs_td"]), priority_mean=jnp.mean(priorities),
              priority_max=jnp.max(priorities), learning=jnp.float32(1.0))


def sampled_age(replay: Any, experience: PyTree, sample: Any,
                overlap: int) -> Dict[str, jax.Array]:
  """`sampled_age`: env steps taken since the sampled items were inserted, mean over the
  batch, for a replay that knows its items' ages (the device replay; a host replay's
  runtime adds it on the host). An item is one environment's stretch of T new steps
  (its [T + overlap] entries), so each later item stands for T env steps."""
  items_added_since = getattr(replay, "items_added_since", None)
  if items_added_since is None:
    return {}
  new_steps = jax.tree.leaves(sample.items.timestep)[0].shape[1] - overlap
  since = items_added_since(experience, sample).astype(jnp.float32)
  return dict(sampled_age=jnp.mean(since) * new_steps)


def objective_outputs(metrics: Dict[str, jax.Array], name: Optional[str]
                      ) -> Dict[str, jax.Array]:
  """The outputs of objective `name`'s loss among `gradient_step`'s metrics (prefixed
  `name_` where there are several objectives), or all of them (`name` None)."""
  if name is None:
    return metrics
  prefix = f"{name}_"
  return {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)}


def replay_q_update(objectives: Sequence[Objective], replay: Any, nets: PyTree,
                    opt: TargetState, experience: PyTree, key: jax.Array, *,
                    importance_sampling_exponent: float, priority_eta: float,
                    target_update_period: int, tx_pair: TxPair, overlap: int = 0,
                    outputs_of: Optional[str] = None
                    ) -> Tuple[PyTree, TargetState, PyTree, Dict[str, jax.Array]]:
  """One learner update from a prioritized replay (an `Agent.update`); nothing but the
  replay's size while it holds fewer than it samples from. The objectives' loss takes
  (items, importance weights [B], target parameters) and returns the `q_learning`
  loss's outputs: `abs_td` and `mask` [T, B], `q` [T, B, A], `target` [T, B]; with
  several objectives (D4PG's critic and actor), `outputs_of` names the one that does.
  `overlap`: the entries an item repeats of the one before (the agent's
  `trajectory_overlap`)."""
  def learn(args):
    nets, opt, experience = args
    sample = replay.sample(experience, key)
    weights = importance_weights(sample, importance_sampling_exponent)
    nets, optimizer, out = gradient_step(objectives, nets, opt.optimizer,
                                         (sample.items, weights, opt.target), None)
    out = objective_outputs(out, outputs_of)
    priorities = sequence_priorities(out["abs_td"], out["mask"], priority_eta)
    experience = replay.update_priorities(experience, sample, priorities)
    metrics = q_diagnostics(out, priorities, tx_pair)
    metrics.update(sampled_age(replay, args[2], sample, overlap))
    opt = update_target(opt, optimizer, nets, period=target_update_period)
    return (nets, opt, experience), metrics

  def wait(args):
    keys = DIAGNOSTICS + (("sampled_age",) if hasattr(replay, "items_added_since") else ())
    return args, {k: jnp.float32(0.0) for k in keys}

  (nets, opt, experience), metrics = jax.lax.cond(
      replay.can_sample(experience), learn, wait, (nets, opt, experience))
  size = getattr(replay, "size", None)
  if size is not None:
    metrics["replay_size"] = jnp.float32(size(experience))
  return nets, opt, experience, metrics


# The Huber loss with a target network copied more often than this (updates) let the
# Q-values run away on DQN's CartPole settings (docs/agents.md, "DQN against PureJaxRL's").
HUBER_MIN_TARGET_PERIOD = 200
_said: set = set()


def huber_target_warning(huber_delta: float, target_update_period: int) -> Optional[str]:
  """What to warn of a Huber loss beside a target copied every few updates, or None."""
  if not huber_delta or target_update_period >= HUBER_MIN_TARGET_PERIOD:
    return None
  return (f"Warning: loss.huber_delta={huber_delta:g} with agent.target_update_period="
          f"{target_update_period}: a target copied this often lets the Q-values run away "
          "under the Huber loss, whose gradient is capped where the squared loss's grows "
          "with the error and pulls them back (DQN's CartPole settings: every seed at one "
          f"action, Q-values in the millions). Copy the target every "
          f"{HUBER_MIN_TARGET_PERIOD} updates or more, or take the squared loss "
          "(loss.huber_delta=0); docs/agents.md, \"DQN against PureJaxRL's\".")


def warn_once(message: Optional[str]) -> None:
  if message and message not in _said:
    _said.add(message)
    sys.stderr.write(message + "\n")


class SequenceReplayAgent(Agent):
  """An agent that learns from a prioritized replay of sequences against a target
  network with `replay_q_update` (DQN, R2D2, D4PG). A subclass sets `discount`,
  `target_update_period`, `importance_sampling_exponent`, `priority_eta` and
  `trajectory_overlap`; its objectives' losses return the `q_learning` loss's outputs.
  A replay item is one environment's [T+K] stretch of a trajectory with
  `item_actor_state` (nothing by default; R2D2: the LSTM state)."""

  tx_pair: TxPair = IDENTITY_PAIR  # How the diagnostics read values back.
  outputs_of: Optional[str] = None  # The objective giving the loss's outputs, if several.

  def init_opt(self, nets):
    return with_target(super().init_opt(nets), nets)

  def item_actor_state(self, trajectory: Trajectory) -> PyTree:
    """What an item keeps of the actors' state at its first step ([B, ...] leaves)."""
    del trajectory
    return ()

  def replay_items(self, trajectory: Trajectory) -> Trajectory:
    """One item per environment: its [T+K] steps and actions, batch-major."""
    batch_major = lambda x: jnp.swapaxes(x, 0, 1)
    return Trajectory(timestep=jax.tree.map(batch_major, trajectory.timestep),
                      actor_state=self.item_actor_state(trajectory),
                      action=batch_major(trajectory.action), extras={})

  def observe(self, experience, trajectory: Trajectory):
    return self.replay.add(experience, self.replay_items(trajectory))

  def update(self, nets, opt: TargetState, experience, key):
    return replay_q_update(self.objectives, self.replay, nets, opt, experience, key,
                           importance_sampling_exponent=self.importance_sampling_exponent,
                           priority_eta=self.priority_eta,
                           target_update_period=self.target_update_period,
                           tx_pair=self.tx_pair, overlap=self.trajectory_overlap,
                           outputs_of=self.outputs_of)


class QLearningAgent(SequenceReplayAgent):
  """An agent that acts epsilon-greedily on Q-values and learns them from a replay with
  the `q_learning` loss (or C51's `categorical_q_learning`) and a target network (DQN,
  R2D2). A subclass sets `q_loss`, `discount`, `target_update_period`,
  `importance_sampling_exponent`, `priority_eta` and `epsilon_anneal_steps`, and defines
  its network's Q-values (`act`, the objective's loss) and sets `tx_pair` to its loss's."""

  q_loss: Any
  epsilon_anneal_steps: int = 0
  action_masks = True  # Acting, argmax and targets over `legal` Q-values only.

  def expected_outputs(self, batch_size):
    """Q-values [B, A], or what the loss reads instead (C51's logits [B, A, K])."""
    shape = self.q_loss.output_shape(self.spec.action.num_values)
    return dict(q_values=((batch_size, *shape), np.floating))

  def actor_metrics(self, actor_state: QActorState):
    """The exploration rate the actors act with now, averaged over their environments."""
    return epsilon_mean(actor_state, self.epsilon_anneal_steps)
