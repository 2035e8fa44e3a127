"""One connected SEED worker's session on the wire (`WorkerSession`): its handshake
(HELLO, the secret's challenge, its spec checked against the run's), its seat of slots,
its steps submitted for inference and its rollout, returned to the inference thread as
finished trajectories; and the `Lobby`, where sessions join, leave or are refused.

Calls go one way: the server makes each session with the run's `Terms`, the `Lobby`,
the `Seats` and a `submit` callback for its steps, and calls the session (its inference
thread's `claim`, `answer`, `acted`; `say_bye`, `abort`); a session never calls the
server back, and the lobby calls no session.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from podracer.distributed import auth, transport
from podracer.runtimes.host import threads
from podracer.runtimes.seed.inference import Request
from podracer.runtimes.seed.seats import Piece, Rollout, Seats
from podracer.types import PyTree

MAX_HANDSHAKES = 16  # connections between their first byte and joining, at once
HANDSHAKE_S = 10.0  # seconds a connection has from its last message to join


@dataclasses.dataclass(frozen=True)
class Terms:
  """The run's rules for a worker, as the server states them to each session it makes."""
  num_workers: int
  overlap: int                   # the agent's trajectory_overlap
  rollout_length: int
  welcome: Dict[str, Any]        # what a worker is told on joining
  step_layout: transport.Layout  # a STEP's arrays
  door: Any                      # door.Door: each STEP checked before it is queued
  secret: Optional[bytes]        # what a worker must prove (None: no challenge)
  max_policy_lag: Optional[int]
  worker_timeout: float
  stopping: threading.Event      # set when the run ends: steps are answered BYE


class Lobby:
  """Who is connected: connections in their handshake (by id) and seated sessions (by
  seat), with why the others were refused or dropped. Sessions tell it when they join,
  leave or are refused; the server reads it."""

  def __init__(self, num_workers: int, seed: int, stopping: threading.Event):
    self.num_workers, self.seed, self.stopping = num_workers, seed, stopping
    self.lock = threading.Lock()
    self.sessions: Dict[int, "WorkerSession"] = {}     # by seat
    self.handshaking: Dict[int, "WorkerSession"] = {}  # connections yet to join, by id
    self.connections = 0
    self.failures: List[str] = []   # why workers were refused or dropped, newest last
    self.dropped = 0                # workers dropped (silent, bad data, lost)

  def enter(self, session: "WorkerSession") -> None:
    """A new connection; TransportError when MAX_HANDSHAKES are already in theirs."""
    with self.lock:
      if len(self.handshaking) >= MAX_HANDSHAKES:
        raise transport.TransportError("too many connections in their handshake")
      self.handshaking[id(session)] = session

  def join(self, session: "WorkerSession") -> Optional[Tuple[int, int, Tuple[int, int]]]:
    """(its seat, its environments' seed, its stream), or None when every seat is taken."""
    with self.lock:
      self.handshaking.pop(id(session), None)
      free = [w for w in range(self.num_workers) if w not in self.sessions]
      if not free:
        return None
      seat = free[0]
      self.sessions[seat] = session
      self.connections += 1
      seed = (self.seed * 10_000 + 1_000 + seat + 7_919 * self.connections) % 2**31
      return seat, seed, (seat, self.connections)

  def leave(self, session: "WorkerSession", error: Optional[str]) -> None:
    with self.lock:
      if self.sessions.get(session.seat) is session:
        del self.sessions[session.seat]
    if error and not self.stopping.is_set():
      self.dropped += 1
      self.failures.append(f"worker {session.peer} (seat {session.seat}) was dropped: "
                           f"{error}")

  def refused(self, session: "WorkerSession", why: str) -> None:
    """A connection that did not join: one line in the run's log."""
    with self.lock:
      self.handshaking.pop(id(session), None)
    if not self.stopping.is_set():
      self.failures.append(f"refused a connection from {session.peer}: {why}")

  def seated(self) -> List["WorkerSession"]:
    with self.lock:
      return list(self.sessions.values())

  def entering(self) -> List["WorkerSession"]:
    with self.lock:
      return list(self.handshaking.values())


