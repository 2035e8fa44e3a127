"""Reverb replay (`replay.name=reverb`): a prioritized table on a Reverb server.

A host replay (see the package docstring): Sebulba's actor threads `insert` sequences, its
learner thread calls `sample_batch`, feeds the batch to the compiled update as the
in-graph state (a `Sample`) and sends the new priorities back with `write_priorities`.

The server is either embedded (`address=None`: `start()` runs one in this process, on
`port` or a free one) or standalone (`address="host:port"`, started beforehand with
`python -m podracer.components.replay.reverb_server`), which lets several processes
share one table. Items are PyTrees of arrays; Reverb stores each as the flat list of its
leaves and, last, the item's serial (the items this process had inserted before it), and
`sample_batch` rebuilds the PyTree given to `start`. With the embedded server the serials
give `sampled_age` (env steps since the sampled items went in).

Waits are bounded by `timeout`. A call held back longer by the rate limiter raises
`ReplayTimeout` (the server is up: retry it, unless the run is stopping); a server that
went away raises `ReplayUnavailableError` within about 1.5 * timeout. Retrying after a
`ReplayTimeout` resumes the wait of the first call: `insert` with the same `items` object
does not queue them twice, and `sample_batch` does not draw a second batch.

Reverb itself is imported by `start()`, so the component builds, and its in-graph
methods run, in the default install lane, which has no Reverb.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import numpy as np

from podracer import registry
from podracer.components.replay.sampled import SampledBatch
from podracer.components.replay.table import check_table_args, default_error_buffer
from podracer.components.replay.reverb_server import (
                                                      import_reverb, make_server,
                                                      make_table)
from podracer.errors import ConfigError, ReplayTimeout, ReplayUnavailableError
from podracer.types import PyTree


class _Call:
  """Runs `fn` on a daemon thread, so that its caller can stop waiting for it.

  Reverb's samplers and mutate_priorities have no deadline and wait forever for a server
  that died; an abandoned call stays blocked (off the GIL, using no CPU) until the
  process exits. Calls with a deadline of their own should not be daemons: on Python
  3.11 a daemon thread that comes back from C++ while the interpreter shuts down aborts
  the process ("terminate called without an active exception"); exit joins the others.
  """

  def __init__(self, fn: Callable[[], Any], name: str, tag: Any = None,
               daemon: bool = True):
    self.tag = tag
    self._done = threading.Event()
    self._result: Any = None
    self._error: Optional[BaseException] = None
    threading.Thread(target=self._run, args=(fn,), name=name, daemon=daemon).start()

  def _run(self, fn):
    try:
      self._result = fn()
    except BaseException as e:  # pylint: disable=broad-except
      self._error = e
    finally:
      self._done.set()

  def wait(self, seconds: float) -> bool:
    return self._done.wait(seconds)

  def result(self) -> Any:
    if self._error is not None:
      raise self._error
    return self._result


def _fetch(client, table: str, n: int) -> List[List[np.ndarray]]:
  """Draws exactly `n` items over one stream: [key, probability, size, ..., *leaves]."""
  # Client.sample opens up to n streams of one item each; one stream of n is cheaper,
  # and never draws more than asked (every draw counts against the rate limiter).
  sampler = client._client.NewSampler(table, n, n)  # pylint: disable=protected-access
  return [sampler.GetNextTrajectory() for _ in range(n)]


@registry.replay.register("reverb")
class ReverbReplay(SampledBatch):
  """Prioritized replay on a Reverb server (see the module docstring).

  Args:
    batch_size: items per `sample_batch` (and the in-graph batch).
    max_size: items the table holds; the oldest are removed first (FIFO).
    min_size: items the table must hold before anything is sampled.
    samples_per_insert: with it, Reverb's SampleToInsertRatio keeps samples within
      `error_buffer` of samples_per_insert * (inserts - min_size), blocking inserts or
      samples, whichever run ahead. None: only `min_size` holds sampling back.
    error_buffer: that slack; default max(1, samples_per_insert) * batch_size, room for
      one learner batch (Reverb refuses less than max(1, samples_per_insert)).
    priority_exponent: alpha: items are drawn with probability p_i^alpha / sum p^alpha.
    initial_priority: the priority of items inserted without one.
    address: "host:port" of a running server to join; None: `start()` runs one here.
      With an address, the table is the server's: its size, rate limiter and exponent
      come from the server's flags, not from these arguments.
    port: the embedded server's port; None: a free one.
    table: the table's name.
    checkpoint_dir: the embedded server checkpoints there, and starts from the latest
      checkpoint found there.
    checkpoint: the run's checkpoints include the table (podracer/lifecycle/checkpoint.py): each
      one also has the server write a Reverb checkpoint (through the client), into
      `checkpoint_dir`, by default WORKDIR/checkpoints/reverb/, and a resumed run's
      embedded server starts from the latest. A joined server (`address`) writes into
      its own --checkpoint_dir and restores from it when restarted.
    timeout: seconds any call waits before raising ReplayTimeout (rate limiter, on a live
      server) or ReplayUnavailableError (server gone). Short, so that a stopping run's
      threads notice within seconds; runtimes retry ReplayTimeout.
  """

  def __init__(self, batch_size: int, max_size: int = 100_000, min_size: int = 1,
               samples_per_insert: Optional[float] = None,
               error_buffer: Optional[float] = None, priority_exponent: float = 0.9,
               initial_priority: float = 1.0, address: Optional[str] = None,
               port: Optional[int] = None, table: str = "replay",
               checkpoint_dir: Optional[str] = None, timeout: float = 2.0,
               checkpoint: Optional[bool] = None):
    check_table_args(max_size=max_size, min_size=min_size, batch_size=batch_size,
                     samples_per_insert=samples_per_insert, error_buffer=error_buffer,
                     priority_exponent=priority_exponent, initial_priority=initial_priority,
                     timeout=timeout)
    if not isinstance(table, str) or not table:
      raise ValueError(f"`table` must be a non-empty string, got {table!r}.")
    if address is not None:
      if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"`address` must be 'host:port', got {address!r}.")
      if port is not None or checkpoint_dir is not None:
        raise ValueError(
            f"`port` and `checkpoint_dir` configure the embedded server, but `address` "
            f"({address}) joins a running one: give them to reverb_server instead "
            f"(--port, --checkpoint_dir).")
    self.batch_size = batch_size
    self.max_size, self.min_size = max_size, min_size
    self.samples_per_insert = samples_per_insert
    self.error_buffer = (float(error_buffer) if error_buffer is not None else
                         default_error_buffer(samples_per_insert, batch_size)
                         if samples_per_insert is not None else None)
    self.priority_exponent = float(priority_exponent)
    self.initial_priority = float(initial_priority)
    self.port, self.table, self.checkpoint_dir = port, table, checkpoint_dir
    self.checkpointed = bool(checkpoint)
    self.timeout = float(timeout)
    self._address = address
    self._server = None
    self._reverb = None
    self._treedef = None
    self._specs: List[Tuple[Tuple[int, ...], np.dtype]] = []
    self._closed = False
    self._lock = threading.Lock()
    self._inserted = 0  # items this process inserted: the next one's serial
    self._new_steps = 1  # env steps of one environment that an item adds
    # Per calling thread: a client, a writer and the call a ReplayTimeout left pending.
    self._local = threading.local()

  @property
  def address(self) -> Optional[str]:
    """The server's "host:port" ("localhost:PORT" when embedded; None before start)."""
    return self._address

  # -- host side (the in-graph side is SampledBatch's) ------------------------------

  def start(self, item_spec: PyTree, overlap: int = 0) -> None:
    """Starts (embedded) or joins (`address`) the server; `item_spec` is ONE item.

    Reverb stores every item whole, so consecutive items' `overlap` shared steps are
    stored twice (its chunk compression shrinks them); the argument only says how many
    env steps an item adds (for `sampled_age`).
    """
    if hasattr(item_spec, "timestep"):  # A sequence: its steps less those it repeats.
      self._new_steps = int(item_spec.timestep.step_type.shape[0]) - overlap
    reverb = import_reverb()
    leaves, treedef = jax.tree_util.tree_flatten(item_spec)
    if not leaves:
      raise ValueError("`item_spec` has no leaves: Reverb items need at least one array.")
    specs = [(tuple(int(d) for d in leaf.shape), np.dtype(leaf.dtype)) for leaf in leaves]
    with self._lock:
      if self._closed:
        raise self._closed_error("start")
      if self._treedef is not None:
        raise RuntimeError("ReverbReplay.start() was already called.")
      self._reverb = reverb
      if self._address is None:
        table = make_table(name=self.table, max_size=self.max_size,
                           min_size=self.min_size,
                           samples_per_insert=self.samples_per_insert,
                           error_buffer=self.error_buffer,
                           priority_exponent=self.priority_exponent,
                           batch_size=self.batch_size)
        self._server = make_server(table, port=self.port,
                                   checkpoint_dir=self.checkpoint_dir)
        self._address = f"localhost:{self._server.port}"
      tables = self._table_infos("start")
      if self._server is not None and self.table in tables:  # Resumed: serials go on.
        self._inserted = int(tables[self.table].rate_limiter_info.insert_stats.completed)
      if self.table not in tables:
        raise ConfigError(
            f"The Reverb server at {self._address} has no table '{self.table}' (config "
            f"key `replay.table`); its tables: {', '.join(sorted(tables)) or 'none'}.")
      self._treedef, self._specs = treedef, specs

  def insert(self, items: PyTree, priorities: Optional[np.ndarray] = None,
             stream: Any = None) -> None:
    """Inserts the N items of `items` (leaves [N, ...]) with `priorities` [N]. Reverb
    keeps every item whole, so the `stream` rows continue is not needed.

    Returns once the server has them; raises ReplayTimeout when the rate limiter held
    them back for `timeout` (they stay queued: call again with the same `items` object
    to keep waiting for them without inserting them twice).
    """
    del stream
    self._check_usable("insert")
    local = self._local
    if getattr(local, "pending_items", None) is not items:
      leaves = self._flatten_items(items)
      n = leaves[0].shape[0]
      priorities = self._insert_priorities(priorities, n)
      writer = self._writer()
      with self._lock:
        first, self._inserted = self._inserted, self._inserted + n
      try:
        for i in range(n):
          writer.append([leaf[i] for leaf in leaves] + [np.int64(first + i)])
          # One step per item; [-1] squeezes the step axis, so items keep their shapes.
          writer.create_item(self.table, float(priorities[i]),
                             [column[-1] for column in writer.history])
      except Exception as e:  # pylint: disable=broad-except
        self._drop_writer()
        self._raise_if_gone("insert", e)
        raise
      local.pending_items = items
    try:
      local.writer.flush(timeout_ms=int(math.ceil(self.timeout * 1000)))
    except self._reverb.errors.DeadlineExceededError:
      self._raise_timeout_or_unavailable("insert", self._drop_writer)
    except Exception as e:  # pylint: disable=broad-except
      self._drop_writer()
      self._raise_if_gone("insert", e)
      raise
    local.pending_items = None

  def sample_batch(self, batch_size: Optional[int] = None
                   ) -> Tuple[PyTree, np.ndarray, np.ndarray, int]:
    """Draws `batch_size` (default: the configured one) items, with replacement.

    Returns (items [B, ...] as given to `start`, keys uint64 [B], probabilities float32
    [B], table size when the last item was drawn).
    """
    self._check_usable("sample_batch")
    n = self.batch_size if batch_size is None else int(batch_size)
    if n < 1:
      raise ValueError(f"`batch_size` must be >= 1, got {n}.")
    local = self._local
    call = getattr(local, "pending_sample", None)
    if call is None or call.tag != n:  # Else a retry: wait for the batch already drawing.
      client, table = self._client(), self.table
      call = local.pending_sample = _Call(lambda: _fetch(client, table, n),
                                          "reverb-sample", tag=n)

    def forget():
      local.pending_sample = None

    while not call.wait(self.timeout):
      self._raise_timeout_or_unavailable("sample_batch", forget)
    forget()
    try:
      rows = call.result()
    except Exception as e:  # pylint: disable=broad-except
      self._raise_if_gone("sample_batch", e)
      raise
    return self._unpack(rows)

  def sampled_age(self, keys: np.ndarray) -> Optional[float]:
    """Env steps taken since the items `keys` (this thread's last `sample_batch`) went
    in, mean over them (0: the newest item); None when other processes may insert too
    (a standalone server, `address`), whose serials are their own."""
    if self._server is None:
      return None
    sampled, serials = getattr(self._local, "serials", (None, None))
    if sampled is None or not np.array_equal(sampled, np.asarray(keys, np.uint64)):
      raise ValueError("sampled_age(keys) takes the keys of this thread's last batch.")
    newest = self._inserted - 1
    return float(np.mean(newest - serials)) * self._new_steps

  def write_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
    """Sets the priorities of the items `keys` (from sample_batch); gone keys are skipped."""
    self._check_usable("write_priorities")
    keys = np.asarray(keys).reshape(-1)
    priorities = np.asarray(priorities, np.float64).reshape(-1)
    if keys.shape != priorities.shape:
      raise ValueError(f"{keys.shape[0]} keys but {priorities.shape[0]} priorities.")
    if not np.all(np.isfinite(priorities)):
      raise ValueError(f"Priorities must be finite, got {priorities}.")
    # Negative priorities mean nothing to prioritized sampling; as in the device replay.
    updates = dict(zip((int(k) for k in keys),
                       (float(p) for p in np.maximum(priorities, 0.0))))
    client, table = self._client(), self.table
    self._call("write_priorities", lambda: client.mutate_priorities(table, updates=updates))

  def info(self) -> Dict[str, Any]:
    """Totals from the server's table: size, inserts and samples since it started."""
    self._check_usable("info")
    table = self._table_infos("info")[self.table]
    limiter = table.rate_limiter_info
    return dict(
        replay_size=int(table.current_size),
        replay_max_size=int(table.max_size),
        replay_inserts=int(limiter.insert_stats.completed),
        replay_samples=int(limiter.sample_stats.completed),
        # Items sampled at least once, of those still in the table.
        replay_unique_samples=int(table.num_unique_samples))

  def use_checkpoint_dir(self, path: str) -> None:
    """Before `start`: the embedded server checkpoints into `path` (unless the config
    named a `checkpoint_dir`) and starts from the latest checkpoint there."""
    if self._address is None and self.checkpoint_dir is None:
      self.checkpoint_dir = path

  def checkpoint(self, keep: Optional[int] = None) -> str:
    """Has the server write a checkpoint; returns its path. With `keep`, deletes all but
    the newest `keep` checkpoints beside it (Reverb names them by time)."""
    self._check_usable("checkpoint")
    client = self._client()
    path = self._call("checkpoint", client.checkpoint)
    if keep and self._server is not None:  # Only an embedded server's files are ours.
      parent = os.path.dirname(path.rstrip("/"))
      done = sorted(name for name in os.listdir(parent)
                    if os.path.isdir(os.path.join(parent, name)) and not name.startswith("."))
      for name in done[:-keep]:
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    return path

  def close(self) -> None:
    """Stops the embedded server (a joined one keeps running); later calls raise."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
      server, self._server = self._server, None
    if server is not None:
      server.stop()

  # -- helpers ------------------------------------------------------------------------

  def _client(self):
    client = getattr(self._local, "client", None)
    if client is None:
      client = self._local.client = self._reverb.Client(self._address)
    return client

  def _writer(self):
    writer = getattr(self._local, "writer", None)
    if writer is None:
      # No signature to validate against, and validating would fetch one without a
      # deadline.
      writer = self._local.writer = self._client().trajectory_writer(
          num_keep_alive_refs=1, validate_items=False)
    return writer

  def _drop_writer(self) -> None:
    self._local.writer = None
    self._local.pending_items = None

  def _table_infos(self, what: str) -> Dict[str, Any]:
    try:
      return self._client().server_info(timeout=max(1, math.ceil(self.timeout)))
    except Exception as e:  # pylint: disable=broad-except
      raise self._unavailable(what, f"it did not answer within {self.timeout:g}s") from e

  def _alive(self) -> bool:
    """Whether the server answers within timeout / 2."""
    client, seconds = self._client(), self.timeout / 2
    # Not a daemon: its own deadline ends it, and exit waits for it (see _Call).
    probe = _Call(lambda: client.server_info(timeout=max(1, math.ceil(seconds))),
                  "reverb-probe", daemon=False)
    if not probe.wait(seconds):
      return False
    try:
      probe.result()
    except Exception:  # pylint: disable=broad-except
      return False
    return True

  def _call(self, what: str, fn: Callable[[], Any]) -> Any:
    """fn() on a helper thread, waited for as long as the server is up."""
    call = _Call(fn, f"reverb-{what}")
    while not call.wait(self.timeout):
      if self._closed:
        raise self._closed_error(what)
      if not self._alive():
        raise self._unavailable(what, "it did not answer")
    try:
      return call.result()
    except Exception as e:  # pylint: disable=broad-except
      self._raise_if_gone(what, e)
      raise

  def _raise_timeout_or_unavailable(self, what: str, forget: Callable[[], None]) -> None:
    """After a wait of `timeout`: ReplayTimeout if the server is up, else unavailable."""
    if self._closed:
      forget()
      raise self._closed_error(what)
    if not self._alive():
      forget()
      raise self._unavailable(what, "it did not answer")
    raise ReplayTimeout(
        f"Reverb table '{self.table}' at {self._address}: {what} waited {self.timeout:g}s "
        f"on the rate limiter (the server is up; retry unless the run is stopping).")

  def _raise_if_gone(self, what: str, error: Exception) -> None:
    """After a failed Reverb call: ReplayUnavailableError if closed or the server died."""
    if self._closed:
      raise self._closed_error(what) from error
    if not self._alive():
      raise self._unavailable(
          what, f"it failed with {type(error).__name__}: {error}") from error

  def _check_usable(self, what: str) -> None:
    if self._closed:
      raise self._closed_error(what)
    if self._treedef is None:
      raise RuntimeError(f"ReverbReplay.{what}() before start(item_spec).")

  def _closed_error(self, what: str) -> ReplayUnavailableError:
    return ReplayUnavailableError(
        f"ReverbReplay ({self._address or 'not started'}, table '{self.table}') was "
        f"closed; {what} cannot run.")

  def _unavailable(self, what: str, why: str) -> ReplayUnavailableError:
    return ReplayUnavailableError(
        f"The Reverb server at {self._address} is unavailable (was it stopped or "
        f"killed?): {what} on table '{self.table}' did not complete and {why}.")

  def _flatten_items(self, items: PyTree) -> List[np.ndarray]:
    leaves, treedef = jax.tree_util.tree_flatten(items)
    if treedef != self._treedef:
      raise ValueError(f"`items` has structure {treedef}, but start() was given "
                       f"{self._treedef}.")
    arrays, n = [], None
    for leaf, (shape, dtype) in zip(leaves, self._specs):
      x = np.asarray(leaf)
      n = x.shape[0] if n is None and x.ndim else n
      if x.shape != (n, *shape) or x.dtype != dtype:
        raise ValueError(f"An `items` leaf is {x.dtype}{list(x.shape)}; expected "
                         f"{dtype}{[n if n is not None else 'N', *shape]} (N items of the "
                         f"spec given to start()).")
      arrays.append(x)
    if not n:
      raise ValueError("`items` holds no items (leading axis 0).")
    return arrays

  def _insert_priorities(self, priorities, n: int) -> np.ndarray:
    if priorities is None:
      return np.full((n,), self.initial_priority)
    priorities = np.asarray(priorities, np.float64).reshape(-1)
    if priorities.shape != (n,) or not np.all(np.isfinite(priorities)):
      raise ValueError(f"`priorities` must be {n} finite numbers, got {priorities}.")
    return np.maximum(priorities, 0.0)

  def _unpack(self, rows) -> Tuple[PyTree, np.ndarray, np.ndarray, int]:
    num_info = self._reverb.pybind.Sampler.NUM_INFO_TENSORS
    if any(len(row) - num_info != len(self._specs) + 1 for row in rows):
      raise ValueError(
          f"Table '{self.table}' at {self._address} holds items of "
          f"{len(rows[0]) - num_info - 1} arrays and a serial, but start() was given "
          f"{len(self._specs)}: another writer inserted items of another structure (or "
          f"a checkpoint from before items carried their serial).")
    leaves = []
    for j, (shape, dtype) in enumerate(self._specs):
      column = np.stack([row[num_info + j] for row in rows])
      if column.shape[1:] != shape or column.dtype != dtype:
        raise ValueError(
            f"Table '{self.table}' at {self._address} returned {column.dtype}"
            f"{list(column.shape[1:])} for an item array that start() was given as "
            f"{dtype}{list(shape)}.")
      leaves.append(column)
    keys = np.array([row[0] for row in rows], np.uint64)
    self._local.serials = (keys, np.array([row[-1] for row in rows], np.int64))
    probabilities = np.array([row[1] for row in rows], np.float32)
    return (jax.tree_util.tree_unflatten(self._treedef, leaves), keys, probabilities,
            int(rows[-1][2]))
