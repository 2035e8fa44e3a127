"""Who may join a SEED run: a shared secret, proved by a challenge-response; imports no JAX.

The server sends each new connection a fresh random nonce (`CHALLENGE`); the worker
answers with `HMAC-SHA256(secret, nonce)` (`AUTH`); the server compares it with its own in
constant time. The secret itself never crosses the wire, an answer is worth nothing for
another nonce (a replayed HELLO gets a new one), and a worker learns nothing about the
run (no CONFIG) before it has answered.

Where the secret comes from, on either side, first found:
  `runtime.secret_file` / `--secret_file`   a file holding it (whitespace stripped);
  $PODRACER_SEED_SECRET                     the secret itself;
  the run's own                             with neither, a server on a loopback address
                                            makes a random one and leaves it in a file
                                            only its user can read, beside its Unix
                                            socket (`secret_path`): the run's local
                                            workers and any worker its user starts on
                                            this host find it there.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from typing import Optional

SECRET_ENV = "PODRACER_SEED_SECRET"
NONCE_BYTES = 32
MIN_SECRET_BYTES = 16


class SecretError(Exception):
  """A secret that cannot be read or is too short to be one."""


def new_secret() -> bytes:
  return secrets.token_hex(32).encode()


def new_nonce() -> bytes:
  return secrets.token_bytes(NONCE_BYTES)


def answer(secret: bytes, nonce: bytes) -> bytes:
  """The worker's proof that it holds `secret`, for this nonce only."""
  return hmac.new(secret, b"podracer-seed/1:" + bytes(nonce), hashlib.sha256).digest()


def verify(secret: bytes, nonce: bytes, reply: bytes) -> bool:
  return hmac.compare_digest(answer(secret, nonce), bytes(reply))


def read_secret(path: str, what: str) -> bytes:
  """The secret in file `path`; `what` names where the path came from (for errors)."""
  try:
    with open(os.path.expanduser(path), "rb") as f:
      secret = f.read().strip()
  except OSError as e:
    raise SecretError(f"{what} ({path}) cannot be read: {e.strerror or e}") from None
  _check(secret, f"{what} ({path})")
  return secret


def _check(secret: bytes, where: str) -> None:
  if len(secret) < MIN_SECRET_BYTES:
    raise SecretError(f"the secret in {where} has {len(secret)} bytes; use at least "
                      f"{MIN_SECRET_BYTES} (e.g. `python -c \"import secrets; "
                      f"print(secrets.token_hex(32))\" > FILE`).")


def configured_secret(path: Optional[str], what: str) -> Optional[bytes]:
  """The secret from `path` (if given) or $PODRACER_SEED_SECRET; None if neither."""
  if path:
    return read_secret(path, what)
  value = os.environ.get(SECRET_ENV, "").strip().encode()
  if value:
    _check(value, f"${SECRET_ENV}")
    return value
  return None


# -- the run's private directory on this host -------------------------------------------

def private_dir() -> str:
  """A directory only this user can open (mode 0700), for the run's Unix socket and its
  own secret; made if missing, and refused if another user owns it or can open it."""
  path = os.path.join(tempfile.gettempdir(), f"podracer-seed-{os.getuid()}")
  try:
    os.mkdir(path, 0o700)
  except FileExistsError:
    pass
  info = os.lstat(path)
  if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
    raise SecretError(f"{path} is not a directory of this user: remove it, or set TMPDIR "
                      f"to a directory of your own")
  if stat.S_IMODE(info.st_mode) & 0o077:
    os.chmod(path, 0o700)
  return path


def secret_path(host: str, port: int) -> str:
  """Where a server of HOST:PORT on this host leaves the secret it made."""
  return os.path.join(private_dir(), f"{host}-{port}.secret")


def write_private(path: str, secret: bytes) -> None:
  """Writes `secret` to `path`, readable by this user only (0600 from the start)."""
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with os.fdopen(fd, "wb") as f:
    f.write(secret + b"\n")


def local_secret(host: str, port: int) -> Optional[bytes]:
  """The secret a server of HOST:PORT on this host made for itself, if there is one."""
  try:
    with open(secret_path(host, port), "rb") as f:
      return f.read().strip() or None
  except (OSError, SecretError):
    return None
