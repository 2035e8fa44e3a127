"""SEED's wire between environment workers and the inference server; imports no JAX.

A worker and its server alternate strictly: the worker sends one message, the server
answers it. So one connection is a `Session.handle(kind, payload) -> (kind, payload)` on
the server, driven by either transport:

  grpc   a gRPC bidirectional stream (`/podracer.Seed/Connect`), raw bytes each way, for
         workers on other machines;
  unix   a Unix-domain socket of this host, length-prefixed frames: about 19x gRPC's
         round trips for small messages (measured in benchmarks/seed.py).

The server of `HOST:PORT` listens on gRPC there and, unless `transport=grpc`, on the Unix
socket `unix_path(HOST, PORT)` too; a worker on the same host finds that socket and uses
it (`auto`). Handshakes are JSON; steps are raw array bytes whose shapes and dtypes were
agreed in the handshake (`Layout`): nothing received is unpickled. Who may join is the
server's session's to decide (auth.py: a challenge for a shared secret); a session also
bounds each message's size before it is read (`Session.limit`). gRPC is encrypted with
TLS when the server is given a certificate (`Listener(tls=...)`, `connect(tls_ca=...)`);
the Unix socket lives in a directory only the run's user can open (auth.private_dir).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pathlib
import queue
import socket
import struct
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from podracer.distributed import auth

# Message kinds: the first byte of every message.
HELLO, CONFIG, SPEC, OK, STEP, ACTION, REFUSE, BYE, CHALLENGE, AUTH = range(1, 11)
KIND_NAMES = {HELLO: "HELLO", CONFIG: "CONFIG", SPEC: "SPEC", OK: "OK", STEP: "STEP",
              ACTION: "ACTION", REFUSE: "REFUSE", BYE: "BYE", CHALLENGE: "CHALLENGE",
              AUTH: "AUTH"}
METHOD = "/podracer.Seed/Connect"
MAX_MESSAGE = 1 << 30
SMALL_MESSAGE = 64 << 10  # What a handshake message may be: JSON of an env section.
_HEADER = struct.Struct("<BI")  # kind, payload bytes


class TransportError(Exception):
  """A broken, truncated or malformed message, or a lost peer."""


def encode_json(obj: Any) -> bytes:
  return json.dumps(obj).encode()


def decode_json(payload: bytes) -> Dict[str, Any]:
  try:
    obj = json.loads(bytes(payload).decode())
  except (UnicodeDecodeError, ValueError) as e:
    raise TransportError(f"malformed JSON message: {e}") from e
  if not isinstance(obj, dict):
    raise TransportError("malformed JSON message: not an object")
  return obj


# -- arrays as raw bytes ------------------------------------------------------------

class Layout:
  """The shapes and dtypes of the arrays one message carries, in order."""

  def __init__(self, arrays: Sequence[Tuple[Sequence[int], str]]):
    self.arrays = [(tuple(int(d) for d in shape), np.dtype(dtype)) for shape, dtype in arrays]
    self.sizes = [int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in self.arrays]
    self.nbytes = sum(self.sizes)

  def to_json(self) -> List[Any]:
    return [[list(s), d.str] for s, d in self.arrays]

  def pack(self, arrays: Sequence[np.ndarray], check: bool = True) -> bytes:
    """The arrays' bytes, in order; `check=False` trusts their shapes and dtypes."""
    if not check:
      return b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
    if len(arrays) != len(self.arrays):
      raise TransportError(f"{len(arrays)} arrays for a layout of {len(self.arrays)}")
    parts = []
    for a, (shape, dtype) in zip(arrays, self.arrays):
      a = np.asarray(a)
      if a.shape != shape or a.dtype != dtype:
        raise TransportError(f"array {a.dtype}{list(a.shape)} where the layout has "
                             f"{dtype}{list(shape)}")
      parts.append(np.ascontiguousarray(a).tobytes())
    return b"".join(parts)

  def unpack(self, payload: bytes) -> List[np.ndarray]:
    if len(payload) != self.nbytes:
      raise TransportError(f"a message of {len(payload)} bytes where its layout has "
                           f"{self.nbytes}")
    out, offset = [], 0
    for (shape, dtype), size in zip(self.arrays, self.sizes):
      out.append(np.frombuffer(payload, dtype, count=size // dtype.itemsize,
                               offset=offset).reshape(shape))
      offset += size
    return out


