"""The `reverb` host replay: embedded and standalone servers, rate limits, failures.

Tests that need Reverb start with `requires_reverb()`: they skip in the default lane and
run in the reverb lane. The in-graph methods and the component's construction are tested
in both lanes.
"""

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import builder, registry
from podracer.components.replay import Sample, importance_weights
from podracer.components.replay.reverb_replay import ReverbReplay
from podracer.errors import ConfigError, ReplayTimeout, ReplayUnavailableError
from tests.reverb_support import requires_reverb

# Reverb, and the lanes themselves: the reverb lane runs this whole module.
pytestmark = pytest.mark.reverb_lane

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LENGTH = 5  # steps per stored sequence


class Step(NamedTuple):
  observation: Any  # [L, 4] float32
  action: Any       # [L] int32
  extras: Any       # {"id": [] int32, "nested": {"value": [2] float32}}


def item_spec() -> Step:
  """ONE item: a sequence of LENGTH steps, with a scalar id that tells items apart."""
  s = jax.ShapeDtypeStruct
  return Step(s((LENGTH, 4), jnp.float32), s((LENGTH,), jnp.int32),
              {"id": s((), jnp.int32), "nested": {"value": s((2,), jnp.float32)}})


def make_items(ids) -> Step:
  """Items whose every leaf is a function of their id, so samples can be checked."""
  ids = np.asarray(ids, np.int32)
  observation = ids[:, None, None] + np.arange(LENGTH * 4).reshape(LENGTH, 4) / 100.0
  return Step(observation.astype(np.float32),
              (ids[:, None] * 10 + np.arange(LENGTH)).astype(np.int32),
              {"id": ids, "nested": {"value": np.stack([ids, -ids], 1).astype(np.float32)}})


def check_items(items: Step, batch: int) -> np.ndarray:
  """Asserts `items` is a [batch, ...] Step of well-formed items; returns their ids."""
  assert jax.tree_util.tree_structure(items) == jax.tree_util.tree_structure(item_spec())
  for leaf, spec in zip(jax.tree_util.tree_leaves(items),
                        jax.tree_util.tree_leaves(item_spec())):
    assert isinstance(leaf, np.ndarray)
    assert leaf.shape == (batch, *spec.shape) and leaf.dtype == spec.dtype
  ids = items.extras["id"]
  expected = make_items(ids)
  for got, want in zip(jax.tree_util.tree_leaves(items), jax.tree_util.tree_leaves(expected)):
    np.testing.assert_array_equal(got, want)
  return ids


def expected_probabilities(priorities: dict, alpha: float) -> dict:
  total = sum(p ** alpha for p in priorities.values())
  return {k: p ** alpha / total for k, p in priorities.items()}


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def start_server(*flags: str):
  """Runs reverb_server in a subprocess; returns (process, its stdout lines, address)."""
  port = free_port()
  proc = subprocess.Popen(
      [sys.executable, "-m", "podracer.components.replay.reverb_server", f"--port={port}",
       *flags], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  lines: "queue.Queue[str]" = queue.Queue()
  threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                   daemon=True).start()
  return proc, lines, f"localhost:{port}"


def wait_for_address(lines, address) -> None:
  """Waits for the server's one line, which must name its address."""
  try:
    line = lines.get(timeout=60)
  except queue.Empty:
    pytest.fail("reverb_server printed nothing within 60 s")
  assert address in line, line


def join(address: str, timeout: float, wait: float = 60.0) -> ReverbReplay:
  """A ReverbReplay started on `address`, once the server there is up (within `wait` s)."""
  deadline = time.monotonic() + wait
  while True:
    replay = ReverbReplay(batch_size=8, address=address, timeout=timeout)
    try:
      replay.start(item_spec())
      return replay
    except ReplayUnavailableError:
      if time.monotonic() > deadline:
        raise


def stop(proc) -> None:
  if proc.poll() is None:
    proc.kill()
    proc.wait(10)


# -- both lanes ---------------------------------------------------------------------------


def test_built_from_config_and_clear_import_error_without_reverb():
  builder.register_builtin_components()
  replay = registry.build(registry.replay, {"name": "reverb", "batch_size": 4}, key="replay")
  assert isinstance(replay, ReverbReplay) and replay.kind == "host"
  assert replay.batch_size == 4 and replay.address is None
  with pytest.raises(ConfigError, match="error_buffer"):
    registry.build(registry.replay, {"name": "reverb", "batch_size": 4,
                                     "samples_per_insert": 4.0, "error_buffer": 2.0},
                   key="replay")
  replay = registry.build(registry.replay, {"name": "reverb", "batch_size": 4,
                                            "samples_per_insert": 2.0}, key="replay")
  assert replay.error_buffer == 8.0  # max(1, samples_per_insert) * batch_size
  try:
    import reverb  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    with pytest.raises(ImportError, match=r"reverb lane.*pip install"):
      replay.start(item_spec())


