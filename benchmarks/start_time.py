"""Where a launch's seconds go, first launch against a second identical one (issue 80):
time to the first record, XLA's compile seconds (`compile_s` of the result line) and the
whole process's wall time, from the shell to its exit.

  python benchmarks/start_time.py [--runs=ppo_cartpole_anakin,...] [--out=DIR]

Each run is launched twice as a user types it, into its own workdir, with
`--config.compile_cache` a folder made empty for that run: the first launch compiles and
writes the cache, the second reads it. Prints one line per launch and, per run, the
second launch's compile as a fraction of the first's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNS: Dict[str, List[str]] = {
    "ppo_cartpole_anakin": ["--config=agents/ppo/config.py:cartpole_anakin",
                            "--config.total_env_steps=65536"],
    "ppo_brax_anakin": ["--config=agents/ppo/config.py:brax_anakin",
                        "--config.total_env_steps=65536"],
    "ppo_cartpole_sebulba": ["--config=agents/ppo/config.py:cartpole_sebulba",
                             "--config.total_env_steps=65536"],
    "ppo_cartpole_seed": ["--config=agents/ppo/config.py:cartpole_seed",
                          "--config.total_env_steps=65536"],
    "muzero_catch_anakin": ["--config=agents/muzero/config.py:catch_anakin",
                            "--config.total_env_steps=8192"],
    "dqn_cartpole_anakin": ["--config=agents/dqn/config.py:cartpole_anakin",
                            "--config.total_env_steps=65536"],
}
FIRST_RECORD = re.compile(r"^\[\s*[\d.]+s\] \| env steps")


def launch(args: List[str], workdir: str, cache: str, timeout: float) -> Dict[str, Optional[float]]:
  """One launch as a user's command: seconds to its first progress line and to its exit,
  and its result line's compile_s (None when it printed none)."""
  command = [sys.executable, "-m", "podracer.launch", *args, f"--workdir={workdir}",
             f"--config.compile_cache={cache}"]
  start = time.perf_counter()
  first, result = None, {}
  with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True) as process:
    for line in process.stdout:
      if first is None and FIRST_RECORD.match(line):
        first = time.perf_counter() - start
      if line.startswith("result: "):
        result = json.loads(line[len("result: "):])
    process.wait(timeout=timeout)
  wall = time.perf_counter() - start
  if process.returncode:
    raise RuntimeError(f"{' '.join(command)} exited {process.returncode}")
  return dict(first_record_s=first, compile_s=result.get("compile_s"),
              cache_hits=result.get("compile_cache_hits"),
              training_s=result.get("wall_time"), wall_s=wall)


def measure(name: str, args: List[str], out: str, timeout: float) -> List[Dict]:
  cache = os.path.join(out, name, "cache")
  shutil.rmtree(os.path.join(out, name), ignore_errors=True)
  rows = []
  for which in ("first", "second"):
    row = dict(run=name, launch=which,
               **launch(args, os.path.join(out, name, which), cache, timeout))
    print(json.dumps(row), flush=True)
    rows.append(row)
  size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs)
  ratio = (rows[1]["compile_s"] / rows[0]["compile_s"]) if rows[0]["compile_s"] else None
  print(json.dumps(dict(run=name, second_compile_over_first=ratio,
                        cache_kb=round(size / 1024))), flush=True)
  return rows


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", default=",".join(RUNS), help="Comma-separated: " + ", ".join(RUNS))
  parser.add_argument("--out", default=None, help="Workdirs and caches (default: a temp dir).")
  parser.add_argument("--timeout", type=float, default=1800.0)
  flags = parser.parse_args()
  out = flags.out or tempfile.mkdtemp(prefix="podracer-start-time-")
  for name in flags.runs.split(","):
    measure(name, RUNS[name], out, flags.timeout)


if __name__ == "__main__":
  main()