# -- addresses ------------------------------------------------------------------------

def split_address(address: str) -> Tuple[str, int]:
  host, sep, port = address.rpartition(":")
  if not sep or not host or not port.isdigit():
    raise ValueError(f"an address is HOST:PORT, got {address!r}")
  return host.strip("[]"), int(port)


def _addresses(host: str) -> set:
  """The addresses `host` resolves to (none if it does not resolve)."""
  try:
    return {info[4][0] for info in socket.getaddrinfo(host, None)}
  except socket.gaierror:
    return set()


def _loopback(address: str) -> bool:
  return address.startswith("127.") or address == "::1"


def is_local(host: str) -> bool:
  """Whether `host` names this machine (a loopback or one of its own addresses)."""
  addresses = _addresses(host)
  if any(map(_loopback, addresses)):
    return True
  return bool(addresses and addresses & _addresses(socket.gethostname()))


def is_loopback(host: str) -> bool:
  """Whether every address `host` resolves to is a loopback one (127.0.0.0/8, ::1)."""
  addresses = _addresses(host)
  return bool(addresses) and all(map(_loopback, addresses))


def read_files(paths: Dict[str, Optional[str]]) -> Dict[str, Optional[bytes]]:
  """Each named file's bytes (None where no path is given; `~` expanded); an unreadable
  one raises UnreadableFile naming it."""
  read = {}
  for name, path in paths.items():
    try:
      read[name] = pathlib.Path(path).expanduser().read_bytes() if path else None
    except OSError as e:
      raise UnreadableFile(name, path, e.strerror or str(e)) from None
  return read


class UnreadableFile(Exception):
  """`read_files`: the file of `name` at `path` cannot be read, `why`."""

  def __init__(self, name: str, path: str, why: str):
    super().__init__(f"{name} ({path}) cannot be read: {why}")
    self.name, self.path, self.why = name, path, why


def unix_path(host: str, port: int) -> str:
  """The Unix socket a server of HOST:PORT also listens on, for workers of its host (of
  its user: the socket is in the user's private directory, auth.private_dir)."""
  return os.path.join(auth.private_dir(), f"{host}-{port}.sock")


def check_bindable(host: str, port: int) -> Optional[str]:
  """None if HOST:PORT can be bound here, else why not (in words)."""
  try:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
  except socket.gaierror as e:
    return f"its host '{host}' does not resolve ({e.strerror})"
  with socket.socket(family, socket.SOCK_STREAM) as s:
    try:
      s.bind((host, port))
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        return f"port {port} is taken on '{host}'"
      if e.errno == errno.EADDRNOTAVAIL:
        return f"'{host}' is not an address of this machine"
      return f"it cannot be bound ({e.strerror})"
  return None


# -- the client side (workers) ---------------------------------------------------------

class SocketConnection:
  """Length-prefixed frames over a stream socket (client or server side)."""

  def __init__(self, sock: socket.socket):
    self.sock = sock

  def send(self, kind: int, payload: bytes = b"") -> None:
    try:
      if len(payload) < 65536:
        self.sock.sendall(_HEADER.pack(kind, len(payload)) + payload)
      else:  # No copy of large payloads.
        self.sock.sendall(_HEADER.pack(kind, len(payload)))
        self.sock.sendall(payload)
    except OSError as e:
      raise TransportError(f"send failed: {e}") from e

  def recv(self, limit: Callable[[int], int] = lambda kind: MAX_MESSAGE) -> Tuple[int, bytes]:
    """The next frame; one whose announced length is over `limit(kind)` ends the
    connection before its payload is read."""
    kind, length = _HEADER.unpack(self._exactly(_HEADER.size))
    if kind not in KIND_NAMES:
      raise TransportError(f"malformed frame (kind {kind}, {length} bytes)")
    if length > limit(kind):
      raise TransportError(f"a {KIND_NAMES[kind]} message of {length} bytes, over the "
                           f"{limit(kind)} this connection may send now")
    return kind, self._exactly(length)

  def request(self, kind: int, payload: bytes = b"") -> Tuple[int, bytes]:
    self.send(kind, payload)
    return self.recv()

  def _exactly(self, n: int) -> bytearray:
    buffer = bytearray(n)
    view, got = memoryview(buffer), 0
    while got < n:
      try:
        k = self.sock.recv_into(view[got:])
      except socket.timeout as e:
        raise TransportError("timed out") from e
      except OSError as e:
        raise TransportError(f"connection failed: {e}") from e
      if not k:
        raise TransportError("connection closed" if not got else
                             f"connection closed mid-message ({got} of {n} bytes)")
      got += k
    return buffer

  def abort(self) -> None:
    try:
      self.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
      pass

  def close(self) -> None:
    self.sock.close()


