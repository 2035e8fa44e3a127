"""Launches a run from a config file:

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin --workdir=DIR \
      [--config.KEY=VALUE ...]

Writes DIR/config.json (the resolved config), DIR/metrics.jsonl, TensorBoard event files,
checkpoints and, at the end, DIR/learning_curve.png. Relaunched into the same DIR
it resumes from the latest checkpoint; `--fresh` moves a previous run aside instead
(podracer/lifecycle/workdir.py). Exit status: 0 when the run ends, 2 with one paragraph
saying why when the config cannot be built, 1 with the thread's traceback when a runtime thread fails,
130 on Ctrl-C and 143 on SIGTERM (after all threads and environments are stopped and the
metrics, plot and `result:` line are written; see podracer/lifecycle/preemption.py).

Several processes (podracer/distributed/processes.py): `--coordinator=HOST:PORT
--num_processes=N --process_id=I` on each, or `python -m podracer.distributed.launch_local
--num_processes=N -- ARGS` on one machine; under SLURM or Open MPI the flags come from the cluster.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

if __name__ == "__main__":
  # `python -m podracer.launch` runs this file as `__main__`; a user's module (`--import`)
  # that imports the public `podracer.launch` gets this module, not a second copy of it
  # whose flags would be defined twice.
  sys.modules.setdefault("podracer.launch", sys.modules[__name__])

# In the Reverb lane rlax -> distrax -> TFP imports TensorFlow, whose C++ logger prints
# CUDA plugin registration errors even on CPU-only runs, before any message of ours.
# Set TF_CPP_MIN_LOG_LEVEL yourself to see TensorFlow's C++ errors again.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags, logging
from ml_collections import config_flags

from podracer import deprecation, distributed
from podracer.config import files as config_files, runs as runs_lib, validation
from podracer.registry import imports
from podracer.logs import disk
from podracer.lifecycle import compile_cache, preemption
from podracer.errors import (ConfigError, DiskError, EnvironmentStepError,
                             EnvironmentWorkerError, NonFiniteError, ThreadFailure)
from podracer.logs.metrics import METRICS_FILE
from podracer.lifecycle.workdir import CONFIG_FILE, held as hold_workdir
from podracer.lifecycle.workdir import prepare as prepare_workdir

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, as path/to/config.py:NAME.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where metrics, config and plots go.")
_FRESH = flags.DEFINE_bool(
    "fresh", False, "Start over in a workdir that holds a previous run, moving its files "
    "into WORKDIR/previous/<UTC time>/ (nothing is deleted).")
_IMPORTS = flags.DEFINE_multi_string(
    "import", [], "A module of your own to import before the config is built, so that the "
    "components it registers can be named in the config: a dotted module on the path "
    "(--import=myrl), a .py file or a package directory (its folder goes on the path). "
    "Repeatable; recorded as the config's `imports`, which SEED's workers import too.")
_DEBUG = flags.DEFINE_bool("debug", False, "Show tracebacks for config errors too.")
_LIST = flags.DEFINE_bool(
    "list", False, "Print every registered component by kind (environments, networks, "
    "losses, optimizers, replay, topologies, agents, runtimes) with the keys its config "
    "section accepts and their defaults, then exit; with --config, the file's own too.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator", None, "HOST:PORT of process 0, for a run over several processes; "
    "without it JAX's cluster detection (SLURM, Open MPI, TPU pods) is tried.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0..N-1.")

EXIT_CONFIG_ERROR = 2
EXIT_THREAD_FAILURE = 1
EXIT_INTERRUPTED = preemption.EXIT_INTERRUPTED


def _fail(message: str) -> None:
  # Paths and keys stay whole: a line break inside one would misquote it.
  lines = textwrap.wrap(f"Config error: {message}", width=88, break_on_hyphens=False,
                        break_long_words=False)
  sys.stderr.write("\n".join(lines) + "\n")
  sys.exit(EXIT_CONFIG_ERROR)


def register_components_and_agents() -> None:
  """Registers podracer's components and runtimes, and the agents that ship with it.

  The application, not the library, knows the built-in agents: `podracer/` never
  imports `agents`, so an agent is a plug-in like any user's.
  """
  from podracer import builder  # Imports JAX: keep `--help` fast.
  import agents  # noqa: F401  # pylint: disable=import-outside-toplevel

  builder.register_builtin_components()


def run(config, workdir=None, stream=sys.stdout, fresh=False):
  """Deprecated (0.17.0): `launch`."""
  deprecation.warn_once("podracer.launch.run", deprecation.renamed_message(
      "podracer.launch.run", "podracer.launch.launch", "0.17.0"))
  return launch(config, workdir, stream, fresh)


def launch(config, workdir=None, stream=sys.stdout, fresh=False):
  """One launch of `config`: holds `workdir`, builds the experiment and trains it;
  returns the run's summary. Raises ConfigError."""
  validation.check_config(config)
  compile_cache.use(config.get(compile_cache.KEY))  # Before anything is compiled.
  if distributed.process_count() > 1:  # One run: the same config and podracer on each.
    from podracer import __version__  # pylint: disable=import-outside-toplevel
    distributed.check_same_run(config.to_json_best_effort(sort_keys=True), __version__)
  main = distributed.is_main()
  with hold_workdir(workdir if main else None):
    return _launch_in(config, workdir, stream, fresh, main)


