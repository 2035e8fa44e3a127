"""SEED against Sebulba on one machine, and SEED's two transports.

  python benchmarks/seed.py [--config=agents/ppo/config.py:cartpole_seed] \\
      [--workers=1,2] [--seconds=10]

Prints, in one run:
  1. raw round trips/s of each transport (Unix socket, gRPC) for the config's step
     message (and for 16 Atari frames), one stream, request and reply alternating;
  2. workers alone, against a server that answers with random actions (their ceiling);
  3. the server and workers without a learner (benchmarks/actors.py, initial parameters), and
     full `seed` runs (learner included) per worker count, `envs_per_worker` each, with
     the median `inference_fill` and worker-seen latency p50/p99;
  4. Sebulba's full steps/s with the same total environments (2 actor threads);
  5. with `--door_rounds=N`: what checking each STEP at the door costs (server.py's
     `door.step_problem`): its time per message for this config's step, for 16 Pong-sized
     uint8 frames and for the same frames as float32, and full runs with the check on and
     off, alternating, N rounds each (`door on/off RATIO`, of medians);
and ends with `seed/sebulba RATIO` for the largest worker count. Rates are medians of the
run's records after the first two (compilation); machines are noisy, so compare ratios
from one run.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from benchmarks.actors import run_actors  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", "agents/ppo/config.py:cartpole_seed", "A SEED config.")
_WORKERS = flags.DEFINE_list("workers", ["1", "2"], "Worker counts to run.")
_SECONDS = flags.DEFINE_float("seconds", 10.0, "Seconds per measurement.")
_DOOR_ROUNDS = flags.DEFINE_integer("door_rounds", 0, "Rounds of the door's A/B (0: none).")
_DOOR_ONLY = flags.DEFINE_bool("door_only", False, "Only the door's figures (section 5).")


def round_trips(transport_kind: str, payload: bytes, seconds: float) -> float:
  from podracer.distributed import transport

  class Echo(transport.Session):
    def handle(self, kind, data):
      return transport.ACTION, b"\0" * 64

  listener = transport.Listener("localhost", 0, lambda peer: Echo(),
                                unix=transport_kind == "unix", max_sessions=2)
  try:
    conn = transport.connect(listener.address, transport_kind, timeout=10)
    for _ in range(100):
      conn.request(transport.STEP, payload)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
      conn.request(transport.STEP, payload)
      n += 1
    rate = n / (time.perf_counter() - start)
    conn.close()
    return rate
  finally:
    listener.close()


def workers_alone(config, workers: int, seconds: float) -> float:
  """Env steps/s of `workers` local workers against a server answering random actions."""
  import numpy as np

  from podracer import builder
  from podracer.distributed import transport
  from podracer.runtimes.seed.workers import LocalWorkers

  runtime = builder.build(config).runtime
  welcome = runtime._welcome()
  actions = transport.Layout(welcome["action"])
  layout, steps, lock = runtime.step_layout(), [0], threading.Lock()
  bw = config.runtime.envs_per_worker
  rng = np.random.default_rng(0)
  num_actions = runtime.spec.action.num_values

  class Random(transport.Session):
    def handle(self, kind, data):
      if kind == transport.HELLO:
        return transport.CONFIG, transport.encode_json(dict(
            {k: v for k, v in welcome.items() if k != "observation_tree"}, seed=1, seat=0))
      if kind == transport.SPEC:
        return transport.OK, b""
      layout.unpack(data)
      with lock:
        steps[0] += bw
      return transport.ACTION, actions.pack([rng.integers(0, num_actions, bw).astype(
          actions.arrays[0][1])])

  listener = transport.Listener("localhost", 0, lambda peer: Random(), unix=True,
                                max_sessions=workers)
  local = LocalWorkers(workers, listener.address, "auto", None)
  try:
    while steps[0] < 1000 * bw:  # Workers start (imports) before they step.
      time.sleep(0.1)
    before, start = steps[0], time.perf_counter()
    time.sleep(seconds)
    return (steps[0] - before) / (time.perf_counter() - start)
  finally:
    listener.close()
    local.stop(grace=0.5)


def full_run(config, seconds: float):
  """(median env steps/s, median inference_fill, p50, p99) over `seconds` of a run, after
  its first two records (compilation)."""
  from podracer import builder
  from podracer.logs.metrics import MetricsLogger

  runtime = builder.build(config).runtime
  logger = MetricsLogger(stream=None)
  poll, since = runtime._poll, []

  def timed_poll(group):  # The main thread's hook, every 0.1 s: stop after `seconds`.
    poll(group)
    if len(logger.records) >= 2 and not since:
      since.append(time.monotonic())
    if since and time.monotonic() - since[0] >= seconds:
      group.stop.set()
  runtime._poll = timed_poll
  runtime.train(logger)
  records = logger.records[2:] or logger.records
  median = lambda k: statistics.median([r[k] for r in records if k in r] or [0.0])
  return (median("sps"), median("inference_fill"), median("inference_latency_p50_ms"),
          median("inference_latency_p99_ms"))


def door_per_message(runtime) -> None:
  """The check's own microseconds per STEP message, for this config and Pong-sized frames."""
  import jax
  import numpy as np

  from podracer.distributed import transport
  from podracer.runtimes import door
  bw = runtime.options.envs_per_worker
  cases = {"this config's step": [np.zeros((bw, *s.shape), s.dtype)
                                  for s in jax.tree.leaves(runtime.spec.observation)],
           "16 x [4, 84, 84] uint8": [np.zeros((16, 4, 84, 84), np.uint8)],
           "16 x [4, 84, 84] float32": [np.zeros((16, 4, 84, 84), np.float32)]}
  for what, observation in cases.items():
    n = len(observation[0])
    arrays = [np.ones(n, np.int32), np.zeros(n, np.float32), np.ones(n, np.float32),
              *observation, np.zeros(5)]
    layout = transport.Layout([(a.shape, a.dtype.str) for a in arrays])
    check, payload = door.Door(layout.arrays), layout.pack(arrays)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.5:
      assert check.problem(payload, arrays) is None
      count += 1
    print(f"  door check, {what:>26}: {1e6 * (time.perf_counter() - start) / count:8.1f} "
          f"us per message")


