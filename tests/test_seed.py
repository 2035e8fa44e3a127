"""The SEED runtime: transport, inference server, workers, faults and learning."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import pytest

from agents.impala import config as impala_config
from agents.ppo import config as ppo_config
from agents.r2d2 import config as r2d2_config
from podracer import __version__, builder, testing, trajectories, worker
from podracer.config import presets
from podracer.distributed import transport
from podracer.errors import ConfigError
from podracer.logs.metrics import MetricsLogger
from podracer.runtimes.host.params import ParamsStore, first_replica
from podracer.runtimes.seed.server import InferenceServer, Seats
from podracer.types import StepType, Trajectory
from tests.test_launch import launch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def one_device(config):
  config.topology.actor_devices = (0,)
  config.topology.learner_devices = (0,)
  return config


# -- transport -----------------------------------------------------------------------


@pytest.mark.reverb_lane
def test_layouts_round_trip_every_dtype_and_shape_as_raw_bytes():
  rng = np.random.default_rng(0)
  arrays = [rng.integers(0, 255, (16, 4, 84, 84)).astype(np.uint8),
            rng.standard_normal((16, 4)).astype(np.float32),
            rng.standard_normal((3,)).astype(np.float64),
            rng.integers(-5, 5, (16,)).astype(np.int32), np.array([True, False]),
            rng.integers(0, 9, (2, 3)).astype(np.int64)]
  layout = transport.Layout([(a.shape, a.dtype.str) for a in arrays])
  again = transport.Layout(json.loads(json.dumps(layout.to_json())))
  payload = layout.pack(arrays)
  assert len(payload) == layout.nbytes == sum(a.nbytes for a in arrays)
  for a, b in zip(arrays, again.unpack(payload)):
    assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
  with pytest.raises(transport.TransportError, match="bytes where its layout has"):
    layout.unpack(payload[:-1])
  with pytest.raises(transport.TransportError, match="where the layout has"):
    layout.pack([a.astype(np.float32) for a in arrays])


def test_nothing_received_is_unpickled():
  for module in ("podracer/distributed/transport.py", "podracer/worker.py",
                 "podracer/runtimes/seed/server.py"):
    code = (ROOT / module).read_text()
    assert not re.search(r"import pickle|pickle\.|cloudpickle|np\.load|allow_pickle", code)


class Echo(transport.Session):
  closed_with = []

  def handle(self, kind, payload):
    if kind != transport.STEP:
      raise transport.TransportError("only STEP")
    return transport.ACTION, payload[::-1]

  def closed(self, error):
    Echo.closed_with.append(error)


@pytest.mark.reverb_lane
@pytest.mark.parametrize("kind", ["unix", "grpc"])
def test_a_malformed_message_closes_that_stream_only(kind):
  Echo.closed_with = []
  listener = transport.Listener("localhost", 0, lambda peer: Echo(), unix=kind == "unix",
                                max_sessions=4)
  try:
    good = transport.connect(listener.address, kind, timeout=10)
    assert good.request(transport.STEP, b"abc") == (transport.ACTION, b"cba")
    bad = transport.connect(listener.address, kind, timeout=10)
    if kind == "unix":  # A frame of an unknown kind.
      bad.sock.sendall(b"\x63\x03\x00\x00\x00abc")
      with pytest.raises(transport.TransportError):
        bad.recv()
    else:
      with pytest.raises(transport.TransportError):
        bad.request(transport.HELLO, b"{}")
    assert good.request(transport.STEP, b"xyz") == (transport.ACTION, b"zyx")
    deadline = time.monotonic() + 5
    while not Echo.closed_with and time.monotonic() < deadline:
      time.sleep(0.05)
    assert Echo.closed_with and Echo.closed_with[0], Echo.closed_with
    good.close()
    bad.close()
  finally:
    listener.close()


def test_a_worker_with_no_server_gives_up_after_its_connect_timeout():
  port = _free_port()
  start = time.monotonic()
  result = subprocess.run([sys.executable, "-m", "podracer.worker",
                           f"--server=localhost:{port}", "--connect_timeout=2"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert result.returncode == 1
  assert f"no podracer server at localhost:{port} after 2 s" in result.stderr
  assert "Traceback" not in result.stderr
  assert time.monotonic() - start < 60


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


# -- the inference server, with in-process workers ---------------------------------


class FakeChannel:
  """Keeps what the server puts into the channel for experience."""

  def __init__(self):
    self.batches = []

  def takes_streams(self):
    return False

  def put(self, trajectory, batch, stop, stream=None):
    assert stream is None  # The queue's form: a learner batch's trajectories joined.
    self.batches.append((trajectory, batch))
    return 0.0


class DirectConnection:
  """A worker's connection that calls the session itself; BYE after `steps` steps."""

  def __init__(self, session, steps):
    self.session, self.steps = session, steps
    self.sent, self.actions = [], []

  def request(self, kind, payload=b""):
    if kind == transport.STEP:
      if len(self.sent) == self.steps:
        return transport.BYE, b""
      self.sent.append(payload)
    reply = self.session.handle(kind, payload)
    if reply[0] == transport.ACTION:
      self.actions.append(reply[1])
    return reply


