"""Starting a test's child process as a background job of a script starts it.

A job started with `&` inherits SIGINT ignored. The tests used to set that with
`preexec_fn`, which makes `subprocess` fork and run Python in the child before exec: in a
pytest worker whose earlier tests left gRPC's threads running (SEED's), that child can
abort in gRPC's poller (SIGABRT, 'epoll_wait error: Bad file descriptor') before the
command starts. Here a fresh interpreter ignores SIGINT and execs the command: an ignored
signal stays ignored across exec, and the test's own process never runs Python after a
fork.
"""

import sys
from typing import List, Sequence

_IGNORE_SIGINT_THEN_EXEC = ("import os, signal, sys; signal.signal(signal.SIGINT, "
                            "signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])")


def with_sigint_ignored(command: Sequence[str]) -> List[str]:
  """`command` (its first item an executable's path) run with SIGINT ignored."""
  return [sys.executable, "-c", _IGNORE_SIGINT_THEN_EXEC, *command]