def _launch_in(config, workdir, stream, fresh, main):
  """`launch` once process 0 holds the workdir."""
  found = prepare_workdir(workdir, fresh, config) if main else None
  distributed.check_shared_workdir(workdir)
  if found and stream:
    stream.write(found + "\n")
  from podracer import builder  # Imports JAX: keep `--help` fast.

  register_components_and_agents()
  experiment = builder.build(config)
  checkpoints_in = workdir
  if not main:  # Process 0 writes the run's files; this one its own log and its part
    stream, workdir = distributed.open_log(workdir, stream), None  # of each checkpoint.
  elif workdir:
    path = os.path.join(workdir, CONFIG_FILE)
    with disk.writing("config", path), open(path, "w") as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True) + "\n")
  try:
    # (Only where they differ: an Experiment of a user's own may not take the argument.)
    where = {} if checkpoints_in == workdir else dict(checkpoints_in=checkpoints_in)
    summary = experiment.train(workdir=workdir, stream=stream, **where)
  except KeyboardInterrupt as interrupt:
    if experiment.logger is None:  # Stopped before the first step
      raise  # (a rank told to stop while it still imported): nothing ran, nothing to say.
    # The runtime stopped its threads and environments, and the logger wrote the plot.
    summary = dict(experiment.logger.summary(), stopped_by=preemption.stopped_by(interrupt))
    saved = experiment.checkpointer.saved_env_steps if experiment.checkpointer else None
    if saved is not None:  # Past the last record: what the run did, and resumes from.
      summary["env_steps"] = max(summary.get("env_steps", 0), saved)
    _report(summary, workdir, stream)
    if saved is not None and stream:
      stream.write(f"saved a checkpoint at env steps {saved:,} in "
                   f"{experiment.checkpointer.directory}; relaunch to resume\n")
    raise
  except ConfigError:  # Found when first traced (a loss's shape): bad input, exit 2.
    raise
  except Exception:
    logger = experiment.logger  # None: it failed before the first step
    if workdir and (logger is None or not logger.records):
      sys.stderr.write(f"The run recorded no metrics before it failed: {workdir}/"
                       f"{METRICS_FILE} is empty and no learning curve was plotted.\n")
    raise
  summary.pop("records", None)
  _report(summary, workdir, stream)
  return summary


def _report(summary, workdir, stream) -> None:
  if stream:
    if summary.get("learning_started") is False:
      stream.write(f"the run ended before learning started: its replay held "
                   f"{summary['replay_size']:,.0f} of the {summary['replay_min_size']:,} items "
                   "(`replay.min_size`) it needs to sample; raise total_env_steps or lower "
                   "replay.min_size\n")
    stream.write("result: " + json.dumps(summary) + "\n")
    if workdir:
      plot = ", learning_curve.png" if summary.get("env_steps") else " (empty: no records)"
      stream.write(f"wrote {workdir}/{METRICS_FILE}, {CONFIG_FILE}{plot}\n")
    stream.flush()


