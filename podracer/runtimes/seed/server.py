"""SEED's inference server: batches the steps of many workers into one `agent.act`.

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
of them make one learner batch, handed to the data path's output (the learners' queue or
a host replay) as Sebulba's actors hand theirs.

Policy lag: each rollout takes a seat in the learner batch it will join (`Seats`), whose
update is known in advance (batches are learned in order, one per update); with
`max_policy_lag=K` a worker's step is acted only with parameters at most K updates older
than that update, and steps waiting for fresher parameters are held back (others go on).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import trajectories
from podracer.distributed import auth, transport
from podracer.agent import Agent
from podracer.runtimes import door
from podracer.runtimes.compile_once import compile_once
from podracer.runtimes.sebulba import threads
from podracer.runtimes.sebulba.actor import Batch
from podracer.runtimes.sebulba.params import ParamsStore
from podracer.types import PyTree, TimeStep, Trajectory


MAX_HANDSHAKES = 16  # connections between their first byte and joining, at once
HANDSHAKE_S = 10.0  # seconds a connection has from its last message to join


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
  device's [N+1] state."""

  def __init__(self, agent: Agent, device: jax.Device, num_slots: int, key: jax.Array):
    self.agent, self.device = agent, device
    initial = agent.init_actor(jax.random.fold_in(key, 1), num_slots + 1)
    self.initial = jax.device_put(initial, device)
    self.states = jax.tree.map(jnp.copy, self.initial)  # Donated: not `initial`'s.
    self.key = jax.device_put(key, device)
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


class InferenceServer:
  """The sessions of one run's workers and the inference threads that act for them:
  `devices` has one entry per inference thread (a device appears once per thread)."""

  def __init__(self, agent: Agent, devices: List[jax.Device], store: ParamsStore,
               output: Any, seats: Seats, *, num_workers: int, envs_per_worker: int,
               rollout_length: int, batch_size: int, timeout_ms: Optional[float],
               max_policy_lag: Optional[int], welcome: Dict[str, Any],
               step_layout: transport.Layout, action_layout: transport.Layout,
               seed: int, worker_timeout: float, secret: Optional[bytes] = None,
               mask_leaf: Optional[int] = None):
    self.agent, self.devices, self.store, self.output, self.seats = (
        agent, devices, store, output, seats)
    self.num_workers, self.envs_per_worker = num_workers, envs_per_worker
    self.rollout_length, self.batch_size = rollout_length, batch_size
    self.timeout = None if not timeout_ms else timeout_ms / 1000
    self.max_policy_lag, self.welcome, self.seed = max_policy_lag, welcome, seed
    self.step_layout, self.action_layout = step_layout, action_layout
    self.door = door.Door(step_layout.arrays, mask_leaf)  # Each STEP checked before queuing.
    self.worker_timeout, self.secret = worker_timeout, secret
    self.num_slots = num_workers * envs_per_worker
    self.lock = threading.Lock()
    self.delivering = threading.Lock()
    self.sessions: Dict[int, WorkerSession] = {}  # by seat
    self.connections = 0
    self.requests = [queue.Queue() for _ in devices]
    self.stopping = threading.Event()
    self.failures: List[str] = []   # why workers were dropped, newest last
    self.dropped = 0                # workers dropped (silent, bad data, lost)
    self.handshaking: Dict[int, WorkerSession] = {}  # connections yet to join, by id
    self.stats = ServerStats()
    key = jax.random.PRNGKey(seed * 7919 + 17)
    self.steps = [InferenceStep(agent, d, self.num_slots, jax.random.fold_in(key, i))
                  for i, d in enumerate(devices)]

  # -- sessions (transport threads) --------------------------------------------------

  def new_session(self, peer: str) -> "WorkerSession":
    """A session for a new connection; TransportError when MAX_HANDSHAKES connections
    are already in their handshake (the transport closes this one)."""
    with self.lock:
      if len(self.handshaking) >= MAX_HANDSHAKES:
        raise transport.TransportError("too many connections in their handshake")
      session = WorkerSession(self, peer)
      self.handshaking[id(session)] = session
      return session

  def refused(self, session: "WorkerSession", why: str) -> None:
    """A connection that did not join: one line in the run's log."""
    with self.lock:
      self.handshaking.pop(id(session), None)
    if not self.stopping.is_set():
      self.failures.append(f"refused a connection from {session.peer}: {why}")

  def join(self, session: "WorkerSession") -> Optional[int]:
    with self.lock:
      self.handshaking.pop(id(session), None)
      free = [w for w in range(self.num_workers) if w not in self.sessions]
      if not free:
        return None
      seat = free[0]
      self.sessions[seat] = session
      self.connections += 1
      session.seed = (self.seed * 10_000 + 1_000 + seat + 7_919 * self.connections) % 2**31
      session.stream = (seat, self.connections)
      return seat

  def leave(self, session: "WorkerSession", error: Optional[str]) -> None:
    with self.lock:
      if self.sessions.get(session.seat) is session:
        del self.sessions[session.seat]
    for j in session.seats_taken():
      self.seats.release(j)
    if error and not self.stopping.is_set():
      self.dropped += 1
      self.failures.append(f"worker {session.peer} (seat {session.seat}) was dropped: "
                           f"{error}")

  def say_bye(self) -> None:
    """Tells every worker the run has ended (`stopping` answers the others' next step)."""
    self.stopping.set()
    with self.lock:
      sessions = list(self.sessions.values())
    for session in sessions:
      session.say_bye()

  @property
  def workers_alive(self) -> int:
    with self.lock:
      return sum(1 for s in self.sessions.values() if s.ready)

  def drop_silent(self) -> None:
    """Drops workers that sent nothing for `worker_timeout` seconds."""
    now = time.monotonic()
    with self.lock:
      silent = [s for s in self.sessions.values()
                if s.ready and not s.waiting and now - s.last_seen > self.worker_timeout]
      slow = [s for s in self.handshaking.values() if now - s.last_seen > HANDSHAKE_S]
    for session in slow:  # A connection that does not say who it is, in time.
      session.timed_out = True
      session.abort()
    for session in silent:
      session.timed_out = True
      session.abort()

  # -- inference (`inference_threads_per_device` threads per actor device) -----------

  def run(self, index: int, stop: threading.Event, fail_after_first_call: bool = False):
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
    with self.lock:
      mine = sum(1 for s in self.sessions.values()
                 if s.ready and s.seat % len(self.devices) == index)
    return waiting >= mine

  def _serve(self, index: int, requests: List[Request], stop: threading.Event) -> None:
    step, bw = self.steps[index], self.envs_per_worker
    got = self.store.get(step.device, max(r.required for r in requests), stop)
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
      r.session.acted(entry, version, r.arrays[-1], now - r.arrived, completed[i], stop)

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

  def deliver(self, pieces: List[Piece], stop: threading.Event) -> bool:
    """One learner batch from its workers' trajectories, to the data path's output
    (a replay takes each worker's rows on their own: they continue its streams)."""
    if getattr(self.output, "streams", False):
      return all(self._deliver([p], stop, stream=p.stream) for p in pieces)
    return self._deliver(pieces, stop)

  def _deliver(self, pieces: List[Piece], stop: threading.Event, **stream: Any) -> bool:
    trajectory = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1),
                              *[p.trajectory for p in pieces])
    versions = [v for p in pieces for v in p.versions]
    times = dict(self.stats.take(), workers_alive=self.workers_alive,
                 worker_restarts=self.restarts, workers_dropped=self.dropped)
    batch = Batch(None, float(np.mean(versions)),
                  self.rollout_length * self.envs_per_worker * len(pieces),
                  sum(p.episodes for p in pieces), times, oldest_version=min(versions))
    prepared = self.output.prepare(trajectory)
    return self.output.deliver(prepared, batch, stop, **stream) is not None

  restarts = 0  # set by the runtime's local workers


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


