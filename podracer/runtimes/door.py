"""What an environment's step must be before it reaches a device: checked at the door.

A non-finite reward or observation from one environment would otherwise surface several
updates later as non-finite parameters, with nothing to say where it came from. SEED's
server checks every worker's STEP with `step_problem` and drops a worker that sends a bad
one (the run goes on); Sebulba's actors check their environments' steps and stop the run
naming the environment (there is no spare one to drop). A float array is scanned once
(`np.isfinite(...).all()`); integer observations (Atari frames) cost nothing. SEED's
`Door` checks a STEP's raw bytes with a few reductions over views of them (a
CartPole message in about 8 us) and names the problem only when there is one.
"""

from __future__ import annotations

import math
import struct
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from podracer.types import action_mask, empty_masks

STEP_TYPES = (0, 1, 2)  # dm_env's FIRST, MID, LAST
_ONE_BITS = int(np.array(1.0, np.float32).view(np.uint32))


def _first_bad(bad: np.ndarray) -> int:
  """The environment (row) of the first True of `bad`."""
  return int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1))) if bad.ndim else 0


def _nonfinite(name: str, x: np.ndarray) -> Optional[str]:
  if x.dtype.kind not in "fc" or np.isfinite(x).all():
    return None
  rows = x.reshape(x.shape[0], -1) if x.ndim else x.reshape(1, 1)
  bad = ~np.isfinite(rows)
  env = _first_bad(bad)
  return f"a non-finite {name} ({rows[env][bad[env]][0]}) from environment {env}"


def _fine(step_type: np.ndarray, reward: np.ndarray, discount: np.ndarray,
          observations: Sequence[np.ndarray]) -> bool:
  """The fast path: one reduction per array (a NaN discount fails its range check)."""
  if not (((step_type >= 0) & (step_type <= 2)).all() and np.isfinite(reward).all()
          and ((discount >= 0) & (discount <= 1)).all()):
    return False
  return all(x.dtype.kind not in "fc" or np.isfinite(x).all() for x in observations)


def step_problem(step_type: np.ndarray, reward: np.ndarray, discount: np.ndarray,
                 observations: Sequence[np.ndarray]) -> Optional[str]:
  """None for a good step of a batch of environments, else what is wrong, naming the
  field, the environment (row) and the value."""
  step_type, reward, discount = np.asarray(step_type), np.asarray(reward), np.asarray(discount)
  observations = [np.asarray(x) for x in observations]
  if _fine(step_type, reward, discount, observations):
    return None
  if not np.isin(step_type, STEP_TYPES).all():
    env = _first_bad(~np.isin(step_type, STEP_TYPES))
    return (f"a step type of {step_type.reshape(-1)[env]} from environment {env} "
            f"(FIRST, MID and LAST are 0, 1 and 2)")
  for name, x in (("reward", reward), ("discount", discount)):
    problem = _nonfinite(name, np.asarray(x))
    if problem:
      return problem
  discount = np.asarray(discount)
  if discount.dtype.kind in "fc" and ((discount < 0) | (discount > 1)).any():
    env = _first_bad((discount < 0) | (discount > 1))
    return f"a discount of {discount.reshape(-1)[env]} from environment {env} (outside [0, 1])"
  for i, leaf in enumerate(observations):
    name = "observation" if len(observations) == 1 else f"observation leaf {i}"
    problem = _nonfinite(name, np.asarray(leaf))
    if problem:
      return problem
  return None


def mask_problem(step_type: np.ndarray, mask: np.ndarray) -> Optional[str]:
  """None when every environment that will act on this step (all but LAST ones) has a
  legal action in its action mask [B, A], else which one has none."""
  empty = empty_masks(step_type, mask)
  if not empty.any():
    return None
  return (f"an action mask with no legal action from environment {_first_bad(empty)} "
          "(its agent would have nothing to choose)")


def statistics_problem(sums: np.ndarray) -> Optional[str]:
  """None for good episode statistics [episodes, return sum, length sum, ...], else what
  is wrong: non-finite anywhere, or a negative episode count or length."""
  sums = np.asarray(sums)
  if np.isfinite(sums).all() and sums[0] >= 0 and sums[2] >= 0:
    return None
  if not np.isfinite(sums).all():
    return f"non-finite episode statistics {sums.tolist()}"
  if sums[0] < 0 or sums[2] < 0:
    return f"a negative episode count or length in its statistics {sums.tolist()}"
  return None


def timestep_problem(timestep: Any) -> Optional[str]:
  """`step_problem` of a TimeStep whose observation is an array or a tree of them."""
  observation = timestep.observation
  if isinstance(observation, np.ndarray):
    leaves = [observation]
  else:
    import jax  # pylint: disable=import-outside-toplevel
    leaves = [np.asarray(x) for x in jax.tree.leaves(observation)]
  mask = action_mask(observation)
  return (step_problem(timestep.step_type, timestep.reward, timestep.discount, leaves)
          or (None if mask is None else mask_problem(timestep.step_type, mask)))


class Door:
  """The check of one STEP layout [step type, reward, discount, observation leaves...,
  statistics] on a message's raw bytes: views, no copies, one reduction per contiguous
  run of float32 arrays; `problem(payload, arrays)` names what is wrong, if anything."""

  def __init__(self, arrays: Sequence[Tuple[Sequence[int], np.dtype]],
               mask_leaf: Optional[int] = None):
    # `mask_leaf`: which observation leaf is the action mask, if any.
    self.mask = None if mask_leaf is None else 3 + mask_leaf
    sizes = [int(np.prod(shape, dtype=np.int64)) for shape, _ in arrays]
    offsets = np.cumsum([0] + [n * np.dtype(d).itemsize for n, (_, d) in zip(sizes, arrays)])
    self.envs, self.offsets, self.sizes = sizes[0], offsets, sizes
    self.floats: List[Tuple[np.dtype, int, int]] = []  # (dtype, offset, count) runs
    for i in range(1, len(arrays) - 1):
      dtype = np.dtype(arrays[i][1])
      if dtype.kind not in "fc":
        continue
      last = self.floats[-1] if self.floats else None
      if last and last[0] == dtype and last[1] + last[2] * dtype.itemsize == offsets[i]:
        self.floats[-1] = (dtype, last[1], last[2] + sizes[i])
      else:
        self.floats.append((dtype, int(offsets[i]), sizes[i]))

  def _fine(self, payload: bytes) -> bool:
    n, at = self.envs, self.offsets
    # Read as unsigned integers: a step type of -1 wraps above 2, and a float32 is in
    # [0, 1] exactly when its bits are at most 1.0's (NaN's and negatives' are above).
    if not (np.frombuffer(payload, np.uint32, n, 0) <= 2).all():
      return False
    if not (np.frombuffer(payload, np.uint32, n, int(at[2])) <= _ONE_BITS).all():
      return False
    for dtype, offset, count in self.floats:
      if not np.isfinite(np.frombuffer(payload, dtype, count, offset)).all():
        return False
    sums = struct.unpack_from(f"<{self.sizes[-1]}d", payload, int(at[-2]))
    return all(map(math.isfinite, sums)) and sums[0] >= 0 and sums[2] >= 0

  def problem(self, payload: bytes, arrays: List[np.ndarray]) -> Optional[str]:
    """None for a good message (`arrays`: its unpacked arrays), else what is wrong."""
    masked = None if self.mask is None else mask_problem(arrays[0], arrays[self.mask])
    if self._fine(payload):
      return masked
    return (step_problem(arrays[0], arrays[1], arrays[2], arrays[3:-1])
            or statistics_problem(arrays[-1]) or masked)