def _import_grpc():
  """grpc, its fork handlers off: podracer forks only to exec (SEED's local workers,
  ffmpeg for videos), and gRPC's handlers, run in such a child while gRPC's threads are
  busy, can abort it before it execs (seen: ffmpeg's pipe broken after a SEED run).
  Read once, when gRPC starts; a value the user set is kept."""
  os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
  import grpc  # pylint: disable=import-outside-toplevel
  return grpc


class GrpcConnection:
  """The client end of one gRPC bidirectional stream."""

  def __init__(self, target: str, timeout: float, tls: Optional["ClientTLS"] = None):
    grpc = _import_grpc()
    self._grpc = grpc
    if tls is None:
      self.channel = grpc.insecure_channel(target)
    else:
      self.channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(
          root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert))
    grpc.channel_ready_future(self.channel).result(timeout=timeout)
    self._requests: "queue.Queue[Optional[bytes]]" = queue.Queue()
    stream = self.channel.stream_stream(METHOD)
    self._responses = stream(iter(self._requests.get, None))

  def request(self, kind: int, payload: bytes = b"") -> Tuple[int, bytes]:
    self._requests.put(bytes([kind]) + payload)
    try:
      message = next(self._responses)
    except (StopIteration, self._grpc.RpcError) as e:
      raise TransportError(f"connection failed: {e}") from e
    return message[0], message[1:]

  def close(self) -> None:
    self._requests.put(None)
    self.channel.close()


@dataclasses.dataclass(frozen=True)
class ClientTLS:
  """PEM bytes a worker's gRPC channel trusts (`ca`) and, for a server that asks for
  client certificates, shows (`cert`, `key`)."""
  ca: bytes
  cert: Optional[bytes] = None
  key: Optional[bytes] = None


@dataclasses.dataclass(frozen=True)
class ServerTLS:
  """PEM bytes of the server's certificate chain and key, and, to require client
  certificates, the CA that signs them."""
  cert: bytes
  key: bytes
  client_ca: Optional[bytes] = None


def connect(address: str, transport: str = "auto", timeout: float = 10.0,
            tls: Optional[ClientTLS] = None) -> Any:
  """A connection to the server at HOST:PORT (TransportError if none answers in
  `timeout` s): its Unix socket when on this host and `transport` allows, else gRPC
  (with TLS when `tls` is given)."""
  host, port = split_address(address)
  path = unix_path(host, port)
  if transport in ("auto", "unix") and os.path.exists(path) and is_local(host):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
      sock.connect(path)
      return SocketConnection(sock)
    except OSError as e:
      sock.close()
      if transport == "unix":
        raise TransportError(f"cannot connect to {path}: {e}") from e
  if transport == "unix":
    raise TransportError(f"no Unix socket {path} (the server is on another host, or "
                         f"was started with transport=grpc)")
  try:
    return GrpcConnection(f"{host}:{port}", timeout, tls)
  except Exception as e:  # grpc.FutureTimeoutError and friends.
    raise TransportError(f"no answer in {timeout:.0f} s") from e


# -- the server side -----------------------------------------------------------------

Handler = Callable[[int, bytes], Tuple[int, bytes]]


class Session:
  """What the server keeps per connection: `handle` answers each message; `closed`
  is called once, with the error that ended it (None: the peer closed cleanly)."""

  def handle(self, kind: int, payload: bytes) -> Tuple[int, bytes]:
    raise NotImplementedError

  def closed(self, error: Optional[str]) -> None:
    pass

  def limit(self, kind: int) -> int:
    """The most bytes a `kind` message may carry now (a longer one ends the connection
    before it is read, where the transport allows)."""
    del kind
    return MAX_MESSAGE

  abort: Callable[[], None] = staticmethod(lambda: None)  # set by the transport
  # Set by a transport whose replies may come from another thread: `handle` may then
  # return None and send its reply later with `send(kind, payload)` (thread-safe).
  send: Optional[Callable[[int, bytes], None]] = None


