"""Learning figures of runs that a seed does not fix: the tests assert these runs'
mechanism only (the lag bound, the replay's rates, shutdown), their figures live here.

  python benchmarks/draws.py [--cases=ppo_sebulba,ppo_seed,...] [--seeds=0,1,2] [--tries=1]

Which runs: Sebulba with a policy lag above 0 (acting overlaps learning, so thread timing
picks what each update learns from), SEED (the workers' timing), and Reverb's sampler
(its own generator, which cannot be seeded: the reverb lane only). Each try is the
launcher in a process of its own, as a user runs it; the table gives, per seed and
try, the env steps at which a record's mean return first reached the case's target,
the best record, the mean over the last 20 % of the records and the wall time, then
each case's median and range of the last-20 % means.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, NamedTuple, Sequence

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from podracer.logs.metrics import tail_mean  # pylint: disable=wrong-import-position


class Case(NamedTuple):
  config: str
  overrides: Sequence[str]
  target: float
  devices: int = 1  # XLA host devices the process sees (8: Sebulba's default split)


CASES: Dict[str, Case] = {
    # PPO's Sebulba learning test before 2026-11-27: 2 actor and 6 learner devices, lag 1.
    "ppo_sebulba": Case("agents/ppo/config.py:cartpole_sebulba",
                        ("--config.total_env_steps=2000000",), 450, devices=8),
    "impala_sebulba": Case("agents/impala/config.py:cartpole_sebulba",
                           ("--config.stop_at_return=450",), 450, devices=8),
    "pqn_sebulba": Case("agents/pqn/config.py:cartpole_sebulba", (), 400),
    "ppo_seed": Case("agents/ppo/config.py:cartpole_seed", (), 450),
    "impala_seed": Case("agents/impala/config.py:cartpole_seed",
                        ("--config.stop_at_return=450",), 450),
    "r2d2_seed": Case("agents/r2d2/config.py:cartpole_seed",
                      ("--config.replay.name=host", "--config.stop_at_return=400"), 400),
    # R2D2's learning test (tests/test_r2d2.py), acting and learning in turns: fixed by
    # the seed, so these are its seeds rather than draws.
    "r2d2_sebulba_host": Case("agents/r2d2/config.py:cartpole_sebulba",
                              ("--config.replay.name=host",), 400),
    "r2d2_sebulba_device": Case("agents/r2d2/config.py:cartpole_sebulba",
                                ("--config.replay.name=device",), 400),
    # The reverb lane's (run it with .venv-reverb/bin/python).
    "r2d2_sebulba_reverb": Case("agents/r2d2/config.py:cartpole_sebulba",
                                ("--config.replay.name=reverb",), 400),
}

_CASES = flags.DEFINE_list("cases", ["ppo_sebulba", "ppo_seed", "impala_seed", "r2d2_seed",
                                     "pqn_sebulba"], f"Of {', '.join(CASES)}.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds to run.")
_TRIES = flags.DEFINE_integer("tries", 1, "Runs of each seed (the same seed differs).")


def run_once(case: Case, seed: int) -> dict:
  """One launch of `case` with `seed`; its figures."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)
  if case.devices > 1:
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={case.devices}"
  with tempfile.TemporaryDirectory() as workdir:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "podracer.launch", f"--config={case.config}",
         f"--workdir={workdir}", f"--config.seed={seed}", *case.overrides],
        cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if result.returncode:
      return dict(error=(result.stderr.strip().splitlines() or ["?"])[-1], wall=wall)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
      records = [json.loads(line) for line in f]
  return dict(figures(records, case.target), wall=wall)


def figures(records: List[dict], target: float) -> dict:
  points = [(r["env_steps"], r["episode_return"]) for r in records
            if r.get("episode_return") is not None]
  reached = next((steps for steps, value in points if value >= target), None)
  return dict(reached=reached, best=max(v for _, v in points),
              held=tail_mean([value for _, value in points]),
              end=records[-1]["env_steps"])


def main(argv):
  del argv
  print(f"{'case':<20} {'seed':>4} {'try':>3} {'reached':>10} {'best':>7} {'held':>7} "
        f"{'env steps':>10} {'wall s':>7}")
  for name in _CASES.value:
    case = CASES[name]
    helds = []
    for seed in map(int, _SEEDS.value):
      for attempt in range(_TRIES.value):
        out = run_once(case, seed)
        if "error" in out:
          print(f"{name:<20} {seed:>4} {attempt:>3} failed: {out['error']}")
          continue
        helds.append(out["held"])
        reached = f"{out['reached']:,}" if out["reached"] else "never"
        print(f"{name:<20} {seed:>4} {attempt:>3} {reached:>10} {out['best']:>7.1f} "
              f"{out['held']:>7.1f} {out['end']:>10,} {out['wall']:>7.0f}", flush=True)
    if helds:
      print(f"{name}: last-20 % means median {statistics.median(helds):.1f}, "
            f"range {min(helds):.1f}-{max(helds):.1f} over {len(helds)} runs "
            f"(target {case.target:g})", flush=True)


if __name__ == "__main__":
  app.run(main)
