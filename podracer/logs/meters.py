"""The meters runtimes fill records with, on the host: a window of env steps, episodes,
means and the learner's metrics between two records (`Window`), episode sums
(`episode_sums`, also inside a compiled program), replay rates (`RateMeter`,
`device_counts`), warm-up fields; and what a run "held" (`tail_mean`,
`windowed_returns`)."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np


def episode_sums(stats: Any, xp: Any = np) -> Any:
  """[count, return sum, length sum] of the episodes that ended at `stats.done` steps.

  `stats` is an EpisodeStats of any shape; `xp` is numpy on the host or jax.numpy in a
  compiled program (Anakin sums in the graph, Sebulba's actors on the host).
  """
  done = stats.done
  # Products, not `where`: the same sums, and cheaper on the host, where actors call this.
  return xp.stack([xp.sum(done), xp.sum(stats.episode_return * done),
                   xp.sum(stats.episode_length * done)]).astype(xp.float32)


def episode_record(sums: Any) -> Dict[str, float]:
  """The record keys of `episode_sums` (summed further): mean return and length, count."""
  count, return_sum, length_sum = (float(x) for x in sums)
  if not count:
    return {}
  return dict(episode_return=return_sum / count, episode_length=length_sum / count,
              episodes=count)


def windowed_returns(records: List[Dict[str, Any]], window: int) -> List[Tuple[int, float]]:
  """(env steps, mean return of the episodes that ended in the last `window` env steps) at
  each record with episodes. Runs whose records cover different numbers of env steps (4x
  the environments per batch, another `log_interval`) are then compared alike: a record's
  mean over one or two episodes is noisy, and a run of more, smaller records has more
  chances to show one high mean, so "first record >= X" favours it."""
  ended, points = [], []  # (env steps, episodes, mean return) of each record with episodes
  for record in records:
    if record.get("episodes", 0) > 0 and "episode_return" in record:
      now = record["env_steps"]
      ended.append((now, record["episodes"], record["episode_return"]))
      inside = [(n, mean) for steps, n, mean in ended if steps > now - window]
      points.append((now, sum(n * mean for n, mean in inside) / sum(n for n, _ in inside)))
  return points


def tail_mean(values: Sequence[float], fraction: float = 0.2) -> Optional[float]:
  """The mean of the last `fraction` of `values` (at least the last one; None if there are
  none): what a run "held", as the learning tests, docs and benchmarks say it."""
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"fraction {fraction} is not in (0, 1]")
  values = list(values)
  tail = values[min(int(len(values) * (1.0 - fraction)), len(values) - 1):]
  return sum(tail) / len(tail) if tail else None


def warming_up(record: Dict[str, Any], replay: Any) -> Dict[str, Any]:
  """Fields of a record of updates that learned nothing while a device replay held fewer
  than `replay.min_size` items: `learning_started: false` and the min size, as a host
  replay's warm-up records say (the progress line reads `warming up replay N/M`)."""
  min_size = getattr(replay, "min_size", None)
  if (min_size and record.get("learning") == 0
      and record.get("replay_size", min_size) < min_size):
    return dict(learning_started=False, replay_min_size=min_size)
  return {}


# Levels, not rates: a record gives the last update's value (the replay's size at the
# record), not the mean over the updates since the last one (half that while it fills).
LAST_VALUE_METRICS = ("replay_size",)


def learner_record(metrics: Dict[str, Any]) -> Dict[str, float]:
  """A learner's metrics (scalars, or one per update) as record values: their means, the
  last update's for LAST_VALUE_METRICS."""
  return {k: float(np.asarray(v).reshape(-1)[-1] if k in LAST_VALUE_METRICS else np.mean(v))
          for k, v in metrics.items()}


class Window:
  """What a runtime sums between two metrics records; every runtime writes through one.

  `add_steps` counts env steps and finished episodes, `add_mean` a value to average over
  the window (timings, policy lag; names in `means` are reported, 0 if never added),
  `metrics` holds the learner's latest metrics (`add_metrics`). `record` turns the window
  into one record.
  """

  def __init__(self, means: Tuple[str, ...] = ()):
    self.start = time.perf_counter()
    self.env_steps = 0
    self.episodes = np.zeros(3)
    self._sums: Dict[str, float] = {k: 0.0 for k in means}
    self._counts: Dict[str, int] = {k: 0 for k in means}
    self._maxes: Dict[str, float] = {}
    self.metrics: Dict[str, Any] = {}

  def add_steps(self, env_steps: int, episodes: Any = None) -> None:
    self.env_steps += env_steps
    if episodes is not None:
      self.episodes += np.asarray(episodes, np.float64).reshape(-1, 3).sum(0)

  def add_mean(self, name: str, value: float) -> None:
    self._sums[name] = self._sums.get(name, 0.0) + value
    self._counts[name] = self._counts.get(name, 0) + 1

  def add_metrics(self, metrics: Dict[str, Any]) -> None:
    """An update's metrics become the window's, unless that update learned nothing
    (`learning` 0: its replay still filled or its rate limiter held it) and one before it
    in this window did: a record shows the last update that learned, not zeros."""
    learned = lambda m: float(np.mean(m.get("learning", 1.0))) > 0  # per update, or mean
    if self.metrics and learned(self.metrics) and not learned(metrics):
      return
    self.metrics = metrics

  def add_max(self, name: str, value: float) -> None:
    self._maxes[name] = max(self._maxes.get(name, value), value)

  def record(self, env_steps: int, updates: int) -> Dict[str, Any]:
    elapsed = max(time.perf_counter() - self.start, 1e-9)
    record: Dict[str, Any] = dict(env_steps=env_steps, updates=updates,
                                  sps=self.env_steps / elapsed)
    record.update({k: v / max(self._counts[k], 1) for k, v in self._sums.items()})
    record.update(self._maxes)
    record.update(episode_record(self.episodes))
    record.update(learner_record(self.metrics))
    return record


class RateMeter:
  """Turns a replay's running insert and sample totals into rates between two records."""

  def __init__(self, inserts: int = 0, samples: int = 0):
    self._totals = (inserts, samples)
    self._time = time.perf_counter()

  def rates(self, inserts: int, samples: int) -> Dict[str, float]:
    now = time.perf_counter()
    elapsed = max(now - self._time, 1e-9)
    new_inserts, new_samples = inserts - self._totals[0], samples - self._totals[1]
    self._totals, self._time = (inserts, samples), now
    return dict(replay_inserts_per_s=new_inserts / elapsed,
                replay_samples_per_s=new_samples / elapsed,
                sample_to_insert_ratio=new_samples / max(new_inserts, 1))


def device_counts(replay: Any, experience: Any) -> Optional[Tuple[int, int]]:
  """Items inserted and sampled so far, summed over replicas; None if not a device replay
  (or before its state exists). Reads two scalars per replica from the devices."""
  counts = getattr(replay, "counts", None)
  if counts is None or experience is None:
    return None
  inserts, samples = (_local_sum(x) for x in counts(experience))
  return int(inserts), int(samples)


def _local_sum(x: Any) -> int:
  """The sum of this process's part of an array that may span processes."""
  parts = [s.data for s in x.addressable_shards] if hasattr(x, "addressable_shards") else [x]
  return sum(int(np.sum(np.asarray(p), dtype=np.int64)) for p in parts)
