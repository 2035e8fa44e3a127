"""What the off-policy continuous-control agents share (SAC, TD3, and yours): single
transitions in a uniform device replay, a learning step once the replay can sample, a
target network Polyak-averaged in the learner state, and the twin-Q critic's target and
regression. A subclass writes `learn(nets, optimizer state, transitions, target, step,
key)`, acting and its objectives.

Transitions out of a LAST step (whose action the environment ignored) go in with
priority 0, so they are never sampled.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from podracer.agent import Agent
from podracer.errors import ConfigError
from podracer.types import PyTree, StepType, Trajectory


class Transition(NamedTuple):
  """One step of one environment, as the replay keeps it."""
  observation: Any
  action: jax.Array
  reward: jax.Array         # the reward that arrived with next_observation
  discount: jax.Array       # the environment's: 0 at termination, else 1
  next_observation: Any


def transitions(trajectory: Trajectory):
  """A [T+1, B] trajectory -> T*B transitions, and whether each is real ([T*B] bool).

  A transition out of a LAST step is not: the next step is a reset that ignored the action.
  """
  flat = lambda x: x.reshape(-1, *x.shape[2:])
  timestep = trajectory.timestep
  items = Transition(
      observation=jax.tree.map(lambda x: flat(x[:-1]), timestep.observation),
      action=flat(trajectory.action[:-1]),
      reward=flat(timestep.reward[1:]),
      discount=flat(timestep.discount[1:]),
      next_observation=jax.tree.map(lambda x: flat(x[1:]), timestep.observation))
  return items, flat(timestep.step_type[:-1] != StepType.LAST)


def gaussian_exploration(action: jax.Array, key: jax.Array, scale: Any, minimum: Any,
                         maximum: Any, clip: Any = None) -> jax.Array:
  """action + N(0, (scale h)^2) per dimension, the noise clipped to +-clip h where `clip`
  is given, the result to the bounds; h the bounds' half-width. `scale` is a scalar or
  one per environment ([B]: D4PG's per-actor noise). TD3's acting and target smoothing,
  D4PG's acting."""
  half_width = jnp.asarray((maximum - minimum) / 2)
  scale = jnp.asarray(scale)
  scale = scale.reshape(scale.shape + (1,) * (action.ndim - scale.ndim))
  noise = scale * half_width * jax.random.normal(key, action.shape, action.dtype)
  if clip is not None:
    noise = jnp.clip(noise, -clip * half_width, clip * half_width)
  return jnp.clip(action + noise, minimum, maximum)


class TransitionReplayAgent(Agent):
  """Uniform replay of transitions and one learning step per update once it can sample
  (before that, the update waits and reports zeros)."""

  action_kind = "continuous"

  def check_replay(self, replay: Any) -> None:
    """The device replay, uniform: a ConfigError naming the agent otherwise."""
    if getattr(replay, "kind", None) != "device" or replay.priority_exponent != 0:
      raise ConfigError(f"{type(self).__name__} replays transitions uniformly from the "
                        "device replay: use `replay.name=device` with "
                        "`replay.priority_exponent=0`.")

  def replay_items(self, trajectory: Trajectory) -> Transition:
    return transitions(trajectory)[0]

  def observe(self, experience, trajectory: Trajectory):
    items, real = transitions(trajectory)
    return self.replay.add(experience, items, priorities=real.astype(jnp.float32))

  def learn(self, nets: PyTree, opt: PyTree, items: Transition, key: jax.Array
            ) -> Tuple[PyTree, PyTree, dict]:
    """(nets, learner state, metrics) after one learning step on a sampled batch."""
    raise NotImplementedError

  def update(self, nets, opt, experience, key):
    def learn(args):
      nets, opt, experience = args
      sample_key, step_key = jax.random.split(key)
      sample = self.replay.sample(experience, sample_key)
      nets, opt, metrics = self.learn(nets, opt, sample.items, step_key)
      # Priorities stay 1 (uniform replay); this counts the samples for the replay's
      # rate metrics.
      experience = self.replay.update_priorities(
          experience, sample, jnp.ones_like(sample.probabilities))
      return (nets, opt, experience), dict(metrics, learning=jnp.float32(1.0))

    def wait(args):
      shapes = jax.eval_shape(learn, args)[1]
      return args, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    (nets, opt, experience), metrics = jax.lax.cond(
        self.replay.can_sample(experience), learn, wait, (nets, opt, experience))
    metrics["replay_size"] = self.replay.size(experience).astype(jnp.float32)
    return nets, opt, experience, metrics
