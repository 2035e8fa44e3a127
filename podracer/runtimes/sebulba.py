"""Sebulba (Podracer paper, section 3.2): CPU environments, actor devices, learner devices.

Threads, all started and stopped by `run`:
  actors   `actor_threads_per_device` per actor device, each with its own batched host
           environment. While one thread steps its environments the device runs the
           other's inference. Each accumulates a [T+K, B] trajectory on its device,
           splits it along B across the learner devices and queues the shards.
  learner  takes one trajectory at a time, runs `observe` + `updates_per_batch` x
           `update` pmapped over the learner devices (gradients averaged with
           `replica_mean`), then pushes the new parameters to every actor device.
  main     supervises: logs metrics, and stops everything within a second when a thread
           fails (re-raising its traceback), on Ctrl-C, when the step budget is spent, or
           when the logger reports the target return (`stop_at_return`) reached.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.agent import Agent, first_entries
from podracer.experience import Sample
from podracer.metrics import RateMeter, device_counts
from podracer.errors import ConfigError, ReplayTimeout, ThreadFailure
from podracer.runtimes.compile_once import compile_once
from podracer.types import REPLICA_AXIS, EnvSpec, PyTree, TimeStep, Trajectory, strip_weak_types

_POLL = 0.1  # Seconds between checks of the stop flag in every blocking wait.

__all__ = ["Sebulba", "ParamsStore", "ThreadFailure"]


def _injected_failure(where: str) -> RuntimeError:
  # The wall-clock time lets a test in another process measure how fast the run stops.
  return RuntimeError(f"injected {where} failure (runtime.inject_failure={where}) at unix "
                      f"time {time.time():.3f}")


class Batch(NamedTuple):
  """What an actor thread hands the learner."""
  shards: PyTree          # Trajectory with a leading learner-device axis, sharded over it
  params_version: int     # version of the parameters that acted
  env_steps: int
  episodes: np.ndarray    # [count, return_sum, length_sum] over finished episodes
  actor_times: Dict[str, float]


class ParamsStore:
  """The newest parameters, one copy per actor device, with a version number."""

  def __init__(self, devices: List[jax.Device]):
    self._devices = devices
    self._lock = threading.Lock()
    self._params: Dict[jax.Device, PyTree] = {}
    self.version = -1

  def push(self, params_on_learner: PyTree, version: int) -> None:
    copies = {d: jax.device_put(params_on_learner, d) for d in self._devices}
    with self._lock:
      self._params, self.version = copies, version

  def get(self, device: jax.Device):
    with self._lock:
      return self._params[device], self.version


@registry.runtimes.register("sebulba")
class Sebulba:
  """Actor threads on actor devices feed a learner replicated over learner devices.

  Config keys (`runtime.*`): `num_envs_per_actor` environments per actor thread (divisible
  by the number of learner devices), `actor_threads_per_device`, `rollout_length` steps
  per trajectory, `updates_per_batch` learner updates per trajectory, `queue_size`
  trajectories in flight, `log_interval` seconds between metrics records, and
  `inject_failure` ('actor' or 'learner': that thread raises once the run is under way,
  to test that failures stop the run).
  """

  def __init__(self, env_factory: Callable[..., Any], topology: Any, seed: int,
               total_env_steps: int, num_envs_per_actor: int = 16,
               actor_threads_per_device: int = 2, rollout_length: int = 32,
               updates_per_batch: int = 1, queue_size: int = 2,
               log_interval: float = 1.0, inject_failure: str = ""):
    if not hasattr(topology, "actor_devices"):
      raise ConfigError("Sebulba needs a topology that splits actor and learner devices "
                        "(`topology.name=actor_learner`).")
    if inject_failure not in ("", "actor", "learner"):
      raise ConfigError("`runtime.inject_failure` is '', 'actor' or 'learner'.")
    self.env_factory = env_factory
    self.topology = topology
    self.seed = seed
    self.num_envs_per_actor = num_envs_per_actor
    self.actor_threads_per_device = actor_threads_per_device
    self.rollout_length = rollout_length
    self.updates_per_batch = updates_per_batch
    self.queue_size = queue_size
    self.log_interval = log_interval
    self.inject_failure = inject_failure
    self.num_actor_threads = len(topology.actor_devices) * actor_threads_per_device
    self.steps_per_batch = num_envs_per_actor * rollout_length
    self.num_batches = max(1, -(-total_env_steps // self.steps_per_batch))
    self.num_updates = self.num_batches * updates_per_batch
    # For the logger's progress line: the learner stops after num_batches batches.
    self.num_calls, self.steps_per_call = self.num_batches, self.steps_per_batch
    def refuse(what):
      raise ConfigError(
          f"Sebulba steps environments on the CPU; `env.name` selects a JAX environment "
          f"({what}). Use an EnvPool, Gymnasium or dm_env environment, or "
          f"runtime.name=anakin.")

    if getattr(env_factory, "kind", None) not in (None, "host"):
      refuse(env_factory.section.name)
    probe = env_factory(num_envs=1, seed=seed)
    if getattr(probe, "kind", "jax") != "host":
      refuse(type(probe).__name__)
    self._spec = probe.spec()
    probe.close()
    self.agent: Optional[Agent] = None

  @property
  def spec(self) -> EnvSpec:
    return self._spec

  def setup(self, agent: Agent) -> None:
    self.agent = agent
    replay = getattr(agent, "replay", None)
    # A host replay (Reverb) takes the actors' sequences instead of the learner queue.
    self._replay = replay if getattr(replay, "kind", None) == "host" else None
    num_learners = len(self.topology.learner_devices)
    # Without a host replay, each actor's trajectory is split over the learners.
    if self._replay is None and self.num_envs_per_actor % num_learners:
      raise ConfigError(
          f"`runtime.num_envs_per_actor` ({self.num_envs_per_actor}) must divide evenly "
          f"over the {num_learners} learner devices.")
    if self._replay is not None:
      self._replay_items = jax.jit(lambda entries: agent.replay_items(_stack(entries)))
      self._learn_sampled = jax.pmap(
          compile_once(self._learn_from_sample, "The Sebulba replay learner step"),
          axis_name=REPLICA_AXIS, devices=self.topology.learner_devices,
          donate_argnums=(0,))
    learners = self.topology.learner_devices
    self._init_learner = jax.pmap(
        lambda key: strip_weak_types(self._init_nets_opt(key)), axis_name=REPLICA_AXIS,
        devices=learners)
    self._learn = jax.pmap(compile_once(self._learn_replica, "The Sebulba learner step"),
                           axis_name=REPLICA_AXIS, devices=learners, donate_argnums=(0,))
    self._act = jax.jit(functools.partial(_act_and_advance_key, agent.act))
    self._stack_and_split = jax.jit(functools.partial(_stack_and_split, len(learners)))

  def _init_nets_opt(self, key):
    nets = self.agent.init_nets(key)
    return nets, self.agent.init_opt(nets)

  def _learn_replica(self, state, trajectory, key):
    nets, opt, experience = state
    experience = self.agent.observe(experience, trajectory)

    def one_update(carry, update_key):
      nets, opt, experience = carry
      nets, opt, experience, metrics = self.agent.update(nets, opt, experience, update_key)
      return (nets, opt, experience), metrics

    (nets, opt, experience), metrics = jax.lax.scan(
        one_update, (nets, opt, experience), jax.random.split(key, self.updates_per_batch))
    return (nets, opt, experience), jax.lax.pmean(jax.tree.map(jnp.mean, metrics),
                                                  REPLICA_AXIS)

  def _learn_from_sample(self, state, sample, key):
    nets, opt = state
    nets, opt, sample, metrics = self.agent.update(nets, opt, sample, key)
    return (nets, opt), sample.priorities, jax.lax.pmean(jax.tree.map(jnp.mean, metrics),
                                                         REPLICA_AXIS)

  def trajectory_spec(self, num_envs: int) -> Trajectory:
    """Shapes of one actor thread's trajectory [T+K, num_envs, ...], without running."""
    agent = self.agent
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    batch = lambda shape, dtype: jax.ShapeDtypeStruct((num_envs, *shape), dtype)
    timestep = TimeStep(batch((), jnp.int32), batch((), jnp.float32), batch((), jnp.float32),
                        jax.tree.map(lambda s: batch(s.shape, s.dtype), self._spec.observation,
                                     is_leaf=lambda x: hasattr(x, "dtype")))
    nets = jax.eval_shape(agent.init_nets, key)
    actor_state = jax.eval_shape(lambda k: agent.init_actor(k, num_envs), key)
    out, _ = jax.eval_shape(agent.act, nets, actor_state, timestep, key)
    entry = Trajectory(timestep, actor_state, out.action, out.extras)
    length = self.rollout_length + agent.trajectory_overlap
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct((length, *x.shape), x.dtype), entry)

  # -- threads ---------------------------------------------------------------------

  def run(self, logger) -> Any:
    # With a host replay the queue only carries statistics, and must never block actors.
    batches: "queue.Queue[Batch]" = queue.Queue(
        maxsize=0 if self._replay is not None else self.queue_size)
    records: "queue.Queue[Dict[str, float]]" = queue.Queue()
    store = ParamsStore(self.topology.actor_devices)
    learner_state = self._start_learner(store)
    self._start_replay()
    group = _ThreadGroup()
    self._spawn_actors(group, batches, store)
    loop = self._learner_loop if self._replay is None else self._replay_learner_loop
    learner = group.spawn("learner", loop, learner_state, batches, store, records,
                          group.stop)
    try:
      while not group.stop.is_set() and learner.is_alive() and not logger.target_reached:
        group.stop.wait(_POLL)
        self._drain(records, logger)
    finally:
      try:
        group.shutdown()
      finally:
        self._drain(records, logger)
        if self._replay is not None:
          self._replay.close()
    return learner_state

  def _start_replay(self) -> None:
    if self._replay is None:
      return
    spec = self.trajectory_spec(self.num_envs_per_actor)
    item_spec = jax.eval_shape(
        lambda t: jax.tree.map(lambda x: x[0], self.agent.replay_items(t)), spec)
    try:
      self._replay.start(item_spec)
    except ImportError as e:  # Reverb lives in its own install lane.
      raise ConfigError(f"{e} Or use --config.replay.name=device.") from e

  def run_actors(self, seconds: float, warmup_batches: Optional[int] = None) -> float:
    """Env steps/s of the actor threads alone: initial parameters, no learner.

    Batches are taken off the queue and dropped. The first `warmup_batches` (default:
    two per thread, which covers compilation) are not counted.
    """
    batches: "queue.Queue[Batch]" = queue.Queue(maxsize=self.queue_size)
    store = ParamsStore(self.topology.actor_devices)
    self._start_learner(store)
    if self._replay is not None:
      raise ConfigError("run_actors measures actors that feed the learner queue; with a "
                        "host replay their pace is the replay's rate limiter's.")
    group = _ThreadGroup()
    self._spawn_actors(group, batches, store)
    warmup = 2 * self.num_actor_threads if warmup_batches is None else warmup_batches
    seen, steps, start = 0, 0, None
    try:
      while not group.stop.is_set():
        try:
          batch = batches.get(timeout=_POLL)
        except queue.Empty:
          continue
        seen += 1
        if seen == warmup + 1:
          start = time.perf_counter()
        elif seen > warmup + 1:
          steps += batch.env_steps
          if time.perf_counter() - start >= seconds:
            break
    finally:
      group.shutdown()
    return steps / (time.perf_counter() - start) if start is not None else 0.0

  def _spawn_actors(self, group: "_ThreadGroup", batches, store) -> None:
    for j, device in enumerate(self.topology.actor_devices):
      for i in range(self.actor_threads_per_device):
        group.spawn(f"actor-{device.id}-{i}", self._actor_loop, device, i + j * 1000,
                    batches, store, group.stop)

  def _drain(self, records, logger):
    while True:
      try:
        record = records.get_nowait()
      except queue.Empty:
        return
      logger.write(record, compile_step=record.pop("first", False))

  def _start_learner(self, store: ParamsStore):
    n = len(self.topology.learner_devices)
    nets_key = np.stack([np.asarray(jax.random.PRNGKey(self.seed))] * n)
    nets, opt = self._init_learner(nets_key)
    store.push(_first_replica(nets), version=0)
    return [nets, opt, None]

  def _actor_loop(self, device, index, batches, store, stop):
    agent = self.agent
    key = jax.device_put(jax.random.PRNGKey(self.seed * 7919 + 1 + index), device)
    env = self.env_factory(num_envs=self.num_envs_per_actor,
                           seed=self.seed * 10_000 + index)
    try:
      key, init_key = jax.random.split(key)
      actor_state = jax.device_put(agent.init_actor(init_key, self.num_envs_per_actor),
                                   device)
      timestep, _ = env.reset()
      pending, history = None, []
      overlap = agent.trajectory_overlap
      queue_wait = 0.0
      while not stop.is_set():
        start = time.perf_counter()
        params, version = store.get(device)
        # Queue waits are reported with the next batch: this one is already handed over.
        times = dict(actor_wait_params=time.perf_counter() - start, actor_env=0.0,
                     actor_inference=0.0, actor_wait_queue=queue_wait)
        if pending is None:
          out, next_state, key = self._act(params, actor_state, timestep, key)
          pending = Trajectory(timestep, actor_state, out.action, out.extras)
          actor_state = next_state
          padding = first_entries(pending, overlap)
          history = [jax.tree.map(lambda x, i=i: x[i], padding) for i in range(overlap - 1)]
        entries = list(history)  # The previous trajectory's last entries open this one.
        episodes = np.zeros(3)
        for _ in range(self.rollout_length):
          if stop.is_set():
            return
          t0 = time.perf_counter()
          action = np.asarray(pending.action)  # Waits for this thread's inference.
          t1 = time.perf_counter()
          timestep, stats = env.step(action)
          t2 = time.perf_counter()
          done = np.asarray(stats.done, bool)
          if done.any():
            episodes += [done.sum(), np.asarray(stats.episode_return)[done].sum(),
                         np.asarray(stats.episode_length)[done].sum()]
          out, next_state, key = self._act(params, actor_state, timestep, key)
          entries.append(pending)
          pending = Trajectory(timestep, actor_state, out.action, out.extras)
          actor_state = next_state
          times["actor_inference"] += t1 - t0
          times["actor_env"] += t2 - t1
        if self._replay is None:
          shards = self._shard_for_learners(self._stack_and_split(entries + [pending]))
        else:
          shards = None
          start = time.perf_counter()
          self._insert(jax.device_get(self._replay_items(entries + [pending])), stop)
          times["actor_wait_replay"] = time.perf_counter() - start
        history = entries[len(entries) - (overlap - 1):]
        start = time.perf_counter()
        batch = Batch(shards, version, self.steps_per_batch, episodes, times)
        while not stop.is_set():
          try:
            batches.put(batch, timeout=_POLL)
            break
          except queue.Full:
            continue
        queue_wait = time.perf_counter() - start
        if self.inject_failure == "actor" and index == 0:
          # After its first batch, so the learner and the other actors are mid-run.
          raise _injected_failure("actor")
    finally:
      env.close()

  def _insert(self, items, stop) -> None:
    """Inserts while the run goes on: the rate limiter may hold inserts back for long."""
    while not stop.is_set():
      try:
        self._replay.insert(items)
        return
      except ReplayTimeout:
        continue

  def _replay_learner_loop(self, state, batches, store, records, stop):
    """Samples the host replay as fast as its rate limiter allows; actor batches arriving
    on the queue only bring statistics. Ends when the actors have taken the step budget."""
    nets, opt, _ = state
    replay = self._replay
    key = jax.random.PRNGKey(self.seed + 1)
    n = len(self.topology.learner_devices)
    total_steps = self.num_batches * self.steps_per_batch
    env_steps, version, first = 0, 0, True
    window_start = time.perf_counter()
    window = _Window()
    info = replay.info()
    meter = RateMeter(info["replay_inserts"], info["replay_samples"])
    metrics: Dict[str, Any] = {}
    while env_steps < total_steps:
      if stop.is_set():
        return
      for batch in _drain_queue(batches):
        env_steps += batch.env_steps
        window.add_batch(batch, version)
      start = time.perf_counter()
      try:
        items, keys, probabilities, size = replay.sample_batch(replay.batch_size * n)
      except ReplayTimeout:
        window.wait += time.perf_counter() - start
        continue
      window.wait += time.perf_counter() - start
      if self.inject_failure == "learner" and version == 1:
        raise _injected_failure("learner")
      sample = Sample(items=items, indices=np.arange(len(keys), dtype=np.int32),
                      probabilities=np.asarray(probabilities, np.float32),
                      size=np.full(len(keys), size, np.int32),
                      priorities=np.zeros(len(keys), np.float32))
      # [n * batch, ...] -> [n, batch, ...]; `size` is a scalar per replica.
      sample = jax.tree.map(lambda x: x.reshape(n, -1, *x.shape[1:]), sample)
      sample = sample._replace(size=sample.size[:, 0])
      key, learn_key = jax.random.split(key)
      learn_keys = np.stack([np.asarray(k) for k in jax.random.split(learn_key, n)])
      start = time.perf_counter()
      (nets, opt), priorities, metrics = self._learn_sampled(
          (nets, opt), self._shard_for_learners(sample), learn_keys)
      replay.write_priorities(keys, np.asarray(priorities).reshape(-1))
      version += 1
      store.push(_first_replica(nets), version)
      metrics = jax.device_get(jax.tree.map(lambda x: x[0], metrics))
      window.update += time.perf_counter() - start
      window.updates += 1
      state[:] = [nets, opt, None]
      now = time.perf_counter()
      if first or now - window_start >= self.log_interval or env_steps >= total_steps:
        info = replay.info()
        elapsed = now - window_start
        record = window.record(env_steps, version * self.updates_per_batch, elapsed,
                               batches.qsize())
        record["replay_size"] = info["replay_size"]
        record.update(meter.rates(info["replay_inserts"], info["replay_samples"]))
        record.update({k: float(np.mean(v)) for k, v in metrics.items()})
        record["first"] = first
        records.put(record)
        first, window_start, window = False, now, _Window()
    stop.set()

  def _shard_for_learners(self, split: PyTree) -> PyTree:
    """[L, ...] on the actor device -> one array sharded over the learner devices."""
    learners = self.topology.learner_devices
    mesh = jax.sharding.Mesh(np.array(learners), (REPLICA_AXIS,))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(REPLICA_AXIS))

    def shard(x):
      pieces = [jax.device_put(x[i:i + 1], d) for i, d in enumerate(learners)]
      return jax.make_array_from_single_device_arrays(x.shape, sharding, pieces)

    return jax.tree.map(shard, split)

  def _learner_loop(self, state, batches, store, records, stop):
    nets, opt, experience = state
    key = jax.random.PRNGKey(self.seed + 1)
    n = len(self.topology.learner_devices)
    replay = getattr(self.agent, "replay", None)
    meter = RateMeter()  # Used only with a device replay on the learners.
    window_start = time.perf_counter()
    window = dict(steps=0, episodes=np.zeros(3), wait=0.0, update=0.0, lag=0.0, batches=0,
                  actor=dict())
    for batch_index in range(self.num_batches):
      start = time.perf_counter()
      batch = None
      while batch is None:
        if stop.is_set():
          return
        try:
          batch = batches.get(timeout=_POLL)
        except queue.Empty:
          pass
      waited = time.perf_counter() - start
      if experience is None:  # The first trajectory fixes the experience's shapes.
        experience = self._init_experience(batch.shards)
      if self.inject_failure == "learner" and batch_index == 1:
        raise _injected_failure("learner")
      key, learn_key = jax.random.split(key)
      learn_keys = np.stack([np.asarray(k) for k in jax.random.split(learn_key, n)])
      start = time.perf_counter()
      (nets, opt, experience), metrics = self._learn((nets, opt, experience), batch.shards,
                                                     learn_keys)
      version = batch_index + 1
      store.push(_first_replica(nets), version)
      metrics = jax.device_get(jax.tree.map(lambda x: x[0], metrics))
      update_time = time.perf_counter() - start
      state[:] = [nets, opt, experience]

      window["steps"] += batch.env_steps
      window["episodes"] += batch.episodes
      window["wait"] += waited
      window["update"] += update_time
      window["lag"] += (version - 1) - batch.params_version
      window["batches"] += 1
      for k, v in batch.actor_times.items():
        window["actor"][k] = window["actor"].get(k, 0.0) + v
      now = time.perf_counter()
      last = batch_index == self.num_batches - 1
      if now - window_start >= self.log_interval or last or batch_index == 0:
        b = window["batches"]
        record = dict(env_steps=(batch_index + 1) * self.steps_per_batch,
                      updates=version * self.updates_per_batch,
                      sps=window["steps"] / (now - window_start),
                      learner_update_time=window["update"] / b,
                      learner_wait_time=window["wait"] / b,
                      queue_depth=batches.qsize(), policy_lag=window["lag"] / b)
        record.update({k: v / b for k, v in window["actor"].items()})
        count, return_sum, length_sum = window["episodes"]
        if count:
          record.update(episode_return=return_sum / count,
                        episode_length=length_sum / count, episodes=count)
        record.update({k: float(np.mean(v)) for k, v in metrics.items()})
        counts = device_counts(replay, experience)
        if counts:
          record.update(meter.rates(*counts))
        record["first"] = batch_index == 0
        records.put(record)
        window_start = now
        window = dict(steps=0, episodes=np.zeros(3), wait=0.0, update=0.0, lag=0.0,
                      batches=0, actor=dict())
    stop.set()

  def _init_experience(self, shards):
    spec = jax.eval_shape(lambda s: jax.tree.map(lambda x: x[0], s), shards)
    init = jax.pmap(lambda _: self.agent.init_experience(spec), axis_name=REPLICA_AXIS,
                    devices=self.topology.learner_devices)
    return strip_weak_types(init(np.zeros(len(self.topology.learner_devices))))


