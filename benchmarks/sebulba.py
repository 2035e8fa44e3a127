"""Sebulba throughput against its ceiling: raw EnvPool, actors alone, the full runtime.

  python benchmarks/sebulba.py --env=CartPole-v1 [--threads=1,2] [--seconds=10]
  python benchmarks/sebulba.py --env=Pong-v5
  python benchmarks/sebulba.py --config=agents/ppo/config.py:cartpole_sebulba \
      [--config.runtime.num_envs_per_actor=24 ...]

For each number of actor threads per actor device it measures, in one process:
  raw:    EnvPool alone, one pool per actor thread stepped in its own Python thread with
          random actions (the ceiling: no inference, no learning, no framework);
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

_ENV = flags.DEFINE_string("env", "CartPole-v1", "EnvPool task id.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file (path/to/config.py:NAME); overrides --env's choice.")
_THREADS = flags.DEFINE_list("threads", ["1", "2"], "Actor threads per actor device.")
_SECONDS = flags.DEFINE_float("seconds", 10.0, "Length of one timed window.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed windows per raw/actors figure.")
_PHASES = flags.DEFINE_list("phases", ["raw", "actors", "full"],
                            "What to measure (full Pong on a 2-core CPU takes minutes).")
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


def raw_envpool_sps(env_config, num_pools: int, num_envs: int, seconds: float) -> float:
  """Steps/s of `num_pools` EnvPools of `num_envs`, each stepped by its own thread."""
  import envpool
  import numpy as np

  options = {k: v for k, v in env_config.items() if k not in ("name", "task_id")}
  pools = [envpool.make(env_config.task_id, env_type="dm", num_envs=num_envs,
                        batch_size=num_envs, seed=i, **options) for i in range(num_pools)]
  spec = pools[0].action_spec()
  counts = [0] * num_pools
  go, stop = threading.Event(), threading.Event()

  def random_actions(rng):
    if hasattr(spec, "num_values"):  # discrete
      return rng.integers(0, spec.num_values, num_envs, dtype=np.int32)
    return rng.uniform(spec.minimum, spec.maximum,
                       (num_envs, *spec.shape)).astype(spec.dtype)  # continuous (bounded)

  def loop(i):
    rng = np.random.default_rng(i)
    pools[i].reset()
    go.wait()
    while not stop.is_set():
      pools[i].step(random_actions(rng))
      counts[i] += num_envs

  threads = [threading.Thread(target=loop, args=(i,)) for i in range(num_pools)]
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
  for pool in pools:
    pool.close()
  return total / elapsed


def full_sps(config, seconds: float) -> float:
  """Median steps/s of the whole runtime's records over `seconds` after its first three."""
  from podracer import builder
  from podracer.metrics import MetricsLogger

  class TimedLogger(MetricsLogger):
    """Ends the run (as a reached target would) `seconds` after the warm-up records."""

    def write(self, record, compile_step=False):
      super().write(record, compile_step)
      if len(self.records) == 3:
        self.window_start = time.perf_counter()
      if len(self.records) > 3 and time.perf_counter() - self.window_start >= seconds:
        self.target_reached = True

  config.total_env_steps = 10 ** 12
  config.runtime.log_interval = 1.0
  logger = TimedLogger(stream=None)
  builder.build(config).runtime.run(logger)
  return statistics.median(r["sps"] for r in logger.records[3:])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # Keep JAX's backend probing out of the table.
  if _CPU_DEVICES.value:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_"
                               f"platform_device_count={_CPU_DEVICES.value}").strip()
  import jax
  from podracer import builder

  base = _config()
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.device_count()} "
        f"device(s), {os.cpu_count()} CPU core(s), Python {platform.python_version()}")
  probe = builder.build(base).runtime
  num_actor_devices = len(probe.topology.actor_devices)
  print(f"{base.agent.name} on {base.env.task_id}: {probe.topology}, "
        f"{base.runtime.num_envs_per_actor} envs per actor thread, rollout "
        f"{base.runtime.rollout_length}; medians of {_REPEATS.value} x {_SECONDS.value:g} s")
  header = (f"{'threads/dev':>11} {'raw steps/s':>12} {'actor steps/s':>14} "
            f"{'full steps/s':>13} {'actor/raw':>9} {'full/raw':>9} {'full/actor':>10}")
  print(header)
  print("-" * len(header))
  results = {}
  nan = float("nan")
  for threads in map(int, _THREADS.value):
    config = base.copy_and_resolve_references()
    config.runtime.actor_threads_per_device = threads
    raw = actors = full = nan
    if "raw" in _PHASES.value:
      raw = statistics.median(
          raw_envpool_sps(config.env, num_actor_devices * threads,
                          config.runtime.num_envs_per_actor, _SECONDS.value)
          for _ in range(_REPEATS.value))
    if "actors" in _PHASES.value:
      runtime = builder.build(config).runtime
      runtime.run_actors(1.0)  # compile
      actors = statistics.median(runtime.run_actors(_SECONDS.value)
                                 for _ in range(_REPEATS.value))
    if "full" in _PHASES.value:
      full = full_sps(config, _SECONDS.value * _REPEATS.value)
    results[threads] = (raw, actors, full)
    print(f"{threads:>11} {raw:>12,.0f} {actors:>14,.0f} {full:>13,.0f} "
          f"{actors / raw:>9.3f} {full / raw:>9.3f} {full / actors:>10.3f}", flush=True)
  if 1 in results and 2 in results:
    print(f"2 vs 1 threads per device: raw x{results[2][0] / results[1][0]:.2f}, actors "
          f"x{results[2][1] / results[1][1]:.2f}, full x{results[2][2] / results[1][2]:.2f}")

if __name__ == "__main__":
  app.run(main)
