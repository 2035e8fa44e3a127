"""How many of the library's modules ("rooms") `builder.build` walks through for a config.

    python benchmarks/rooms.py ppo.cartpole_anakin ppo.cartpole_sebulba

For each config (AGENT.CONFIG of agents/), one build under `sys.setprofile` in a fresh
process (modules imported first, so imports are not counted): every call into a
function of a file under podracer/ is seen with the nearest podracer/ frame below it
(its caller, through any library in between). A **visit** is a call whose file differs
from that caller's file (a step from one room into another); the rooms are the distinct
files entered; the calls, every call into a library function. Calls made while a module
is being imported are left out. Prints the rooms, the visits, the calls, and (visits,
calls) of the builder and of the files that hold many runs (`--by_room`: of every file).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import subprocess
import sys
from typing import Any, Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = os.path.join(ROOT, "podracer") + os.sep
MANY_RUNS = ("podracer/config/runs.py", "podracer/config/population.py",
             "podracer/runtimes/many_runs.py", "podracer/runtimes/population.py")


def _room(code: Any) -> str:
  filename = code.co_filename
  return os.path.relpath(filename, ROOT) if filename.startswith(LIBRARY) else ""


def _caller_room(frame: Any) -> str:
  """The room of the nearest library frame below `frame`; None inside an import."""
  room, back = "", frame.f_back
  while back is not None and back.f_code is not count.__code__:
    if back.f_code.co_name == "<module>":
      return None
    if not room:
      room = _room(back.f_code)
    back = back.f_back
  return room


def count(name: str) -> Dict[str, Any]:
  """The rooms and visits of one build of `name` (AGENT.CONFIG)."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  import agents  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
  builder.register_builtin_components()
  agent, config_name = name.split(".")
  config = getattr(importlib.import_module(f"agents.{agent}.config"), config_name)()
  visits: collections.Counter = collections.Counter()
  calls: collections.Counter = collections.Counter()

  def profile(frame, event, _):
    if event != "call" or frame.f_code.co_name == "<module>":
      return
    room = _room(frame.f_code)
    if room:
      caller = _caller_room(frame)
      if caller is not None:
        calls[room] += 1
        visits[room] += caller != room

  sys.setprofile(profile)
  try:
    builder.build(config)
  finally:
    sys.setprofile(None)
  return dict(config=name, rooms=len(calls), visits=sum(visits.values()),
              calls=sum(calls.values()),
              many_runs={f: (visits[f], calls[f]) for f in MANY_RUNS},
              builder=(visits["podracer/builder.py"], calls["podracer/builder.py"]),
              by_room={room: (visits[room], n) for room, n in calls.most_common()})


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("configs", nargs="+", help="AGENT.CONFIG, e.g. ppo.cartpole_anakin")
  parser.add_argument("--one", help=argparse.SUPPRESS)  # a child's single config
  parser.add_argument("--by_room", action="store_true", help="every room's visits")
  args = parser.parse_args()
  if args.one:
    print(json.dumps(count(args.one)))
    return
  for name in args.configs:
    out = subprocess.run([sys.executable, __file__, name, "--one", name], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if out.returncode:
      sys.exit(f"{name}: the build failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{name}: {result['rooms']} rooms, {result['visits']} visits between rooms, "
          f"{result['calls']} calls; (visits, calls) builder.py {tuple(result['builder'])}, "
          + ", ".join(f"{f.split('podracer/')[1]} {tuple(n)}"
                      for f, n in result["many_runs"].items()))
    if args.by_room:
      for room, (n, c) in result["by_room"].items():
        print(f"  {n:5d} {c:6d}  {room}")


if __name__ == "__main__":
  sys.path.insert(0, ROOT)
  main()
