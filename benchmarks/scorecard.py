"""The project's scorecard: one command that measures podracer on the machine it runs on.

  python benchmarks/scorecard.py [--out=scorecard] [--quick] [--only=a,b] [--skip=a,b]
                                 [--learn=ppo,impala,muzero,r2d2] [--cap_scale=1]

Writes OUT/scorecard.md (a table a person reads), OUT/scorecard.json (the same as data)
and one PNG per learning run, and prints each row as it is measured. Sections, in order:

  anakin   PPO CartPole against benchmarks/ppo_reference.py (hand-fused, the ceiling)
  sebulba  IMPALA Pong: EnvPool alone in its own async mode over every core (the
           ceiling), Sebulba's actors alone, the full runtime, full / ceiling
  seed     IMPALA pong_seed against Sebulba with the same environments: env steps/s,
           inference fill, latency p50 and p99
  muzero   Anakin cartpole_anakin acting and full at 8,192 environments; atari_sebulba
  runs     64 runs x 2,048 environments in one Anakin program against one run
  learn    time to a target: PPO Pong to +18 by default; --learn=impala,muzero,r2d2 (with
           --only=learn) runs those too, one after the other

Each section runs in a process of its own under a time cap, and the whole default set
stays within 9 minutes of wall time (compilation included): a section that reaches its
cap is stopped and reports what it measured by then. A section whose package is missing
(EnvPool, mctx) is a row saying so; one that fails is a row with its error's first line,
the others still run, and the script exits 1. Ctrl-C stops the running section and
writes the table so far (exit 130). `--quick` measures tiny sizes (CartPole and pixel
Catch instead of Pong) so every section fits in about 3 minutes on a 2-core CPU; the
test suite runs it. Without an accelerator the CPU is the device, and the header says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("anakin", "sebulba", "seed", "muzero", "runs", "learn")
# Seconds each section may take: on a GPU box (the default sizes, 9 minutes in all with
# the learning run's 4), and with --quick on a 2-core CPU (3 minutes in all).
CAPS = dict(anakin=45, sebulba=60, seed=60, muzero=55, runs=40, learn=250)
QUICK_CAPS = dict(anakin=25, sebulba=25, seed=30, muzero=45, runs=20, learn=25)
TOTAL_CAP = dict(full=540, quick=180)
# What each learning run trains, its target and its cap (--learn).
LEARN = {
    "ppo": ("agents/ppo/config.py:pong_sebulba", 18.0, 240),
    "impala": ("agents/impala/config.py:pong_sebulba", 18.0, 540),
    "muzero": ("agents/muzero/config.py:atari_sebulba", 10.0, 540),
    "r2d2": ("agents/r2d2/config.py:atari_sebulba", 18.0, 540),
}
QUICK_LEARN = {"ppo": ("agents/ppo/config.py:cartpole_anakin", 475.0, 25)}
NEEDS = dict(sebulba=("envpool",), seed=("envpool",), muzero=("mctx",), learn=())


# -- the parent: sections in processes of their own, the table ---------------------------


def main(argv: Optional[List[str]] = None) -> int:
  args = _parse(argv)
  # Ctrl-C stops the running section also where the script started with SIGINT ignored
  # (a background job of a script, as CI runners and the test lanes start jobs).
  signal.signal(signal.SIGINT, signal.default_int_handler)
  os.makedirs(args.out, exist_ok=True)
  card = dict(header=_header(args), sections=[])
  _print_header(card["header"])
  deadline = time.monotonic() + (10 ** 6 if args.only == ["learn"] else
                                 TOTAL_CAP["quick" if args.quick else "full"] * args.cap_scale)
  status = 0
  try:
    for name in _chosen(args):
      cap = min((QUICK_CAPS if args.quick else CAPS)[name] * args.cap_scale,
                deadline - time.monotonic())
      if name == "learn" and not args.quick:
        cap = max(cap, sum(LEARN[k][2] for k in args.learn) if args.only == ["learn"] else cap)
      section = _run_section(name, args, max(cap, 5.0))
      card["sections"].append(section)
      status |= section["status"] == "failed"
      _write(card, args.out)
  except KeyboardInterrupt:
    card["interrupted"] = True
    _write(card, args.out)
    print(f"interrupted: wrote {args.out}/scorecard.md with the sections so far")
    return 130
  _write(card, args.out)
  print(f"wrote {args.out}/scorecard.md, scorecard.json"
        + "".join(f", {p}" for s in card["sections"] for p in s.get("plots", [])))
  return 1 if status else 0


def _parse(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default="scorecard")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--only", type=_names, default=None)
  parser.add_argument("--skip", type=_names, default=[])
  parser.add_argument("--learn", type=lambda s: s.split(","), default=["ppo"])
  parser.add_argument("--inject_failure", default="",
                      help="A section that raises at once (tests/test_scorecard.py).")
  parser.add_argument("--cap_scale", type=float, default=1.0,
                      help="Multiplies every time cap: a busy machine (the test suite's) "
                           "that must not cut a section short.")
  parser.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  unknown = [k for k in args.learn if k not in LEARN]
  if unknown:
    parser.error(f"--learn={','.join(unknown)}: choose from {', '.join(LEARN)}")
  return args


def _names(text: str) -> List[str]:
  names = [n for n in text.split(",") if n]
  unknown = [n for n in names if n not in SECTIONS]
  if unknown:
    raise argparse.ArgumentTypeError(f"unknown section(s) {', '.join(unknown)}; the "
                                     f"sections are {', '.join(SECTIONS)}")
  return names


def _chosen(args) -> List[str]:
  return [s for s in SECTIONS if (args.only is None or s in args.only) and s not in args.skip]


def _run_section(name: str, args, cap: float) -> Dict[str, Any]:
  """Runs one section's process under `cap` seconds; its rows and how it ended."""
  rows_file = os.path.join(args.out, f"{name}.rows.jsonl")
  if os.path.exists(rows_file):
    os.remove(rows_file)
  command = [sys.executable, os.path.abspath(__file__), f"--child={name}", f"--out={args.out}",
             f"--learn={','.join(args.learn)}", f"--inject_failure={args.inject_failure}",
             f"--cap_scale={args.cap_scale}"]
  command += ["--quick"] if args.quick else []
  print(f"\n== {name} (cap {cap:.0f} s)", flush=True)
  start = time.monotonic()
  process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True,
                             env=_child_env(), start_new_session=True)
  ended = "done"
  try:
    _, stderr = process.communicate(timeout=cap)
  except subprocess.TimeoutExpired:
    _stop(process)
    _, stderr = process.communicate()
    ended = "capped"
  except KeyboardInterrupt:
    _stop(process)
    process.communicate()
    raise
  rows = _read_rows(rows_file)
  section = dict(name=name, wall_s=round(time.monotonic() - start, 1), rows=rows,
                 plots=[r["plot"] for r in rows if r.get("plot")])
  skipped = [r for r in rows if r.get("skipped")]
  if skipped:
    section.update(status="skipped", note=skipped[0]["skipped"])
  elif ended == "capped":
    section.update(status="capped", note=f"stopped at its cap of {cap:.0f} s; the rows are "
                   "what it measured by then")
  elif process.returncode:
    section.update(status="failed", note=_first_error(stderr, process.returncode))
  else:
    section["status"] = "ok"
  print(f"   {name}: {section['status']}" + (f" ({section['note']})" if "note" in section
                                                else "") + f", {section['wall_s']:.0f} s",
        flush=True)
  return section


