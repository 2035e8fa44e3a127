"""The data that flows between environments, agents and runtimes.

One convention for JAX and CPU environments alike, dm_env's: a `TimeStep` carries the
step type, the reward and discount that arrived with this observation, and the
observation. After a LAST step the next step starts a new episode (FIRST) and ignores
the action it was given; EnvPool's auto-reset works the same way, which is why an agent
cannot tell a JAX environment from an EnvPool one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any

# The mapped axis over which replicas (devices, hosts) share gradients. Every runtime maps
# its learner over this name, so an agent written for one replica works on any number.
REPLICA_AXIS = "data"


class StepType:
  FIRST = 0
  MID = 1
  LAST = 2


class TimeStep(NamedTuple):
  step_type: jax.Array  # int32 [...]
  reward: jax.Array     # float32 [...]
  discount: jax.Array   # float32 [...]: 0 when the episode terminated, else 1
  observation: PyTree

  def first(self):
    return self.step_type == StepType.FIRST

  def mid(self):
    return self.step_type == StepType.MID

  def last(self):
    return self.step_type == StepType.LAST


class EpisodeStats(NamedTuple):
  """True episode statistics (before reward clipping or life-loss signals), per env.

  `done` marks the steps at which an episode ended; `episode_return` and
  `episode_length` hold that episode's totals there (and running totals elsewhere).
  """
  done: jax.Array
  episode_return: jax.Array
  episode_length: jax.Array


# Specs are frozen dataclasses, not NamedTuples, so that jax.tree.map over a pytree of
# specs treats each spec as a leaf.
@dataclasses.dataclass(frozen=True)
class ArraySpec:
  """An array's shape and dtype; continuous actions also carry their bounds.

  `minimum` and `maximum` are None (unbounded), a float for every element, or a tuple of
  floats of `shape` (tuples, not arrays, so specs stay hashable and comparable). Bounds
  given any other way (numpy arrays of any float dtype, lists) are kept that way, as
  float32 values: `ArraySpec((2,), np.float32, minimum=-np.ones(2), maximum=np.ones(2))`
  has minimum -1.0 and maximum 1.0. An environment's spec is checked when it is built
  (`podracer.check_environment`): a NaN bound, or a minimum not below its maximum, is
  refused naming the environment; an infinite bound means unbounded on that side.
  """
  shape: Tuple[int, ...]
  dtype: Any
  name: str = ""
  minimum: Any = None
  maximum: Any = None

  def __post_init__(self):
    minimum, maximum = bounds(self.minimum, self.maximum)
    object.__setattr__(self, "minimum", minimum)
    object.__setattr__(self, "maximum", maximum)


@dataclasses.dataclass(frozen=True)
class DiscreteSpec:
  num_values: int
  dtype: Any = np.int32
  name: str = "action"

  @property
  def shape(self):
    return ()


class EnvSpec(NamedTuple):
  observation: PyTree  # pytree of ArraySpec
  action: Any          # DiscreteSpec, or for continuous actions a bounded ArraySpec
  # Self-play: two players take turns in a zero-sum game and the agent plays both seats.
  # Each timestep is the player to move's observation, the reward of the player who just
  # moved, and discount -1 where the turn passes (0 at the end): every agent's
  # bootstrapped targets then negate the opponent's value (negamax), and MuZero's search
  # alternates its backups the same way.
  zero_sum: bool = False
  # The environment's own game, lent to agents that search it (AlphaZero): a pure
  # `simulator(state, action, key) -> (state, reward, discount, observation)` over the
  # state each observation carries under SIMULATOR_STATE; its reward is the mover's and
  # its discount -1 where the turn passes, 0 at the end (as `zero_sum`'s). None: lends none.
  simulator: Any = None


# The observation key under which an environment gives its legal actions: an
# observation {"action_mask": bool [A], ...} (Pgx, Jumanji and Craftax variants give
# one) says which of the A discrete actions may be taken now. Agents honour it
# (`podracer.agent.legal`); networks' torsos never see it as a feature.
ACTION_MASK = "action_mask"

# The observation key under which an environment that lends its simulator
# (`EnvSpec.simulator`: Pgx's games with `env.simulator=True`) gives the state to search
# from. Like the action mask, no torso sees it.
SIMULATOR_STATE = "simulator_state"

# What an illegal action's logit or Q-value becomes: no legal action's value is below it,
# and unlike -inf it keeps softmax entropies and their gradients finite.
ILLEGAL = -1e9


def action_mask(observation: PyTree) -> Any:
  """The legal actions [..., A] (bool) an observation carries, or None."""
  if isinstance(observation, Mapping) and ACTION_MASK in observation:
    return observation[ACTION_MASK]
  return None


def empty_masks(step_type: Any, mask: Any) -> np.ndarray:
  """[..., B] bool: environments whose mask [..., B, A] leaves no legal action at a step
  they act on (any but LAST, whose action is ignored)."""
  return ~np.asarray(mask).any(axis=-1) & (np.asarray(step_type) != StepType.LAST)


def has_action_mask(spec: EnvSpec) -> bool:
  return action_mask(spec.observation) is not None


def simulator_state(observation: PyTree) -> Any:
  """The state an observation carries for `EnvSpec.simulator` [...], or None."""
  if isinstance(observation, Mapping) and SIMULATOR_STATE in observation:
    return observation[SIMULATOR_STATE]
  return None


def observation_features(observation: PyTree) -> PyTree:
  """What a torso encodes: the observation without its action mask and simulator state;
  an observation left with one entry ({"observation": x, "action_mask": m}) is that
  entry, x."""
  if action_mask(observation) is None and simulator_state(observation) is None:
    return observation
  rest = {k: v for k, v in observation.items() if k not in (ACTION_MASK, SIMULATOR_STATE)}
  return next(iter(rest.values())) if len(rest) == 1 else rest


def bounds(minimum, maximum) -> Tuple[Any, Any]:
  """Array bounds as ArraySpec keeps them: a float when every element shares it, else a
  (nested) tuple of floats, float32 values either way; None stays None (unbounded)."""
  def as_tuple(x):
    return tuple(as_tuple(v) for v in x) if isinstance(x, list) else x

  def convert(x):
    if x is None:
      return None
    x = np.asarray(x, np.float64).astype(np.float32)
    if x.size and np.all(x == x.flat[0]):
      return float(x.flat[0])
    return as_tuple(x.tolist())
  return convert(minimum), convert(maximum)


def bound_arrays(action: ArraySpec) -> Tuple[np.ndarray, np.ndarray]:
  """A bounded action spec's (minimum, maximum) as float32 arrays of its shape (what
  `bounds` keeps as floats or tuples); the caller checks that there are bounds."""
  return tuple(np.broadcast_to(np.asarray(b, np.float32), action.shape)
               for b in (action.minimum, action.maximum))


class ActorOutput(NamedTuple):
  action: jax.Array
  extras: PyTree  # whatever the learner needs from acting: log-probs, values, q-values


class Trajectory(NamedTuple):
  """T+1 steps of B environments, time-major: [T+1, B, ...].

  Entry t holds the timestep the agent saw, the actor state it saw it with, and what
  it did. Consecutive trajectories overlap by one entry (the last of one is the first
  of the next), so every trajectory has its bootstrap step and T new env steps.
  """
  timestep: TimeStep
  actor_state: PyTree
  action: jax.Array
  extras: PyTree


class AgentState(NamedTuple):
  """An agent's state split by who touches it (as in Earl).

  actor: read and written by acting (recurrent state, exploration schedules), per env.
  nets: the parameters; read by actors, written by the learner.
  opt: everything else the learner updates with the nets (optimizer state, counters).
  experience: what the learner learns from: the latest trajectory, or a replay buffer.
  """
  actor: PyTree
  nets: PyTree
  opt: PyTree
  experience: PyTree


def strip_weak_types(tree: PyTree) -> PyTree:
  """Gives every array a strong dtype, so state cannot change type between calls.

  A weakly typed scalar in an initial state becomes strongly typed after one step,
  which would compile the step a second time (the Earl post's recompilation trap).
  """
  def strip(x):
    if isinstance(x, (jax.Array, np.ndarray, np.generic, float, int, bool)):
      x = jnp.asarray(x)
      return x.astype(x.dtype)
    return x
  return jax.tree.map(strip, tree)


def replica_mean(tree: PyTree) -> PyTree:
  """Mean over all replicas of the learner (devices and hosts); see REPLICA_AXIS."""
  # One replica: no all-reduce at all. XLA:CPU keeps a one-device all-reduce, and its
  # rendezvous in every minibatch costs more than a small network's gradient step.
  if jax.lax.psum(1, axis_name=REPLICA_AXIS) == 1:
    return tree
  return packed(lambda flat: jax.lax.pmean(flat, axis_name=REPLICA_AXIS), tree)


def replica_sum(tree: PyTree) -> PyTree:
  """Sum over all replicas of the learner; with one, no collective (as `replica_mean`)."""
  if jax.lax.psum(1, axis_name=REPLICA_AXIS) == 1:
    return tree
  return jax.lax.psum(tree, REPLICA_AXIS)


def packed(collective, tree: PyTree) -> PyTree:
  """Applies an elementwise `collective` to `tree` as one flat vector per dtype.

  XLA:CPU runs a tuple all-reduce as one cross-process (gloo) all-reduce per leaf, each a
  round trip between processes; packing makes it one per dtype (one for a gradient).
  """
  leaves, treedef = jax.tree.flatten(tree)
  groups = {}
  for i, leaf in enumerate(leaves):
    groups.setdefault(jnp.result_type(leaf), []).append(i)
  out = list(leaves)
  for indices in groups.values():
    flat = collective(jnp.concatenate([jnp.ravel(leaves[i]) for i in indices]))
    offset = 0
    for i in indices:
      size = jnp.size(leaves[i])
      out[i] = flat[offset:offset + size].reshape(jnp.shape(leaves[i]))
      offset += size
  return jax.tree.unflatten(treedef, out)
