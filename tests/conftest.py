"""Test-wide setup: 8 virtual CPU devices, so multi-device code is tested without a GPU.

XLA reads the flag once, when JAX first starts a backend, so it is set here, before any
test module imports JAX.
"""

import os
import shutil
import tempfile

import pytest

# As podracer.testing_fixtures.force_host_devices(8) does; that module is not imported
# here, so that pytest can load it as a plugin (below) with its assertions rewritten.
_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# gRPC's fork handlers off in every gRPC of the session (grpcio's, jaxlib's): a test that
# forks to exec (ffmpeg, a launcher) after a SEED or multi-process test in the same
# worker could have its child aborted by them (podracer/distributed/transport.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# One persistent XLA compilation cache for the session, shared with the processes tests
# start (they inherit the environment): most of the suite's time is compiling, and many
# tests compile the same programs (a relaunch, a second seed, the same config in another
# module, whose compiled programs `_release_compiled_programs` frees). A cached program
# is the same executable, so results do not change; the key includes XLA_FLAGS.
# PODRACER_TEST_XLA_CACHE=off runs the suite without it (JAX_COMPILATION_CACHE_DIR set
# empty: neither JAX nor podracer's launches cache), to measure what it saves.
# Not in the reverb lane: its JAX (0.4.34) crashed reading a cached program back
# (podracer/lifecycle/compile_cache.py, OLD_JAX), so it compiles every program.
_XLA_CACHE = None
if (os.environ.get("PODRACER_TEST_XLA_CACHE") == "off"
    or os.environ.get("PODRACER_LANE", "").strip() == "reverb"):
  os.environ["JAX_COMPILATION_CACHE_DIR"] = ""
elif "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _XLA_CACHE = tempfile.mkdtemp(prefix="podracer-tests-xla-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _XLA_CACHE
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

# Marks the processes this session starts (they inherit the environment), so a test that
# looks for its stray processes does not count another session's: a second lane running
# side by side, or a user's own run on the machine.
os.environ["PODRACER_TEST_SESSION"] = f"{os.getpid()}-{os.urandom(4).hex()}"

# The fixtures podracer ships for users' tests (podracer/testing_fixtures.py).
pytest_plugins = ["podracer.testing_fixtures"]


# Markers (pytest.ini declares them):
#   learning     a learning figure (tests/learning.py runs most as a user's command)
#   slow         a test over about 10 s that is not a learning test: processes, faults,
#                signals, long runs; `scripts/test.sh --fast` leaves both out
#   reverb_lane  what differs in the reverb lane (Reverb itself, code whose behaviour
#                depends on the JAX, Haiku, optax, rlax or mctx version, the launcher in
#                that lane): the reverb lane runs these alone, the default lane runs all
REVERB_LANE = "reverb_lane"


def pytest_configure(config):
  """In the default lane (current JAX), a DeprecationWarning raised from podracer's own
  code is an error: the library moves off an API JAX deprecates before it is removed.
  (The reverb lane pins an older JAX, whose warnings are about what it lacks.)"""
  from tests.reverb_support import current_lane  # pylint: disable=import-outside-toplevel
  if current_lane() != "reverb":
    config.addinivalue_line("filterwarnings", "error::DeprecationWarning:podracer")


def pytest_unconfigure(config):
  del config
  if _XLA_CACHE is not None:
    shutil.rmtree(_XLA_CACHE, ignore_errors=True)


# What a test costs, roughly, by its marker: used only to order the files (below).
_COST = {"learning": 120, "slow": 20}


def _file_cost(items):
  """Each test file's rough cost: its learning tests, its slow ones, and the rest."""
  cost = {}
  for item in items:
    marks = [m for m in _COST if item.get_closest_marker(m) is not None]
    cost[item.path] = cost.get(item.path, 0) + max((_COST[m] for m in marks), default=1)
  return cost


# Test files that import the default lane's own packages (Flax, Equinox) at their top: the
# reverb lane installs neither and runs none of their tests (none is `reverb_lane`).
_DEFAULT_LANE_ONLY = ("test_network_adapters.py",)


def pytest_ignore_collect(collection_path, config):
  del config
  from tests.reverb_support import current_lane  # pylint: disable=import-outside-toplevel
  if current_lane() == "reverb" and collection_path.name in _DEFAULT_LANE_ONLY:
    return True
  return None


def pytest_collection_modifyitems(config, items):
  """The heaviest files first (their tests in their order): the default lane's workers
  take a file at a time (`--dist loadfile --no-loadscope-reorder`), and the longest
  first leaves no worker with an hour-long file to start when the other is done."""
  from tests.reverb_support import current_lane  # pylint: disable=import-outside-toplevel
  cost = _file_cost(items)
  order = {path: i for i, path in enumerate(dict.fromkeys(item.path for item in items))}
  items.sort(key=lambda item: (-cost[item.path], order[item.path]))
  if current_lane() != "reverb":
    return
  kept = [item for item in items if item.get_closest_marker(REVERB_LANE) is not None]
  if len(kept) < len(items):
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Frees each module's compiled programs when it ends. XLA:CPU maps every compiled
  executable's code into memory regions of its own (a MuZero Anakin step: about 2,300),
  and one pytest process running the whole suite otherwise reaches the kernel's
  vm.max_map_count (65,530) and aborts in the middle of a compile."""
  yield
  import gc  # pylint: disable=import-outside-toplevel

  import jax  # pylint: disable=import-outside-toplevel
  jax.clear_caches()
  gc.collect()


def _cpu_seconds():
  """User and system CPU seconds of this process (all its threads) and of its children
  that ended (a test's `subprocess.run`, its worker processes)."""
  import resource  # pylint: disable=import-outside-toplevel
  total = 0.0
  for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
    usage = resource.getrusage(who)
    total += usage.ru_utime + usage.ru_stime
  return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
  start = _cpu_seconds()
  yield
  item.user_properties.append(("cpu_setup", _cpu_seconds() - start))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
  start = _cpu_seconds()
  yield
  item.user_properties.append(("cpu_call", _cpu_seconds() - start))


def pytest_runtest_logreport(report):
  """With PODRACER_TEST_TIMES=FILE, each test phase's duration is appended to FILE as it
  ends (tab-separated: seconds, CPU seconds, phase, outcome, test): a partial or killed
  run still says where its time went (`--durations` prints only at the end). The CPU
  seconds (the process's and its finished children's, `_cpu_seconds`) are the test's own
  work whatever else shares the machine; its seconds are not."""
  path = os.environ.get("PODRACER_TEST_TIMES")
  # Under pytest-xdist the controller gets every worker's reports: written there once.
  if path and "PYTEST_XDIST_WORKER" not in os.environ:
    cpu = dict(report.user_properties).get(f"cpu_{report.when}", 0.0)
    with open(path, "a", encoding="utf-8") as f:
      f.write(f"{report.duration:.2f}\t{cpu:.2f}\t{report.when}\t{report.outcome}\t"
              f"{report.nodeid}\n")