def _config_path(argv):
  """The file part of --config=FILE[:NAME] (or --config FILE[:NAME]), if given."""
  for i, arg in enumerate(argv[1:], 1):
    if arg.startswith("--config="):
      return arg.split("=", 1)[1].split(":", 1)[0]
    if arg == "--config" and i + 1 < len(argv):
      return argv[i + 1].split(":", 1)[0]
  return None


def _prepare_config_file(path):
  """Makes a config file a first-class module before absl loads it.

  Built-ins are registered first, so a name the file registers again clashes with the
  built-in by name (or replaces it with override=True) instead of the reverse. The
  file's folder then goes first on sys.path, as Python does for a script, so the file
  can import modules beside it.
  """
  register_components_and_agents()
  folder = os.path.dirname(os.path.abspath(path))
  if folder not in sys.path:
    sys.path.insert(0, folder)


def add_imports(config, specs) -> None:
  """Imports the config's own `imports` and records `specs` (--import, already imported)
  after them in `config.imports`, so config.json and SEED's workers have them all."""
  own = config.get(imports.CONFIG_KEY) or ()
  if isinstance(own, str):
    own = (own,)
  imports.import_all(own)
  every = tuple(dict.fromkeys([imports.resolve(s) for s in (*own, *specs)]))
  if every:
    config[imports.CONFIG_KEY] = every


def _import_args(argv):
  """The values of every `--import=X` / `--import X` on the command line."""
  found = []
  for i, arg in enumerate(argv[1:], 1):
    if arg.startswith(imports.FLAG + "="):
      found.append(arg.split("=", 1)[1])
    elif arg == imports.FLAG and i + 1 < len(argv):
      found.append(argv[i + 1])
  return found


class _ComposingParser(flags.ArgumentParser):
  """ml_collections' config-file parser, then `--config.SECTION=NAME` choices applied to
  the loaded config before absl applies the key overrides (podracer/config/compose.py)."""

  def __init__(self, inner):
    self.inner, self.choices, self.sweeps, self.config = inner, {}, {}, None
    self.bounds = {}
    self.imports, self.overrides = [], []

  def parse(self, argument):
    # podracer's loader, not ml_collections': every way the file can be wrong is one
    # paragraph naming it (podracer/config/files.py), whatever else the command line has.
    self.config = config = config_files.load(argument)
    from podracer.config import compose  # pylint: disable=import-outside-toplevel
    with config.unlocked():
      add_imports(config, self.imports)  # Before a section swap names their components.
      compose.choose(config, self.choices)
      compose.add_accepted(config, self.overrides)
      runs_lib.add_sweep(config, self.sweeps)
      runs_lib.add_sweep(config, self.bounds, section="population.bounds")
    return config

  def flag_type(self):
    return self.inner.flag_type()


_CONFIG_PARSER = _ComposingParser(flags.FLAGS["config"].parser)
flags.FLAGS["config"].parser = _CONFIG_PARSER


def _parse_flags(argv):
  """absl's parser, with bad overrides reported as one paragraph instead of a traceback."""
  path = _config_path(argv)
  if path is not None:
    try:  # Before anything else on the command line is looked at.
      config_files.check_readable(path)
    except ConfigError as e:
      _fail(str(e))
    _prepare_config_file(path)
  _CONFIG_PARSER.imports = _import_args(argv)
  if _CONFIG_PARSER.imports:  # After the built-ins (a clash names both), before the file.
    register_components_and_agents()
    try:
      imports.import_all(_CONFIG_PARSER.imports)
    except ConfigError as e:
      _fail(str(e))
  from podracer.config import compose  # pylint: disable=import-outside-toplevel
  _CONFIG_PARSER.choices, argv = compose.section_choices(argv)
  # `--config.sweep.KEY=V1,V2` names keys the config does not have: podracer/config/runs.py.
  _CONFIG_PARSER.sweeps, argv = runs_lib.sweep_args(argv)
  _CONFIG_PARSER.bounds, argv = runs_lib.sweep_args(argv, runs_lib.BOUNDS_FLAG)
  _CONFIG_PARSER.overrides = [compose.override_path(a) for a in argv
                              if a.startswith("--config.") and "=" in a]
  # ml_collections finds the overrides to define in sys.argv itself.
  sys.argv[:] = argv
  try:
    return flags.FLAGS(argv)
  except ConfigError as e:  # The config file (podracer/config/files.py) or a choice.
    if "--debug" in argv:
      raise
    _fail(str(e))
  except flags.Error as e:
    message = str(e)
    if "Traceback (most recent call last)" in message:  # A config file raised: keep its error.
      error, _, text = message.strip().splitlines()[-1].partition(": ")
      message = (f"config file '{path}' failed to load: {error.rsplit('.', 1)[-1]}: {text}")
    _fail(message)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    bad = [a for a in argv[1:] if a.startswith("--config.")]
    _fail(_override_error(bad, e))


