"""A first agent of one's own: components from the command line (`--import`), the errors
a first agent meets, the policy-lag contract, and docs/first-agent.md's commands."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from podracer import builder, registry
from podracer.registry import imports
from podracer.distributed.launch_local import free_port
from podracer.errors import ConfigError
from podracer.launch import register_components_and_agents
from tests.test_launch import launch

ROOT = pathlib.Path(__file__).resolve().parents[1]
PPO = "--config=agents/ppo/config.py:cartpole_anakin"
TINY = ("--config.total_env_steps=4096", "--config.runtime.updates_per_call=2",
        "--config.topology.num_devices=1")

# A package whose __init__ registers what its submodule defines: only importing the
# package (not the environment's own module) registers `steps_env`.
PACKAGE = {
    "__init__.py": "from podracer import registry\nfrom mypkg.envs import HostSteps, Steps\n"
                   "registry.environments.register('steps_env', Steps)\n"
                   "registry.environments.register('host_steps', HostSteps)\n",
    "envs.py": """
import jax
import jax.numpy as jnp
import numpy as np
from podracer import testing
from podracer.components.environments import Environment, restart, transition
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec

class Steps(Environment):
  '''Action 1 pays 1; an episode is 5 steps.'''
  def reset(self, key):
    return jnp.int32(0), restart(jnp.zeros((3,), jnp.float32))
  def step(self, state, action):
    return state + 1, transition(jnp.ones((3,), jnp.float32) * (state + 1),
                                 jnp.where(action == 1, 1.0, 0.0),
                                 terminated=state + 1 >= 5, truncated=False)
  def spec(self):
    return EnvSpec(ArraySpec((3,), np.float32), DiscreteSpec(2))

class HostSteps(testing.FakeHostEnvironment):
  # Steps on the host, for Sebulba and SEED.
  def __init__(self, num_envs: int = 2, seed: int = 0):
    super().__init__(testing.fake_spec((3,), 2), num_envs, seed, episode_length=5)