class Listener:
  """Serves sessions from `new_session(peer)` on gRPC at HOST:PORT and, with
  `unix=True`, on `unix_path(HOST, PORT)`; `address` is the bound HOST:PORT."""

  def __init__(self, host: str, port: int, new_session: Callable[[str], Session],
               unix: bool, max_sessions: int, max_message: int = MAX_MESSAGE,
               tls: Optional[ServerTLS] = None):
    grpc = _import_grpc()
    from concurrent import futures  # pylint: disable=import-outside-toplevel
    self.new_session, self._stop = new_session, threading.Event()
    self._grpc_error, self.max_message = grpc.RpcError, max_message
    # gRPC reads a whole message before a handler sees it: `max_message` bounds that.
    self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=max_sessions + 4),
                             options=[("grpc.max_receive_message_length", max_message),
                                      ("grpc.max_send_message_length", MAX_MESSAGE)])
    handler = grpc.stream_stream_rpc_method_handler(self._serve_grpc)
    self._grpc.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        METHOD.split("/")[1], {METHOD.split("/")[2]: handler})])
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    if tls is None:
      bound = self._grpc.add_insecure_port(where)
    else:
      bound = self._grpc.add_secure_port(where, grpc.ssl_server_credentials(
          [(tls.key, tls.cert)], root_certificates=tls.client_ca,
          require_client_auth=tls.client_ca is not None))
    if not bound:
      raise OSError(f"cannot bind {host}:{port}")
    self.host, self.port = host, bound
    self.address = f"{host}:{bound}"
    self._grpc.start()
    self.path = None
    if unix:
      self.path = unix_path(host, bound)
      if os.path.exists(self.path):
        os.unlink(self.path)  # A dead run's; its port was free, so its server is gone.
      self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
      self._unix.bind(self.path)
      os.chmod(self.path, 0o600)  # In a 0700 directory already; the socket too.
      self._unix.listen(max_sessions + 4)
      self._unix.settimeout(0.1)
      threading.Thread(target=self._accept, name="seed-accept", daemon=True).start()

  def _serve_grpc(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
    try:
      session = self.new_session(context.peer())
    except TransportError:  # Refused before a message (e.g. too many handshakes).
      return
    session.abort = context.cancel
    error = None
    try:
      for message in requests:
        if not message:
          raise TransportError("an empty message")
        if len(message) - 1 > session.limit(message[0]):
          raise TransportError(f"a message of {len(message) - 1} bytes, over the "
                               f"{session.limit(message[0])} this connection may send now")
        kind, payload = session.handle(message[0], message[1:])
        yield bytes([kind]) + payload
        if kind in (REFUSE, BYE):
          return
      error = self._ended()  # gRPC ends a stream whose message was too long this way too.
    except TransportError as e:
      error = str(e)
    except self._grpc_error:  # A message over `max_message`, a peer gone: that one.
      error = self._ended()
    except Exception as e:  # pylint: disable=broad-except
      error = f"{type(e).__name__}: {e}"
    finally:
      session.closed(error)

  def _ended(self) -> str:
    return (f"its gRPC stream ended: it closed it, or sent a message over "
            f"{self.max_message} bytes")

  def _accept(self) -> None:
    while not self._stop.is_set():
      try:
        sock, _ = self._unix.accept()
      except socket.timeout:
        continue
      except OSError:
        return
      sock.settimeout(None)
      threading.Thread(target=self._serve_socket, args=(sock,), name="seed-session",
                       daemon=True).start()

  def _serve_socket(self, sock: socket.socket) -> None:
    conn = SocketConnection(sock)
    try:
      session = self.new_session("unix:" + str(self.path))
    except TransportError:
      conn.close()
      return
    session.abort, session.send = conn.abort, conn.send
    error = None
    try:
      while True:
        try:
          kind, payload = conn.recv(session.limit)
        except TransportError as e:
          error = ("it closed the connection" if str(e) == "connection closed"
                   else str(e))
          return
        reply = session.handle(kind, payload)
        if reply is None:  # Sent by the session itself, later.
          continue
        conn.send(*reply)
        if reply[0] in (REFUSE, BYE):
          return
    except TransportError as e:
      error = str(e)
    finally:  # The line for the run's log before the peer sees the connection end.
      session.closed(error)
      conn.close()

  def close(self) -> None:
    self._stop.set()
    if self.path is not None:
      self._unix.close()
      try:
        os.unlink(self.path)
      except OSError:
        pass
    self._grpc.stop(grace=1.0)