def make_server(config, num_workers, envs_per_worker=4, workers_per_batch=1,
                batch_workers=1, max_policy_lag=None):
  config.runtime.update(dict(num_local_workers=0, num_workers=num_workers,
                             envs_per_worker=envs_per_worker,
                             envs_per_batch=envs_per_worker * workers_per_batch))
  runtime = builder.build(one_device(config)).runtime
  store = ParamsStore(runtime.actor_places)
  store.push(first_replica(runtime._start_learner()[0]), 0)
  welcome = runtime._welcome()
  output = FakeChannel()
  server = InferenceServer(
      runtime.agent, runtime.actor_places, store, output,
      Seats(workers_per_batch, 0), num_workers=num_workers,
      envs_per_worker=envs_per_worker, rollout_length=config.runtime.rollout_length,
      batch_size=batch_workers * envs_per_worker, timeout_ms=None,
      max_policy_lag=max_policy_lag, welcome=welcome, step_layout=runtime.step_layout(),
      action_layout=transport.Layout(welcome["action"]), seed=0, worker_timeout=30.0)
  return server, output, runtime


def run_worker(server, steps, seed=0, episode_length=7):
  """A worker on a fake environment for `steps` steps; (connection, layout)."""
  session = server.new_session("test")
  conn = DirectConnection(session, steps)
  kind, _ = conn.request(transport.HELLO, transport.encode_json(dict(
      version=__version__)))
  assert kind == transport.CONFIG
  env = testing.FakeHostEnvironment(testing.fake_spec((4,), 2), num_envs=server.envs_per_worker,
                                    seed=seed, episode_length=episode_length)
  timestep, _ = env.reset()
  layout = transport.Layout([(a.shape, a.dtype.str)
                             for a in worker.step_arrays(timestep, np.zeros(5))])
  assert conn.request(transport.SPEC, transport.encode_json(dict(
      step=layout.to_json())))[0] == transport.OK
  worker._loop(conn, env, timestep, layout, server.action_layout)
  session.closed(None)  # As the transport does when the connection ends.
  return conn, layout, session


def run_workers(server, steps, seeds):
  """Workers in threads of their own, one per seed; their run_worker results."""
  results = [None] * len(seeds)

  def one(i):
    results[i] = run_worker(server, steps, seed=seeds[i])
  threads_ = [threading.Thread(target=one, args=(i,)) for i in range(len(seeds))]
  for t in threads_:
    t.start()
  for t in threads_:
    t.join(60)
  return results


def expected_trajectories(server, conn, layout, overlap):
  """What trajectories.first_entries / extend give for the worker's timesteps/actions."""
  entries = []
  for payload, action in zip(conn.sent, conn.actions):
    arrays = layout.unpack(payload)
    entries.append(Trajectory(server._timestep(arrays), (),
                              server.action_layout.unpack(action)[0], ()))
  out, t = [], server.rollout_length
  start = trajectories.first_entries(entries[0], overlap)
  rest = entries[1:]
  while len(rest) >= t:
    new = trajectories.stack(rest[:t])
    trajectory = trajectories.extend(start, new)
    out.append(jax.tree.map(np.asarray, trajectory))
    start = trajectories.last_entries(trajectory, overlap)
    rest = rest[t:]
  return out


def _serve(server):
  stop = threading.Event()
  thread = threading.Thread(target=server.loop, args=(0, stop), daemon=True)
  thread.start()
  return stop, thread


