"""A config file that cannot give a config is one paragraph naming it, exit 2, whatever
else is on the command line (podracer/config/files.py)."""

import os

import pytest

from podracer.config import files as config_files
from podracer.errors import ConfigError
from tests.test_launch import launch

# Beside the file: what else a user may have typed. Each must not change the error.
EXTRAS = {
    "alone": [],
    "override": ["--config.total_env_steps=2048"],
    "section swap": ["--config.optimizer=rmsprop", "--config.optimizer.learning_rate=1e-3"],
    "sweep": ["--config.num_runs=2", "--config.sweep.optimizer.learning_rate=1e-4,1e-3"],
}

GOOD = ("from agents.ppo.config import cartpole_anakin\n"
        "def get_config({param}):\n"
        "  return cartpole_anakin()\n")

# name -> (file text or None for no file, the :NAME part, what the paragraph must say)
BROKEN = {
    "missing": (None, ":cartpole_anakin", "does not exist"),
    "a directory": ("<dir>", "", "is a directory"),
    "unreadable": ("<unreadable>", "", "cannot be read: Input/output error"),
    "syntax error": ("def get_config(:\n", "", "is not valid Python: invalid syntax (line 1)"),
    "raises while loading": ("import os\nraise RuntimeError('no GPU here')\n", "",
                             "raised an error while it was loading: RuntimeError at line 2: "
                             "no GPU here"),
    "no get_config": ("X = 1\n", "", "defines no get_config()"),
    "get_config needs a name": (GOOD.format(param="name"), "",
                                "needs a config name: its get_config(name) takes an argument"),
    "name given to get_config()": (GOOD.format(param=""), ":fast",
                                   "was given the config name 'fast'"),
    "get_config raises": ("def get_config(name):\n  return {'a': 1}[name]\n", ":b",
                          "get_config('b') raised KeyError at line 2: 'b'"),
    "not a ConfigDict": ("def get_config():\n  return dict(seed=0)\n", "",
                         "returned dict, not an ml_collections.ConfigDict"),
}


def _config_file(tmp_path, case):
  text, name, _ = BROKEN[case]
  path = tmp_path / "my_config.py"
  if text == "<dir>":
    path.mkdir()
  elif text == "<unreadable>":  # Unreadable even for root: reading it fails with EIO.
    os.symlink("/proc/self/mem", path)
  elif text is not None:
    path.write_text(text)
  return f"{path}{name}", str(path)


def _paragraph(stderr):
  assert stderr.startswith("Config error: ") and stderr.count("\n\n") == 0, stderr
  assert "Traceback" not in stderr
  return " ".join(stderr.split())


@pytest.mark.reverb_lane
@pytest.mark.parametrize("extra", list(EXTRAS))
def test_a_missing_config_file_is_one_paragraph_whatever_else_is_given(tmp_path, extra):
  result = launch("--config=agents/ppo/nope.py:cartpole_anakin", *EXTRAS[extra],
                  f"--workdir={tmp_path / 'run'}", timeout=120)
  assert result.returncode == 2, result.stderr
  message = _paragraph(result.stderr)
  assert "config file 'agents/ppo/nope.py' does not exist" in message
  assert f"(looked in {os.path.dirname(os.path.dirname(__file__))})" in message
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("case", [c for c in BROKEN if c != "missing"])
def test_a_broken_config_file_is_one_paragraph_naming_it(tmp_path, case):
  flag, path = _config_file(tmp_path, case)
  extra = EXTRAS[("override", "section swap", "sweep")[len(case) % 3]]
  result = launch(f"--config={flag}", *extra, f"--workdir={tmp_path / 'run'}", timeout=120)
  assert result.returncode == 2, result.stderr
  message = _paragraph(result.stderr)
  assert f"config file '{path}'" in message and BROKEN[case][2] in message, message


def test_a_name_the_agent_configs_do_not_define_lists_the_ones_they_do():
  with pytest.raises(ConfigError) as raised:
    config_files.load("agents/ppo/config.py:cartpole_anakn")
  message = str(raised.value)
  assert "config file 'agents/ppo/config.py' does not define the config 'cartpole_anakn'" \
      in message and "cartpole_anakin" in message


def test_the_loader_reads_a_config_and_locks_it(tmp_path):
  path = tmp_path / "c.py"
  path.write_text(GOOD.format(param=""))
  config = config_files.load(str(path))
  assert config.agent.name == "ppo" and config.is_locked
  with pytest.raises(ConfigError, match="cannot be read: Permission denied"):
    _unreadable_by_open(path, config_files)


def _unreadable_by_open(path, module):
  def refuse(*args, **kwargs):
    raise PermissionError(13, "Permission denied", str(path))
  module.open = refuse
  try:
    module.check_readable(str(path))
  finally:
    del module.open
