"""SEED lets no one in and one bad worker cannot stop it: the shared secret's challenge,
TLS, messages sized by the handshake, steps checked at the door (and Sebulba's
environments' steps), a NaN worker and a fuzzer beside real workers."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import stat
import subprocess
import threading
import time

import numpy as np
import pytest

from agents.ppo import config as ppo_config
from podracer import __version__, builder, registry, testing, worker
from podracer.distributed import auth, transport
from podracer.errors import ConfigError, EnvironmentStepError
from podracer.logs.metrics import MetricsLogger
from podracer.runtimes import door
from podracer.runtimes.seed import session as seed_session
from podracer.types import TimeStep
from tests import seed_peers
from tests.learning import last_fifth_means
from tests.test_launch import launch
from tests.test_seed import (  # noqa: F401
    DirectConnection, _kill_stray_workers, make_server, one_device)

SECRET = b"0123456789abcdef0123456789abcdef"


def _hello(session):
  return session.handle(transport.HELLO, transport.encode_json(dict(version=__version__)))


def _secured_server(num_workers=1):
  server, _, _ = make_server(ppo_config.cartpole_seed(), num_workers=num_workers)
  server.secret = SECRET
  return server


# -- the challenge ---------------------------------------------------------------------

def test_the_right_secret_joins_and_the_secret_never_crosses_the_wire():
  server = _secured_server()
  session = server.new_session("good")
  kind, nonce = _hello(session)
  assert kind == transport.CHALLENGE and len(nonce) == auth.NONCE_BYTES
  reply = auth.answer(SECRET, nonce)
  assert SECRET not in reply and len(reply) == 32
  kind, payload = session.handle(transport.AUTH, reply)
  assert kind == transport.CONFIG and transport.decode_json(payload)["seat"] == 0
  assert server.failures == []


@pytest.mark.parametrize("case", ["wrong secret", "no answer", "replayed answer"])
def test_a_peer_without_the_secret_is_refused_in_one_line_with_no_config_and_no_slot(case):
  server = _secured_server()
  if case == "replayed answer":  # An answer seen on the wire, for another connection.
    first = server.new_session("watched")
    _, old_nonce = _hello(first)
    seen = auth.answer(SECRET, old_nonce)
    assert first.handle(transport.AUTH, seen)[0] == transport.CONFIG
    first.closed(None)
  session = server.new_session("intruder")
  kind, nonce = _hello(session)
  assert kind == transport.CHALLENGE
  if case == "no answer":
    with pytest.raises(transport.TransportError, match="unexpected SPEC"):
      session.handle(transport.SPEC, b"{}")  # Skipping the answer is not joining.
    session.closed("unexpected SPEC message")
  else:
    answer = seen if case == "replayed answer" else auth.answer(b"x" * 32, nonce)
    kind, payload = session.handle(transport.AUTH, answer)
    assert kind == transport.REFUSE and b"env" not in payload and b"seed" not in payload
    assert "does not prove the run's secret" in transport.decode_json(payload)["message"]
    with pytest.raises(transport.TransportError):  # One answer per challenge.
      session.handle(transport.AUTH, auth.answer(SECRET, nonce))
    session.closed(None)
  assert server.sessions == {} and server.handshaking == {}
  assert len(server.failures) == 1 and "\n" not in server.failures[0]
  assert server.failures[0].startswith("refused a connection from intruder")


def test_a_worker_with_no_secret_says_how_to_give_one():
  server = _secured_server()
  conn = DirectConnection(server.new_session("worker"), steps=0)
  with pytest.raises(worker.Refused, match="--secret_file=FILE or \\$PODRACER_SEED_SECRET"):
    worker.handshake(conn, None)
  again = DirectConnection(server.new_session("worker 2"), steps=0)
  assert worker.handshake(again, SECRET)["seat"] == 0


def test_connections_in_their_handshake_are_capped_and_time_out():
  server = _secured_server()
  sessions = [server.new_session(f"peer {i}") for i in range(seed_session.MAX_HANDSHAKES)]
  with pytest.raises(transport.TransportError, match="too many connections"):
    server.new_session("one more")
  aborted = []
  for s in sessions:
    s.abort = lambda s=s: (aborted.append(s), s.closed("connection closed"))
    s.last_seen -= seed_session.HANDSHAKE_S + 1
  server.drop_silent()
  assert len(aborted) == seed_session.MAX_HANDSHAKES and server.handshaking == {}
  assert "did not join within 10 s" in server.failures[-1]
  server.new_session("room again")


def test_non_loopback_without_a_secret_exits_2_unless_allowed(tmp_path, monkeypatch):
  monkeypatch.delenv(auth.SECRET_ENV, raising=False)
  result = launch("--config=agents/ppo/config.py:cartpole_seed",
                  "--config.runtime.address=0.0.0.0:0", f"--workdir={tmp_path}")
  said = " ".join(result.stderr.split())
  assert result.returncode == 2 and "Traceback" not in said
  assert "is not a loopback address, and the run has no secret" in said
  assert "secrets.token_hex(32)" in said and "allow_unauthenticated=True" in said
  config = one_device(ppo_config.cartpole_seed())
  config.runtime.address = "0.0.0.0:0"
  config.runtime.allow_unauthenticated = True
  runtime = builder.build(config).runtime
  assert runtime.secret is None and not runtime.own_secret
  config.runtime.allow_unauthenticated = False
  short = tmp_path / "short"
  short.write_text("abc\n")
  config.runtime.secret_file = str(short)
  with pytest.raises(ConfigError, match=r"runtime.secret_file` is unusable: the secret .* "
                     r"has 3 bytes"):
    builder.build(config)
  (tmp_path / "good").write_bytes(SECRET + b"\n")
  config.runtime.secret_file = str(tmp_path / "good")
  assert builder.build(config).runtime.secret == SECRET


def test_the_unix_socket_and_the_runs_own_secret_only_its_user_can_open():
  listener = transport.Listener("localhost", 0, lambda peer: transport.Session(),
                                unix=True, max_sessions=1)
  try:
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)
    assert mode(os.path.dirname(listener.path)) == 0o700
    assert mode(listener.path) == 0o600
    path = auth.secret_path("localhost", listener.port)
    auth.write_private(path, SECRET)
    assert mode(path) == 0o600
    assert auth.local_secret("localhost", listener.port) == SECRET
    os.unlink(path)
  finally:
    listener.close()


# -- messages sized by the agreement ---------------------------------------------------

@pytest.mark.parametrize("kind", ["unix", "grpc"])
def test_a_message_over_what_the_handshake_allows_ends_the_connection(kind):
  server = _secured_server()
  # gRPC reads whole messages: it is told the largest (here 2 handshake messages).
  listener = transport.Listener("localhost", 0, server.new_session, unix=kind == "unix",
                                max_sessions=2, max_message=2 * transport.SMALL_MESSAGE)

  def failure(n):
    deadline = time.monotonic() + 5
    while len(server.failures) < n and time.monotonic() < deadline:
      time.sleep(0.05)
    return server.failures[n - 1]
  try:
    conn = transport.connect(listener.address, kind, timeout=10)
    if kind == "unix":  # Announces 1 GiB: refused on the header, nothing buffered.
      conn.sock.sendall(bytes([transport.HELLO]) + (1 << 30).to_bytes(4, "little"))
      with pytest.raises(transport.TransportError):
        conn.recv()
      assert "a HELLO message of 1073741824 bytes, over the 65536" in failure(1)
    else:
      with pytest.raises(transport.TransportError):
        conn.request(transport.HELLO, b" " * (transport.SMALL_MESSAGE + 1))
      assert "a message of 65537 bytes, over the 65536" in failure(1)
      again = transport.connect(listener.address, kind, timeout=10)
      with pytest.raises(transport.TransportError):  # Over what gRPC reads at all.
        again.request(transport.HELLO, b" " * (3 * transport.SMALL_MESSAGE))
      assert "its gRPC stream ended: it closed it, or sent a message over 131072" in failure(2)
  finally:
    listener.close()


# -- data checked at the door ---------------------------------------------------------

def _good(envs=4):
  return [np.ones(envs, np.int32), np.zeros(envs, np.float32), np.ones(envs, np.float32),
          np.zeros((envs, 4), np.float32)]


@pytest.mark.parametrize("field, index, value, words", [
    ("reward", 1, np.nan, "a non-finite reward (nan) from environment 2"),
    ("discount", 2, 1.5, "a discount of 1.5 from environment 2 (outside [0, 1])"),
    ("discount", 2, np.inf, "a non-finite discount (inf) from environment 2"),
    ("step type", 0, 7, "a step type of 7 from environment 2 (FIRST, MID and LAST are 0, 1 and 2)"),
    ("observation", 3, -np.inf, "a non-finite observation (-inf) from environment 2"),
])
def test_each_bad_field_is_named_with_its_environment_and_value(field, index, value, words):
  arrays = _good()
  assert door.step_problem(*arrays[:3], arrays[3:]) is None
  arrays[index] = arrays[index].copy()
  arrays[index][2] = value
  assert door.step_problem(*arrays[:3], arrays[3:]) == words, field
  frames = np.full((4, 84, 84), 255, np.uint8)  # Integer frames: nothing to check.
  assert door.step_problem(*_good()[:3], [frames]) is None
  assert "negative" in door.statistics_problem(np.array([-1.0, 0, 0, 0, 0]))
  assert "non-finite" in door.statistics_problem(np.array([1.0, np.nan, 9, 0, 0]))
  assert door.statistics_problem(np.array([2.0, -40.0, 9, 0.1, 0.2])) is None


def test_a_bad_step_drops_its_worker_before_it_reaches_a_device_and_frees_its_seat():
  server, _, _ = make_server(ppo_config.cartpole_seed(), num_workers=1)
  session = server.new_session("peer-nan")
  assert _hello(session)[0] == transport.CONFIG
  layout = server.step_layout
  session.handle(transport.SPEC, transport.encode_json(dict(step=layout.to_json())))
  envs = server.envs_per_worker
  bad = [np.zeros(envs, np.int32), np.full(envs, np.nan, np.float32),
         np.ones(envs, np.float32), np.zeros((envs, 4), np.float32), np.zeros(5)]
  kind, payload = session.handle(transport.STEP, layout.pack(bad))
  assert kind == transport.REFUSE
  assert server.requests[0].qsize() == 0  # Nothing for the inference thread.
  session.closed(None)  # The transport ends the connection after a REFUSE.
  assert server.failures == ["worker peer-nan (seat 0) was dropped: it sent a non-finite "
                             "reward (nan) from environment 0"]
  assert server.dropped == 1 and server.sessions == {}
  assert "non-finite reward" in transport.decode_json(payload)["message"]


def test_sebulba_stops_naming_the_environment_that_stepped_nan():
  from podracer.runtimes.sebulba.actor import _Groups  # pylint: disable=import-outside-toplevel
  groups = _Groups.__new__(_Groups)
  groups.actor = type("A", (), dict(index=1, num_envs=8))()
  groups.envs = [None, None]
  reward = np.zeros(4, np.float32)
  observation = {"x": np.zeros((4, 3), np.float32), "frame": np.zeros((4, 2), np.uint8)}
  groups.check(1, TimeStep(np.ones(4, np.int32), reward, np.ones(4, np.float32),
                           observation))
  observation["x"][3, 1] = np.nan
  with pytest.raises(EnvironmentStepError, match=re.escape(
      "actor 1's environments 4-7 (group 1) stepped a non-finite observation leaf 1 (nan) "
      "from environment 3 of the group")):
    groups.check(1, TimeStep(np.ones(4, np.int32), reward, np.ones(4, np.float32),
                             observation))


# -- whole runs -------------------------------------------------------------------------

def _certificate(directory: pathlib.Path):
  """A self-signed certificate for localhost, made here: (cert, key) paths."""
  cert, key = directory / "cert.pem", directory / "key.pem"
  assert shutil.which("openssl"), "the TLS test makes its certificate with openssl"
  subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                  "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                  "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
  return cert, key


@pytest.mark.slow
def test_tls_workers_with_a_secret_train_and_the_secret_is_nowhere_in_the_workdir(tmp_path):
  cert, key = _certificate(tmp_path)
  secret = "s3cr3t-" + os.urandom(16).hex()
  (tmp_path / "seed.secret").write_text(secret + "\n")
  workdir = tmp_path / "run"
  result = launch("--config=agents/ppo/config.py:cartpole_seed",
                  "--config.runtime.transport=grpc", "--config.total_env_steps=20000",
                  f"--config.runtime.tls_cert={cert}", f"--config.runtime.tls_key={key}",
                  f"--config.runtime.secret_file={tmp_path / 'seed.secret'}",
                  f"--workdir={workdir}")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "result:" in result.stdout
  for path in workdir.rglob("*"):
    if path.is_file():
      assert secret.encode() not in path.read_bytes(), path
  assert secret not in result.stdout + result.stderr


class _Echo(transport.Session):
  def handle(self, kind, payload):
    return transport.ACTION, payload[::-1]


def _echo_over_tls(tls):
  return transport.Listener("localhost", 0, lambda peer: _Echo(), unix=False,
                            max_sessions=2, tls=tls)


def test_a_plain_client_cannot_talk_to_a_tls_server_and_a_trusting_one_can(tmp_path):
  cert, key = _certificate(tmp_path)
  listener = _echo_over_tls(transport.ServerTLS(cert.read_bytes(), key.read_bytes()))
  try:
    with pytest.raises(transport.TransportError):
      transport.connect(listener.address, "grpc", timeout=3).request(transport.STEP, b"ab")
    good = transport.connect(listener.address, "grpc", timeout=10,
                             tls=transport.ClientTLS(cert.read_bytes()))
    assert good.request(transport.STEP, b"ab") == (transport.ACTION, b"ba")
    good.close()
  finally:
    listener.close()


def _rss_mb():
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith("VmRSS:"):
      return int(line.split()[1]) / 1024
  raise AssertionError("no VmRSS")


def _attacked_ppo(total: int, fuzz_until: int):
  """PPO `cartpole_seed` for `total` env steps with a third slot: a worker joins it, steps
  50 good steps and then NaN, and is dropped; a seeded fuzzer then sends random frames on
  both transports, with and without a valid handshake, until `fuzz_until` env steps.
  Returns the records, the NaN worker's reply, the fuzzer's figures and the server's
  failure lines."""
  config = one_device(ppo_config.cartpole_seed())
  config.runtime.num_workers = 3
  config.total_env_steps = total
  runtime = builder.build(config).runtime
  logger = MetricsLogger(stream=None)
  out, peers = {}, {}

  def attack():
    while runtime.listener is None or not logger.records:
      time.sleep(0.1)
    seed_peers.nan_worker(runtime.listener.address, 50, out)
    peers["fuzzer"] = fuzzer = seed_peers.Fuzzer(runtime.listener.address, seed=0)
    peers["rss"] = _rss_mb()
    # Every connection it makes ends while the run still runs.
    fuzzer.run(600, until=lambda: logger.records[-1]["env_steps"] >= fuzz_until)
    peers["rss_end"] = _rss_mb()
  attacker = threading.Thread(target=attack, daemon=True)
  attacker.start()
  runtime.train(logger)
  peers["fuzzer"].stop.set()
  attacker.join(30)
  return logger.records, out, peers, runtime.server.failures


def _check_what_the_attack_left(said, records, out, peers, failures, total):
  """The NaN worker refused and named, a line for every peer dropped, no traceback, less
  than 100 MB grown while the fuzzer ran (2026-11-28: 898 peers in about 90 s, 15 MB),
  and the run at its end."""
  assert out["reply"][0] == "REFUSE" and b"non-finite reward (nan)" in out["reply"][1]
  assert re.search(r"SEED: worker ipv[46]:\S+ \(seat 2\) was dropped: it sent a non-finite "
                   r"reward \(nan\) from environment 0", said), said[-3000:]
  assert "Traceback" not in said
  fuzzer = peers["fuzzer"]
  assert fuzzer.ended >= 20 and fuzzer.errors == [], fuzzer.errors[:3]
  assert len(failures) == fuzzer.ended + 1  # A line for each, and the NaN worker's.
  assert all("\n" not in f for f in failures)
  assert peers["rss_end"] - peers["rss"] < 100, peers
  assert max(r.get("workers_dropped", 0) for r in records) >= 1
  assert records[-1]["env_steps"] >= total


@pytest.mark.slow
def test_a_nan_worker_and_a_fuzzer_beside_two_workers_are_dropped_and_ppo_goes_on(capsys):
  """`_attacked_ppo` over PPO's first 300K env steps, the fuzzer until 200K: every peer
  dropped with its line and the run to its end. Whether PPO still holds its return under
  the attack is the extended test below (1M env steps)."""
  records, out, peers, failures = _attacked_ppo(300_000, 200_000)
  _check_what_the_attack_left(capsys.readouterr().err, records, out, peers, failures,
                              300_000)


@pytest.mark.extended
@pytest.mark.slow
def test_a_nan_worker_and_a_fuzzer_beside_two_workers_do_not_stop_ppo(capsys):
  """PPO `cartpole_seed` (1M of its 2M env steps, its two local workers) under
  `_attacked_ppo`'s attack until 800K env steps. The run holds what PPO holds without
  them (docs/results/benchmarks.md: 450 reached at 303K to 612K, 500 held over the last
  20 % of 2M, seeds 0-2; asserted: 450, 0.9x of 500, over 800K-1M)."""
  records, out, peers, failures = _attacked_ppo(1_000_000, 800_000)
  _check_what_the_attack_left(capsys.readouterr().err, records, out, peers, failures,
                              1_000_000)
  held = last_fifth_means(records)[0]
  assert held >= 450, f"held {held:.1f} < 450 with a NaN worker and the fuzzer"


class _NanSimulator(testing.FakeHostEnvironment):
  """The fake host environment, whose environment 3 steps a NaN reward at step 30."""

  def step(self, action):
    timestep, stats = super().step(action)
    if self.steps == 30:
      reward = np.array(timestep.reward, np.float32)
      reward[3] = np.nan
      timestep = timestep._replace(reward=reward)
    return timestep, stats


@registry.environments.register("test_nan_simulator", override=True)
def nan_simulator(num_envs: int, seed: int = 0):
  return _NanSimulator(num_envs=num_envs, seed=seed, episode_length=50)


def test_a_sebulba_run_stops_naming_the_environment_that_stepped_nan():
  config = one_device(ppo_config.cartpole_sebulba())
  config.env = dict(name="test_nan_simulator")
  config.total_env_steps = 10_000_000
  experiment = builder.build(config)
  start = time.monotonic()
  # Every actor's environments step NaN at step 30: whichever actor thread gets there first.
  with pytest.raises(EnvironmentStepError, match=r"actor \d's environments 0-\d+ \(group 0\) "
                     r"stepped a non-finite reward \(nan\) from environment 3 of the group"):
    experiment.runtime.train(MetricsLogger(stream=None))
  assert time.monotonic() - start < 30.0  # compilation included


@pytest.mark.parametrize("index, value", [(0, 7), (0, -1), (1, np.nan), (2, 1.5), (2, -0.5),
                                          (2, np.nan), (3, np.inf), (4, np.nan)])
def test_the_doors_fast_check_of_raw_bytes_agrees_with_the_named_check(index, value):
  arrays = _good() + [np.array([1.0, 3.0, 9.0, 0.1, 0.2])]
  layout = transport.Layout([(a.shape, a.dtype.str) for a in arrays])
  check = door.Door(layout.arrays)
  assert check.problem(layout.pack(arrays), arrays) is None
  arrays[index] = arrays[index].copy()
  arrays[index][1 if index < 4 else 0] = value
  payload = layout.pack(arrays)
  named = door.step_problem(*arrays[:3], arrays[3:-1]) or door.statistics_problem(arrays[-1])
  assert named and check.problem(payload, layout.unpack(payload)) == named


def _signed(directory: pathlib.Path, ca, name: str, san: str):
  """A certificate for `name` (subject alternative name `san`) signed by `ca`, made with
  openssl: (cert, key) paths."""
  key, csr, cert = (directory / f"{name}.{x}" for x in ("key", "csr", "pem"))
  ext = directory / f"{name}.ext"
  ext.write_text(f"subjectAltName={san}\n")
  subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                  "-keyout", str(key), "-out", str(csr)], check=True, capture_output=True)
  subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey",
                  str(ca[1]), "-CAcreateserial", "-days", "1", "-extfile", str(ext),
                  "-out", str(cert)], check=True, capture_output=True)
  return cert, key


def test_mutual_tls_refuses_a_worker_without_a_certificate_of_the_ca(tmp_path):
  ca = _certificate(tmp_path)  # A self-signed CA, for the server's and a client's.
  server_cert, server_key = _signed(tmp_path, ca, "server", "DNS:localhost")
  client_cert, client_key = _signed(tmp_path, ca, "client", "DNS:client")
  listener = _echo_over_tls(transport.ServerTLS(
      server_cert.read_bytes(), server_key.read_bytes(), client_ca=ca[0].read_bytes()))
  try:
    anonymous = transport.ClientTLS(ca[0].read_bytes())
    with pytest.raises(transport.TransportError):
      transport.connect(listener.address, "grpc", timeout=3,
                        tls=anonymous).request(transport.STEP, b"ab")
    known = transport.ClientTLS(ca[0].read_bytes(), client_cert.read_bytes(),
                                client_key.read_bytes())
    good = transport.connect(listener.address, "grpc", timeout=10, tls=known)
    assert good.request(transport.STEP, b"ab") == (transport.ACTION, b"ba")
    good.close()
  finally:
    listener.close()
