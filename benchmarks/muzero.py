"""MuZero throughput under Anakin against a bare mctx search on the same networks and batch.

  python benchmarks/muzero.py [--num_envs=16,64,256] [--simulations=8,16,50] \
      [--searches=gumbel,muzero] [--repeats=3]

MuZero `cartpole_anakin` on one device, its network (two 64-unit layers), for each search,
number of simulations and number of environments, in one process:
  search: `agent.run_search` alone, jitted, on a fixed batch of CartPole observations, in
          a compiled scan (no environment, no trajectory): the ceiling for acting;
  act:    the runtime's own rollouts (environment, search, trajectory entries and extras),
          without observe or update;
  full:   the whole Anakin program (acting, replay, `agent.sgd_steps` gradient steps);
  ppo:    PPO `cartpole_anakin`'s full program at the same environments (once per count).
Steps/s are env steps (one search per environment per step); medians of `repeats` timed
calls after a warm-up call. act/search is what the runtime, the entries and the extras
cost (1.0 = nothing); full/act what learning costs. The last line reads
`act/search RATIO` for the default search at 64 environments and 16 simulations.
"""

from __future__ import annotations

import os
import platform
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import acting_only, median_sps, ppo_runtime  # noqa: E402

_NUM_ENVS = flags.DEFINE_list("num_envs", ["16", "64", "256"], "Environments (one device).")
_SIMULATIONS = flags.DEFINE_list("simulations", ["8", "16", "50"], "Simulations per search.")
_SEARCHES = flags.DEFINE_list("searches", ["gumbel", "muzero"], "agent.search values.")
_ROLLOUT = flags.DEFINE_integer("rollout_length", 32, "Env steps per update.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed calls per measurement.")
_MIN_STEPS = flags.DEFINE_integer("min_steps_per_call", 8192,
                                  "Env steps per timed call, so launch overhead stays small.")
_PPO = flags.DEFINE_bool("ppo", True, "Also measure PPO's full program at each count.")

HEADLINE = ("gumbel", 16, 64)  # search, simulations, environments of the last line


def muzero_runtime(search: str, simulations: int, num_envs: int, rollout_length: int,
                   updates: int):
  """MuZero cartpole_anakin's runtime on one device; the replay can be sampled after the
  first update, so every timed update learns."""
  from agents.muzero.config import cartpole_anakin
  from podracer import builder

  config = cartpole_anakin()
  config.topology.num_devices = 1
  config.agent.search = search
  config.agent.num_simulations = simulations
  config.runtime.update(dict(num_envs_per_device=num_envs, rollout_length=rollout_length,
                             updates_per_call=updates))
  config.replay.min_size = num_envs
  config.replay.max_size = max(config.replay.max_size, 2 * num_envs)
  config.total_env_steps = num_envs * rollout_length * updates
  return builder.build(config).runtime


def bare_search(runtime, searches: int):
  """`searches` searches of the agent on one fixed batch of observations, in a scan; the
  carry sums the actions, so no search can be left out of the compiled program."""
  import jax
  import jax.numpy as jnp

  agent = runtime.agent

  def run(carry):
    nets, observation, key, total = carry

    def body(carry, _):
      key, total = carry
      key, search_key = jax.random.split(key)
      out = agent.run_search(nets, observation, search_key)
      return (key, total + jnp.sum(out.action) + jnp.sum(out.action_weights)), None

    (key, total), _ = jax.lax.scan(body, (key, total), None, length=searches)
    return nets, observation, key, total

  return jax.jit(run)


def measure(search: str, simulations: int, num_envs: int):
  import jax
  import numpy as np

  updates = max(1, _MIN_STEPS.value // (num_envs * _ROLLOUT.value))
  runtime = muzero_runtime(search, simulations, num_envs, _ROLLOUT.value, updates)
  steps = runtime.steps_per_call
  state = runtime.init()
  first = lambda x: x[0]
  nets = jax.tree.map(first, state.agent.nets)
  observation = jax.tree.map(first, state.pending.timestep.observation)[-1]
  carry = jax.device_put((nets, observation, jax.random.PRNGKey(0), np.float32(0)))
  search = bare_search(runtime, steps // num_envs)
  carry = search(carry)  # Its output's placement differs from the input's: compile both.
  search_sps = median_sps(search, carry, steps, _REPEATS.value)
  act_sps = median_sps(acting_only(runtime, updates), state, steps, _REPEATS.value)
  full_sps = median_sps(lambda s: runtime._step(s)[0], state, steps, _REPEATS.value)
  return search_sps, act_sps, full_sps


def ppo_full(num_envs: int) -> float:
  updates = max(1, _MIN_STEPS.value // (num_envs * 128))
  runtime = ppo_runtime(num_envs, 128, updates)
  return median_sps(lambda s: runtime._step(s)[0], runtime.init(), runtime.steps_per_call,
                     _REPEATS.value)


def main(argv):
  del argv
  import jax
  import jaxlib
  import mctx
  print(f"jax {jax.__version__} (jaxlib {jaxlib.__version__}), mctx {mctx.__version__}, "
        f"backend {jax.default_backend()}, {os.cpu_count()} CPU core(s), "
        f"Python {platform.python_version()}")
  print(f"MuZero cartpole_anakin, 1 device, rollout {_ROLLOUT.value}; env steps/s, median "
        f"of {_REPEATS.value} calls", flush=True)
  header = (f"{'search':>7} {'sims':>5} {'envs':>6} {'search/s':>11} {'act/s':>11} "
            f"{'full/s':>11} {'ppo/s':>11} {'act/search':>10} {'full/act':>9} "
            f"{'full/ppo':>9}")
  print(header)
  print("-" * len(header))
  ppo = {}
  headline = None
  for search in _SEARCHES.value:
    for simulations in map(int, _SIMULATIONS.value):
      for num_envs in map(int, _NUM_ENVS.value):
        search_sps, act_sps, full_sps = measure(search, simulations, num_envs)
        if _PPO.value and num_envs not in ppo:
          ppo[num_envs] = ppo_full(num_envs)
        ppo_sps = ppo.get(num_envs, float("nan"))
        print(f"{search:>7} {simulations:>5} {num_envs:>6} {search_sps:>11,.0f} "
              f"{act_sps:>11,.0f} {full_sps:>11,.0f} {ppo_sps:>11,.0f} "
              f"{act_sps / search_sps:>10.3f} {full_sps / act_sps:>9.3f} "
              f"{full_sps / ppo_sps:>9.4f}", flush=True)
        if (search, simulations, num_envs) == HEADLINE:
          headline = act_sps / search_sps
  if headline is None:
    print(f"act/search n/a (the grid leaves out {HEADLINE[0]} search, {HEADLINE[1]} "
          f"simulations at {HEADLINE[2]} environments)")
  else:
    print(f"act/search {headline:.3f}")


if __name__ == "__main__":
  app.run(main)
