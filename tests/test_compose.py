"""Composable configs: --config.SECTION=NAME swaps a component with its defaults; every
top-level key must be used; bad keys get a plain-text list of what a section accepts."""

import json

import pytest

from agents.r2d2.config import catch_anakin as r2d2_catch_anakin
from podracer import registry
from podracer.config import compose, presets
from podracer.errors import ConfigError
from podracer.launch import register_components_and_agents
from tests.test_launch import launch


def _message(result):
  return " ".join(result.stderr.split())  # The launcher wraps its paragraph.


@pytest.mark.slow
def test_section_choice_replaces_the_section_with_the_components_defaults(tmp_path):
  result = launch("--config=agents/ppo/config.py:cartpole_anakin",
                  "--config.total_env_steps=100",  # One compiled call.
                  "--config.optimizer=rmsprop", "--config.optimizer.decay=0.9",
                  f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr
  optimizer = json.loads((tmp_path / "config.json").read_text())["optimizer"]
  # RMSProp's own defaults (adam's eps 1e-5 and b1 are gone); decay set after the swap.
  assert optimizer == dict(name="rmsprop", learning_rate=6e-4, decay=0.9, eps=1e-8,
                           momentum=0.0, max_grad_norm=40.0, anneal=False)


def test_a_section_the_agent_does_not_take_lists_the_sections_it_uses():
  result = launch("--config=agents/r2d2/config.py:catch_anakin", "--config.loss.name=ppoo")
  assert result.returncode == 2
  message = _message(result)
  assert "--config.loss.name=ppoo: the config has no key `loss`" in message
  assert ("agent 'r2d2' uses the sections env, agent, runtime, topology, network, "
          "optimizer, replay") in message
  assert "Traceback" not in result.stderr


def test_an_unused_section_in_a_config_is_refused_at_build_time():
  register_components_and_agents()
  config = r2d2_catch_anakin()
  config.loss = presets.section("ppo")
  with pytest.raises(ConfigError, match="section `loss` is not used: agent 'r2d2' takes no "
                     "loss component.*uses the sections env, agent, runtime, topology, "
                     "network, optimizer, replay"):
    compose.check_used(config)
  del config["loss"]
  config.my_note = "hello"
  with pytest.raises(ConfigError, match="key `my_note` is not read by anything.*RUN_KEYS"):
    compose.check_used(config)


def test_an_unknown_key_in_a_section_lists_what_it_accepts_in_plain_text():
  result = launch("--config=agents/ppo/config.py:cartpole_anakin", "--config.network.widht=5")
  assert result.returncode == 2
  message = _message(result)
  assert ("network 'mlp_actor_critic' (section `network`) has no argument `widht`. "
          "It accepts: activation, hidden_sizes.") in message, message
  assert "\\'" not in message and "spec" not in message and "Traceback" not in message

  result = launch("--config=agents/ppo/config.py:cartpole_anakin",
                  "--config.optimizer=rmsprop", "--config.optimizer.b1=0.5")
  assert result.returncode == 2
  assert "optimizer 'rmsprop' (section `optimizer`) has no argument `b1`" in _message(result)
  assert "total_steps" not in result.stderr


def test_builder_set_arguments_are_not_listed_as_accepted_keys():
  register_components_and_agents()
  with pytest.raises(ConfigError) as error:
    registry.build(registry.optimizers, dict(name="adam", widht=3), key="optimizer",
                   total_steps=10)
  message = str(error.value)
  assert "`optimizer.widht`" in message and "learning_rate" in message
  assert "total_steps" not in message


def test_section_defaults_leave_out_builder_arguments_and_type_placeholders():
  register_components_and_agents()
  network = compose.section_defaults(registry.networks, "mlp_actor_critic", "network")
  assert network.to_dict() == dict(name="mlp_actor_critic", hidden_sizes=(64, 64),
                                   activation="tanh")
  agent = compose.section_defaults(registry.agents, "r2d2", "agent")
  assert not {"spec", "network", "optimizer", "replay"} & set(agent)
  runtime = compose.section_defaults(registry.runtimes, "sebulba", "runtime")
  assert runtime.rollout_length == 32  # SebulbaOptions' default.
  env = compose.section_defaults(registry.environments, "envpool", "env")
  assert env.task_id is None and "num_envs" not in env and "seed" not in env
  with pytest.raises(ConfigError, match="environment 'envpool' needs `env.task_id`"):
    registry.build(registry.environments, env, key="env", num_envs=1, seed=0)
  env.task_id = "CartPole-v1"  # A typed placeholder: the command line can set it.


@pytest.mark.slow
def test_entropy_schedule_loss_component_follows_its_schedule(tmp_path):
  """examples/entropy_schedule: a loss reads learning.step() and its injected total_steps."""
  result = launch("--config=examples/entropy_schedule/config.py", f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr
  records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert len(records) == 3
  # 3 calls x 16 updates x 16 minibatch steps = 768 gradient steps; each record averages
  # the linear schedule 0.02 -> 0 over its call's 256 steps.
  for call, record in enumerate(records):
    expected = 0.02 * (1 - (256 * call + 127.5) / 768)
    assert record["entropy_coef"] == pytest.approx(expected, rel=1e-4), record
  # log.progress_metrics puts the loss's own metric on the progress line.
  assert "entropy_coef 0.0" in result.stdout and "value_loss" not in result.stdout


def test_the_log_section_takes_only_the_keys_the_logger_reads():
  from agents.ppo.config import cartpole_anakin
  from podracer import experiment

  config = cartpole_anakin()
  config.log.progress_metrics = ("loss", "my_metric")
  assert experiment.log_options(config) == dict(progress_metrics=("loss", "my_metric"))
  config.log.colour = "red"
  with pytest.raises(ConfigError, match="`log.colour` are not read; the `log` section "
                     "takes: progress_metrics"):
    experiment.log_options(config)


def test_a_component_parameter_with_a_default_makes_its_section_optional(capsys):
  from ml_collections import config_dict
  from podracer.builder import build_agent

  @registry.agents.register("test_optional_loss")
  class OptionalLoss:
    def __init__(self, spec, loss="mine", meta_loss=None):
      self.loss, self.meta_loss = loss, meta_loss

  try:
    config = config_dict.ConfigDict(dict(agent=dict(name="test_optional_loss")))
    agent = build_agent(config, spec=None, total_updates=1)
    assert (agent.loss, agent.meta_loss) == ("mine", None)
    # A default component is said; a section whose default is None is a feature left off.
    assert capsys.readouterr().err == ("Warning: no `loss` section; agent "
                                       "'test_optional_loss' uses its default loss.\n")
  finally:
    registry.agents.unregister("test_optional_loss")


def test_a_roles_sections_are_named_by_one_rule():
  """A loss's schedule counts the steps of its role's optimizer (builder.build_agent)."""
  assert compose.same_role("loss", "optimizer") == "optimizer"
  assert compose.same_role("critic_loss", "optimizer") == "critic_optimizer"
  assert compose.same_role("target_critic_network", "loss") == "target_critic_loss"
  with pytest.raises(ValueError, match="`replay`"):
    compose.same_role("replay", "optimizer")
  # Every such pair resolves to a registry, as the sections of an agent's signature do.
  assert compose.section_registry(compose.same_role("critic_loss", "optimizer")) is (
      registry.optimizers)