""",
}


def write_package(root: pathlib.Path) -> pathlib.Path:
  package = root / "mypkg"
  package.mkdir(parents=True)
  for name, text in PACKAGE.items():
    (package / name).write_text(text)
  return package


def one_paragraph(result):
  assert result.returncode == 2, result.stderr[-2000:]
  assert "Traceback" not in result.stderr + result.stdout
  assert result.stderr.startswith("Config error:") and "\n\n" not in result.stderr.strip()
  return " ".join(result.stderr.split())


@pytest.fixture
def clean_registries():
  register_components_and_agents()
  before = {kind: set(reg.names()) for kind, reg in registry.ALL.items()}
  modules, imported = set(sys.modules), list(imports._imported)  # pylint: disable=protected-access
  dotted = list(imports._modules)  # pylint: disable=protected-access
  yield
  imports._imported[:] = imported  # pylint: disable=protected-access
  imports._modules[:] = dotted  # pylint: disable=protected-access
  for kind, reg in registry.ALL.items():
    for name in set(reg.names()) - before[kind]:
      reg.unregister(name)
  for name in set(sys.modules) - modules:
    if name.split(".")[0] in ("mypkg", "myrl", "extra_env"):
      del sys.modules[name]


# -- --import ------------------------------------------------------------------------------


@pytest.mark.slow
def test_import_a_module_trains_ppo_on_its_environment_and_evaluates_it(tmp_path):
  write_package(tmp_path / "src")
  workdir = tmp_path / "run"
  result = launch("--import=mypkg", PPO, "--config.env=steps_env", f"--workdir={workdir}",
                  "--config.eval_interval=2048", "--config.eval_episodes=2", *TINY,
                  env_path=tmp_path / "src")
  assert result.returncode == 0, result.stderr[-2000:]
  config = json.loads((workdir / "config.json").read_text())
  assert config["imports"] == ["mypkg"] and config["env"]["name"] == "steps_env"
  records = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert any(r.get("eval_return") is not None for r in records)  # evaluated in it too


def test_import_a_file_or_a_package_directory_by_its_path(tmp_path):
  package = write_package(tmp_path / "src")
  extra = tmp_path / "extra_env.py"
  extra.write_text("from podracer import registry\nfrom podracer.components.environments "
                   "import CartPole\nregistry.environments.register('extra_cartpole', "
                   "CartPole)\n")
  listed = launch(f"--import={extra}", f"--import={package}", "--list")
  assert listed.returncode == 0, listed.stderr[-2000:]
  assert "extra_cartpole" in listed.stdout and "steps_env" in listed.stdout


def test_an_unknown_component_says_which_modules_were_imported(tmp_path):
  package = write_package(tmp_path / "src")
  message = one_paragraph(launch(PPO, "--config.agent.name=a2c"))
  assert "Unknown agent 'a2c'" in message and "pass --import=MODULE" in message
  assert "No module was imported with --import" in message
  message = one_paragraph(launch(f"--import={package}", PPO, "--config.agent.name=a2c"))
  assert f"imported with --import or the config's `imports` are: {package}." in message


@pytest.mark.parametrize("spec, words", [
    ("no_such_module_here", "no module named 'no_such_module_here' on the path"),
    ("missing/dir", "does not exist"),
    ("{tmp}/broken.py", "not valid Python at {tmp}/broken.py:2"),
    ("{tmp}/raises.py", "raised RuntimeError ({tmp}/raises.py:2): no GPU here"),
])
def test_a_bad_import_is_one_paragraph_naming_it(tmp_path, spec, words):
  (tmp_path / "broken.py").write_text("x = 1\ndef (:\n")
  (tmp_path / "raises.py").write_text("import os\nraise RuntimeError('no GPU here')\n")
  spec, words = spec.format(tmp=tmp_path), words.format(tmp=tmp_path)
  message = one_paragraph(launch(f"--import={spec}", PPO))
  assert f"--import={spec}" in message and words in message


def test_a_config_files_imports_are_imported_and_recorded(tmp_path, clean_registries):
  write_package(tmp_path)
  sys.path.insert(0, str(tmp_path))
  try:
    from agents.ppo.config import cartpole_anakin
    config = cartpole_anakin()
    config.imports = ("mypkg",)
    config.env = dict(name="steps_env")
    config.topology.num_devices = 1
    experiment = builder.build(config)  # The builder imports what `imports` names.
    assert experiment.runtime is not None and "steps_env" in registry.environments
    assert "mypkg" in imports.imported()
  finally:
    sys.path.remove(str(tmp_path))


@pytest.mark.slow
def test_launch_local_ranks_import_the_same_modules(tmp_path):
  from tests.test_distributed import launch_local_cmd
  write_package(tmp_path / "src")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path / "src")]))
  env.pop("XLA_FLAGS", None)
  run = subprocess.run(launch_local_cmd(
      2, 1, "--import=mypkg", PPO, "--config.env=steps_env", f"--workdir={tmp_path / 'run'}",
      "--config.total_env_steps=2048", "--config.runtime.updates_per_call=1"),
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
  assert run.returncode == 0, run.stderr[-3000:]
  records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
  assert json.loads(records[-1])["num_processes"] == 2


@pytest.mark.slow
def test_a_seed_worker_started_by_hand_imports_what_the_run_imported(tmp_path):
  """The environment's own module (mypkg.envs) registers nothing: a worker that did not
  import the package as the run did would not know `host_steps`."""
  package = write_package(tmp_path / "src")
  port = free_port()
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  run = subprocess.Popen(
      [sys.executable, "-m", "podracer.launch", f"--import={package}",
       "--config=agents/ppo/config.py:cartpole_seed", "--config.env=host_steps",
       "--config.runtime.num_local_workers=0", "--config.runtime.num_workers=1",
       "--config.runtime.envs_per_worker=8", "--config.runtime.envs_per_batch=8",
       f"--config.runtime.address=127.0.0.1:{port}", "--config.total_env_steps=4096",
       f"--workdir={tmp_path / 'run'}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  log = tmp_path / "worker.log"
  with open(log, "w") as out:  # In another folder, with nothing of mypkg on its path.
    worker = subprocess.Popen([sys.executable, "-m", "podracer.worker",
                               f"--server=127.0.0.1:{port}"], cwd=tmp_path, env=env,
                              stdout=out, stderr=subprocess.STDOUT)
  try:
    _, stderr = run.communicate(timeout=240)
    assert run.returncode == 0, stderr[-3000:]
    worker.wait(timeout=30)
  finally:
    for p in (run, worker):
      if p.poll() is None:
        p.kill()
  assert worker.returncode == 0, log.read_text()


def test_a_worker_that_cannot_import_the_runs_modules_is_refused_with_the_cause(tmp_path):
  from podracer import worker
  with pytest.raises(worker.Refused, match="cannot: --import=/nowhere/mypkg: .* does not"):
    worker.build_env(dict(imports=["/nowhere/mypkg"], env=dict(name="steps_env"),
                          env_module=None, env_file=None, envs_per_worker=1, seed=0))


# -- the errors a first agent meets --------------------------------------------------------


SCALAR_LOSS = """
import jax.numpy as jnp
from podracer import registry
from agents.ppo.config import cartpole_anakin