def test_in_graph_methods_pass_the_sampled_batch_through_under_jit():
  replay = ReverbReplay(batch_size=3)  # No server: the in-graph side never needs one.
  state = replay.init(item_spec())
  assert isinstance(state, Sample)
  assert state.items.observation.shape == (3, LENGTH, 4)
  assert state.items.extras["nested"]["value"].shape == (3, 2)
  assert state.ids.dtype == jnp.int32 and state.priorities.shape == (3,)

  fed = state._replace(items=jax.tree_util.tree_map(jnp.asarray, make_items([7, 8, 9])),
                       probabilities=jnp.full((3,), 0.25, jnp.float32),
                       size=jnp.int32(40))

  @jax.jit
  def step(state, key):
    state = replay.add(state, make_items([1, 2, 3]))  # ignored: the host inserts
    sample = replay.sample(state, key)
    new = jnp.abs(sample.items.observation[:, 0, 0]) + 1.0
    return (replay.update_priorities(state, sample, new), replay.can_sample(state),
            importance_weights(sample, 0.5))

  out, can, weights = step(fed, jax.random.PRNGKey(0))
  assert bool(can)
  np.testing.assert_array_equal(out.items.extras["id"], [7, 8, 9])
  np.testing.assert_allclose(out.priorities, [8.0, 9.0, 10.0])
  np.testing.assert_allclose(weights, [1.0, 1.0, 1.0])


# -- reverb lane --------------------------------------------------------------------------


def test_embedded_server_returns_pytree_batches_with_prioritized_probabilities():
  requires_reverb()
  replay = ReverbReplay(batch_size=16, priority_exponent=0.7, timeout=5.0)
  replay.start(item_spec())
  try:
    assert re.fullmatch(r"localhost:\d+", replay.address)
    priorities = {i: float(i + 1) for i in range(6)}
    replay.insert(make_items(list(priorities)), np.array(list(priorities.values())))
    items, keys, probabilities, size = replay.sample_batch()
    ids = check_items(items, 16)
    assert keys.dtype == np.uint64 and keys.shape == (16,)
    assert probabilities.dtype == np.float32 and size == 6
    want = expected_probabilities(priorities, 0.7)
    np.testing.assert_allclose(probabilities, [want[i] for i in ids], rtol=1e-5)
    # One key per item: equal ids, equal keys.
    assert len({(int(i), int(k)) for i, k in zip(ids, keys)}) == len(set(ids.tolist()))

    items, _, _, _ = replay.sample_batch(batch_size=3)
    check_items(items, 3)
    info = replay.info()
    assert (info["replay_size"], info["replay_inserts"], info["replay_samples"]) == (6, 6, 19)
  finally:
    replay.close()
  replay.close()  # idempotent
  with pytest.raises(ReplayUnavailableError, match="closed"):
    replay.sample_batch()


def test_written_priorities_are_the_ones_the_server_samples_with():
  requires_reverb()
  replay = ReverbReplay(batch_size=32, priority_exponent=0.9, timeout=5.0)
  replay.start(item_spec())
  try:
    replay.insert(make_items(range(4)))  # initial_priority 1: uniform
    items, keys, probabilities, _ = replay.sample_batch()
    np.testing.assert_allclose(probabilities, 0.25, rtol=1e-6)
    key_of = {int(i): int(k) for i, k in zip(items.extras["id"], keys)}
    assert len(key_of) == 4, "32 uniform draws from 4 items missed one"  # p = 4 * 0.75^32

    new = {0: 0.5, 1: 2.0, 2: 4.0, 3: 8.0}
    order = sorted(key_of)
    replay.write_priorities(np.array([key_of[i] for i in order], np.uint64),
                            np.array([new[i] for i in order], np.float32))
    items, keys, probabilities, _ = replay.sample_batch()
    want = expected_probabilities(new, 0.9)
    ids = items.extras["id"]
    np.testing.assert_allclose(probabilities, [want[int(i)] for i in ids], rtol=1e-5)
    assert all(key_of[int(i)] == int(k) for i, k in zip(ids, keys))
  finally:
    replay.close()