class _ThreadGroup:
  """Threads that share one stop flag: any failure sets it, and `shutdown` reports it."""

  def __init__(self):
    self.stop = threading.Event()
    self.failures: List[str] = []
    self.threads: List[threading.Thread] = []

  def spawn(self, name: str, fn: Callable[..., Any], *args: Any) -> threading.Thread:
    def body():
      try:
        fn(*args)
      except BaseException:  # noqa: B902 -- any failure must stop the whole run.
        self.failures.append(f"{name} failed:\n{traceback.format_exc()}")
        self.stop.set()

    thread = threading.Thread(target=body, name=name, daemon=True)
    self.threads.append(thread)
    thread.start()
    return thread

  def shutdown(self, timeout: float = 10.0) -> None:
    """Stops and joins every thread; raises ThreadFailure with the failures' tracebacks."""
    self.stop.set()
    deadline = time.monotonic() + timeout
    for t in self.threads:
      t.join(timeout=max(0.0, deadline - time.monotonic()))
    if self.failures:
      raise ThreadFailure("\n".join(self.failures))
    alive = [t.name for t in self.threads if t.is_alive()]
    if alive:
      raise RuntimeError(f"Sebulba threads did not stop within {timeout:.0f} s: "
                         f"{', '.join(alive)}")


class _Window:
  """What the replay learner sums between two metrics records."""

  def __init__(self):
    self.steps, self.batches, self.updates = 0, 0, 0
    self.episodes = np.zeros(3)
    self.wait = self.update = self.lag = 0.0
    self.actor: Dict[str, float] = {}

  def add_batch(self, batch: "Batch", version: int) -> None:
    self.steps += batch.env_steps
    self.batches += 1
    self.episodes += batch.episodes
    self.lag += version - batch.params_version
    for k, v in batch.actor_times.items():
      self.actor[k] = self.actor.get(k, 0.0) + v

  def record(self, env_steps, updates, elapsed, queue_depth) -> Dict[str, float]:
    u, b = max(self.updates, 1), max(self.batches, 1)
    record = dict(env_steps=env_steps, updates=updates, sps=self.steps / elapsed,
                  learner_update_time=self.update / u, learner_wait_time=self.wait / u,
                  queue_depth=queue_depth, policy_lag=self.lag / b)
    record.update({k: v / b for k, v in self.actor.items()})
    count, return_sum, length_sum = self.episodes
    if count:
      record.update(episode_return=return_sum / count, episode_length=length_sum / count,
                    episodes=count)
    return record


def _drain_queue(q: "queue.Queue") -> List[Any]:
  out = []
  while True:
    try:
      out.append(q.get_nowait())
    except queue.Empty:
      return out


def _stack(entries: List[Trajectory]) -> Trajectory:
  return jax.tree.map(lambda *xs: jnp.stack(xs), *entries)


def _act_and_advance_key(act, params, actor_state, timestep, key):
  # Splitting the key inside the jitted call saves a dispatch per environment step.
  key, act_key = jax.random.split(key)
  out, actor_state = act(params, actor_state, timestep, act_key)
  return out, actor_state, key


def _stack_and_split(num_learners: int, entries: List[Trajectory]) -> Trajectory:
  """T+K entries of [B, ...] -> a [L, T+K, B/L, ...] trajectory, one slice per learner."""
  def stack(*xs):
    x = jnp.stack(xs)
    x = x.reshape(x.shape[0], num_learners, -1, *x.shape[2:])
    return jnp.moveaxis(x, 1, 0)
  return jax.tree.map(stack, *entries)


def _first_replica(tree: PyTree) -> PyTree:
  """Replica 0's copy of pmapped output, still on its learner device."""
  return jax.tree.map(lambda x: x.addressable_shards[0].data[0], tree)
