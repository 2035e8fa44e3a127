"""A run's writes that fail because of the disk, named in one paragraph.

`writing(what, path)` wraps a write (a metrics record, a checkpoint, event files, the
plot): an error whose cause is the disk (no space, quota, read-only, I/O error), however
deep a library wrapped it, becomes a `DiskError` naming what was being written, the path
and the free space there, instead of the library's tracebacks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from typing import Callable, Iterator, Optional

from podracer.errors import DiskError

DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
_STRERRORS = tuple(os.strerror(e) for e in DISK_ERRNOS)


def disk_cause(error: Optional[BaseException]) -> Optional[str]:
  """The disk's reason (`No space left on device`, ...) if it caused `error` or any error
  in its chain (libraries such as tensorstore re-raise it with the text only), else None."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in DISK_ERRNOS:
      return os.strerror(error.errno)
    reason = reason_in(str(error))
    if reason is not None:
      return reason
    error = error.__cause__ or error.__context__
  return None


def reason_in(text: str) -> Optional[str]:
  """The disk's reason if `text` (a message, a log line) names one, else None."""
  return next((reason for reason in _STRERRORS if reason in text), None)


def _size(num_bytes: float) -> str:
  if num_bytes < 1024:
    return f"{num_bytes:,.0f} bytes"
  for unit in ("KB", "MB"):
    num_bytes /= 1024
    if num_bytes < 1024:
      return f"{num_bytes:,.1f} {unit}"
  return f"{num_bytes / 1024:,.1f} GB"


def free_space(path: str) -> str:
  """'12.0 KB free of 300.0 KB' on the filesystem that holds `path` (or its parent)."""
  probe = os.path.abspath(path)
  while not os.path.exists(probe) and os.path.dirname(probe) != probe:
    probe = os.path.dirname(probe)
  try:
    usage = shutil.disk_usage(probe)
  except OSError:
    return "its free space could not be read"
  return f"{_size(usage.free)} free of {_size(usage.total)}"


def message(what: str, path: str, reason: str, cleaned: bool = False) -> str:
  removed = " (what it had written is removed)" if cleaned else ""
  return (f"Could not write the {what} to {path}: {reason} ({free_space(path)} on that "
          f"filesystem). Everything written before is intact{removed}; free some space "
          "(or point --workdir elsewhere) and relaunch into the same workdir to resume "
          "from its last complete checkpoint.")


@contextlib.contextmanager
def writing(what: str, path: str,
            cleanup: Optional[Callable[[], None]] = None) -> Iterator[None]:
  """Turns a disk failure inside the block into a DiskError; `cleanup` runs first."""
  try:
    yield
  except DiskError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    reason = disk_cause(e)
    if reason is None:
      raise
    if cleanup is not None:
      cleanup()
    raise DiskError(message(what, path, reason, cleaned=cleanup is not None)) from e
