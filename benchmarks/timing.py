"""Timing helpers the benchmarks share (no flags here: each script defines its own)."""

from __future__ import annotations

import statistics
import time


def median_seconds(fn, *args, repeats: int) -> float:
  """Median wall seconds of `repeats` calls of `fn(*args)`, after one call that compiles
  and warms up."""
  import jax
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def median_sps(fn, state, steps_per_call, repeats):
  import jax
  state = jax.block_until_ready(fn(state))  # Compile and warm up.
  rates = []
  for _ in range(repeats):
    start = time.perf_counter()
    state = jax.block_until_ready(fn(state))
    rates.append(steps_per_call / (time.perf_counter() - start))
  return statistics.median(rates)


def paired_median_sps(fns, states, steps_per_call, repeats):
  """Medians of alternating timed calls of each fn: a noisy machine slows all alike."""
  import jax
  states = [jax.block_until_ready(fn(state)) for fn, state in zip(fns, states)]
  rates = [[] for _ in fns]
  for _ in range(repeats):
    for i, fn in enumerate(fns):
      start = time.perf_counter()
      states[i] = jax.block_until_ready(fn(states[i]))
      rates[i].append(steps_per_call / (time.perf_counter() - start))
  return [statistics.median(r) for r in rates]


def ppo_runtime(num_envs: int, rollout_length: int, updates: int, num_runs: int = 1):
  """PPO cartpole_anakin's runtime on one device, `updates` updates per call (of each of
  `num_runs` runs in one program)."""
  from agents.ppo.config import cartpole_anakin
  from podracer import builder

  config = cartpole_anakin()
  config.topology.num_devices = 1
  config.runtime.num_envs_per_device = num_envs
  config.runtime.rollout_length = rollout_length
  config.runtime.updates_per_call = updates
  config.total_env_steps = num_envs * rollout_length * updates
  config.num_runs = num_runs
  return builder.build(config).runtime


def acting_only(runtime, updates: int):
  """The runtime's own rollouts, `updates` of them, without observe or update: a function
  of the runtime's state, compiled over its mesh."""
  import jax

  from podracer import mesh

  def act_only(s):
    def body(s, _):
      key, rollout_key = jax.random.split(s.key)
      _, env_state, pending, actor_state, _ = runtime._rollout(
          runtime.agent, s.agent.nets, s.env, s.pending, s.agent.actor, rollout_key)
      return s._replace(env=env_state, pending=pending, key=key,
                        agent=s.agent._replace(actor=actor_state)), None
    return jax.lax.scan(body, s, None, length=updates)[0]

  return mesh.spmd(act_only, runtime.mesh)


def full_sps(config, seconds: float) -> float:
  """Median steps/s of the whole runtime's records over `seconds` after its first three."""
  from podracer import builder
  from podracer.logs.metrics import MetricsLogger

  class TimedLogger(MetricsLogger):
    """Ends the run (as a reached target would) `seconds` after the warm-up records."""

    def write(self, record, compile_step=False):
      super().write(record, compile_step)
      if len(self.records) == 3:
        self.window_start = time.perf_counter()
      if len(self.records) > 3 and time.perf_counter() - self.window_start >= seconds:
        self.target_reached = True

  config.total_env_steps = 10 ** 10  # Beyond any window; its schedules fit int32.
  config.runtime.log_interval = 1.0
  logger = TimedLogger(stream=None)
  builder.build(config).runtime.train(logger)
  return statistics.median(r["sps"] for r in logger.records[3:])