def _child_env() -> Dict[str, str]:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT,
                                                                  os.environ.get("PYTHONPATH")])))
  env.pop("XLA_FLAGS", None)  # The machine's own devices, as a user's command sees them.
  return env


def _stop(process: subprocess.Popen) -> None:
  """SIGTERM to the section's process group (its workers too), SIGKILL 10 s later."""
  for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
    try:
      os.killpg(process.pid, sig)
    except ProcessLookupError:
      return
    try:
      process.wait(timeout=wait)
      return
    except subprocess.TimeoutExpired:
      continue


def _first_error(stderr: str, code: int) -> str:
  """The error's first line: the last traceback's exception line, else the last line."""
  lines = [l for l in (stderr or "").strip().splitlines() if l.strip()]
  exception = [l for l in lines if not l.startswith((" ", "\t", "Traceback"))]
  return (exception[-1] if exception else f"exit status {code}")[:300]


def _read_rows(path: str) -> List[Dict[str, Any]]:
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _header(args) -> Dict[str, Any]:
  """Where and with what this scorecard was measured (versions from a child process, so
  this one stays free of JAX)."""
  probe = ("import json, platform, jax, numpy; out = dict(python=platform.python_version(), "
           "jax=jax.__version__, numpy=numpy.__version__, backend=jax.default_backend(), "
           "devices=[str(d.device_kind) for d in jax.devices()])\n"
           "for m in ('jaxlib', 'envpool', 'mctx', 'optax', 'haiku'):\n"
           "  try:\n    out[m] = __import__(m).__version__\n"
           "  except Exception as e:\n    out[m] = 'missing'\n"
           "print(json.dumps(out))")
  result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=_child_env(), cwd=ROOT, timeout=120)
  versions = json.loads(result.stdout) if result.returncode == 0 else dict(
      error=_first_error(result.stderr, result.returncode))
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=ROOT).stdout.strip()
  return dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit,
              machine=f"{platform.node()}: {os.cpu_count()} CPU cores, {_memory_gib()} GiB",
              quick=args.quick, **versions)