class WorkerSession(transport.Session):
  """One connected worker: its seat, its rollout, and the message it waits on."""

  def __init__(self, server: InferenceServer, peer: str):
    self.server, self.peer = server, peer
    self.seat = -1
    self.seed = 0
    self.stream = (-1, 0)
    self.ready = False      # its spec was accepted
    self.waiting = False    # a step of it is with the inference thread
    self.timed_out = False
    self.last_seen = time.monotonic()
    self.rollout = Rollout(server.agent.trajectory_overlap, server.rollout_length)
    self.seat_now: Optional[int] = None   # learner batch of the current rollout
    self.episodes = np.zeros(3)
    self.fresh = True
    self._sending = threading.Lock()
    self.hello: Optional[Dict[str, Any]] = None  # its HELLO, until it joins
    self.nonce: Optional[bytes] = None           # the challenge it must answer
    self.drop_reason: Optional[str] = None       # why the server ends the connection

  def seats_taken(self) -> List[int]:
    return [] if self.seat_now is None else [self.seat_now]

  def limit(self, kind: int) -> int:
    if self.ready and kind == transport.STEP:
      return self.server.step_layout.nbytes  # Exactly that, checked when unpacked.
    return transport.SMALL_MESSAGE

  def handle(self, kind: int, payload: bytes) -> Tuple[int, bytes]:
    self.last_seen = time.monotonic()
    if kind == transport.HELLO and self.hello is None and self.seat < 0:
      return self._hello(transport.decode_json(payload))
    if kind == transport.AUTH and self.nonce is not None:
      return self._auth(payload)
    if kind == transport.SPEC and self.seat >= 0 and not self.ready:
      return self._spec(transport.decode_json(payload))
    if kind == transport.STEP and self.ready:
      arrays = self.server.step_layout.unpack(payload)
      problem = self.server.door.problem(payload, arrays)
      if problem:  # Dropped before the step reaches a device; the run goes on.
        self.ready = False
        return self._refuse(f"it sent {problem}")
      return self._step(arrays)
    raise transport.TransportError(
        f"unexpected {transport.KIND_NAMES.get(kind, kind)} message")

  def _refuse(self, message: str) -> Tuple[int, bytes]:
    self.drop_reason = message
    return transport.REFUSE, transport.encode_json(dict(message=message))

  def _hello(self, hello: Dict[str, Any]) -> Tuple[int, bytes]:
    """A worker's first message: a challenge for the run's secret, or (with none) its
    admission."""
    self.hello = hello
    if self.server.secret is None:
      return self._admit()
    self.nonce = auth.new_nonce()
    return transport.CHALLENGE, self.nonce

  def _auth(self, reply: bytes) -> Tuple[int, bytes]:
    nonce, self.nonce = self.nonce, None  # One answer per challenge.
    if not auth.verify(self.server.secret, nonce, reply):
      return self._refuse("its answer does not prove the run's secret (a wrong or no "
                          "secret: see --secret_file and $PODRACER_SEED_SECRET).")
    return self._admit()

  def _admit(self) -> Tuple[int, bytes]:
    from podracer import __version__  # pylint: disable=import-outside-toplevel
    version = self.hello.get("version")
    if version != __version__:
      return self._refuse(f"the worker runs podracer {version}, the server "
                          f"{__version__}; install the same version on both.")
    seat = self.server.join(self)
    if seat is None:
      return self._refuse(f"the run has {self.server.num_workers} worker slots "
                          f"(runtime.num_workers), all taken.")
    self.seat = seat
    welcome = {k: v for k, v in self.server.welcome.items() if k != "observation_tree"}
    return transport.CONFIG, transport.encode_json(dict(welcome, seed=self.seed,
                                                        seat=seat))

  def _spec(self, spec: Dict[str, Any]) -> Tuple[int, bytes]:
    theirs = transport.Layout(spec.get("step", []))
    ours = self.server.step_layout
    if theirs.arrays != ours.arrays:
      describe = lambda layout: ", ".join(f"{d.name}{list(s)}" for s, d in layout.arrays)
      return self._refuse(f"the worker's environment steps [{describe(theirs)}] (step "
                          f"type, reward, discount, observations, statistics), the run's "
                          f"[{describe(ours)}]: the env sections differ.")
    self.ready = True
    return transport.OK, b""

  def _step(self, arrays: List[np.ndarray]) -> Tuple[int, bytes]:
    server = self.server
    if server.stopping.is_set():
      return transport.BYE, b""
    if self.seat_now is None:
      self.seat_now = server.seats.take()
    seat = self.seat_now
    lag = server.max_policy_lag
    required = -1 if lag is None else server.seats.update_of(seat) - lag
    request = Request(self, arrays, required, self.fresh, time.perf_counter())
    self.fresh = False
    self.waiting = True
    server.requests[self.seat % len(server.devices)].put(request)
    if self.send is not None:
      return None  # The inference thread answers (`answer`).
    while not request.done.wait(threads.POLL):
      if server.stopping.is_set():
        return transport.BYE, b""
    self.waiting = False
    self.last_seen = time.monotonic()
    return transport.ACTION, request.action

  def answer(self, request: Request, action: bytes) -> None:
    """The inference thread's reply: sent from that thread where the transport allows
    (one thread switch less per step), else handed to the session's thread."""
    if self.send is None:
      request.action = action
      request.done.set()
      return
    with self._sending:
      if self.waiting:
        self.waiting = False
        self.last_seen = time.monotonic()
        try:
          self.send(transport.ACTION, action)
        except transport.TransportError:
          self.abort()  # Its session thread sees the connection end.

  def say_bye(self) -> None:
    """At the run's end: answers a step still waiting with BYE."""
    with self._sending:
      if self.send is not None and self.waiting:
        self.waiting = False
        try:
          self.send(transport.BYE, b"")
        except transport.TransportError:
          pass

  def claim(self) -> Optional[int]:
    """Called by the inference thread before it replies: the learner batch this step
    completes a trajectory of, if it does (the worker's next step takes a new seat)."""
    if not self.rollout.completes_next:
      return None
    j, self.seat_now = self.seat_now, None
    return j

  def acted(self, entry: PyTree, version: int, sums: np.ndarray, latency: float,
            completed: Optional[int], stop: threading.Event) -> None:
    """Called by the inference thread with the entry acted for this worker's step
    (after the reply); `completed` is what `claim` returned."""
    self.episodes += sums[:3]
    self.server.stats.add_worker(float(sums[4]) if sums[4] else latency, float(sums[3]))
    done = self.rollout.add(entry, version)
    if done is None:
      return
    trajectory, versions = done
    piece = Piece(trajectory, versions, self.episodes, self.stream)
    self.episodes = np.zeros(3)
    # Filled and handed over under one lock: batches reach the queue in update order
    # whichever inference thread completes them.
    with self.server.delivering:
      for batch in self.server.seats.fill(completed, piece):
        if not self.server.deliver(batch, stop):
          return

  def closed(self, error: Optional[str]) -> None:
    if self.timed_out:
      error = (f"sent nothing for {self.server.worker_timeout:.0f} s "
               f"(runtime.worker_timeout)" if self.seat >= 0 else
               f"did not join within {HANDSHAKE_S:.0f} s of its last message")
    error = self.drop_reason or error
    self.ready = False
    if self.seat >= 0:
      self.server.leave(self, error)
    else:
      self.server.refused(self, error or "it closed the connection before joining")