class WorkerSession(transport.Session):
  """One connected worker: its seat, its rollout, and the message it waits on."""

  def __init__(self, peer: str, terms: Terms, lobby: Lobby, seats: Seats,
               submit: Callable[[Request], None]):
    self.peer, self.terms, self.lobby, self.seats, self.submit = (
        peer, terms, lobby, seats, submit)
    self.seat = -1
    self.seed = 0
    self.stream = (-1, 0)
    self.ready = False      # its spec was accepted
    self.waiting = False    # a step of it is with the inference thread
    self.timed_out = False
    self.last_seen = time.monotonic()
    self.rollout = Rollout(terms.overlap, terms.rollout_length)
    self.seat_now: Optional[int] = None   # learner batch of the current rollout
    self.episodes = np.zeros(3)
    self.fresh = True
    self._sending = threading.Lock()
    self.hello: Optional[Dict[str, Any]] = None  # its HELLO, until it joins
    self.nonce: Optional[bytes] = None           # the challenge it must answer
    self.drop_reason: Optional[str] = None       # why the server ends the connection

  def limit(self, kind: int) -> int:
    if self.ready and kind == transport.STEP:
      return self.terms.step_layout.nbytes  # Exactly that, checked when unpacked.
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
      arrays = self.terms.step_layout.unpack(payload)
      problem = self.terms.door.problem(payload, arrays)
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
    if self.terms.secret is None:
      return self._admit()
    self.nonce = auth.new_nonce()
    return transport.CHALLENGE, self.nonce

  def _auth(self, reply: bytes) -> Tuple[int, bytes]:
    nonce, self.nonce = self.nonce, None  # One answer per challenge.
    if not auth.verify(self.terms.secret, nonce, reply):
      return self._refuse("its answer does not prove the run's secret (a wrong or no "
                          "secret: see --secret_file and $PODRACER_SEED_SECRET).")
    return self._admit()

  def _admit(self) -> Tuple[int, bytes]:
    from podracer import __version__  # pylint: disable=import-outside-toplevel
    version = self.hello.get("version")
    if version != __version__:
      return self._refuse(f"the worker runs podracer {version}, the server "
                          f"{__version__}; install the same version on both.")
    joined = self.lobby.join(self)
    if joined is None:
      return self._refuse(f"the run has {self.terms.num_workers} worker slots "
                          f"(runtime.num_workers), all taken.")
    self.seat, self.seed, self.stream = joined
    seat = self.seat
    welcome = {k: v for k, v in self.terms.welcome.items() if k != "observation_tree"}
    return transport.CONFIG, transport.encode_json(dict(welcome, seed=self.seed,
                                                        seat=seat))

  def _spec(self, spec: Dict[str, Any]) -> Tuple[int, bytes]:
    theirs = transport.Layout(spec.get("step", []))
    ours = self.terms.step_layout
    if theirs.arrays != ours.arrays:
      describe = lambda layout: ", ".join(f"{d.name}{list(s)}" for s, d in layout.arrays)
      return self._refuse(f"the worker's environment steps [{describe(theirs)}] (step "
                          f"type, reward, discount, observations, statistics), the run's "
                          f"[{describe(ours)}]: the env sections differ.")
    self.ready = True
    return transport.OK, b""

  def _step(self, arrays: List[np.ndarray]) -> Tuple[int, bytes]:
    stopping = self.terms.stopping
    if stopping.is_set():
      return transport.BYE, b""
    if self.seat_now is None:
      self.seat_now = self.seats.take()
    lag = self.terms.max_policy_lag
    required = -1 if lag is None else self.seats.update_of(self.seat_now) - lag
    request = Request(self, arrays, required, self.fresh, time.perf_counter())
    self.fresh = False
    self.waiting = True
    self.submit(request)
    if self.send is not None:
      return None  # The inference thread answers (`answer`).
    while not request.done.wait(threads.POLL):
      if stopping.is_set():
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

  def acted(self, entry: PyTree, version: int, sums: np.ndarray) -> Optional[Piece]:
    """Called by the inference thread with the entry acted for this worker's step
    (after the reply) and the step's episode sums; the worker's trajectory, if this
    entry completed one (in the learner batch `claim` returned)."""
    self.episodes += sums[:3]
    done = self.rollout.add(entry, version)
    if done is None:
      return None
    trajectory, versions = done
    piece = Piece(trajectory, versions, self.episodes, self.stream)
    self.episodes = np.zeros(3)
    return piece

  def closed(self, error: Optional[str]) -> None:
    if self.timed_out:
      error = (f"sent nothing for {self.terms.worker_timeout:.0f} s "
               f"(runtime.worker_timeout)" if self.seat >= 0 else
               f"did not join within {HANDSHAKE_S:.0f} s of its last message")
    error = self.drop_reason or error
    self.ready = False
    if self.seat < 0:
      self.lobby.refused(self, error or "it closed the connection before joining")
      return
    self.lobby.leave(self, error)
    if self.seat_now is not None:  # Its rollout's seat, for another worker's to take.
      self.seats.release(self.seat_now)
