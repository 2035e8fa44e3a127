"""The SEED runtime: environment-only worker processes, central batched inference.

It replaces only Sebulba's actor threads: the inference server (server.py) puts its
trajectories into the same channel for experience (host/channel.py), learned by the same
learner (host/learner.py), with the same checkpoints, evaluation and supervision
(host/runtime.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
import time
from typing import Any, Callable, Optional, Tuple

import jax

from podracer import distributed, registry, trajectories
from podracer.registry import imports
from podracer.distributed import auth, transport
from podracer.agent import Agent
from podracer.errors import ConfigError, EnvironmentWorkerError
from podracer.runtime import Plan, plan_rounds
from podracer.runtimes.host import threads
from podracer.runtimes.host.runtime import HostRuntime, LearnerOptions
from podracer.runtimes.host.params import ParamsStore, PolicyLagBound
from podracer.runtimes.seed.server import InferenceServer, Seats
from podracer.types import action_mask
from podracer.runtimes.seed.workers import LocalWorkers, describe, tail

ADDRESS_FILE = "seed_address"
TRANSPORTS = ("auto", "grpc", "unix")


def _key_error(key: str, message: str) -> ConfigError:
  return ConfigError(f"`runtime.{key}` {message}")


@dataclasses.dataclass(frozen=True)
class SeedOptions(LearnerOptions):
  """`runtime.*`: `num_local_workers` worker processes started by the run (0: workers
  are started by hand, `num_workers` of them), `envs_per_worker` environments each,
  `envs_per_batch` environments per learner batch (a multiple of `envs_per_worker`),
  `rollout_length`, `updates_per_batch`, `queue_size`, `max_policy_lag`, `log_interval`
  as under Sebulba; `address` HOST:PORT the server binds (port 0: a free one),
  `transport` ('auto': a Unix socket for workers of this host, gRPC for others; 'grpc';
  'unix'), `inference_batch_size` (None: all of one inference thread's workers),
  `inference_timeout_ms` (None: act once the batch is full or every worker waits),
  `inference_threads_per_device` (each serves its own workers, so one thread's batch
  steps while another's inference runs, as Sebulba's actor threads take turns),
  `worker_timeout` seconds of silence before a worker is dropped, `max_worker_restarts`
  of local workers, and `inject_failure` ('inference' or 'learner').

  Who may join (docs/seed.md, "Workers on other machines, safely"): `secret_file` holds the secret workers
  must prove (else $PODRACER_SEED_SECRET; else, on a loopback address, one the run makes
  for its user); `allow_unauthenticated` lets a non-loopback server run without one;
  `tls_cert`/`tls_key` (PEM files) encrypt gRPC, and `tls_client_ca` also requires
  workers' certificates signed by that CA."""
  num_local_workers: int = 4
  num_workers: Optional[int] = None
  envs_per_worker: int = 16
  envs_per_batch: int = 32
  address: str = "localhost:0"
  transport: str = "auto"
  inference_batch_size: Optional[int] = None
  inference_timeout_ms: Optional[float] = None
  inference_threads_per_device: int = 2
  worker_timeout: float = 30.0
  max_worker_restarts: int = 3
  secret_file: Optional[str] = None
  allow_unauthenticated: bool = False
  tls_cert: Optional[str] = None
  tls_key: Optional[str] = None
  tls_client_ca: Optional[str] = None

  def __post_init__(self):
    super().__post_init__()
    if bool(self.tls_cert) != bool(self.tls_key):
      raise _key_error("tls_cert" if not self.tls_cert else "tls_key",
                       "is missing: runtime.tls_cert and runtime.tls_key go together.")
    if self.tls_client_ca and not self.tls_cert:
      raise _key_error("tls_client_ca", "needs runtime.tls_cert and runtime.tls_key.")
    bw = self.envs_per_worker
    for key in ("envs_per_worker", "envs_per_batch", "rollout_length", "updates_per_batch",
                "queue_size", "inference_threads_per_device"):
      value = getattr(self, key)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _key_error(key, f"is a positive integer, got {value!r}.")
    if self.num_local_workers < 0:
      raise _key_error("num_local_workers", f"is >= 0, got {self.num_local_workers}.")
    if self.num_local_workers == 0 and not self.num_workers:
      raise _key_error("num_workers", "must say how many workers started by hand the "
                       "run waits for, since runtime.num_local_workers=0.")
    if self.envs_per_batch % bw:
      raise _key_error("envs_per_batch", f"({self.envs_per_batch}) must be a multiple of "
                       f"runtime.envs_per_worker ({bw}): a batch holds whole workers.")
    total = self.workers * bw
    if self.inference_batch_size is not None:
      if self.inference_batch_size % bw or self.inference_batch_size < bw:
        raise _key_error("inference_batch_size", f"({self.inference_batch_size}) must be "
                         f"a multiple of runtime.envs_per_worker ({bw}): a worker's "
                         f"environments are acted on together.")
      if self.inference_batch_size > total:
        raise _key_error("inference_batch_size", f"({self.inference_batch_size}) is "
                         f"larger than all {total} environments of the run "
                         f"({self.workers} workers x {bw}).")
    if self.transport not in TRANSPORTS:
      raise _key_error("transport", f"is one of {', '.join(TRANSPORTS)}; got "
                       f"{self.transport!r}.")
    if self.inject_failure not in ("", "inference", "learner"):
      raise _key_error("inject_failure", "is '', 'inference' or 'learner'.")
    try:
      transport.split_address(self.address)
    except ValueError as e:
      raise _key_error("address", f"{e}.") from e

  @property
  def workers(self) -> int:
    """Worker slots of the run."""
    return self.num_workers or self.num_local_workers

  def batch_size(self, lanes: int) -> int:
    """Environments per inference call of one of `lanes` inference threads: all of that
    thread's workers' (half of all environments with one device and two threads, SEED's
    default), at least one worker's."""
    if self.inference_batch_size is not None:
      return self.inference_batch_size
    bw = self.envs_per_worker
    return max(bw, (self.workers // lanes) * bw)

  def plan(self, topology: Any, total_env_steps: int) -> Plan:
    del topology
    return plan_rounds(self.envs_per_batch * self.rollout_length, self.updates_per_batch,
                      total_env_steps)


def _secret(options: SeedOptions) -> Tuple[Optional[bytes], bool]:
  """(the secret workers must prove, whether the run makes its own at start); (None,
  False) only where the user allowed a server without one."""
  try:
    secret = auth.configured_secret(options.secret_file, "runtime.secret_file")
  except auth.SecretError as e:
    raise _key_error("secret_file", f"is unusable: {e}") from None
  if secret is not None:
    return secret, False
  host, _ = transport.split_address(options.address)
  if transport.is_loopback(host):
    return None, True
  if options.allow_unauthenticated:
    sys.stderr.write(
        f"WARNING: the SEED server at {options.address} lets any peer that reaches it "
        f"join the run (runtime.allow_unauthenticated=True): it is told the run's env "
        f"section and steps in it.\n")
    return None, False
  raise ConfigError(
      f"`runtime.address` ({options.address}) is not a loopback address, and the run has "
      f"no secret: anyone who reaches the port could join it. Make one and give it to the "
      f"run and to every worker: `python -c \"import secrets; print(secrets.token_hex(32))"
      f"\" > seed.secret; chmod 600 seed.secret`, then --config.runtime.secret_file="
      f"seed.secret here and `python -m podracer.worker --secret_file=seed.secret ...` "
      f"there (or set ${auth.SECRET_ENV} on both). Add runtime.tls_cert and "
      f"runtime.tls_key to encrypt the traffic too. To run without, on a network you "
      f"trust: --config.runtime.allow_unauthenticated=True.")


def _tls(options: SeedOptions) -> Optional[transport.ServerTLS]:
  if not options.tls_cert:
    return None
  if options.tls_client_ca and options.transport == "grpc" and options.num_local_workers:
    raise _key_error("tls_client_ca", "asks workers for client certificates, which the "
                     "run's local workers do not have over gRPC; use transport=auto (they "
                     "use the Unix socket) or num_local_workers=0.")
  try:
    read = transport.read_files({key: getattr(options, key)
                                 for key in ("tls_cert", "tls_key", "tls_client_ca")})
  except transport.UnreadableFile as e:
    raise _key_error(e.name, f"({e.path}) cannot be read: {e.why}.") from None
  return transport.ServerTLS(read["tls_cert"], read["tls_key"], read["tls_client_ca"])


def _check_address(options: SeedOptions) -> None:
  host, port = transport.split_address(options.address)
  if options.transport == "unix" and not transport.is_local(host):
    raise _key_error("transport", f"is 'unix', which only reaches workers of this host, "
                     f"but runtime.address names '{host}'; use transport=auto or grpc.")
  problem = transport.check_bindable(host, port)
  if problem:
    raise _key_error("address", f"({options.address}) cannot be served: {problem}.")


@registry.runtimes.register("seed")
class Seed(HostRuntime):
  """Workers step environments in their own processes; an inference server batches
  their steps on the actor devices; the learner learns on the learner devices."""

  Options = SeedOptions

  def __init__(self, agent: Agent, env_factory: Callable[..., Any], topology: Any,
               options: SeedOptions, plan: Plan, seed: int):
    self.check_topology(topology)
    if distributed.process_count() > 1:
      raise ConfigError("runtime.name=seed runs in one process: its workers bring the "
                        "scale. Several learner processes are not supported yet; launch "
                        "without podracer.distributed.launch_local.")
    _check_state_axis(agent, options.workers * options.envs_per_worker)
    _check_address(options)
    self.secret, self.own_secret = _secret(options)
    self.tls = _tls(options)
    super().__init__(agent, env_factory, topology, options, plan, seed,
                     producers=options.workers, batch_envs=options.envs_per_batch,
                     batch_key="envs_per_batch", turns=False)
    self.server = self.listener = self.local = None
    self._secret_file: Optional[str] = None  # the run's own secret, for its user's workers
    self.workdir: Optional[str] = None

  def train(self, logger, checkpointer: Optional[Any] = None,
            evaluation: Optional[Any] = None):
    self.workdir = getattr(logger, "workdir", None)
    return super().train(logger, checkpointer=checkpointer, evaluation=evaluation)

  def _welcome(self) -> dict:
    """What every worker is told on connecting."""
    section = self.env_factory.section
    factory = registry.environments.get(section.name, key="env.name")
    try:
      env_file = inspect.getfile(factory)
    except TypeError:
      env_file = None
    bw = self.options.envs_per_worker
    action = trajectories.trajectory_spec(self.agent, self.spec, bw, 1).action
    return dict(env=section.to_dict(), env_module=factory.__module__, env_file=env_file,
                imports=list(imports.imported()), envs_per_worker=bw,
                action=[[list(action.shape[1:]), action.dtype.str]],
                observation_tree=jax.tree.structure(self.spec.observation,
                                                    is_leaf=lambda x: hasattr(x, "dtype")))

  def _mask_leaf(self) -> Optional[int]:
    """Which observation leaf of a STEP is the action mask, if the observation has one."""
    leaves, tree = jax.tree.flatten(self.spec.observation,
                                   is_leaf=lambda x: hasattr(x, "dtype"))
    return action_mask(jax.tree.unflatten(tree, range(len(leaves))))

  def step_layout(self) -> transport.Layout:
    bw = self.options.envs_per_worker
    leaves = jax.tree.leaves(self.spec.observation, is_leaf=lambda x: hasattr(x, "dtype"))
    return transport.Layout([((bw,), "<i4"), ((bw,), "<f4"), ((bw,), "<f4")]
                            + [((bw, *s.shape), jax.numpy.dtype(s.dtype).str) for s in leaves]
                            + [((5,), "<f8")])

  def _spawn_producers(self, group: threads.ThreadGroup, store: ParamsStore, channel: Any,
                       restart: int = 0, lag_bound: Optional[PolicyLagBound] = None) -> None:
    options, welcome = self.options, self._welcome()
    # Inference threads: `inference_threads_per_device` per actor device, each with the
    # workers of its own seats (seat % len(lanes)).
    lanes = [p for p in self.actor_places for _ in range(options.inference_threads_per_device)]
    self.server = server = InferenceServer(
        self.agent, lanes, store, channel,
        Seats(options.envs_per_batch // options.envs_per_worker, first_update=restart),
        num_workers=options.workers, envs_per_worker=options.envs_per_worker,
        rollout_length=options.rollout_length, batch_size=options.batch_size(len(lanes)),
        timeout_ms=options.inference_timeout_ms,
        # None without a learner (benchmarks/actors.py): the parameters never change there.
        max_policy_lag=None if lag_bound is None else lag_bound.max_lag,
        welcome=welcome, step_layout=self.step_layout(), mask_leaf=self._mask_leaf(),
        action_layout=transport.Layout(welcome["action"]),
        seed=self.seed + 7_919 * restart, worker_timeout=options.worker_timeout,
        secret=self.secret or (auth.new_secret() if self.own_secret else None))
    host, port = transport.split_address(options.address)
    self.listener = transport.Listener(
        host, port, server.new_session, unix=options.transport != "grpc",
        max_sessions=options.workers, tls=self.tls,
        max_message=max(transport.SMALL_MESSAGE, server.step_layout.nbytes) + 1)
    if self.own_secret:  # For this user's workers on this host (auth.local_secret).
      self._secret_file = auth.secret_path(host, self.listener.port)
      auth.write_private(self._secret_file, server.secret)
    self._announce(self.listener.address)
    for i, place in enumerate(lanes):
      group.spawn(f"inference-{place.name}-{i}", server.loop, i, group.stop,
                  options.inject_failure == "inference" and i == 0)
    self._alive_at, self._reported = time.monotonic(), 0  # for `_poll`
    if options.num_local_workers:
      self.local = LocalWorkers(options.num_local_workers, self.listener.address,
                                options.transport, self.workdir, secret=server.secret,
                                tls_ca=options.tls_cert)

  def _announce(self, address: str) -> None:
    if self.options.num_local_workers:
      return
    sys.stderr.write(f"SEED server at {address}: start workers with\n  python -m "
                     f"podracer.worker --server={address} --num_workers=N\n")
    if self.workdir:
      with open(os.path.join(self.workdir, ADDRESS_FILE), "w") as f:
        f.write(address + "\n")

  def _poll(self, group: threads.ThreadGroup) -> None:
    server, now = self.server, time.monotonic()
    server.drop_silent()
    for failure in server.failures[self._reported:]:
      sys.stderr.write(f"SEED: {failure}\n")
    self._reported = len(server.failures)
    if self.local is not None:
      self._restart_local_workers()
    if server.workers_alive or (self.local is not None and self.local.starting()):
      self._alive_at = now
    elif now - self._alive_at > self.options.worker_timeout:
      last = server.failures[-1] if server.failures else "no worker joined"
      hint = ("" if self.options.num_local_workers else
              f"; start workers with: python -m podracer.worker "
              f"--server={self.listener.address} --num_workers=N")
      raise EnvironmentWorkerError(
          f"no SEED worker was alive for {self.options.worker_timeout:.0f} s "
          f"(runtime.worker_timeout); last: {last}{hint}")

  def _restart_local_workers(self) -> None:
    local = self.local
    for i, status in local.exited():
      why = (f"local worker {i} {describe(status)}; the end of {local.log(i)}:\n"
             f"{tail(local.log(i))}")
      if local.restarts >= self.options.max_worker_restarts:
        raise EnvironmentWorkerError(
            f"{why}\nIt was the last restart allowed (runtime.max_worker_restarts="
            f"{self.options.max_worker_restarts}).")
      sys.stderr.write(f"SEED: {why}\nrestarting it.\n")
      local.restarts += 1
      self.server.restarts = local.restarts
      local.start(i)

  def _stop_producers(self) -> None:
    if self.server is not None:
      self.server.say_bye()
    try:
      if self.local is not None:
        self.local.stop()
    finally:
      if self.listener is not None:
        self.listener.close()
      if self._secret_file:
        try:
          os.unlink(self._secret_file)
        except OSError:
          pass


def _check_state_axis(agent: Agent, num_slots: int) -> None:
  """Every leaf of the actor state must have a leading environment axis (one slot per
  environment), or the server cannot keep it per environment."""
  key = jax.ShapeDtypeStruct((2,), jax.numpy.uint32)
  state = jax.eval_shape(lambda k: agent.init_actor(k, num_slots + 1), key)
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    if not leaf.shape or leaf.shape[0] != num_slots + 1:
      raise ConfigError(
          f"SEED keeps the actor state per environment, but the leaf "
          f"{jax.tree_util.keystr(path) or '(root)'} of the agent's "
          f"init_actor(key, num_envs) has shape {list(leaf.shape)}, with no leading "
          f"num_envs axis; give every leaf one, or run it under runtime.name=sebulba.")