@registry.losses.register("scalar_only")
def scalar_only():
  def loss(logits, value, batch):  # The mistake: no metrics dict.
    return jnp.mean(jnp.square(value - batch.value_target))
  return loss

def get_config():
  c = cartpole_anakin()
  c.loss = dict(name="scalar_only")
  c.total_env_steps = 4096
  return c
"""

PYTHON_IF_ENV = """
import jax.numpy as jnp
import numpy as np
from podracer import registry
from podracer.components.environments import Environment, restart, transition
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec
from agents.ppo.config import cartpole_anakin

@registry.environments.register("python_if")
class PythonIf(Environment):
  def reset(self, key):
    return jnp.int32(0), restart(jnp.zeros((2,), jnp.float32))
  def step(self, state, action):
    # The mistake: a Python `if` on a traced value.
    if action == 1:
      state = state + 1
    return state, transition(jnp.zeros((2,), jnp.float32), 1.0, terminated=state > 3,
                             truncated=False)
  def spec(self):
    return EnvSpec(ArraySpec((2,), np.float32), DiscreteSpec(2))

def get_config():
  c = cartpole_anakin()
  c.env = dict(name="python_if")
  return c
"""


def test_a_loss_without_metrics_is_one_paragraph_naming_the_objective(tmp_path):
  config = tmp_path / "scalar_loss.py"
  config.write_text(SCALAR_LOSS)
  message = one_paragraph(launch(f"--config={config}", f"--workdir={tmp_path / 'run'}",
                                 "--config.topology.num_devices=1"))
  assert "Objective 'ppo': its loss (PPO._loss) returns a single array of shape []" in message
  assert "Return `loss, {}` for no metrics" in message


def test_a_python_if_in_an_environment_is_one_paragraph_naming_its_line(tmp_path):
  config = tmp_path / "python_if.py"
  config.write_text(PYTHON_IF_ENV)
  message = one_paragraph(launch(f"--config={config}", f"--workdir={tmp_path / 'run'}"))
  assert (f"environment 'python_if': PythonIf.step cannot be compiled at {config}:15 "
          "(`if action == 1:`)") in message
  assert "use jnp.where, jax.lax.select or jax.lax.cond" in message
  assert "JAX said: Attempted boolean conversion of traced array" in message


def test_every_registry_kind_reads_as_a_word_in_messages():
  plurals = {"environment": "environments", "network": "networks", "loss": "losses",
             "optimizer": "optimizers", "replay": "replays",
             "device topology": "device topologies", "agent": "agents",
             "runtime": "runtimes", "logger": "loggers",
             "distribution": "distributions", "normalizer": "normalizers",
             "sharding": "shardings"}
  assert {reg.kind for reg in registry.ALL.values()} == set(plurals)
  for reg in registry.ALL.values():
    with pytest.raises(ConfigError) as error:
      reg.get("nothing_of_that_name", key="k")
    assert f"Registered {plurals[reg.kind]}: " in str(error.value)
    with pytest.raises(ConfigError) as error:
      reg.get(3, key="k")
    article = "an" if reg.kind[0] in "aeiou" else "a"
    assert f"must name {article} {reg.kind} (a string)" in str(error.value)


# -- the policy-lag contract ---------------------------------------------------------------


def _sebulba_build(config):
  from tests.test_sebulba import one_device
  config.total_env_steps = 20_000
  return builder.build(one_device(config))


def test_sebulba_refuses_an_uncorrected_on_policy_agent_above_lag_0(clean_registries):
  sys.path.insert(0, str(ROOT / "examples" / "first_agent"))
  try:
    register_components_and_agents()
    from myrl import configs
    config = configs.cartpole_sebulba()
    config.runtime.max_policy_lag = 1
    with pytest.raises(ConfigError, match=r"Agent A2C corrects for no policy lag .* "
                       r"`runtime.max_policy_lag` = 1 updates older .* "
                       r"--config.runtime.max_policy_lag=0"):
      _sebulba_build(config)
    config.runtime.max_policy_lag = None
    with pytest.raises(ConfigError, match=r"= None \(unbounded"):
      _sebulba_build(config)
    config.runtime.max_policy_lag = 0
    assert _sebulba_build(config).runtime is not None
  finally:
    sys.path.remove(str(ROOT / "examples" / "first_agent"))


@pytest.mark.parametrize("agent", ["ppo", "impala"])
def test_ppo_and_impala_correct_for_any_policy_lag(agent, clean_registries):
  register_components_and_agents()
  module = __import__(f"agents.{agent}.config", fromlist=["cartpole_sebulba"])
  config = module.cartpole_sebulba()
  config.runtime.max_policy_lag = None
  assert _sebulba_build(config).agent.policy_lag_corrected() is None


# -- docs/first-agent.md ---------------------------------------------------------------------


TUTORIAL = ROOT / "docs" / "first-agent.md"
EXAMPLE = ROOT / "examples" / "first_agent"


def test_the_tutorials_files_are_the_tested_ones():
  text = TUTORIAL.read_text()
  for path in sorted(EXAMPLE.rglob("*.py")):
    name = path.relative_to(EXAMPLE).as_posix()
    assert f"`{name}`" in text, f"docs/first-agent.md does not show {name}"
    assert path.read_text().strip() in text, f"docs/first-agent.md's {name} differs"
  extras = re.findall(r'pip install -e "\.\[(\w+)\]"', text)
  setup = (ROOT / "setup.py").read_text()
  assert extras and all(f'"{e}": [' in setup for e in extras)


def tutorial_commands():
  """(command, expected exit status) of each line of the tutorial's bash blocks; a
  command whose comment says `exits 2` is expected to."""
  blocks = re.findall(r"```bash\n(.*?)```", TUTORIAL.read_text(), re.S)
  commands = []
  for line in "".join(blocks).replace("\\\n", " ").splitlines():
    command, _, comment = line.partition("#")
    if command.strip():
      commands.append((command.strip(), 2 if "exits 2" in comment else 0))
  return commands


@pytest.mark.extended
@pytest.mark.slow
def test_every_command_of_the_tutorial_runs_as_it_says(tmp_path):
  project = tmp_path / "my-project"  # The user's project, outside podracer's checkout.
  shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
  env = dict(os.environ, PODRACER=str(ROOT),
             PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
  env.pop("XLA_FLAGS", None)
  commands = tutorial_commands()
  assert len(commands) >= 6 and any(status == 2 for _, status in commands)
  for command, status in commands:
    command = re.sub(r"^python ", f"{sys.executable} ", command)
    done = subprocess.run(command, shell=True, cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == status, f"{command}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    if status == 2:
      assert "Traceback" not in done.stderr
  report = (project / "runs" / "report" / "report.md").read_text()
  # The tutorial's A2C learns: 8 seeds in one program, the IQM of their last-10 % means
  # (476 [456, 500] on 2026-11-28; a user's first A2C held 446.5), PPO's beside it.
  iqm = {g: float(v) for g, v in re.findall(r"^\| (a2c|ppo) \| 8 \| ([\d.]+) \[", report, re.M)}
  assert iqm.get("a2c", 0) >= 450 and iqm.get("ppo", 0) >= 475, report
