"""A fourth new user's mistakes (issue 63), each taken as input: what they get is one
paragraph naming the problem and its fix (exit 2 from the launcher), not a traceback."""

import io
import textwrap

import pytest

from podracer import builder, contracts, registry
from podracer.config import presets
from podracer.errors import ConfigError
from podracer.learning import Objective
from podracer.logs.metrics import MetricsLogger
from podracer.registry import imports
from tests.test_launch import launch


def _write(root, files):
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_a_users_module_may_import_the_public_launch_module(tmp_path):
  _write(tmp_path, {"usermod63.py": """\
      from podracer import launch
      from podracer import registry

      @registry.losses.register("test_usermod63_loss")
      def loss():
        return launch.launch
      """})
  result = launch(f"--import={tmp_path / 'usermod63.py'}", "--list")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "test_usermod63_loss" in result.stdout and "DuplicateFlagError" not in result.stderr


def _registers(name):
  """A module that registers environment `name`."""
  return ("from podracer import registry\n\n"
          f"@registry.environments.register(\"{name}\")\n"
          "def chain():\n  return None\n")


def test_import_of_a_sub_package_path_imports_it_from_its_package_root(tmp_path):
  """`--import=DIR/pkg/envs` is `pkg.envs` from DIR, as Python and pytest import it, so
  the package's own absolute imports (`from pkg.envs.chain import ...`) work."""
  _write(tmp_path, {
      "pkg63/__init__.py": "",
      "pkg63/envs/__init__.py": "from pkg63.envs.chain import chain  # noqa\n",
      "pkg63/envs/chain.py": _registers("test_chain63")})
  try:
    assert imports.import_all([str(tmp_path / "pkg63" / "envs")]) == ["pkg63.envs"]
    assert "test_chain63" in registry.environments
  finally:
    registry.environments.unregister("test_chain63")


def test_an_unknown_name_says_which_module_of_an_imported_package_registers_it(tmp_path):
  _write(tmp_path, {
      "pkg64/__init__.py": "",
      "pkg64/sub/__init__.py": "",
      "pkg64/sub/chain.py": _registers("test_chain64")})
  imports.import_all([str(tmp_path / "pkg64")])
  with pytest.raises(ConfigError, match=r"Unknown environment 'test_chain64'.*Module "
                     r"'pkg64\.sub\.chain' \(.*chain\.py\) registers 'test_chain64', but "
                     r"nothing imported it.*--import=pkg64\.sub\.chain"):
    registry.environments.get("test_chain64", key="env.name")


def test_a_forgotten_register_is_named_as_such(tmp_path):
  _write(tmp_path, {"usermod65.py": """\
      def test_rnd_wide(spec):
        return None
      """})
  imports.import_all([str(tmp_path / "usermod65.py")])
  with pytest.raises(ConfigError, match=r"Unknown network 'test_rnd_wide'.*Module "
                     r"'usermod65' defines `test_rnd_wide` but does not register it: "
                     r"decorate it with `@registry\.networks\.register\(\"test_rnd_wide\"\)`"):
    registry.networks.get("test_rnd_wide", key="network.name")


def test_a_misspelt_key_in_a_config_file_gets_a_did_you_mean():
  from podracer import launch as launcher  # pylint: disable=import-outside-toplevel
  launcher.register_components_and_agents()
  with pytest.raises(ConfigError, match=r"`optimizer\.learning_rat` -> "
                     r"`optimizer\.learning_rate`\? It accepts: learning_rate"):
    registry.build(registry.optimizers, presets.section("adam", learning_rat=1e-3),
                   key="optimizer", total_steps=10)


@pytest.fixture(name="ppo")
def _ppo():
  from agents.ppo.config import cartpole_anakin  # pylint: disable=import-outside-toplevel
  c = cartpole_anakin()
  c.topology.num_devices = 1
  return builder.build(c).agent