@pytest.mark.reverb_lane
@pytest.mark.parametrize("name", ["ppo", "r2d2"])
def test_each_slots_trajectories_are_what_first_entries_and_extend_give(name):
  config = (ppo_config.cartpole_seed() if name == "ppo" else r2d2_config.cartpole_seed())
  config.runtime.rollout_length = 5
  if name == "r2d2":
    config.replay.name = "host"
  server, output, runtime = make_server(config, num_workers=2, batch_workers=2)
  overlap = runtime.agent.trajectory_overlap
  assert overlap == (1 if name == "ppo" else config.agent.burn_in + config.agent.n_step)
  stop, thread = _serve(server)
  try:
    workers = run_workers(server, 23, seeds=(0, 1))
    # A reconnect: a new worker on a freed seat starts with padding and fresh state.
    again = run_worker(server, 12, seed=5)
  finally:
    stop.set()
    thread.join(10)
  got = [jax.tree.map(np.asarray, b[0]) for b in output.batches]
  assert all(b[1].env_steps == 5 * 4 for b in output.batches)
  wanted = [(conn, layout) for conn, layout, _ in workers] + [again[:2]]
  expected = [e for conn, layout in wanted
              for e in expected_trajectories(server, conn, layout, overlap)]
  assert len(got) == len(expected) == 4 + 4 + 2  # partial rollouts never delivered
  for e in expected:
    same = [g for g in got if all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves((g.timestep, g.action)), jax.tree.leaves((e.timestep, e.action))))]
    assert same, "a worker's trajectory was not delivered as assembled"
  # The reconnected worker's first trajectory: K-1 padding entries (LAST, no reward).
  first = expected[-2]
  if overlap > 1:
    assert np.all(first.timestep.step_type[:overlap - 1] == StepType.LAST)
    assert np.all(first.timestep.reward[:overlap - 1] == 0)
  # Padded rows never reach a trajectory: every delivered one is a worker's own (above),
  # though the reconnected worker, alone, was acted on in half-padded calls.
  fills = [b[1].actor_times["inference_fill"] for b in output.batches
           if "inference_fill" in b[1].actor_times]
  assert min(fills) == 0.5


def test_r2d2_states_follow_the_environment_whatever_batch_its_steps_arrive_in():
  """The LSTM state of each slot is the same with one worker per inference call and two,
  and a reconnecting worker's slots start from init_actor's values."""
  states = {}
  for batch_workers in (1, 2):
    config = r2d2_config.cartpole_seed()
    config.replay.name = "host"
    config.runtime.rollout_length = 4
    server, output, runtime = make_server(config, num_workers=2,
                                          batch_workers=batch_workers)
    stop, thread = _serve(server)
    try:
      run_workers(server, 13, seeds=(0, 1))
    finally:
      stop.set()
      thread.join(10)
    lstm = jax.tree.leaves(jax.device_get(server.steps[0].states.core))
    states[batch_workers] = [np.asarray(x)[:8] for x in lstm]
  for a, b in zip(states[1], states[2]):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.reverb_lane
def test_the_inference_step_compiles_once_whatever_the_fill():
  config = ppo_config.cartpole_seed()
  config.runtime.rollout_length = 3
  server, output, _ = make_server(config, num_workers=3, batch_workers=2)
  stop, thread = _serve(server)
  try:
    run_workers(server, 9, seeds=(0,))  # alone: every call is half full (padded)
    run_workers(server, 9, seeds=(1, 2))
  finally:
    stop.set()
    thread.join(10)
  assert server.steps[0]._step._cache_size() == 1
  assert len(output.batches) == 3 * 2  # 1 + 8 steps: two rollouts of 3 per worker


def test_a_spec_that_differs_from_the_runs_is_refused_naming_both():
  server, _, _ = make_server(ppo_config.cartpole_seed(), num_workers=1)
  session = server.new_session("test")
  kind, _ = session.handle(transport.HELLO, transport.encode_json(dict(
      version=__version__)))
  assert kind == transport.CONFIG
  wrong = transport.Layout([((4,), "<i4"), ((4,), "<f4"), ((4,), "<f4"),
                            ((4, 84, 84), "|u1"), ((5,), "<f8")])
  kind, payload = session.handle(transport.SPEC, transport.encode_json(dict(
      step=wrong.to_json())))
  message = transport.decode_json(payload)["message"]
  assert kind == transport.REFUSE
  assert "uint8[4, 84, 84]" in message and "float32[4, 4]" in message
  other = server.new_session("late")
  kind, payload = other.handle(transport.HELLO, transport.encode_json(dict(version="0.0")))
  assert kind == transport.REFUSE and "podracer 0.0" in payload.decode()