def _memory_gib() -> str:
  try:
    import psutil  # pylint: disable=import-outside-toplevel
    return f"{psutil.virtual_memory().total / 2**30:.0f}"
  except ImportError:
    return "?"


def _print_header(header: Dict[str, Any]) -> None:
  for line in _header_lines(header):
    print(line)


def _header_lines(header: Dict[str, Any]) -> List[str]:
  backend = header.get("backend", "?")
  accelerator = (f"{backend}: {', '.join(sorted(set(header.get('devices', []))))} x "
                 f"{len(header.get('devices', []))}" if backend != "cpu" else
                 "none: the CPU is the device (no GPU or TPU found)")
  versions = ", ".join(f"{k} {header[k]}" for k in ("python", "jax", "jaxlib", "numpy",
                                                    "envpool", "mctx", "optax", "haiku")
                       if k in header)
  return [f"podracer scorecard, {header['date']}, commit {header['commit']}"
          + (" (--quick: tiny sizes)" if header["quick"] else ""),
          f"machine: {header['machine']}", f"accelerator: {accelerator}",
          f"versions: {versions or header.get('error', '?')}"]


def _write(card: Dict[str, Any], out: str) -> None:
  with open(os.path.join(out, "scorecard.json"), "w", encoding="utf-8") as f:
    json.dump(card, f, indent=1)
  lines = ["# Scorecard", ""] + [f"- {l}" for l in _header_lines(card["header"])] + [""]
  lines += ["| section | what | value | note |", "| --- | --- | --- | --- |"]
  for section in card["sections"]:
    status = section["status"] + (f": {section['note']}" if section.get("note") else "")
    lines.append(f"| **{section['name']}** | ({status}, {section['wall_s']:.0f} s) | | |")
    for row in section["rows"]:
      if row.get("skipped"):
        continue
      lines.append(f"| {section['name']} | {row['what']} | {_format(row)} | "
                   f"{row.get('note', '')} |")
  if card.get("interrupted"):
    lines.append("\nInterrupted (Ctrl-C): the sections above are those measured before.")
  plots = [p for s in card["sections"] for p in s.get("plots", [])]
  lines += [""] + [f"![{p}]({p})" for p in plots]
  with open(os.path.join(out, "scorecard.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")


def _format(row: Dict[str, Any]) -> str:
  value, unit = row["value"], row.get("unit", "")
  if isinstance(value, float) and abs(value) < 100:
    text = f"{value:.2f}"
  elif isinstance(value, (int, float)):
    text = f"{value:,.0f}"
  else:
    text = str(value)
  return f"{text} {unit}".strip()


# -- the sections: each in its own process, each row written as soon as it is measured ---


class Rows:
  """Appends a section's rows to OUT/SECTION.rows.jsonl as they are measured (what the
  parent reports if the section is stopped at its cap) and prints them."""

  def __init__(self, out: str, section: str):
    self.path, self.section = os.path.join(out, f"{section}.rows.jsonl"), section

  def add(self, what: str, value: Any, unit: str = "", **extra: Any) -> Any:
    row = dict(what=what, value=value, unit=unit, **extra)
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(row) + "\n")
    print(f"   {self.section}: {what}: {_format(row)}" + (f" ({extra['note']})" if extra.get(
        "note") else ""), flush=True)
    return value

  def skip(self, why: str) -> None:
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(dict(skipped=why)) + "\n")


