"""The agent interface that both runtimes drive.

An agent is written once, for one replica and a batch of environments. Anakin compiles
`act`, `observe` and `update` into one program replicated over devices; Sebulba calls
`act` from actor threads on actor devices and `observe` + `update` on learner devices.
Gradients are shared across replicas with `podracer.types.replica_mean`, which both
runtimes bind to the devices that learn.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, Mapping, Tuple, Union

import jax
import jax.numpy as jnp

from podracer.types import ActorOutput, EnvSpec, PyTree, StepType, TimeStep, Trajectory

Metrics = Dict[str, jax.Array]


class Agent(abc.ABC):
  """Acting, experience and learning as pure functions of explicit state.

  The state is split by who touches it (`podracer.types.AgentState`): `actor` (per env,
  owned by actors), `nets` (parameters), `opt` (optimizer state), `experience` (what
  the learner learns from). No method keeps state on `self`; everything is jittable.
  """

  # Entries each trajectory repeats from the end of the previous one, so trajectories
  # are [rollout_length + trajectory_overlap, B]. One gives every transition its
  # bootstrap step; recurrent replay agents ask for more, to burn in their state.
  trajectory_overlap: int = 1

  def __init__(self, spec: EnvSpec):
    self.spec = spec

  @classmethod
  def gradient_steps_per_update(cls, **config: Any) -> Union[int, Mapping[str, int]]:
    """Optimizer steps one `update` makes, so learning-rate schedules can be sized.

    An int applies to every optimizer; agents whose optimizers step at different rates
    return {constructor parameter: steps}, e.g. {"actor_optimizer": 1, ...}.
    """
    del config
    return 1

  @abc.abstractmethod
  def init_nets(self, key: jax.Array) -> PyTree:
    """Network parameters (identical on every replica for the same key)."""

  @abc.abstractmethod
  def init_opt(self, nets: PyTree) -> PyTree:
    """Optimizer (and other learner) state for `nets`."""

  def init_actor(self, key: jax.Array, num_envs: int) -> PyTree:
    """Per-environment actor state (recurrent state, exploration); none by default."""
    del key, num_envs
    return ()

  @abc.abstractmethod
  def init_experience(self, trajectory_spec: Trajectory) -> PyTree:
    """Experience state, given the shapes of one trajectory ([T+K, B, ...])."""

  @abc.abstractmethod
  def act(self, nets: PyTree, actor_state: PyTree, timestep: TimeStep,
          key: jax.Array) -> Tuple[ActorOutput, PyTree]:
    """Actions for a batch of timesteps [B, ...], and the next actor state."""

  @abc.abstractmethod
  def observe(self, experience: PyTree, trajectory: Trajectory) -> PyTree:
    """Adds one trajectory to the experience (keeps it, or writes it to replay)."""

  @abc.abstractmethod
  def update(self, nets: PyTree, opt: PyTree, experience: PyTree,
             key: jax.Array) -> Tuple[PyTree, PyTree, PyTree, Metrics]:
    """One learner update; average gradients with `replica_mean` before applying them."""


def first_entries(first: Trajectory, overlap: int) -> Trajectory:
  """The [K, B] entries a run starts from: K-1 padding entries, then `first` ([B]).

  Padding entries copy `first` but are LAST steps with zero reward and discount, as if an
  episode had just ended: the step after a LAST is a FIRST, and transitions out of a LAST
  step are ignored, so no agent learns from the padding.
  """
  def pad(x):
    return jnp.broadcast_to(x, (overlap - 1, *jnp.shape(x)))
  padding = jax.tree.map(pad, first)
  ts = padding.timestep
  padding = padding._replace(timestep=ts._replace(
      step_type=jnp.full_like(ts.step_type, StepType.LAST),
      reward=jnp.zeros_like(ts.reward), discount=jnp.zeros_like(ts.discount)))
  return jax.tree.map(lambda p, x: jnp.concatenate([p, x[None]]), padding, first)
