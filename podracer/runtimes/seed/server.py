"""SEED's inference server: batches the steps of many workers into one `agent.act`
(its threads; the compiled step is inference.py's, a worker's wire session and the lobby
session.py's, the rollouts and seats seats.py's). The server makes the sessions and
calls them; they never call it back (session.py).

Every environment of the run has a slot: a row of the actor state kept on the device
([N+1, ...] leaves; row N takes padded rows' writes). A worker holds `envs_per_worker`
consecutive slots (its seat) while connected; its first step gives them fresh
`init_actor` values, so R2D2's LSTM state and epsilons follow the environment, not the
batch a step arrives in. Each inference thread (`runtime.inference_threads_per_device`
per actor device; worker seat w goes to thread w % threads) takes whole worker
messages in arrival order until it has `inference_batch_size` environments (or every
connected worker is waiting, or `inference_timeout_ms` passed), pads them to that fixed
size, and runs one compiled step that gathers the slots' states, acts and scatters the
new states back.

Each worker's entries are assembled as every runtime assembles them
(podracer/trajectories.py): a rollout of `rollout_length` steps extends the previous
rollout's last K entries into a [T+K, B_w] trajectory; `envs_per_batch / envs_per_worker`
of them make one learner batch, `put` into the run's channel for experience
(podracer/runtimes/host/channel.py: the learners' queue or a host replay) as Sebulba's
actors put theirs.

Policy lag: each rollout takes a seat in the learner batch it will join (`Seats`), whose
update is known in advance (batches are learned in order, one per update); with
`max_policy_lag=K` a worker's step is acted only with parameters at most K updates older
than that update, and steps waiting for fresher parameters are held back (others go on).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np

from podracer.distributed import transport
from podracer.agent import Agent
from podracer.runtimes import door
from podracer.runtimes.host import threads
from podracer.runtimes.host.channel import Batch
from podracer.runtimes.host.params import ActorPlace, ParamsStore
from podracer.types import TimeStep, Trajectory
from podracer.runtimes.seed.inference import InferenceStep, Request, ServerStats
from podracer.runtimes.seed.seats import Piece, Seats
from podracer.runtimes.seed.session import HANDSHAKE_S, Lobby, Terms, WorkerSession


class InferenceServer:
  """The sessions of one run's workers and the inference threads that act for them:
  `devices` has one place per inference thread (host/params.py's ActorPlace: a device
  or a group of them; one appears once per thread)."""

  def __init__(self, agent: Agent, devices: List[ActorPlace], store: ParamsStore,
               channel: Any, seats: Seats, *, num_workers: int, envs_per_worker: int,
               rollout_length: int, batch_size: int, timeout_ms: Optional[float],
               max_policy_lag: Optional[int], welcome: Dict[str, Any],
               step_layout: transport.Layout, action_layout: transport.Layout,
               seed: int, worker_timeout: float, secret: Optional[bytes] = None,
               mask_leaf: Optional[int] = None):
    self.agent, self.devices, self.store, self.channel, self.seats = (
        agent, devices, store, channel, seats)
    self.num_workers, self.envs_per_worker = num_workers, envs_per_worker
    self.rollout_length, self.batch_size = rollout_length, batch_size
    self.timeout = None if not timeout_ms else timeout_ms / 1000
    self.max_policy_lag, self.welcome, self.seed = max_policy_lag, welcome, seed
    self.step_layout, self.action_layout = step_layout, action_layout
    self.door = door.Door(step_layout.arrays, mask_leaf)  # Each STEP checked before queuing.
    self.worker_timeout, self.secret = worker_timeout, secret
    self.num_slots = num_workers * envs_per_worker
    self.delivering = threading.Lock()
    self.requests = [queue.Queue() for _ in devices]
    self.stopping = threading.Event()
    self.lobby = Lobby(num_workers, seed, self.stopping)
    self.stats = ServerStats()
    key = jax.random.PRNGKey(seed * 7919 + 17)
    self.steps = [InferenceStep(agent, d, self.num_slots, jax.random.fold_in(key, i))
                  for i, d in enumerate(devices)]

  # -- sessions (transport threads) --------------------------------------------------

  def new_session(self, peer: str) -> WorkerSession:
    """A session for a new connection; TransportError when MAX_HANDSHAKES connections
    are already in their handshake (the transport closes this one)."""
    terms = Terms(self.num_workers, self.agent.trajectory_overlap, self.rollout_length,
                  self.welcome, self.step_layout, self.door, self.secret,
                  self.max_policy_lag, self.worker_timeout, self.stopping)
    session = WorkerSession(peer, terms, self.lobby, self.seats, self._submit)
    self.lobby.enter(session)
    return session

  def _submit(self, request: Request) -> None:
    """A session's step, for the inference thread of its seat."""
    self.requests[request.session.seat % len(self.devices)].put(request)

  @property
  def sessions(self) -> Dict[int, WorkerSession]:
    return self.lobby.sessions

  @property
  def handshaking(self) -> Dict[int, WorkerSession]:
    return self.lobby.handshaking

  @property
  def failures(self) -> List[str]:
    return self.lobby.failures

  @property
  def dropped(self) -> int:
    return self.lobby.dropped

  def say_bye(self) -> None:
    """Tells every worker the run has ended (`stopping` answers the others' next step)."""
    self.stopping.set()
    for session in self.lobby.seated():
      session.say_bye()

  @property
  def workers_alive(self) -> int:
    return sum(1 for s in self.lobby.seated() if s.ready)

  def drop_silent(self) -> None:
    """Drops workers that sent nothing for `worker_timeout` seconds."""
    now = time.monotonic()
    silent = [s for s in self.lobby.seated()
              if s.ready and not s.waiting and now - s.last_seen > self.worker_timeout]
    slow = [s for s in self.lobby.entering() if now - s.last_seen > HANDSHAKE_S]
    for session in slow:  # A connection that does not say who it is, in time.
      session.timed_out = True
      session.abort()
    for session in silent:
      session.timed_out = True
      session.abort()

  # -- inference (`inference_threads_per_device` threads per actor device) -----------

  def loop(self, index: int, stop: threading.Event, fail_after_first_call: bool = False):
    """Inference thread `index` (of `devices`), until `stop`."""
    held: List[Request] = []
    while not stop.is_set():
      batch, held = self._collect(index, held, stop)
      if batch:
        self._serve(index, batch, stop)
        if fail_after_first_call:  # runtime.inject_failure=inference
          raise threads.injected_failure("inference")

  def _collect(self, index: int, held: List[Request],
               stop: threading.Event) -> Tuple[List[Request], List[Request]]:
    """Whole messages in arrival order up to the batch size; those whose parameters are
    not yet fresh enough stay held for the next call."""
    requests, envs, deadline = [], 0, None
    q = self.requests[index]
    while not stop.is_set():
      version = self.store.version
      held = [r for r in held if r.session.ready]  # Not those of dropped workers.
      ready = [r for r in held if r.required <= version]
      held = [r for r in held if r.required > version]
      for r in ready:
        if envs + self.envs_per_worker > self.batch_size:
          held.insert(0, r)
          continue
        requests.append(r)
        envs += self.envs_per_worker
      if envs >= self.batch_size:
        break
      try:
        r = q.get(timeout=threads.POLL if not (requests or held) else 0.002)
        held.append(r)
        if deadline is None and self.timeout is not None:
          deadline = time.monotonic() + self.timeout
        continue
      except queue.Empty:
        pass
      if requests and (self._everyone_waiting(index, len(requests) + len(held))
                       or (deadline is not None and time.monotonic() > deadline)):
        break
    return requests, held

  def _everyone_waiting(self, index: int, waiting: int) -> bool:
    mine = sum(1 for s in self.lobby.seated()
               if s.ready and s.seat % len(self.devices) == index)
    return waiting >= mine

  def _serve(self, index: int, requests: List[Request], stop: threading.Event) -> None:
    step, bw = self.steps[index], self.envs_per_worker
    got = self.store.get(step.place, max(r.required for r in requests), stop)
    if got is None:
      return
    params, version = got
    start = time.perf_counter()
    slots, fresh, timestep = self._pad(requests)
    out, before = step(params, slots, fresh, timestep)
    action, extras, before = jax.device_get((out.action, out.extras, before))
    elapsed = time.perf_counter() - start
    now = time.perf_counter()
    # Before any reply, so that a worker's next step already takes its next seat.
    completed = [r.session.claim() for r in requests]
    for i, r in enumerate(requests):
      r.session.answer(r, self.action_layout.pack([np.asarray(action[i * bw:(i + 1) * bw])]))
    self.stats.add_call(len(requests) * bw, self.batch_size, elapsed,
                        sum(q.qsize() for q in self.requests))
    for i, r in enumerate(requests):
      rows = slice(i * bw, (i + 1) * bw)
      take = lambda x, rows=rows: x[rows]
      entry = Trajectory(self._timestep(r.arrays),
                         jax.tree.map(take, before), action[rows],
                         jax.tree.map(take, extras))
      sums = r.arrays[-1]
      self.stats.add_worker(float(sums[4]) if sums[4] else now - r.arrived, float(sums[3]))
      piece = r.session.acted(entry, version, sums)
      if piece is not None:
        self._fill(completed[i], piece, stop)

  def _fill(self, seat: int, piece: Piece, stop: threading.Event) -> None:
    """A worker's finished trajectory into its learner batch's seat; the batches that
    completes go to the channel, filled and put under one lock, so that they reach it in
    update order whichever inference thread completes them."""
    with self.delivering:
      for batch in self.seats.fill(seat, piece):
        if not self._put(batch, stop):
          return

  def _timestep(self, arrays: List[np.ndarray]) -> TimeStep:
    observation = jax.tree.unflatten(self.welcome["observation_tree"], arrays[3:-1])
    return TimeStep(arrays[0], arrays[1], arrays[2], observation)

  def _pad(self, requests: List[Request]):
    """Slots, fresh mask and timestep of the batch, padded to `batch_size` rows."""
    bw, n = self.envs_per_worker, self.batch_size
    pad = n - bw * len(requests)
    slots = np.concatenate([np.arange(r.session.seat * bw, (r.session.seat + 1) * bw)
                            for r in requests] + [np.full(pad, self.num_slots)])
    fresh = np.concatenate([np.full(bw, r.fresh) for r in requests] + [np.zeros(pad, bool)])
    columns = [np.concatenate([r.arrays[i] for r in requests]
                              + [np.zeros((pad,) + requests[0].arrays[i].shape[1:],
                                          requests[0].arrays[i].dtype)])
               for i in range(len(requests[0].arrays) - 1)]
    return slots.astype(np.int32), fresh, self._timestep(columns + [None])

  def _put(self, pieces: List[Piece], stop: threading.Event) -> bool:
    """One learner batch of its workers' trajectories into the channel (a replay takes
    each worker's rows on their own: they continue its stream's); False if stopped."""
    if self.channel.takes_streams():
      return all(self._put_joined([p], stop, p.stream) for p in pieces)
    return self._put_joined(pieces, stop)

  def _put_joined(self, pieces: List[Piece], stop: threading.Event,
                  stream: Any = None) -> bool:
    trajectory = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1),
                              *[p.trajectory for p in pieces])
    versions = [v for p in pieces for v in p.versions]
    times = dict(self.stats.take(), workers_alive=self.workers_alive,
                 worker_restarts=self.restarts, workers_dropped=self.dropped)
    batch = Batch(None, float(np.mean(versions)),
                  self.rollout_length * self.envs_per_worker * len(pieces),
                  sum(p.episodes for p in pieces), times, oldest_version=min(versions))
    return self.channel.put(trajectory, batch, stop, stream=stream) is not None

  restarts = 0  # set by the runtime's local workers


