"""The batch split's data efficiency (the Podracer paper, section 4.2): MuZero
`cartpole_sebulba` against the same config with `runtime.num_envs_per_actor` and
`runtime.updates_per_batch` both x SCALE (the same samples per env step; SCALE x the env
steps acted with each set of parameters).

  python benchmarks/muzero_split.py [--seeds=0,1,2] [--scale=4] [--budget=ENV_STEPS] \\
      [--window=8192] [--threshold=400]

One device acts and learns, `max_policy_lag=0`, a record per batch: each run is the same
for a seed under the same XLA flags (the test suite's are
XLA_FLAGS=--xla_force_host_platform_device_count=8). For each seed and config, the env
steps at which
  record: a record's mean return first reaches the threshold (the base's records hold
          SCALE x fewer episodes, so this favours it: one or two long episodes suffice);
  window: the mean over the episodes that ended in the last `window` env steps first does
          (`metrics.windowed_returns`: both configs measured alike).
Runs go to the config's 500K env steps, over which its learning rate anneals to 0 (about
3.5 minutes each on 2 CPU cores); another `budget` anneals over another run. The last
line reads `split/base window RATIO`: the median over seeds that reached it in both.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds, each run in both configs.")
_SCALE = flags.DEFINE_integer("scale", 4, "Factor on environments and updates per batch.")
_BUDGET = flags.DEFINE_integer("budget", 0, "Env steps per run (0: the config's).")
_WINDOW = flags.DEFINE_integer("window", 8192, "Env steps of the windowed mean return.")
_THRESHOLD = flags.DEFINE_float("threshold", 400.0, "Mean return to reach.")


def run(seed: int, scale: int, budget: int):
  """The records of `cartpole_sebulba` with environments and updates per batch x scale."""
  from agents.muzero.config import cartpole_sebulba
  from podracer import builder

  config = cartpole_sebulba()
  config.seed = seed
  config.total_env_steps = budget or config.total_env_steps
  config.topology.actor_devices = config.topology.learner_devices = (0,)
  config.runtime.max_policy_lag, config.runtime.log_interval = 0, 0.0
  config.runtime.num_envs_per_actor *= scale
  config.runtime.updates_per_batch *= scale
  return builder.build(config).train(stream=None)["records"]


def first_reaching(points, threshold: float):
  return next((steps for steps, value in points if value >= threshold), None)


def _k(steps) -> str:
  return "never" if steps is None else f"{steps / 1000:.0f}K"


def _ratio(split, base) -> str:
  return "-" if split is None or base is None else f"{split / base:.2f}x"


def main(argv):
  del argv
  import jax
  from podracer.logs.metrics import windowed_returns

  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPU "
        f"core(s), Python {platform.python_version()}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
  budget = f"{_BUDGET.value:,}" if _BUDGET.value else "the config's"
  print(f"MuZero cartpole_sebulba: base against x{_SCALE.value} environments and updates "
        f"per batch; env steps to a mean return of {_THRESHOLD.value:g} (budget "
        f"{budget}; window {_WINDOW.value:,} env steps)", flush=True)
  header = (f"{'seed':>4} {'base record':>11} {'split record':>12} {'ratio':>6} "
            f"{'base window':>11} {'split window':>12} {'ratio':>6} {'s':>5}")
  print(header)
  print("-" * len(header))
  ratios = []
  for seed in map(int, _SEEDS.value):
    start = time.time()
    found = {}
    for name, scale in (("base", 1), ("split", _SCALE.value)):
      records = run(seed, scale, _BUDGET.value)
      # A window of 1 env step holds each record's own episodes: its mean return.
      found[name] = (first_reaching(windowed_returns(records, 1), _THRESHOLD.value),
                     first_reaching(windowed_returns(records, _WINDOW.value),
                                    _THRESHOLD.value))
    (base_r, base_w), (split_r, split_w) = found["base"], found["split"]
    if base_w is not None and split_w is not None:
      ratios.append(split_w / base_w)
    print(f"{seed:>4} {_k(base_r):>11} {_k(split_r):>12} {_ratio(split_r, base_r):>6} "
          f"{_k(base_w):>11} {_k(split_w):>12} {_ratio(split_w, base_w):>6} "
          f"{time.time() - start:>5.0f}", flush=True)
  median = f"{statistics.median(ratios):.2f}" if ratios else "-"
  print(f"split/base window {median}")


if __name__ == "__main__":
  app.run(main)
