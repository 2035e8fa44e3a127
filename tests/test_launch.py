"""The launcher as a user runs it: a subprocess, flags, exit codes, files in the workdir."""

import pytest
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def launch(*args, timeout=300, env_path=None, env_vars=None):
  # The launcher sees what this process sees, this checkout first (then `env_path`), and
  # `env_vars` besides.
  path = os.pathsep.join(filter(None, [str(ROOT), env_path and str(env_path),
                                       os.environ.get("PYTHONPATH")]))
  env = dict(os.environ, PYTHONPATH=path, **(env_vars or {}))
  env.pop("XLA_FLAGS", None)  # The launcher runs as a user would: host devices only.
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # Set to 1 by TensorFlow's import in this process.
  return subprocess.run([sys.executable, "-m", "podracer.launch", *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.reverb_lane
def test_misspelled_environment_exits_nonzero_with_suggestion_and_no_traceback(tmp_path):
  result = launch("--config=agents/ppo/config.py:cartpole_anakin",
                  "--config.env.name=CartPol", f"--workdir={tmp_path}")
  assert result.returncode == 2
  assert "CartPol" in result.stderr and "'cartpole'" in result.stderr
  assert "Traceback" not in result.stderr + result.stdout


def test_unknown_config_key_names_the_key(tmp_path):
  result = launch("--config=agents/ppo/config.py:cartpole_anakin", "--config.env.max_steps=5")
  assert result.returncode == 2
  assert "--config.env.max_steps=5" in result.stderr
  assert "Traceback" not in result.stderr

  result = launch("--config=agents/ppo/config.py:cartpole_anakin",
                  "--config.network.hidden_size=5", "--config.network.name=mlp_actor_critic")
  assert result.returncode == 2 and "Traceback" not in result.stderr


def test_component_argument_that_does_not_exist_names_the_key(tmp_path):
  config = tmp_path / "config.py"
  config.write_text(
      "from agents.ppo.config import cartpole_anakin\n"
      "def get_config():\n"
      "  c = cartpole_anakin()\n"
      "  c.env.max_steps = 100\n"
      "  return c\n")
  result = launch(f"--config={config}")
  assert result.returncode == 2
  assert "`env.max_steps`" in result.stderr and "max_episode_steps" in result.stderr
  assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_user_registered_environment_and_loss_train_through_the_launcher(tmp_path):
  """examples/custom_components.py registers `match_sign` and `a2c` outside the package."""
  result = launch(f"--config={ROOT / 'examples' / 'custom_components.py'}",
                  f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr
  records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert all({"env_steps", "sps"} <= set(r) for r in records)
  assert "pg_loss" in records[-1], "the user's a2c loss did not run"
  # Random play scores 2.5 of 5; the agent must have learned to read the sign.
  assert records[-1]["episode_return"] >= 4.5
  config = json.loads((tmp_path / "config.json").read_text())
  assert config["env"]["name"] == "match_sign" and config["loss"]["name"] == "a2c"
  assert (tmp_path / "learning_curve.png").stat().st_size > 1000
  assert "env steps" in result.stdout and "steps/s" in result.stdout
  assert "return" in result.stdout



# Config files are modules: their folder is importable, and built-ins are registered first.

SHORT_RUN = ("from agents.ppo.config import cartpole_anakin\n"
             "def get_config():\n"
             "  config = cartpole_anakin()\n"
             "  config.total_env_steps = 8192  # One compiled call.\n"
             "  return config\n")


@pytest.mark.slow
def test_config_file_imports_a_module_from_its_own_folder(tmp_path):
  (tmp_path / "my_components.py").write_text("STEPS = 8192\n")
  config = tmp_path / "config.py"
  config.write_text("import my_components\n" + SHORT_RUN.replace("8192", "my_components.STEPS"))
  result = launch(f"--config={config}", f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout.split("result: ")[1].splitlines()[0])["env_steps"] == 8192


def test_config_file_import_error_names_the_file_and_the_module(tmp_path):
  config = tmp_path / "config.py"
  config.write_text("import not_beside_me\n" + SHORT_RUN)
  result = launch(f"--config={config}")
  assert result.returncode == 2
  message = " ".join(result.stderr.split())
  assert f"config file '{config}' could not import module 'not_beside_me'" in message
  assert "Traceback" not in result.stderr


CARTPOLE_AGAIN = ("from podracer import registry\n"
                  "from podracer.components.environments.cartpole import CartPole\n"
                  "@registry.environments.register('cartpole'{override})\n"
                  "class MyCartPole(CartPole):\n"
                  "  def __init__(self, **kwargs):\n"
                  "    super().__init__(**kwargs)\n"
                  "    open({marker!r}, 'w').close()  # Shows which CartPole ran.\n")


def test_config_file_overrides_a_built_in_name_with_override_true(tmp_path):
  marker = tmp_path / "my_cartpole_was_built"
  config = tmp_path / "config.py"
  config.write_text(CARTPOLE_AGAIN.format(override=", override=True", marker=str(marker))
                    + SHORT_RUN)
  result = launch(f"--config={config}", f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 0, result.stderr
  assert marker.exists()


def test_config_file_clashing_with_a_built_in_names_both(tmp_path):
  config = tmp_path / "config.py"
  config.write_text(CARTPOLE_AGAIN.format(override="", marker=str(tmp_path / "m")) + SHORT_RUN)
  result = launch(f"--config={config}")
  assert result.returncode == 2
  message = " ".join(result.stderr.split())
  assert f"config file '{config}' failed to load" in message
  assert "'cartpole' is already registered" in message
  assert "podracer.components.environments.cartpole" in message and "override=True" in message
  assert "config_config" not in message and "Traceback" not in result.stderr


def test_list_prints_every_registered_component_by_kind_with_its_keys():
  from podracer import launch as launcher, registry
  result = launch("--list", timeout=120)
  assert result.returncode == 0, result.stderr
  launcher.register_components_and_agents()
  for kind, reg in registry.ALL.items():
    assert f"\n{kind}:\n" in f"\n{result.stdout}"
    for name in reg.names():  # The built-in ones (other tests register their own here).
      if reg.get(name).__module__.split(".")[0] in ("podracer", "agents"):
        assert f"\n  {name}: " in result.stdout, (kind, name)
  assert "\n  muzero: " in result.stdout and "num_simulations=16" in result.stdout
  assert "sections: network, loss, optimizer" in result.stdout  # PPO's and IMPALA's
  assert "\n  anakin: fixed_batch=False, num_envs_per_device=4, rollout_length=128" in result.stdout
  # With a config file, the components it registers are listed too.
  result = launch("--list", f"--config={ROOT / 'examples' / 'custom_components.py'}",
                  timeout=120)
  assert result.returncode == 0, result.stderr
  assert "\n  match_sign: " in result.stdout and "\n  a2c: " in result.stdout
