"""Sebulba throughput against its ceiling: raw EnvPool, actors alone, the full runtime.

  python benchmarks/sebulba.py --env=CartPole-v1 [--threads=1,2] [--seconds=10]
  python benchmarks/sebulba.py --env=Pong-v5 [--env_mode=sync,async] [--phases=raw,actors]
  python benchmarks/sebulba.py --config=agents/ppo/config.py:cartpole_sebulba \
      [--config.runtime.num_envs_per_actor=24 ...]

For each `--env_mode` (runtime.env_mode: sync, async) and number of actor threads per
actor device it measures, in one process:
  raw:    EnvPool alone, stepped from one Python thread per actor thread with random
          actions (the ceiling: no inference, no learning, no framework), in the actor's
          shape: sync, one pool of B stepped whole; async, two pools of B/2 taking turns
          (and, as a reference, one EnvPool of B in its own async mode, batch B/2);
  actors: Sebulba's actor threads with the initial parameters and no learner: environment
          steps, inference, trajectory assembly and the hand-off to the learner devices;
  full:   the whole runtime, learner included.
`--phases` picks what to measure (default all three). Figures are medians over
`--repeats` windows of `--seconds` (full: over its per-second
metrics records), after a warm-up that covers compilation. The config comes from `--env`
(CartPole-v1: IMPALA cartpole_sebulba; any Atari task: IMPALA pong_sebulba with that
task) unless `--config` is given. With `--cpu_devices=8` the CPU is split into 8 virtual
devices, as in the tests (2 actor, 6 learner devices).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import threading
import time

from absl import app, flags, logging
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.actors import run_actors  # noqa: E402
from benchmarks.timing import full_sps  # noqa: E402

_ENV = flags.DEFINE_string("env", "CartPole-v1", "EnvPool task id.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file (path/to/config.py:NAME); overrides --env's choice.")
_THREADS = flags.DEFINE_list("threads", ["1", "2"], "Actor threads per actor device.")
_SECONDS = flags.DEFINE_float("seconds", 10.0, "Length of one timed window.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed windows per raw/actors figure.")
_PHASES = flags.DEFINE_list("phases", ["raw", "actors", "full"],
                            "What to measure (full Pong: about a minute per mode on 2 cores).")
_ENV_MODES = flags.DEFINE_list("env_mode", ["sync", "async"],
                               "runtime.env_mode values to measure, each with its raw "
                               "ceiling in the same shape.")
_CLASSIC = flags.DEFINE_bool("classic", True, "With async: also the raw ceiling of one "
                             "EnvPool of B environments in async mode, batch B/2.")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", None,
                                    "Split the CPU into this many virtual devices.")


def _config():
  if _CONFIG.value is not None:
    return _CONFIG.value
  from agents.impala import config as impala_config
  if _ENV.value.startswith("CartPole"):
    config = impala_config.cartpole_sebulba()
  else:
    config = impala_config.pong_sebulba()
  config.env.task_id = _ENV.value
  return config


# Raw EnvPool shapes per actor thread of B environments: (num_envs, batch_size) per pool.
RAW_SHAPES = {
    "sync": lambda b: [(b, b)],               # one pool, stepped whole (the sync actor)
    "async": lambda b: [(b // 2, b // 2)] * 2,  # two halves taking turns (the async actor)
    "async-classic": lambda b: [(b, b // 2)],   # EnvPool's own async: first half done
}


def raw_envpool_sps(env_config, num_threads: int, num_envs: int, seconds: float,
                    shape: str = "sync") -> float:
  """Steps/s of `num_threads` Python threads, each with its `num_envs` environments in
  pools of `RAW_SHAPES[shape]`, receiving each pool's batch and sending random actions."""
  import envpool
  import numpy as np

  options = {k: v for k, v in env_config.items() if k not in ("name", "task_id")}
  shapes = RAW_SHAPES[shape](num_envs)
  pools = [[envpool.make(env_config.task_id, env_type="dm", num_envs=n, batch_size=b,
                         seed=i * len(shapes) + j, **options)
            for j, (n, b) in enumerate(shapes)] for i in range(num_threads)]
  spec = pools[0][0].action_spec()
  counts = [0] * num_threads
  go, stop = threading.Event(), threading.Event()

  def random_actions(rng, size):
    if hasattr(spec, "num_values"):  # discrete
      return rng.integers(0, spec.num_values, size, dtype=np.int32)
    return rng.uniform(spec.minimum, spec.maximum,
                       (size, *spec.shape)).astype(spec.dtype)  # continuous (bounded)

  def loop(i):
    rng = np.random.default_rng(i)
    for pool in pools[i]:
      pool.async_reset()
    go.wait()
    while not stop.is_set():
      for pool in pools[i]:  # While one pool's batch is handled, the others step.
        env_id = pool.recv().observation.env_id
        pool.send(random_actions(rng, len(env_id)), env_id)
        counts[i] += len(env_id)

  threads = [threading.Thread(target=loop, args=(i,)) for i in range(num_threads)]
  for t in threads:
    t.start()
  time.sleep(0.5)  # every pool reset
  start = time.perf_counter()
  go.set()
  time.sleep(seconds)
  total = sum(counts)
  elapsed = time.perf_counter() - start
  stop.set()
  for t in threads:
    t.join()
  for pool in sum(pools, []):
    pool.close()
  return total / elapsed


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # Keep JAX's backend probing out of the table.
  if _CPU_DEVICES.value:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_"
                               f"platform_device_count={_CPU_DEVICES.value}").strip()
  import jax
  import agents  # noqa: F401  # Registers the agents a --config file may name.
  from podracer import builder

  base = _config()
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.device_count()} "
        f"device(s), {os.cpu_count()} CPU core(s), Python {platform.python_version()}")
  probe = builder.build(base).runtime
  num_actor_devices = len(probe.topology.actor_devices)
  print(f"{base.agent.name} on {base.env.task_id}: {probe.topology}, "
        f"{base.runtime.num_envs_per_actor} envs per actor thread, rollout "
        f"{base.runtime.rollout_length}; medians of {_REPEATS.value} x {_SECONDS.value:g} s")
  header = (f"{'mode':>5} {'threads/dev':>11} {'raw steps/s':>12} {'actor steps/s':>14} "
            f"{'full steps/s':>13} {'actor/raw':>9} {'full/raw':>9} {'full/actor':>10}")
  print(header)
  print("-" * len(header))
  results = {}
  nan = float("nan")
  median_raw = lambda config, threads, shape: statistics.median(
      raw_envpool_sps(config.env, num_actor_devices * threads,
                      config.runtime.num_envs_per_actor, _SECONDS.value, shape)
      for _ in range(_REPEATS.value))
  for mode in _ENV_MODES.value:
    for threads in map(int, _THREADS.value):
      config = base.copy_and_resolve_references()
      config.runtime.actor_threads_per_device = threads
      config.runtime.env_mode = mode
      raw = actors = full = nan
      if "raw" in _PHASES.value:
        raw = median_raw(config, threads, mode)
      if "actors" in _PHASES.value:
        runtime = builder.build(config).runtime
        run_actors(runtime, 1.0)  # compile
        actors = statistics.median(run_actors(runtime, _SECONDS.value)
                                   for _ in range(_REPEATS.value))
      if "full" in _PHASES.value:
        full = full_sps(config, _SECONDS.value * _REPEATS.value)
      results[mode, threads] = (raw, actors, full)
      print(f"{mode:>5} {threads:>11} {raw:>12,.0f} {actors:>14,.0f} {full:>13,.0f} "
            f"{actors / raw:>9.3f} {full / raw:>9.3f} {full / actors:>10.3f}", flush=True)
      if mode == "async" and "raw" in _PHASES.value and _CLASSIC.value:
        classic = median_raw(config, threads, "async-classic")
        print(f"{'':>5} {threads:>11} {classic:>12,.0f}   (raw EnvPool async, num_envs="
              f"{config.runtime.num_envs_per_actor}, batch_size "
              f"{config.runtime.num_envs_per_actor // 2})", flush=True)
  for mode in _ENV_MODES.value:
    if (mode, 1) in results and (mode, 2) in results:
      one, two = results[mode, 1], results[mode, 2]
      print(f"{mode}: 2 vs 1 threads per device: raw x{two[0] / one[0]:.2f}, actors "
            f"x{two[1] / one[1]:.2f}, full x{two[2] / one[2]:.2f}")
  for threads in map(int, _THREADS.value):
    if ("sync", threads) in results and ("async", threads) in results:
      ratios = [a / s for a, s in zip(results["async", threads], results["sync", threads])]
      print(f"async vs sync, {threads} thread(s) per device: raw x{ratios[0]:.2f}, "
            f"actors x{ratios[1]:.2f}, full x{ratios[2]:.2f}")


if __name__ == "__main__":
  app.run(main)