def test_an_objective_owning_a_key_the_nets_lack_is_one_paragraph(ppo):
  (own,) = ppo.objectives
  keys = sorted(ppo.init_nets(__import__("jax").random.PRNGKey(0)))
  ppo.objectives = (own._replace(owns=(keys[0],)),
                    Objective("rnd", own.loss, own.optimizer, owns=(keys[1] + "x",)))
  with pytest.raises(ConfigError, match=rf"Agent PPO's objective 'rnd' owns \['{keys[1]}x'\], "
                     rf"which its nets do not have.*did you mean '{keys[1]}'"):
    contracts.check_objectives(ppo)
  ppo.objectives = (own._replace(owns=tuple(keys)),)
  contracts.check_objectives(ppo)  # Every key it names is there.


def test_an_objective_owning_a_misspelt_key_exits_2_from_the_launcher(tmp_path):
  _write(tmp_path, {"usermod66.py": """\
      from agents.ppo.agent import PPO
      from podracer import registry
      from podracer.learning import Objective

      @registry.agents.register("test_ppo_aux66")
      class PPOAux(PPO):
        def __init__(self, *args, **kwargs):
          super().__init__(*args, **kwargs)
          self.add_objective(Objective("aux", self._loss, self.objectives[0].optimizer,
                                       owns=("predictr",)), others_own=("policy",))
      """})
  result = launch(f"--import={tmp_path / 'usermod66.py'}",
                  "--config=examples/rnd/configs.py:deep_sea_ppo",
                  "--config.network=rnd_actor_critic", "--config.agent.name=test_ppo_aux66",
                  f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2, result.stderr[-2000:]
  said = " ".join(result.stderr.split())
  assert "Traceback" not in said
  assert ("objective 'aux' owns ['predictr'], which its nets do not have" in said
          and "did you mean 'predictor'" in said), said


def test_an_objective_owning_everything_beside_another_is_refused(ppo):
  (own,) = ppo.objectives
  ppo.objectives = (own, Objective("rnd", own.loss, own.optimizer, owns=("predictor",)))
  with pytest.raises(ConfigError, match=r"objective\(s\) \['ppo'\] own every key of its "
                     r"nets \(owns=None\) beside \{'rnd': \['predictor'\]\}"):
    contracts.check_objectives(ppo)


def test_the_progress_line_warns_once_and_shows_the_losses_of_several_objectives():
  stream = io.StringIO()
  logger = MetricsLogger(stream=stream, print_interval=0)
  for step in (1, 2):
    logger.write(dict(env_steps=step, updates=step, ppo_loss=0.5, rnd_loss=0.25))
  lines = stream.getvalue().splitlines()
  warnings = [line for line in lines if line.startswith("Warning")]
  assert len(warnings) == 1 and "the progress line shows ppo_loss, rnd_loss instead" in \
      warnings[0]
  assert "ppo_loss 0.5 | rnd_loss 0.25" in lines[-1]


def test_a_huber_loss_beside_a_frequently_copied_target_is_warned_of(capsys):
  """Issue 49's open finding: DQN's CartPole settings with a Huber loss ran every seed to
  one action; the cause (docs/agents.md) is said when such a DQN is built."""
  from agents.dqn.config import cartpole_anakin  # pylint: disable=import-outside-toplevel
  from podracer.kits import q_learning  # pylint: disable=import-outside-toplevel
  q_learning._said.clear()  # pylint: disable=protected-access
  c = cartpole_anakin()
  c.topology.num_devices = 1
  c.loss.huber_delta = 1.0
  builder.build(c)
  said = " ".join(capsys.readouterr().err.split())
  assert ("loss.huber_delta=1 with agent.target_update_period=50: a target copied this "
          "often lets the Q-values run away" in said), said
  c.agent.target_update_period = 500
  builder.build(c)
  assert "huber_delta" not in capsys.readouterr().err


def test_the_forgotten_register_hint_names_each_kinds_registry_attribute():
  from podracer.registry.registry import _registry_attribute  # pylint: disable=import-outside-toplevel
  assert {attr: _registry_attribute(reg.kind) for attr, reg in registry.ALL.items()} == {
      attr: attr for attr in registry.ALL}
