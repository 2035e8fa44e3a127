"""Trajectories as every runtime assembles them: [T+K, B], overlapping by K entries.

An entry is what an agent saw and did at one step (`Trajectory` of [B] arrays). A run
keeps the last K = `agent.trajectory_overlap` entries: K-1 already-stepped `earlier`
ones and the `pending` one, acted on but not yet stepped. A rollout of T steps turns
them into the trajectory `earlier + T stepped entries + pending`, whose last K entries
open the next one. Anakin does this inside its scan, Sebulba's actors on their device
(`opening`, `assemble_groups`: compiled once, for environments stepped in groups), SEED's
server per worker on the host; all call these functions, so all hand agents the same
trajectories.
"""

from __future__ import annotations

import functools
from typing import List, Tuple

import jax
import jax.numpy as jnp

from podracer.types import EnvSpec, PyTree, StepType, TimeStep, Trajectory


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


def split_last(entries: Trajectory) -> Tuple[Trajectory, Trajectory]:
  """[K, B] entries -> the K-1 `earlier` ones [K-1, B] and the `pending` one [B]."""
  return jax.tree.map(lambda x: x[:-1], entries), jax.tree.map(lambda x: x[-1], entries)


def assemble(earlier: Trajectory, stepped: Trajectory, pending: Trajectory) -> Trajectory:
  """earlier [K-1, B] + stepped [T, B] + pending [B] -> the [T+K, B] trajectory."""
  return jax.tree.map(lambda e, xs, x: jnp.concatenate([e, xs, x[None]]),
                      earlier, stepped, pending)


def extend(entries: Trajectory, new: Trajectory) -> Trajectory:
  """The K entries a rollout starts from [K, B] + the T entries it made [T, B] -> the
  [T+K, B] trajectory (the same as `assemble`, for rollouts that emit each step's new
  entry rather than the one it stepped)."""
  return jax.tree.map(lambda e, xs: jnp.concatenate([e, xs]), entries, new)


def last_entries(trajectory: Trajectory, overlap: int) -> Trajectory:
  """The [K, B] entries that open the next trajectory."""
  return jax.tree.map(lambda x: x[-overlap:], trajectory)


def trajectory_spec(agent, spec: EnvSpec, num_envs: int, rollout_length: int) -> Trajectory:
  """Shapes of a [T+K, num_envs, ...] trajectory of `agent` on `spec`, without running."""
  key = jax.ShapeDtypeStruct((2,), jnp.uint32)
  batch = lambda shape, dtype: jax.ShapeDtypeStruct((num_envs, *shape), dtype)
  timestep = TimeStep(batch((), jnp.int32), batch((), jnp.float32), batch((), jnp.float32),
                      jax.tree.map(lambda s: batch(s.shape, s.dtype), spec.observation,
                                   is_leaf=lambda x: hasattr(x, "dtype")))
  nets = jax.eval_shape(agent.init_nets, key)
  actor_state = jax.eval_shape(lambda k: agent.init_actor(k, num_envs), key)
  out, _ = jax.eval_shape(agent.act, nets, actor_state, timestep, key)
  entry = Trajectory(timestep, actor_state, out.action, out.extras)
  length = rollout_length + agent.trajectory_overlap
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct((length, *x.shape), x.dtype), entry)


def stack(entries) -> PyTree:
  """A list of [B, ...] entries -> one [len, B, ...] pytree."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *entries)


def join(groups: List[PyTree]) -> PyTree:
  """One pytree per group of environments ([B/G, ...] leaves) -> one [B, ...] pytree."""
  if len(groups) == 1:
    return groups[0]
  return jax.tree.map(lambda *xs: jnp.concatenate(xs), *groups)


# Compiled once at module level with static sizes: every run (and every benchmarks/actors.py
# call) reuses one compilation rather than compiling its own closure mid-run.
@functools.partial(jax.jit, static_argnums=(1,))
def opening(pending: List[Trajectory], overlap: int) -> Trajectory:
  """A run's first pending entries, one per group -> the K-1 `earlier` entries [K-1, B]
  its first trajectory starts from (`first_entries`' padding)."""
  return split_last(first_entries(join(pending), overlap))[0]


@functools.partial(jax.jit, static_argnums=(3,))
def assemble_groups(earlier: Trajectory, stepped: List[List[Trajectory]],
                    pending: List[Trajectory], overlap: int) -> Tuple[Trajectory, Trajectory]:
  """earlier [K-1, B], T stepped entries per group, the pending entry per group -> (the
  [T+K, B] trajectory, the K-1 `earlier` entries of the next one)."""
  entries = [join(list(step)) for step in zip(*stepped)]
  trajectory = assemble(earlier, stack(entries), join(pending))
  return trajectory, split_last(last_entries(trajectory, overlap))[0]