def _override_error(overrides, error):
  """One plain-text sentence for an override ml_collections could not apply."""
  from podracer.config import compose  # pylint: disable=import-outside-toplevel
  config = _CONFIG_PARSER.config
  for arg in overrides:
    path = compose.override_path(arg)
    why = config is not None and compose.unknown_key_message(config, path)
    if why:
      return f"could not apply {arg}: {why}"
  while error.args and isinstance(error.args[0], BaseException):  # KeyError in AttributeError
    error = error.args[0]
  text = str(error.args[0]) if error.args else str(error)
  return (f"could not apply {' '.join(overrides) or 'the command line'}: "
          f"{' '.join(text.split())}. Overrides must name an existing config key, as "
          "--config.KEY=VALUE.")


def main(argv):
  logging.set_verbosity(logging.WARNING)  # Keep JAX's backend probing out of the output.
  if _LIST.value:
    from podracer.config import compose  # pylint: disable=import-outside-toplevel
    register_components_and_agents()
    print(compose.catalogue())
    return
  if len(argv) > 1:
    _fail(f"unexpected arguments {' '.join(argv[1:])!r}; overrides look like "
          "--config.KEY=VALUE.")
  if not flags.FLAGS["config"].present:
    _fail("no config given; pass --config=path/to/config.py:NAME.")
  try:  # Before the config's value is read, which would chain three tracebacks.
    validation.check_config_file(config_flags.get_config_filename(flags.FLAGS["config"]))
  except ConfigError as e:
    _fail(str(e))
  _start_processes()
  preemption.handle_sigint()
  preemption.handle_sigterm()
  try:
    launch(_CONFIG.value, _WORKDIR.value, fresh=_FRESH.value)
  except ConfigError as e:
    if _DEBUG.value:
      raise
    _fail(str(e))
  except (NonFiniteError, EnvironmentWorkerError, EnvironmentStepError, DiskError) as e:
    sys.stderr.write(f"Run stopped: {e}\n")
    sys.exit(EXIT_THREAD_FAILURE)
  except ThreadFailure as e:
    # The runtime stopped its other threads and environments before raising.
    sys.stderr.write(f"Run stopped because a thread failed.\n{e}\n")
    sys.exit(EXIT_THREAD_FAILURE)
  except KeyboardInterrupt as interrupt:
    # Runtimes stop their threads and environments before this propagates.
    name = preemption.stopped_by(interrupt)
    what = "Interrupted" if name == "SIGINT" else f"Stopped by {name}"
    sys.stderr.write(f"{what}; all threads and environments were stopped.\n")
    sys.exit(preemption.exit_status(interrupt))


def _start_processes() -> None:
  """jax.distributed, before anything touches a device (podracer/distributed/processes.py)."""
  given = [f.name for f in (_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID) if f.present]
  if given and len(given) < 3:
    _fail(f"--{', --'.join(given)} given alone; a run over several processes needs "
          "--coordinator=HOST:PORT, --num_processes=N and --process_id=I together.")
  if given and not 0 <= _PROCESS_ID.value < _NUM_PROCESSES.value:
    _fail(f"--process_id={_PROCESS_ID.value} is not in 0..{_NUM_PROCESSES.value - 1} "
          f"(--num_processes={_NUM_PROCESSES.value}).")
  try:
    distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  except Exception as e:  # pylint: disable=broad-except
    sys.stderr.write(f"Could not join the other processes: {e}\n")
    sys.exit(EXIT_THREAD_FAILURE)


def entry_point():
  with distributed.ends_process_on_failure():
    app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
  entry_point()