def child(args) -> int:
  """One section, in this process (the parent's `--child=NAME`)."""
  sys.path.insert(0, ROOT)
  rows = Rows(args.out, args.child)
  missing = [m for m in NEEDS.get(args.child, ()) if not _importable(m)]
  if missing:
    rows.skip(f"{', '.join(missing)} is not installed here (the default lane has it)")
    return 0
  if args.inject_failure == args.child:
    raise RuntimeError(f"injected failure in section {args.child} (--inject_failure)")
  from absl import logging  # pylint: disable=import-outside-toplevel
  logging.set_verbosity(logging.WARNING)
  import agents  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
  SECTION_FUNCTIONS[args.child](rows, args.quick, args)
  return 0


def _importable(module: str) -> bool:
  import importlib.util  # pylint: disable=import-outside-toplevel
  return importlib.util.find_spec(module) is not None


def anakin_section(rows: Rows, quick: bool, args) -> None:
  """PPO CartPole's full program against the hand-fused reference, alternating calls."""
  from benchmarks import ppo_reference  # pylint: disable=import-outside-toplevel
  from benchmarks.timing import paired_median_sps, ppo_runtime  # pylint: disable=import-outside-toplevel
  del args
  for num_envs in ((64, 256) if quick else (2048, 32768)):
    updates = max(1, (16_384 if quick else 2 ** 22) // (num_envs * 128))
    runtime = ppo_runtime(num_envs, 128, updates)
    init, train = ppo_reference.make(num_envs, 128, updates)
    ours, reference = paired_median_sps(
        [lambda s: runtime._step(s)[0], lambda s: train(s)[0]],  # pylint: disable=protected-access
        [runtime.init(), init()], runtime.steps_per_call, 3 if quick else 5)
    rows.add(f"PPO CartPole, {num_envs:,} envs: podracer", ours, "env steps/s")
    rows.add(f"PPO CartPole, {num_envs:,} envs: reference (ppo_reference.py)", reference,
             "env steps/s")
    rows.add(f"PPO CartPole, {num_envs:,} envs: podracer / reference", ours / reference, "x")


def _sebulba_config(quick: bool):
  from agents.impala import config as impala_config  # pylint: disable=import-outside-toplevel
  config = impala_config.cartpole_sebulba() if quick else impala_config.pong_sebulba()
  config.topology.actor_devices, config.topology.learner_devices = (0,), (0,)
  if quick:
    config.runtime.num_envs_per_actor = 16
  return config


def sebulba_section(rows: Rows, quick: bool, args) -> None:
  """EnvPool's own async mode over every core (the ceiling), actors alone, full."""
  from benchmarks.actors import run_actors  # pylint: disable=import-outside-toplevel
  from benchmarks.timing import full_sps  # pylint: disable=import-outside-toplevel
  from podracer import builder  # pylint: disable=import-outside-toplevel
  del args
  config = _sebulba_config(quick)
  seconds = 3.0 if quick else 10.0
  total = config.runtime.num_envs_per_actor * config.runtime.actor_threads_per_device
  task = config.env.task_id
  ceiling = rows.add(f"{task}: EnvPool alone, async over {os.cpu_count()} threads, "
                     f"{total} envs", envpool_async_sps(config.env, total, seconds),
                     "env steps/s")
  actors = run_actors(builder.build(config).runtime, seconds)
  rows.add(f"{task}: Sebulba actors alone (IMPALA, no learner)", actors, "env steps/s")
  full = rows.add(f"{task}: Sebulba full (IMPALA)", full_sps(config, 2 * seconds),
                  "env steps/s")
  rows.add(f"{task}: Sebulba full / EnvPool async ceiling", full / ceiling, "x")


def envpool_async_sps(env_config, num_envs: int, seconds: float) -> float:
  """EnvPool's own asynchronous mode: `num_envs` environments, batches of half, its
  threads over every core, random actions from one Python thread."""
  import envpool  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  options = {k: v for k, v in env_config.items() if k not in ("name", "task_id")}
  pool = envpool.make(env_config.task_id, env_type="dm", num_envs=num_envs,
                      batch_size=max(1, num_envs // 2), num_threads=os.cpu_count(), **options)
  num_actions = pool.action_spec().num_values
  rng = np.random.default_rng(0)
  pool.async_reset()
  count, start = 0, None
  while start is None or time.perf_counter() - start < seconds:
    env_id = pool.recv().observation.env_id
    pool.send(rng.integers(0, num_actions, len(env_id), dtype=np.int32), env_id)
    count += len(env_id)
    if start is None and count >= 4 * num_envs:  # every environment reset, then time
      start, count = time.perf_counter(), 0
  pool.close()
  return count / (time.perf_counter() - start)


def seed_section(rows: Rows, quick: bool, args) -> None:
  """SEED against Sebulba with the same environments, both learning."""
  from agents.impala import config as impala_config  # pylint: disable=import-outside-toplevel
  from benchmarks.seed import full_run  # pylint: disable=import-outside-toplevel
  from podracer.config import presets  # pylint: disable=import-outside-toplevel
  del args
  config = impala_config.cartpole_seed() if quick else impala_config.pong_seed()
  config.topology.actor_devices, config.topology.learner_devices = (0,), (0,)
  if quick:
    config.runtime.num_local_workers, config.runtime.envs_per_worker = 2, 16
    config.runtime.envs_per_batch = 16
  seconds = 6.0 if quick else 15.0
  total = config.runtime.num_local_workers * config.runtime.envs_per_worker
  task = config.env.task_id
  seed_sps, fill, p50, p99 = full_run(config.copy_and_resolve_references(), seconds)
  rows.add(f"{task}: SEED full, {config.runtime.num_local_workers} workers x "
           f"{config.runtime.envs_per_worker} envs", seed_sps, "env steps/s")
  rows.add(f"{task}: SEED inference fill", fill)
  rows.add(f"{task}: SEED inference latency p50", p50, "ms")
  rows.add(f"{task}: SEED inference latency p99", p99, "ms")
  twin = config.copy_and_resolve_references()
  twin.runtime = presets.sebulba_runtime(total // 2, config.runtime.rollout_length,
                                         max_policy_lag=config.runtime.max_policy_lag)
  sebulba = rows.add(f"{task}: Sebulba full, 2 actor threads x {total // 2} envs",
                     full_run(twin, seconds)[0], "env steps/s")
  rows.add(f"{task}: SEED / Sebulba", seed_sps / sebulba, "x")


def muzero_section(rows: Rows, quick: bool, args) -> None:
  """MuZero's Anakin acting and full program, and its Sebulba config's env steps/s."""
  from benchmarks.muzero import muzero_runtime  # pylint: disable=import-outside-toplevel
  from benchmarks.timing import acting_only, full_sps, median_sps  # pylint: disable=import-outside-toplevel
  from agents.muzero import config as muzero_config  # pylint: disable=import-outside-toplevel
  del args
  num_envs = 64 if quick else 8192
  runtime = muzero_runtime("gumbel", 16, num_envs, 32, 1)
  state = runtime.init()
  repeats = 2 if quick else 3
  rows.add(f"cartpole_anakin, {num_envs:,} envs: acting (search of 16)",
           median_sps(acting_only(runtime, 1), state, runtime.steps_per_call, repeats),
           "env steps/s")
  rows.add(f"cartpole_anakin, {num_envs:,} envs: full (acting and learning)",
           median_sps(lambda s: runtime._step(s)[0], state, runtime.steps_per_call,  # pylint: disable=protected-access
                      repeats), "env steps/s")
  config = muzero_config.cartpole_sebulba() if quick else muzero_config.atari_sebulba()
  config.topology.actor_devices, config.topology.learner_devices = (0,), (0,)
  rows.add(f"{config.env.get('task_id', 'cartpole')} {'cartpole_sebulba' if quick else 'atari_sebulba'}: "
           "Sebulba full", full_sps(config, 5.0 if quick else 20.0), "env steps/s")


def runs_section(rows: Rows, quick: bool, args) -> None:
  """Many runs in one Anakin program against one run, the same environments per run."""
  from benchmarks.timing import median_sps, ppo_runtime  # pylint: disable=import-outside-toplevel
  del args
  num_envs, many = (64, 4) if quick else (2048, 64)
  figures = {}
  for num_runs in (1, many):
    runtime = ppo_runtime(num_envs, 128, 1, num_runs=num_runs)
    figures[num_runs] = rows.add(
        f"PPO CartPole, {num_runs} run(s) x {num_envs:,} envs in one program",
        median_sps(lambda s: runtime.step(s)[0], runtime.init(),
                   runtime.steps_per_call * num_runs, 2 if quick else 3), "env steps/s")
  rows.add(f"{many} runs / 1 run", figures[many] / figures[1], "x")


def learn_section(rows: Rows, quick: bool, args) -> None:
  """Time to a target: each run the launcher's, stopping at its target or its cap; its
  learning curve copied next to the scorecard."""
  chosen = QUICK_LEARN if quick else {k: LEARN[k] for k in args.learn}
  for name, (config, target, cap) in chosen.items():
    if not quick and "pong" in config and not _importable("envpool"):
      rows.add(f"{name}: {config}", "skipped", note="EnvPool is not installed here")
      continue
    _learn_once(rows, name, config, target, cap * args.cap_scale, args.out)


def _learn_once(rows: Rows, name: str, config: str, target: float, cap: float,
                out: str) -> None:
  workdir = os.path.join(out, f"learn_{name}")
  shutil.rmtree(workdir, ignore_errors=True)
  start = time.monotonic()
  command = [sys.executable, "-m", "podracer.launch", f"--config={config}",
             f"--workdir={workdir}", f"--config.stop_at_return={target}"]
  process = subprocess.Popen(command, cwd=ROOT, env=_child_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
  try:
    _, stderr = process.communicate(timeout=cap)
    ended = "reached" if process.returncode == 0 else f"failed: {_first_error(stderr, 1)}"
  except subprocess.TimeoutExpired:
    process.send_signal(signal.SIGTERM)  # the launcher writes its records and plot
    process.communicate(timeout=60)
    ended = f"cap of {cap:.0f} s"
  wall = time.monotonic() - start
  records = _records(workdir)
  returns = [(r["env_steps"], r["episode_return"]) for r in records
             if r.get("episode_return") is not None]
  best = max((v for _, v in returns), default=float("nan"))
  reached = next((s for s, v in returns if v >= target), None)
  plot = f"learn_{name}.png"
  if os.path.exists(os.path.join(workdir, "learning_curve.png")):
    shutil.copy(os.path.join(workdir, "learning_curve.png"), os.path.join(out, plot))
  else:
    plot = None
  rows.add(f"{name}: {config} to {target:g}", round(wall, 1), "s",
           note=(f"reached at {reached:,} env steps" if reached else
                 f"not reached ({ended}); best {best:.2f} by "
                 f"{returns[-1][0] if returns else 0:,} env steps"), plot=plot)


def _records(workdir: str) -> List[Dict[str, Any]]:
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


SECTION_FUNCTIONS: Dict[str, Callable[..., None]] = dict(
    anakin=anakin_section, sebulba=sebulba_section, seed=seed_section,
    muzero=muzero_section, runs=runs_section, learn=learn_section)


if __name__ == "__main__":
  parsed = _parse(sys.argv[1:])
  if parsed.child:
    try:
      sys.exit(child(parsed))
    except Exception:  # pylint: disable=broad-except
      traceback.print_exc()
      sys.exit(1)
  sys.exit(main(sys.argv[1:]))
