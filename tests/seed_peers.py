"""Hostile and broken peers of a SEED server, for tests/test_seed_trust.py: a worker that
steps NaN after a few good steps, and a seeded fuzzer of random frames."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import List, Optional

import numpy as np

from podracer import worker
from podracer.distributed import auth, transport


def step_layout(envs: int, observation: int = 4) -> transport.Layout:
  """A CartPole worker's STEP layout (podracer.worker.step_arrays)."""
  return transport.Layout([((envs,), "<i4"), ((envs,), "<f4"), ((envs,), "<f4"),
                           ((envs, observation), "<f4"), ((5,), "<f8")])


def join(address: str, kind: str = "grpc", secret: Optional[bytes] = None):
  """A connection that has joined the run: (connection, config, layout)."""
  conn = transport.connect(address, kind, timeout=10)
  config = worker.handshake(conn, secret, address)
  layout = step_layout(config["envs_per_worker"])
  reply = conn.request(transport.SPEC, transport.encode_json(dict(step=layout.to_json())))
  assert reply[0] == transport.OK, reply
  return conn, config, layout


def nan_worker(address: str, good_steps: int, out: dict) -> None:
  """Joins, steps `good_steps` good steps, then steps NaN rewards and observations;
  `out["reply"]` is the server's answer to that step (REFUSE, naming the cause)."""
  conn, config, layout = join(address)
  envs = config["envs_per_worker"]
  types = np.full(envs, 1, np.int32)
  for i in range(good_steps):
    arrays = [types if i else np.zeros(envs, np.int32), np.ones(envs, np.float32),
              np.ones(envs, np.float32), np.zeros((envs, 4), np.float32), np.zeros(5)]
    kind, _ = conn.request(transport.STEP, layout.pack(arrays))
    assert kind == transport.ACTION, kind
  bad = [types, np.full(envs, np.nan, np.float32), np.ones(envs, np.float32),
         np.full((envs, 4), np.nan, np.float32), np.zeros(5)]
  kind, payload = conn.request(transport.STEP, layout.pack(bad))
  out["reply"] = (transport.KIND_NAMES.get(kind, kind), bytes(payload))
  conn.close()


class Fuzzer:
  """Random frames at a server, one connection at a time, until `stop`: random kinds,
  lengths and payloads, a third of the connections after a valid handshake (HELLO and
  the answer to the challenge), alternately on the Unix socket and on gRPC. Counts the
  connections the server ended (`ended`) and the frames sent."""

  def __init__(self, address: str, seed: int):
    self.address, self.rng = address, np.random.default_rng(seed)
    host, port = transport.split_address(address)
    self.secret = auth.local_secret(host, port)
    self.path = transport.unix_path(host, port)
    self.ended = self.frames = 0
    self.stop = threading.Event()
    self.errors: List[str] = []

  def _frame(self) -> bytes:
    kind = int(self.rng.choice([0, *transport.KIND_NAMES, 11, 255]))
    size = int(self.rng.choice([0, 1, 7, 100, 4096, 70_000]))
    return bytes([kind]) + self.rng.bytes(size)

  def _unix(self, authenticate: bool) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
      sock.settimeout(15)
      sock.connect(self.path)
      conn = transport.SocketConnection(sock)
      if authenticate:
        worker.handshake(conn, self.secret)
      if self.rng.random() < 0.2:  # Announce a large frame and stall.
        sock.sendall(struct.pack("<BI", transport.STEP, 1 << 30) + b"\0" * 10)
      try:
        while not self.stop.is_set():
          frame = self._frame()
          conn.send(frame[0], frame[1:])
          self.frames += 1
          conn.recv()
      except (transport.TransportError, OSError, struct.error):
        pass

  def _grpc(self, authenticate: bool) -> None:
    conn = transport.connect(self.address, "grpc", timeout=10)
    try:
      if authenticate:
        worker.handshake(conn, self.secret)
      while not self.stop.is_set():
        frame = self._frame()
        self.frames += 1
        kind, _ = conn.request(frame[0], frame[1:])
        if kind in (transport.REFUSE, transport.BYE):
          break
    except (transport.TransportError, ValueError, IndexError):
      pass
    finally:
      conn.close()

  def run(self, seconds: float, until=lambda: False) -> None:
    """Connections one after the other for `seconds`, or until `stop` or `until()`."""
    deadline = time.monotonic() + seconds
    i = 0
    while not self.stop.is_set() and time.monotonic() < deadline and not until():
      authenticate = self.rng.random() < 1 / 3
      try:
        (self._unix if i % 2 == 0 else self._grpc)(authenticate)
        self.ended += 1
      except (transport.TransportError, worker.Refused, OSError) as e:
        self.errors.append(f"{type(e).__name__}: {e}")
      i += 1
