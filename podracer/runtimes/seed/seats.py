"""SEED's rollouts and seats: each worker's entries assembled into [T+K, B_w]
trajectories as every runtime assembles them (`Rollout`, podracer/trajectories.py), and
the learner batch each rollout takes a seat in (`Seats`), whose update is known in
advance, so that `max_policy_lag` holds."""

from __future__ import annotations

import dataclasses
import threading
from typing import Dict, List, Optional, Tuple

import jax
import numpy as np

from podracer import trajectories
from podracer.types import PyTree


def stack_np(entries: List[PyTree]) -> PyTree:
  return jax.tree.map(lambda *xs: np.stack(xs), *entries)


class Rollout:
  """One worker's entries since its last trajectory, with the parameter version each
  was acted with. `add` returns (trajectory [T+K, B_w], versions of the T entries acted
  for it) when `length` new entries complete one. As under Sebulba, the trajectory's
  first K entries were acted for the previous one."""

  def __init__(self, overlap: int, length: int):
    self.overlap, self.length = overlap, length
    self.start: Optional[PyTree] = None   # [K, B_w] entries a trajectory starts from
    self.new: List[PyTree] = []
    self.versions: List[int] = []

  @property
  def completes_next(self) -> bool:
    """Whether the next entry completes a trajectory."""
    return self.start is not None and len(self.new) == self.length - 1

  def add(self, entry: PyTree, version: int) -> Optional[Tuple[PyTree, List[int]]]:
    if self.start is None:  # A (re)connected worker's first step: padding, then it.
      self.start = jax.tree.map(np.asarray,
                                trajectories.first_entries(entry, self.overlap))
      return None
    self.new.append(entry)
    self.versions.append(version)
    if len(self.new) < self.length:
      return None
    trajectory = jax.tree.map(lambda s, n: np.concatenate([s, n]), self.start,
                              stack_np(self.new))
    versions = self.versions
    self.start = jax.tree.map(lambda x: x[-self.overlap:], trajectory)
    self.new, self.versions = [], []
    return trajectory, versions


@dataclasses.dataclass
class Piece:
  """One worker's trajectory, for a learner batch."""
  trajectory: PyTree
  versions: List[int]
  episodes: np.ndarray
  stream: Tuple[int, int]  # (seat, connection): the rows a replay's items continue


class Seats:
  """Learner batches of `per_batch` worker trajectories, learned in order: batch j by
  update `first_update + j`. A rollout takes a seat in the first batch with one free;
  a dropped worker's seat is freed for the next rollout to take."""

  def __init__(self, per_batch: int, first_update: int):
    self.per_batch, self.first_update = per_batch, first_update
    self._lock = threading.Lock()
    self._taken: Dict[int, int] = {}
    self._filled: Dict[int, List[Piece]] = {}
    self._next = 0  # the next batch to hand over

  def take(self) -> int:
    with self._lock:
      j = self._next
      while self._taken.get(j, 0) >= self.per_batch:
        j += 1
      self._taken[j] = self._taken.get(j, 0) + 1
      return j

  def release(self, j: int) -> None:
    with self._lock:
      self._taken[j] -= 1

  def update_of(self, j: int) -> int:
    return self.first_update + j

  def fill(self, j: int, piece: Piece) -> List[List[Piece]]:
    """Adds a finished trajectory; the batches now complete, in order."""
    with self._lock:
      self._filled.setdefault(j, []).append(piece)
      ready = []
      while len(self._filled.get(self._next, ())) == self.per_batch:
        ready.append(self._filled.pop(self._next))
        self._taken.pop(self._next, None)
        self._next += 1
      return ready
