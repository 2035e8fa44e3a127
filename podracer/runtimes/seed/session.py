"""One connected SEED worker's session on the wire (`WorkerSession`): its handshake
(HELLO, the secret's challenge, its spec checked against the server's), its seat of
slots, its steps queued for inference and its rollout handed on as learner batches."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from podracer.distributed import auth, transport
from podracer.runtimes.host import threads
from podracer.runtimes.seed.inference import Request
from podracer.runtimes.seed.seats import Piece, Rollout
from podracer.types import PyTree

if TYPE_CHECKING:  # (the server makes sessions; this module does not import it)
  from podracer.runtimes.seed.server import InferenceServer

MAX_HANDSHAKES = 16  # connections between their first byte and joining, at once
HANDSHAKE_S = 10.0  # seconds a connection has from its last message to join


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