def test_a_silent_worker_is_dropped_after_worker_timeout():
  server, _, _ = make_server(ppo_config.cartpole_seed(), num_workers=1)
  server.worker_timeout = 0.2
  session = server.new_session("silent")
  session.handle(transport.HELLO, transport.encode_json(dict(
      version=__version__)))
  layout = server.step_layout
  session.handle(transport.SPEC, transport.encode_json(dict(step=layout.to_json())))
  aborted = []
  session.abort = lambda: (aborted.append(True), session.closed("connection closed"))
  assert server.workers_alive == 1
  time.sleep(0.3)
  server.drop_silent()
  assert aborted and server.workers_alive == 0
  assert "sent nothing for" in server.failures[-1]


# -- bad input -------------------------------------------------------------------------


def _build(**runtime):
  config = one_device(ppo_config.cartpole_seed())
  config.runtime.update(runtime)
  return builder.build(config)


@pytest.mark.parametrize("runtime,words", [
    (dict(envs_per_batch=24), "runtime.envs_per_batch` (24) must be a multiple"),
    (dict(inference_batch_size=24), "runtime.inference_batch_size` (24) must be a multiple"),
    (dict(inference_batch_size=128), "larger than all 64 environments"),
    (dict(address="localhost"), "an address is HOST:PORT"),
    (dict(address="192.0.2.7:5000"), "not an address of this machine"),
    (dict(transport="unix", address="192.0.2.7:5000"), "only reaches workers of this host"),
    (dict(num_local_workers=0), "runtime.num_workers` must say"),
])
def test_bad_seed_options_are_refused_at_build(runtime, words):
  with pytest.raises(ConfigError, match=re.escape(words)):
    _build(**runtime)