def test_rate_limiter_holds_the_samples_per_insert_ratio_within_its_error_buffer():
  requires_reverb()
  spi, min_size, batch = 2.0, 8, 4
  replay = ReverbReplay(batch_size=batch, max_size=10_000, min_size=min_size,
                        samples_per_insert=spi, timeout=0.5)
  assert replay.error_buffer == 8.0
  replay.start(item_spec())
  stop_event = threading.Event()
  errors = []

  def loop(fn):
    try:
      while not stop_event.is_set():
        try:
          fn()
        except ReplayTimeout:
          pass
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  items = make_items([1, 2])
  # Two actor threads insert at once (one writer each), one learner samples.
  threads = [threading.Thread(target=loop, args=(lambda: replay.insert(items),)),
             threading.Thread(target=loop, args=(lambda: replay.insert(make_items([3])),)),
             threading.Thread(target=loop, args=(replay.sample_batch,))]
  try:
    for t in threads:
      t.start()
    time.sleep(2.0)
    info = replay.info()
  finally:
    stop_event.set()
    for t in threads:
      t.join(10)
    replay.close()
  assert not errors, errors
  assert not any(t.is_alive() for t in threads)
  inserts, samples = info["replay_inserts"], info["replay_samples"]
  assert inserts > 4 * min_size and samples > 4 * batch, info
  # Reverb's invariant, checked on one consistent snapshot: within the buffer, plus one
  # batch of slack.
  slack = replay.error_buffer + batch
  assert abs(samples - spi * (inserts - min_size)) <= slack, info


def test_rate_limited_calls_raise_replay_timeout_and_resume_without_duplicates():
  requires_reverb()
  # error_buffer 1 at samples_per_insert 1 and min_size 1: inserts stay at most 2 ahead
  # of samples, samples at most 0 ahead of inserts.
  replay = ReverbReplay(batch_size=2, min_size=1, samples_per_insert=1.0, error_buffer=1.0,
                        timeout=0.5)
  replay.start(item_spec())
  counts = lambda: (replay.info()["replay_inserts"], replay.info()["replay_samples"])
  try:
    items = make_items([10, 11, 12])
    start = time.perf_counter()
    with pytest.raises(ReplayTimeout, match="rate limiter"):
      replay.insert(items)  # the third item waits for a sample
    assert time.perf_counter() - start < 2.0
    assert counts() == (2, 0)
    batch, _, _, _ = replay.sample_batch()  # lets the third in
    assert set(check_items(batch, 2).tolist()) <= {10, 11, 12}
    replay.insert(items)  # the same items: waits for the queued third, adds nothing
    assert counts() == (3, 2)

    start = time.perf_counter()
    with pytest.raises(ReplayTimeout, match="rate limiter"):
      replay.sample_batch()  # draws one, then waits for an insert
    assert time.perf_counter() - start < 2.0
    assert counts() == (3, 3)
    replay.insert(make_items([13]))
    # The retry finishes the first call's batch instead of drawing a new one.
    batch, _, _, _ = replay.sample_batch()
    assert set(check_items(batch, 2).tolist()) <= {10, 11, 12, 13}
    assert counts() == (4, 4)
    assert replay.info()["replay_size"] == 4
  finally:
    replay.close()


def test_checkpoint_then_a_new_replay_restores_the_items(tmp_path):
  requires_reverb()
  directory = str(tmp_path / "reverb")
  first = ReverbReplay(batch_size=8, checkpoint_dir=directory, timeout=5.0)
  first.start(item_spec())
  try:
    first.insert(make_items(range(100, 106)), np.arange(1.0, 7.0))
    path = first.checkpoint()
  finally:
    first.close()
  assert path.startswith(directory) and os.path.exists(path)

  second = ReverbReplay(batch_size=8, checkpoint_dir=directory, timeout=5.0)
  second.start(item_spec())
  try:
    assert second.info()["replay_size"] == 6
    items, _, probabilities, size = second.sample_batch()
    ids = check_items(items, 8)
    assert size == 6 and set(ids.tolist()) <= set(range(100, 106))
    want = expected_probabilities({i: float(i - 99) for i in range(100, 106)}, 0.9)
    np.testing.assert_allclose(probabilities, [want[int(i)] for i in ids], rtol=1e-5)
  finally:
    second.close()


def test_sampled_age_counts_the_items_inserted_since_and_goes_on_after_a_restore(tmp_path):
  """Each item carries its serial (items this process inserted before it): the embedded
  server's sampled_age is the mean count of items inserted since, times the env steps an
  item adds (1 for these); a replay joined by address cannot tell (other processes may
  insert), and a restored table's serials go on from its insert count."""
  requires_reverb()
  directory = str(tmp_path / "reverb")
  first = ReverbReplay(batch_size=64, checkpoint_dir=directory, timeout=5.0)
  first.start(item_spec())
  joined = ReverbReplay(batch_size=8, address=first.address, timeout=5.0)
  try:
    first.insert(make_items(range(6)))
    first.insert(make_items(range(6, 10)))
    items, keys, _, _ = first.sample_batch()
    ids = check_items(items, 64)
    assert first.sampled_age(keys) == pytest.approx(float(np.mean(9 - ids)))
    assert 0 < first.sampled_age(keys) < 9
    joined.start(item_spec())
    _, joined_keys, _, _ = joined.sample_batch()
    assert joined.sampled_age(joined_keys) is None
    first.checkpoint()
  finally:
    joined.close()
    first.close()
  second = ReverbReplay(batch_size=64, checkpoint_dir=directory, timeout=5.0)
  second.start(item_spec())
  try:
    second.insert(make_items(range(10, 12)))  # serials 10 and 11
    items, keys, _, _ = second.sample_batch()
    ids = check_items(items, 64)
    assert second.sampled_age(keys) == pytest.approx(float(np.mean(11 - ids)))
  finally:
    second.close()


