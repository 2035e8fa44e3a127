"""A SEED environment worker: steps one host environment and asks the server to act.

  python -m podracer.worker --server=HOST:PORT [--num_workers=N] [--connect_timeout=60]
      [--secret_file=FILE] [--tls_ca=CA.pem [--tls_cert=CERT.pem --tls_key=KEY.pem]]

runs N worker processes, each one host environment of the run's `envs_per_worker`
environments. A worker takes no config: once it has proved it holds the run's secret
(podracer/distributed/auth.py: `--secret_file`, else $PODRACER_SEED_SECRET, else on the
server's own host the secret the run made for its user), the server sends it the `env`
section, its seed, and the module that registered the environment (imported here; a
module this machine lacks is a clear error). `--tls_ca` encrypts gRPC with TLS, trusting
that CA (the server's `runtime.tls_cert`). Workers do no device work (JAX_PLATFORMS=cpu).

Exit status: 0 when the run ends; 1 when no server answers within `--connect_timeout`
seconds or the server is lost; 2 when the server refuses the worker (no or a wrong secret,
another podracer version, an environment whose spec differs from the run's, bad steps,
or no free slot).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from podracer import __version__  # noqa: E402
from podracer.distributed import auth, transport  # noqa: E402
from podracer.errors import ConfigError  # noqa: E402
from podracer.distributed.transport import TransportError  # noqa: E402


CLOSE_S = 5.0  # How long a finished worker waits for its environment to close.


class Refused(Exception):
  pass


def _connect(address: str, kind: str, timeout: float,
             tls: Optional[transport.ClientTLS] = None) -> Any:
  deadline = time.monotonic() + timeout
  while True:
    try:
      return transport.connect(address, kind, timeout=max(1.0, deadline - time.monotonic()),
                               tls=tls)
    except TransportError:
      if time.monotonic() >= deadline:
        raise
      time.sleep(0.5)


def _expect(reply, *kinds: int):
  kind, payload = reply
  if kind == transport.REFUSE:
    raise Refused(transport.decode_json(payload).get("message", "refused"))
  if kind not in kinds:
    raise TransportError(f"unexpected {transport.KIND_NAMES.get(kind, kind)} message")
  return kind, payload


def import_env_module(module: Optional[str], path: Optional[str]) -> None:
  """Imports the module whose import registers the run's environment."""
  if not module or module.startswith("podracer."):
    return
  try:
    importlib.import_module(module)
    return
  except ImportError as e:
    if not path or not os.path.exists(path):
      raise Refused(f"the run's environment is registered by module '{module}' "
                    f"({path}), which this machine cannot import: {e}") from e
  spec = importlib.util.spec_from_file_location(module.replace(".", "_"), path)
  loaded = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = loaded
  spec.loader.exec_module(loaded)


def build_env(config: dict) -> Any:
  from ml_collections import config_dict  # pylint: disable=import-outside-toplevel
  from podracer import builder, registry  # pylint: disable=import-outside-toplevel
  from podracer.registry import imports  # pylint: disable=import-outside-toplevel
  builder.register_builtin_components()
  try:  # What the run's launcher imported (--import, the config's `imports`).
    imports.import_all(config.get("imports") or ())
  except ConfigError as e:
    raise Refused(f"the run imports modules of its own, and this machine cannot: {e}") \
        from None
  import_env_module(config.get("env_module"), config.get("env_file"))
  section = config_dict.ConfigDict(config["env"])
  return registry.build(registry.environments, section, key="env",
                        num_envs=config["envs_per_worker"], seed=config["seed"])


def observation_leaves(timestep: Any) -> List[np.ndarray]:
  if isinstance(timestep.observation, np.ndarray):
    return [timestep.observation]
  import jax  # pylint: disable=import-outside-toplevel
  return [np.asarray(x) for x in jax.tree.leaves(timestep.observation)]


def step_arrays(timestep: Any, sums: np.ndarray) -> List[np.ndarray]:
  """What a STEP message carries: step type, reward, discount, observation leaves, then
  [episodes, return sum, length sum, env seconds, latency seconds] (float64)."""
  return [np.asarray(timestep.step_type, np.int32), np.asarray(timestep.reward, np.float32),
          np.asarray(timestep.discount, np.float32), *observation_leaves(timestep),
          np.asarray(sums, np.float64)]


def configured_secret(secret_file: Optional[str]) -> Optional[bytes]:
  """The secret given to this worker: `--secret_file`, else $PODRACER_SEED_SECRET."""
  try:
    return auth.configured_secret(secret_file, "--secret_file")
  except auth.SecretError as e:
    raise Refused(str(e)) from None


def handshake(conn: Any, secret: Optional[bytes],
              address: Optional[str] = None) -> Dict[str, Any]:
  """HELLO, the answer to the server's challenge if it sends one, and the run's CONFIG.
  Without a `secret`, a server of this host at `address` may have left its own for this
  user (auth.local_secret; read once the server answers, so it has written it)."""
  kind, payload = _expect(conn.request(transport.HELLO, transport.encode_json(dict(
      version=__version__, pid=os.getpid(), host=socket.gethostname()))),
                          transport.CONFIG, transport.CHALLENGE)
  if kind == transport.CHALLENGE:
    if secret is None and address is not None:
      host, port = transport.split_address(address)
      secret = auth.local_secret(host, port) if transport.is_local(host) else None
    if secret is None:
      raise Refused("the server asks for the run's secret and this worker has none: give "
                    f"it --secret_file=FILE or ${auth.SECRET_ENV}")
    _, payload = _expect(conn.request(transport.AUTH, auth.answer(secret, payload)),
                         transport.CONFIG)
  return transport.decode_json(payload)