def test_a_taken_port_and_a_jax_environment_exit_2_with_one_paragraph(tmp_path):
  with socket.socket() as taken:
    taken.bind(("localhost", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    result = launch("--config=agents/ppo/config.py:cartpole_seed",
                    f"--config.runtime.address=localhost:{port}", f"--workdir={tmp_path}")
  assert result.returncode == 2, result.stderr
  assert f"port {port} is taken" in result.stderr and "Traceback" not in result.stderr
  with pytest.raises(ConfigError, match="anakin"):
    config = one_device(ppo_config.cartpole_seed())
    config.env = ppo_config.cartpole_anakin().env
    builder.build(config)


# -- whole runs ----------------------------------------------------------------------


def run_in_process(config, workdir=None):
  experiment = builder.build(one_device(config))
  logger = MetricsLogger(workdir, stream=None, stop_at_return=config.get("stop_at_return"))
  experiment.runtime.train(logger)
  return logger.records


_EARLIER_WORKERS = set()  # Worker processes that were alive before the running test.


def _all_worker_processes():
  """This test session's worker processes: those that inherited its PODRACER_TEST_SESSION
  (tests/conftest.py), not a user's SEED job or another lane's tests on the machine."""
  out = subprocess.run(["pgrep", "-f", "podracer.worker"], capture_output=True, text=True)
  tag = f"PODRACER_TEST_SESSION={os.environ['PODRACER_TEST_SESSION']}".encode()
  mine = []
  for pid in map(int, out.stdout.split()):
    try:
      if tag in pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        mine.append(pid)
    except OSError:  # Ended since pgrep listed it.
      continue
  return mine


def worker_processes():
  """The worker processes the running test started and that are still alive."""
  return [p for p in _all_worker_processes() if p not in _EARLIER_WORKERS]


@pytest.fixture(autouse=True)
def _kill_stray_workers():
  """A failing test's workers are killed after it, so they cannot fail the next."""
  _EARLIER_WORKERS.clear()
  _EARLIER_WORKERS.update(_all_worker_processes())
  yield
  for pid in worker_processes():
    try:
      os.kill(pid, signal.SIGKILL)
    except OSError:
      pass


@pytest.mark.slow
def test_a_short_ppo_run_keeps_its_policy_lag_and_its_workers_end_with_it():
  """The mechanism PPO's SEED learning rests on: every learner batch within the config's
  policy lag of 1, the workers' rollouts learned from (finite losses), the inference
  server's records, and no worker left when the run ends. How well a run learns
  depends on the workers' timing, so its figure is `benchmarks/draws.py`'s
  (docs/seed.md), not this test's."""
  config = ppo_config.cartpole_seed()
  assert config.seed == 0 and config.runtime.max_policy_lag == 1
  config.total_env_steps = 40_960
  config.runtime.log_interval = 0.0  # a record per batch
  records = run_in_process(config)
  assert records[-1]["env_steps"] >= 40_960
  learned = [r for r in records if "policy_loss" in r]
  assert len(learned) >= 10 and all(np.isfinite(r["policy_loss"]) for r in learned)
  assert max(r["policy_lag_max"] for r in records if "policy_lag_max" in r) <= 1
  assert all(0 < r["inference_fill"] <= 1 for r in records if "inference_fill" in r)
  assert worker_processes() == []


@pytest.mark.slow
@pytest.mark.reverb_lane
def test_r2d2_seed_inserts_the_workers_sequences_into_the_lanes_replay_and_learns():
  """With the lane's replay (`host`; Reverb in the reverb lane), the server inserts each
  worker's sequences and the learner samples them: the replay fills, the learner
  samples at a rate, its losses are finite and its sampled items' ages are within the
  replay. (The learner samples while the workers step, so no two runs are the same:
  the learning figure is `benchmarks/draws.py`'s, docs/seed.md.)"""
  config = r2d2_config.cartpole_seed()
  config.replay.name = presets.lane_replay()
  config.total_env_steps = 30_000
  records = run_in_process(config)
  learned = [r for r in records if r.get("learning", 0) > 0]
  assert learned and all(np.isfinite(r["loss"]) for r in learned)
  assert max(r.get("replay_samples_per_s", 0.0) for r in records) > 0
  assert max(r["replay_size"] for r in records if "replay_size" in r) > 0
  capacity = config.replay.max_size * config.runtime.rollout_length
  assert all(0 < r["sampled_age"] <= capacity for r in learned[1:])
  assert worker_processes() == []


@pytest.mark.slow
def test_a_killed_local_worker_is_replaced_and_the_run_goes_on(tmp_path, capsys):
  config = impala_config.cartpole_seed()
  config.total_env_steps = 600_000
  config.runtime.worker_timeout = 10.0
  killed = []

  def kill_one():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
      if (tmp_path / "metrics.jsonl").exists() and len(
          (tmp_path / "metrics.jsonl").read_text().splitlines()) >= 3:
        pids = worker_processes()
        if pids:
          os.kill(pids[0], signal.SIGKILL)
          killed.append(pids[0])
          return
      time.sleep(0.2)

  killer = threading.Thread(target=kill_one)
  killer.start()
  records = run_in_process(config, str(tmp_path))
  killer.join()
  assert killed
  alive = [r["workers_alive"] for r in records if "workers_alive" in r]
  restarts = [r["worker_restarts"] for r in records if "worker_restarts" in r]
  assert min(alive) < 4 and alive[-1] == 4, alive
  assert max(restarts) >= 1
  assert records[-1]["env_steps"] >= 600_000
  said = capsys.readouterr().err  # The run's log names the worker and its signal.
  assert re.search(r"local worker \d was killed by SIGKILL; the end of .*worker_\d\.log",
                   said), said
  assert worker_processes() == []


@pytest.mark.slow
def test_workers_started_by_hand_join_a_run_and_exit_0_when_it_ends(tmp_path):
  port = _free_port()
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  run = subprocess.Popen(
      [sys.executable, "-m", "podracer.launch", "--config=agents/ppo/config.py:cartpole_seed",
       "--config.runtime.num_local_workers=0", "--config.runtime.num_workers=2",
       f"--config.runtime.address=127.0.0.2:{port}", "--config.total_env_steps=100000",
       f"--workdir={tmp_path}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  log = tmp_path / "workers.log"  # A file, not a pipe that nobody reads while the run runs.
  with open(log, "w") as out:
    workers = subprocess.Popen(
        [sys.executable, "-m", "podracer.worker", f"--server=127.0.0.2:{port}",
         "--num_workers=2"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
  _, stderr = run.communicate(timeout=240)
  assert run.returncode == 0, stderr
  assert f"--server=127.0.0.2:{port}" in stderr
  assert (tmp_path / "seed_address").read_text().strip() == f"127.0.0.2:{port}"
  try:
    workers.wait(timeout=10)
  except subprocess.TimeoutExpired:
    pytest.fail(f"the workers outlived the run by 10 s; they said: {log.read_text()}")
  assert workers.returncode == 0, log.read_text()
  records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert records[-1]["env_steps"] >= 100_000


@pytest.mark.slow
def test_local_workers_slower_to_start_than_worker_timeout_are_waited_for(tmp_path,
                                                                          monkeypatch):
  """A local worker's start (imports, connecting: seconds on a busy machine) is not a
  silence: here each worker process sleeps 4 s before it starts, with
  `worker_timeout=1`, and the run still goes to its end. Its bound is the worker's own
  connect timeout (60 s), after which it exits and is restarted or reported."""
  hook = tmp_path / "hook"
  hook.mkdir()
  (hook / "sitecustomize.py").write_text(  # Only in the worker processes (their flag).
      "import sys, time\n"
      "if any(a.startswith('--connect_timeout') for a in sys.argv):\n"
      "  time.sleep(4)\n")
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
      filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
  config = ppo_config.cartpole_seed()
  config.total_env_steps = 20_000
  config.runtime.worker_timeout = 1.0
  records = run_in_process(config, str(tmp_path / "run"))
  assert records[-1]["env_steps"] >= 20_000
  assert worker_processes() == []


@pytest.mark.slow
def test_a_run_no_worker_joins_stops_with_the_command_that_starts_one(tmp_path):
  result = launch("--config=agents/ppo/config.py:cartpole_seed",
                  "--config.runtime.num_local_workers=0", "--config.runtime.num_workers=1",
                  "--config.runtime.worker_timeout=2", f"--workdir={tmp_path}")
  assert result.returncode == 1, result.stderr
  assert "no SEED worker was alive for 2 s" in result.stderr
  assert "python -m podracer.worker --server=localhost:" in result.stderr
  assert "Traceback" not in result.stderr


def _start_long_run(tmp_path, *extra):
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  process = subprocess.Popen(
      [sys.executable, "-m", "podracer.launch", "--config=agents/ppo/config.py:cartpole_seed",
       "--config.total_env_steps=100000000", f"--workdir={tmp_path}", *extra], cwd=ROOT,
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  metrics = tmp_path / "metrics.jsonl"
  deadline = time.monotonic() + 120
  while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
    assert process.poll() is None and time.monotonic() < deadline, process.communicate()
    time.sleep(0.2)
  return process


@pytest.mark.slow
def test_sigterm_stops_the_run_and_its_workers_with_a_checkpoint(tmp_path):
  process = _start_long_run(tmp_path)
  assert len(worker_processes()) == ppo_config.cartpole_seed().runtime.num_local_workers
  sent = time.monotonic()
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=60)
  assert process.returncode == 143, stderr
  assert time.monotonic() - sent < 15
  assert any((tmp_path / "checkpoints").iterdir())
  assert worker_processes() == []
  assert "Traceback" not in stderr


@pytest.mark.slow
def test_workers_lose_a_killed_server_within_10_s(tmp_path):
  process = _start_long_run(tmp_path)
  pids = worker_processes()
  assert len(pids) == ppo_config.cartpole_seed().runtime.num_local_workers
  process.kill()
  process.communicate()
  killed = time.monotonic()
  while worker_processes() and time.monotonic() - killed < 10:
    time.sleep(0.1)
  assert worker_processes() == []
  logs = [(tmp_path / "workers" / f"worker_{i}.log").read_text() for i in range(len(pids))]
  assert all("lost the podracer server at localhost:" in log for log in logs), logs


@pytest.mark.slow
def test_a_failing_inference_thread_stops_the_run_with_its_traceback(tmp_path):
  result = launch("--config=agents/ppo/config.py:cartpole_seed",
                  "--config.runtime.inject_failure=inference", f"--workdir={tmp_path}")
  assert result.returncode == 1, result.stderr
  assert re.search(r"RuntimeError: injected inference failure", result.stderr)
  assert worker_processes() == []