def test_joining_a_server_without_the_table_or_without_a_server_fails_clearly():
  requires_reverb()
  host = ReverbReplay(batch_size=2, timeout=5.0)
  host.start(item_spec())
  try:
    guest = ReverbReplay(batch_size=2, address=host.address, table="nope", timeout=5.0)
    with pytest.raises(ConfigError, match=rf"{host.address}.*'nope'.*replay"):
      guest.start(item_spec())
  finally:
    host.close()
  address = f"localhost:{free_port()}"
  start = time.perf_counter()
  with pytest.raises(ReplayUnavailableError, match=address):
    ReverbReplay(batch_size=2, address=address, timeout=1.0).start(item_spec())
  assert time.perf_counter() - start < 5.0


ACTOR = """
import sys
from tests.components.test_reverb_replay import join, make_items
address, actor = sys.argv[1], int(sys.argv[2])
replay = join(address, timeout=10.0)
for i in range(10):  # 10 inserts of 3 items, ids 1000 * actor + ...
  replay.insert(make_items([1000 * actor + 3 * i + j for j in range(3)]))
replay.close()
print("inserted 30")
"""

LEARNER = """
import sys
import numpy as np
from podracer.errors import ReplayTimeout
from tests.components.test_reverb_replay import check_items, join
replay = join(sys.argv[1], timeout=2.0)
ids, batches = set(), 0
while batches < 5:
  try:
    items, keys, probabilities, size = replay.sample_batch()
  except ReplayTimeout:  # nothing inserted yet
    continue
  ids.update(check_items(items, 8).tolist())
  replay.write_priorities(keys, np.full(len(keys), 2.0))
  batches += 1
replay.close()
print("sampled", batches, "batches of", sorted(ids))
"""


def test_two_actor_processes_and_a_learner_process_share_a_standalone_server():
  requires_reverb()
  server, lines, address = start_server("--max_size=1000", "--min_size=4",
                                        "--table=replay")
  procs = []
  try:
    # Clients go once the server serves: started sooner, they would connect later, after
    # gRPC's backoff between attempts.
    wait_for_address(lines, address)
    for program, args in ((ACTOR, ["1"]), (ACTOR, ["2"]), (LEARNER, [])):
      procs.append(subprocess.Popen([sys.executable, "-c", program, address, *args],
                                    cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outputs):
      assert p.returncode == 0, err[-3000:]
    assert outputs[0][0].strip() == outputs[1][0].strip() == "inserted 30"
    assert outputs[2][0].startswith("sampled 5 batches of")

    client = join(address, timeout=5.0)
    info = client.info()
    assert (info["replay_size"], info["replay_inserts"], info["replay_samples"]) == (
        60, 60, 40), info
    items, _, probabilities, _ = client.sample_batch(60)
    ids = set(check_items(items, 60).tolist())
    assert any(i // 1000 == 1 for i in ids) and any(i // 1000 == 2 for i in ids)
    assert np.all(probabilities > 0)
    client.close()

    server.send_signal(signal.SIGINT)  # Ctrl-C: a clean exit
    assert server.wait(20) == 0
    assert "stopped" in lines.get(timeout=5)
  finally:
    for p in procs + [server]:
      stop(p)


def test_a_killed_server_raises_replay_unavailable_within_the_timeout():
  requires_reverb()
  server, lines, address = start_server("--min_size=1")
  timeout = 1.0
  try:
    wait_for_address(lines, address)
    replay = join(address, timeout)
    replay.insert(make_items(range(4)))
    _, keys, _, _ = replay.sample_batch()
    server.kill()
    server.wait(10)
    calls = dict(sample_batch=replay.sample_batch,
                 insert=lambda: replay.insert(make_items([5])),
                 write_priorities=lambda: replay.write_priorities(keys, np.ones(len(keys))))
    for name, call in calls.items():
      start = time.perf_counter()
      with pytest.raises(ReplayUnavailableError, match=rf"{address}.*{name}"):
        call()
      elapsed = time.perf_counter() - start
      assert elapsed < 2 * timeout, (name, elapsed)
  finally:
    stop(server)
