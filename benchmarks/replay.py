"""Replay throughput on Atari-sized R2D2 sequences: inserts/s and samples/s per replay.

Items are what R2D2's actor threads insert under `atari_sebulba`: per environment a
sequence of 85 steps (40 burn-in + 40 learned + 5 n-step) of [4, 84, 84] uint8 frame
stacks, with the LSTM state (2 x 512) at its start; an insert is one actor thread's 32
sequences, a sample the learner's batch of 64. Consecutive inserts continue the same 32
environments (sequences overlap by 45 steps), with an episode start now and then, as an
actor's do. Each replay runs without a rate limiter, one thread, in this process:

  host    podracer's host-memory replay (numpy; each timeline and frame stored once)
  device  the device replay on the default JAX device (jitted add / sample)
  reverb  an embedded Reverb server (reverb lane only; skipped where not installed)

  .venv/bin/python benchmarks/replay.py            # default lane: host, device
  .venv-reverb/bin/python benchmarks/replay.py     # reverb lane: host, device, reverb

Then (`--part=priorities` alone) the device replay's prioritized sampling against its
uniform sampling, on DQN-sized transitions (CartPole's): learner steps/s of a compiled
loop that samples 128 transitions, gives them new priorities and adds 16, at capacities
10K and 100K, with priority_exponent 0 (uniform) and 0.6, side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from podracer.components.replay.device import DeviceReplay  # noqa: E402
from podracer.components.replay.host import HostReplay  # noqa: E402
from podracer.types import StepType, TimeStep, Trajectory  # noqa: E402

BURN_IN, LEARNED, N_STEP, STACK, SIDE, LSTM = 40, 40, 5, 4, 84, 512
OVERLAP = BURN_IN + N_STEP
LENGTH = OVERLAP + LEARNED


def actor_inserts(envs: int, inserts: int, seed: int = 0):
  """`inserts` batches of `envs` overlapping sequences, as one actor thread makes them."""
  rng = np.random.default_rng(seed)
  steps = OVERLAP - 1 + LEARNED * inserts + 1 + STACK
  frames = rng.integers(0, 255, (envs, steps, SIDE, SIDE), dtype=np.uint8)
  # stacks[:, t] = frames t .. t+3 (newest last): each step shifts in one new frame.
  stacks = np.lib.stride_tricks.sliding_window_view(frames, STACK, axis=1)
  stacks = np.moveaxis(stacks, -1, 2)[:, :steps - STACK + 1]
  step_type = np.full(stacks.shape[:2], StepType.MID, np.int32)
  step_type[:, ::500] = StepType.FIRST
  reward = rng.normal(size=stacks.shape[:2]).astype(np.float32)
  out = []
  for j in range(inserts):
    window = slice(j * LEARNED, j * LEARNED + LENGTH)
    core = (rng.normal(size=(envs, LSTM)).astype(np.float32),) * 2
    out.append(Trajectory(
        timestep=TimeStep(step_type[:, window], reward[:, window],
                          np.ones_like(reward[:, window]), np.ascontiguousarray(
                              stacks[:, window])),
        actor_state=core, action=step_type[:, window] % 6, extras={}))
  return out


def item_spec(items):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), items)


def timed(fn, count):
  start = time.perf_counter()
  for i in range(count):
    fn(i)
  return time.perf_counter() - start


def bench_host(batches, batch_size, max_size, samples):
  replay = HostReplay(batch_size=batch_size, max_size=max_size)
  replay.start(item_spec(batches[0]), overlap=OVERLAP)
  insert = timed(lambda i: replay.insert(batches[i]), len(batches))
  sample = timed(lambda i: replay.sample_batch(), samples)
  return insert, sample, replay.bytes_used


def bench_device(batches, batch_size, max_size, samples):
  replay = DeviceReplay(max_size=max_size, batch_size=batch_size)
  # Distinct buffers (init shares one zero between counters), so the state can be donated.
  state = jax.tree.map(jnp.copy, replay.init(item_spec(batches[0])))
  add = jax.jit(replay.add, donate_argnums=0)
  draw = jax.jit(replay.sample)
  state = add(state, batches[0])  # Compiles; not timed.
  jax.block_until_ready(draw(state, jax.random.PRNGKey(0)))
  holder = [state]

  def insert(i):
    holder[0] = add(holder[0], batches[i])
    jax.block_until_ready(holder[0].size)

  def sample(i):
    jax.block_until_ready(draw(holder[0], jax.random.PRNGKey(i)).items)

  insert_time = timed(insert, len(batches))
  return insert_time, timed(sample, samples), sum(
      x.nbytes for x in jax.tree.leaves(holder[0]))


def bench_reverb(batches, batch_size, max_size, samples):
  from podracer.components.replay.reverb_replay import ReverbReplay
  replay = ReverbReplay(batch_size=batch_size, max_size=max_size, timeout=60.0)
  replay.start(item_spec(batches[0]))
  try:
    insert = timed(lambda i: replay.insert(batches[i]), len(batches))
    sample = timed(lambda i: replay.sample_batch(), samples)
  finally:
    replay.close()
  return insert, sample, None


def bench_priorities(capacity: int, alpha: float, steps: int = 200, repeats: int = 5):
  """Learner steps/s (median of `repeats` compiled loops of `steps`) of the device
  replay holding `capacity` transitions with priority exponent `alpha`."""
  replay = DeviceReplay(max_size=capacity, batch_size=128, priority_exponent=alpha)
  spec = dict(observation=jax.ShapeDtypeStruct((4,), jnp.float32),
              action=jax.ShapeDtypeStruct((), jnp.int32),
              reward=jax.ShapeDtypeStruct((), jnp.float32))
  fresh = lambda key: dict(observation=jax.random.normal(key, (16, 4)),
                           action=jnp.zeros((16,), jnp.int32), reward=jnp.ones((16,)))

  def step(state, key):
    draw_key, new_key = jax.random.split(key)
    sample = replay.sample(state, draw_key)
    priorities = jnp.abs(sample.items["observation"].sum(-1)) + 0.1
    state = replay.update_priorities(state, sample, priorities)
    return replay.add(state, fresh(new_key)), sample.probabilities.mean()

  @jax.jit
  def loop(state, key):
    return jax.lax.scan(step, state, jax.random.split(key, steps))

  state = replay.init(spec)
  filled = dict(observation=jax.random.normal(jax.random.PRNGKey(1), (capacity, 4)),
                action=jnp.zeros((capacity,), jnp.int32), reward=jnp.ones((capacity,)))
  state = replay.add(state, filled, jax.random.uniform(jax.random.PRNGKey(2), (capacity,)))
  jax.block_until_ready(loop(state, jax.random.PRNGKey(0)))  # Compiles; not timed.
  times = []
  for i in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(loop(state, jax.random.PRNGKey(i)))
    times.append(time.perf_counter() - start)
  return steps / float(np.median(times))


def print_priorities():
  print("device replay, transitions: learner steps/s (sample 128, new priorities, add 16)")
  for capacity in (10_000, 100_000):
    uniform, prioritized = (bench_priorities(capacity, a) for a in (0.0, 0.6))
    print(f"  capacity {capacity:>7,}: uniform {uniform:8.0f}, prioritized (alpha 0.6) "
          f"{prioritized:8.0f}, ratio {prioritized / uniform:.2f}")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--inserts", type=int, default=16, help="batches of --envs sequences")
  parser.add_argument("--envs", type=int, default=32)
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--samples", type=int, default=16, help="batches sampled")
  parser.add_argument("--max_size", type=int, default=1000, help="sequences held")
  parser.add_argument("--part", default="sequences,priorities",
                      help="comma-separated: sequences (the replays), priorities")
  args = parser.parse_args()
  if "sequences" in args.part.split(","):
    print_sequences(args)
  if "priorities" in args.part.split(","):
    print_priorities()


def print_sequences(args):
  batches = actor_inserts(args.envs, args.inserts)
  item_mb = sum(x[0].nbytes for x in jax.tree.leaves(batches[0])) / 1e6
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}; sequences of {LENGTH} "
        f"steps of [{STACK}, {SIDE}, {SIDE}] uint8 ({item_mb:.2f} MB each), inserts of "
        f"{args.envs}, samples of {args.batch_size}, max_size {args.max_size}")
  benches = dict(host=bench_host, device=bench_device, reverb=bench_reverb)
  try:
    import reverb  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
  except ImportError:
    print("reverb: not installed in this lane (skipped)")
    benches.pop("reverb")
  for name, bench in benches.items():
    insert, sample, nbytes = bench(batches, args.batch_size, args.max_size, args.samples)
    items_in = args.inserts * args.envs
    items_out = args.samples * args.batch_size
    held = "" if nbytes is None else f", {nbytes / 1e9:.2f} GB held"
    print(f"{name:>7}: {items_in / insert:8.0f} sequences inserted/s "
          f"({items_in * LEARNED / insert:9.0f} env steps/s), "
          f"{items_out / sample:7.0f} sequences sampled/s{held}")


if __name__ == "__main__":
  main()