def door_cost(config, seconds: float, rounds: int) -> None:
  """Full runs with the door's check on and off, alternating; the ratio of medians."""
  from podracer.runtimes import door
  check = door.Door.problem
  rates = {"on": [], "off": []}
  for _ in range(rounds):
    for mode in ("on", "off"):
      if mode == "off":
        door.Door.problem = lambda self, payload, arrays: None
      try:
        rates[mode].append(full_run(config, seconds)[0])
      finally:
        door.Door.problem = check
  on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
  print(f"  full seed runs, check on: {[round(r) for r in rates['on']]}, off: "
        f"{[round(r) for r in rates['off']]}\n  door on/off {on / off:.3f}")


def main(argv):
  del argv
  import agents  # noqa: F401 -- registers the agents
  from podracer import builder
  from podracer.config import presets

  base = _CONFIG.value
  base.topology.actor_devices, base.topology.learner_devices = (0,), (0,)
  base.total_env_steps = 10**9
  seconds = _SECONDS.value
  runtime = builder.build(base).runtime
  if _DOOR_ONLY.value:
    c = base.copy_and_resolve_references()
    c.runtime.num_local_workers = int(_WORKERS.value[-1])
    door_per_message(runtime)
    door_cost(c, seconds, _DOOR_ROUNDS.value or 3)
    return
  step_bytes = runtime.step_layout().nbytes
  frames = 16 * 4 * 84 * 84
  print(f"transports (round trips/s, one stream; {step_bytes:,} B up, 64 B back):")
  for size, what in ((step_bytes, "this config's step"), (frames, "16 Atari frames")):
    unix = round_trips("unix", b"\0" * size, seconds / 2)
    grpc = round_trips("grpc", b"\0" * size, seconds / 2)
    print(f"  {what:>20}: unix {unix:10,.0f}  grpc {grpc:9,.0f}  unix/grpc {unix / grpc:5.1f}")
  counts = [int(w) for w in _WORKERS.value]
  bw = base.runtime.envs_per_worker
  print(f"\n{'workers':>7} {'envs':>5} {'alone sps':>10} {'no learner':>10} "
        f"{'seed sps':>10} {'fill':>5} "
        f"{'p50 ms':>7} {'p99 ms':>7}")
  seed_sps = 0.0
  for w in counts:
    c = base.copy_and_resolve_references()
    c.runtime.num_local_workers = w
    c.runtime.envs_per_batch = min(c.runtime.envs_per_batch, w * bw)
    alone = workers_alone(c, w, seconds)
    no_learner = run_actors(builder.build(c).runtime, seconds)
    seed_sps, fill, p50, p99 = full_run(c, seconds)
    print(f"{w:>7} {w * bw:>5} {alone:>10,.0f} {no_learner:>10,.0f} {seed_sps:>10,.0f} "
          f"{fill:>5.2f} "
          f"{p50:>7.2f} {p99:>7.2f}", flush=True)
  twin = base.copy_and_resolve_references()
  total = counts[-1] * bw
  twin.runtime = presets.sebulba_runtime(total // 2, base.runtime.rollout_length,
                                         max_policy_lag=base.runtime.max_policy_lag)
  sebulba_sps = full_run(twin, seconds)[0]
  if _DOOR_ROUNDS.value:
    print("\nthe door (each STEP checked before it reaches a device):")
    door_per_message(runtime)
    door_cost(c, seconds, _DOOR_ROUNDS.value)
  print(f"\nsebulba, 2 actor threads x {total // 2}: {sebulba_sps:,.0f} env steps/s")
  print(f"seed/sebulba {seed_sps / sebulba_sps:.2f}")


if __name__ == "__main__":
  app.run(main)
