"""SEED's batched inference: a worker's step waiting to be acted (`Request`), the one
compiled step that gathers the slots' actor states, acts and scatters the new states
(`InferenceStep`), and the figures of the calls between two learner batches
(`ServerStats`)."""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from podracer.agent import Agent
from podracer.runtimes.compile_once import compile_once
from podracer.runtimes.host.params import ActorPlace

if TYPE_CHECKING:  # (a session's steps wait here; the session imports this module)
  from podracer.runtimes.seed.session import WorkerSession


@dataclasses.dataclass
class Request:
  """One worker message waiting for inference."""
  session: "WorkerSession"
  arrays: List[np.ndarray]   # step type, reward, discount, observation leaves, sums
  required: int              # the oldest parameter version that may act it
  fresh: bool                # the worker's first step since it connected
  arrived: float
  done: threading.Event = dataclasses.field(default_factory=threading.Event)
  action: Optional[bytes] = None


class InferenceStep:
  """The compiled step of one inference thread: gather slots, act, scatter, on its
  place's [N+1] state (an actor device, or a group the parameters are split over:
  host/params.py's ActorPlace)."""

  def __init__(self, agent: Agent, place: ActorPlace, num_slots: int, key: jax.Array):
    self.agent, self.place = agent, place
    initial = agent.init_actor(jax.random.fold_in(key, 1), num_slots + 1)
    self.initial = jax.device_put(initial, place.data)
    self.states = jax.tree.map(jnp.copy, self.initial)  # Donated: not `initial`'s.
    self.key = jax.device_put(key, place.data)
    self._step = jax.jit(compile_once(self._act, "The SEED inference step"),
                         donate_argnums=(1,))

  def _act(self, params, states, initial, slots, fresh, timestep, key):
    def gather(s, i):
      mask = fresh.reshape(fresh.shape + (1,) * (s.ndim - 1))
      return jnp.where(mask, i[slots], s[slots])
    before = jax.tree.map(gather, states, initial)
    key, act_key = jax.random.split(key)
    out, after = self.agent.act(params, before, timestep, act_key)
    states = jax.tree.map(lambda s, a: s.at[slots].set(a), states, after)
    return out, before, states, key

  def __call__(self, params, slots, fresh, timestep):
    out, before, self.states, self.key = self._step(params, self.states, self.initial,
                                                    slots, fresh, timestep, self.key)
    return out, before


class ServerStats:
  """Inference figures between two learner batches (their means go in the records)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._reset()

  def _reset(self):
    self.calls, self.envs, self.capacity, self.depth, self.infer = 0, 0, 0, 0, 0.0
    self.latencies: List[float] = []
    self.env_times: List[float] = []

  def add_call(self, envs: int, capacity: int, seconds: float, depth: int) -> None:
    with self._lock:
      self.calls += 1
      self.envs, self.capacity = self.envs + envs, self.capacity + capacity
      self.depth += depth
      self.infer += seconds

  def add_worker(self, latency: float, env_seconds: float) -> None:
    with self._lock:
      self.latencies.append(latency)
      self.env_times.append(env_seconds)

  def take(self) -> Dict[str, float]:
    """The figures since the last take; none when no call was made since (two batches
    completed by one call), rather than zeros that would pull the records' means down."""
    with self._lock:
      if not self.calls:
        return {}
      calls = self.calls
      out = dict(inference_batch=self.envs / calls,
                 inference_fill=self.envs / max(self.capacity, 1),
                 server_queue_depth=self.depth / calls,
                 inference_time=self.infer / calls)
      if self.latencies:
        out.update(inference_latency_p50_ms=1000 * float(np.percentile(self.latencies, 50)),
                   inference_latency_p99_ms=1000 * float(np.percentile(self.latencies, 99)),
                   worker_env=float(np.mean(self.env_times)))
      self._reset()
      return out
