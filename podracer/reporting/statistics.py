"""The statistics of a report across runs, as Agarwal et al. ("Deep RL at the Edge of the
Statistical Precipice", NeurIPS 2021) and their `rliable` define them: the interquartile
mean, the aggregates (IQM, median, mean, optimality gap) of score matrices [runs, tasks],
and the stratified bootstrap of their 95 % intervals, vectorized over the replications.
Pure numpy; podracer/report.py reads runs and renders what these compute."""

from __future__ import annotations

import contextlib
import warnings
from typing import Dict

import numpy as np

REPS = 2000              # bootstrap replications of the final-score estimates


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
  """The interquartile mean along `axis`: the mean of the middle half, as scipy's
  `trim_mean(x, 0.25)` and rliable's `aggregate_iqm` cut it, over every other axis at once."""
  x = np.sort(np.moveaxis(x, axis, -1), axis=-1)
  cut = int(0.25 * x.shape[-1])
  return x[..., cut:x.shape[-1] - cut].mean(axis=-1)


def aggregates(scores: np.ndarray, normalized: bool) -> np.ndarray:
  """IQM, median, mean and (normalized scores only) the optimality gap of score matrices
  [..., runs, tasks], as rliable defines them (the median: of the tasks' mean scores):
  [..., 4]."""
  flat = scores.reshape(*scores.shape[:-2], -1)
  gap = 1.0 - np.minimum(flat, 1.0).mean(-1) if normalized else np.full(flat.shape[:-1],
                                                                        np.nan)
  per_task = scores.mean(-2)
  return np.stack([iqm(flat), np.median(per_task, -1), per_task.mean(-1), gap], axis=-1)


def resampled(matrix: np.ndarray, reps: int, seed: int) -> np.ndarray:
  """A stratified bootstrap of [runs, tasks, ...]: `reps` resamples [reps, runs, tasks,
  ...], each task's runs drawn with replacement from its own (rliable's strata)."""
  runs, tasks = matrix.shape[:2]
  picks = np.random.default_rng(seed).integers(0, runs, size=(reps, runs, tasks))
  return matrix[picks, np.arange(tasks)]


def bootstrapped(statistic, matrix: np.ndarray, reps: int, seed: int):
  """(statistic(matrix), its 95 % percentile interval [2, ...] over `reps` stratified
  resamples): `statistic` takes [..., runs, tasks, ...] and reduces the runs and tasks."""
  boot = statistic(resampled(matrix, reps, seed))
  return statistic(matrix), np.percentile(boot, [2.5, 97.5], axis=0)


def interval_estimates(matrices: Dict[str, np.ndarray], normalized: bool, seed: int = 0,
                       reps: int = REPS):
  """({group: the 4 aggregates}, {group: [2, 4] 95 % percentile intervals}): rliable's
  estimates and stratified bootstrap, vectorized over the replications."""
  points, intervals = {}, {}
  for i, (name, matrix) in enumerate(matrices.items()):
    points[name], intervals[name] = bootstrapped(lambda m: aggregates(m, normalized),
                                                 matrix, reps, seed + i)
  return points, intervals


@contextlib.contextmanager
def quiet_bootstrap(seed: int = 0):
  """A reproducible bootstrap: arch (under rliable) draws from numpy's global generator
  besides the `random_state` it is given, so that one is seeded here too (and put back
  after); and arch's warning at every bootstrap, that it will prefer numpy Generators,
  is kept quiet."""
  state = np.random.get_state()
  np.random.seed(seed)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", FutureWarning)
      yield
  finally:
    np.random.set_state(state)