def run_worker(address: str, kind: str, connect_timeout: float,
               secret: Optional[bytes] = None,
               tls: Optional[transport.ClientTLS] = None) -> int:
  try:
    conn = _connect(address, kind, connect_timeout, tls)
  except TransportError:
    print(f"no podracer server at {address} after {connect_timeout:.0f} s", file=sys.stderr)
    return 1
  env = None
  try:
    config = handshake(conn, secret, address)
    env = build_env(config)
    timestep, _ = env.reset()
    layout = transport.Layout([(a.shape, a.dtype.str)
                               for a in step_arrays(timestep, np.zeros(5))])
    _expect(conn.request(transport.SPEC, transport.encode_json(dict(
        step=layout.to_json()))), transport.OK)
    actions = transport.Layout(config["action"])
    return _loop(conn, env, timestep, layout, actions)
  except Refused as e:
    print(f"podracer worker refused by {address}: {e}", file=sys.stderr)
    return 2
  except TransportError as e:
    print(f"lost the podracer server at {address} ({e})", file=sys.stderr)
    return 1
  finally:
    if env is not None:
      _close_within(env, CLOSE_S)
    conn.close()


def _close_within(env: Any, seconds: float) -> None:
  """Closes the environment, waiting at most `seconds`: a worker whose run has ended
  must not hang in an environment's shutdown (the process exits regardless, `main`)."""
  closing = threading.Thread(target=env.close, name="env-close", daemon=True)
  closing.start()
  closing.join(seconds)
  if closing.is_alive():
    print(f"the environment did not close within {seconds:.0f} s; exiting anyway",
          file=sys.stderr)


def _loop(conn: Any, env: Any, timestep: Any, layout: transport.Layout,
          actions: transport.Layout) -> int:
  sums = np.zeros(5)
  check = True  # The first message's arrays are checked against the layout; then trusted.
  while True:
    start = time.perf_counter()
    kind, payload = _expect(conn.request(transport.STEP, layout.pack(
        step_arrays(timestep, sums), check=check)), transport.ACTION, transport.BYE)
    check = False
    if kind == transport.BYE:
      return 0
    latency = time.perf_counter() - start
    action = actions.unpack(payload)[0]
    start = time.perf_counter()
    timestep, stats = env.step(action)
    elapsed = time.perf_counter() - start
    done = np.asarray(stats.done, bool)
    if done.any():
      sums = np.array([done.sum(), np.sum(stats.episode_return * done),
                       np.sum(stats.episode_length * done), elapsed, latency], np.float64)
    else:
      sums = np.array([0.0, 0.0, 0.0, elapsed, latency])


def _spawn(argv: Sequence[str], n: int) -> int:
  """Runs n single workers as child processes; the worst exit status."""
  base = [sys.executable, "-m", "podracer.worker", *argv, "--num_workers=1"]
  children = [subprocess.Popen(base) for _ in range(n)]

  def forward(signum, frame):
    del frame
    for child in children:
      if child.poll() is None:
        child.send_signal(signum)
  signal.signal(signal.SIGTERM, forward)
  signal.signal(signal.SIGINT, forward)
  statuses = [child.wait() for child in children]
  return max((s if s >= 0 else 128 - s) for s in statuses)


def _tls(args: argparse.Namespace) -> Optional[transport.ClientTLS]:
  """The client's TLS from its flags (None: plain gRPC); Refused on an unreadable file."""
  if not args.tls_ca:
    if args.tls_cert or args.tls_key:
      raise Refused("--tls_cert and --tls_key need --tls_ca (the CA the server's "
                    "certificate is checked against)")
    return None
  if bool(args.tls_cert) != bool(args.tls_key):
    raise Refused("--tls_cert and --tls_key go together")
  try:
    read = transport.read_files({flag: getattr(args, flag)
                                 for flag in ("tls_ca", "tls_cert", "tls_key")})
  except transport.UnreadableFile as e:
    raise Refused(f"--{e}") from None
  return transport.ClientTLS(read["tls_ca"], read["tls_cert"], read["tls_key"])


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m podracer.worker",
                                   description=__doc__.split("\n\n")[0])
  parser.add_argument("--server", required=True, help="the run's HOST:PORT")
  parser.add_argument("--num_workers", type=int, default=1)
  parser.add_argument("--connect_timeout", type=float, default=60.0)
  parser.add_argument("--transport", default="auto", choices=("auto", "grpc", "unix"))
  parser.add_argument("--secret_file", default=None,
                      help=f"a file holding the run's secret (else ${auth.SECRET_ENV})")
  parser.add_argument("--tls_ca", default=None, help="PEM CA to check the server against: "
                      "gRPC with TLS")
  parser.add_argument("--tls_cert", default=None, help="PEM client certificate")
  parser.add_argument("--tls_key", default=None, help="PEM client key")
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = _parser()
  args = parser.parse_args(argv)
  try:
    transport.split_address(args.server)
  except ValueError as e:
    parser.error(str(e))
  if args.num_workers > 1:
    passed = [f"--{k}={v}" for k, v in vars(args).items()
              if k != "num_workers" and v is not None]
    return _spawn(passed, args.num_workers)
  # The launcher stops a run's local workers with SIGTERM: exit without a traceback.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
  try:  # The files it was given, read before it connects.
    secret, tls = configured_secret(args.secret_file), _tls(args)
  except Refused as e:
    print(f"podracer worker: {e}", file=sys.stderr)
    return 2
  try:
    return run_worker(args.server, args.transport, args.connect_timeout, secret, tls)
  except KeyboardInterrupt:
    return 130


if __name__ == "__main__":
  exit_status = main()
  # Nothing is left to keep: skip the interpreter's shutdown, where an environment's or
  # gRPC's threads could keep a finished worker process alive.
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(exit_status)
