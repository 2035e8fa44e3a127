"""Registries: lookup, errors that help, duplicate protection, config-to-component building."""

import pytest

from podracer import registry
from podracer.launch import register_components_and_agents
from podracer.errors import ConfigError
from podracer.registry import DuplicateComponentError, Registry, UnknownComponentError


def test_unknown_name_lists_kind_closest_and_all_names():
  reg = Registry("environment")
  for name in ("cartpole", "catch", "pong"):
    reg.register(name, object())
  with pytest.raises(UnknownComponentError) as info:
    reg.get("CartPol", key="env.name")
  msg = str(info.value)
  assert "environment" in msg and "'CartPol'" in msg and "env.name" in msg
  assert "Did you mean 'cartpole'" in msg
  assert "cartpole, catch, pong" in msg


def test_lookup_is_case_insensitive_and_decorator_returns_the_object():
  reg = Registry("loss")

  @reg.register("My_Loss")
  def my_loss():
    return 1

  assert reg.get("my_loss") is my_loss and reg.get("MY_LOSS") is my_loss
  assert "my_loss" in reg and reg.names() == ["my_loss"]


def test_registering_a_different_object_twice_is_an_error_unless_overridden():
  reg = Registry("network")
  first, second = (lambda: 1), (lambda: 2)
  second.__qualname__ = "other"
  reg.register("net", first)
  with pytest.raises(DuplicateComponentError, match="already registered"):
    reg.register("net", second)
  reg.register("net", second, override=True)
  assert reg.get("net") is second


def test_reregistering_the_same_definition_is_allowed():
  """A config file loaded twice defines a new but identical class: that is no conflict."""
  reg = Registry("environment")

  def make():
    class Env:
      pass
    return Env

  reg.register("env", make())
  again = make()
  reg.register("env", again)
  assert reg.get("env") is again


def test_build_checks_config_keys_against_the_factory():
  reg = Registry("optimizer")

  @reg.register("sgd")
  def sgd(learning_rate, momentum=0.0):
    return ("sgd", learning_rate, momentum)

  assert registry.build(reg, dict(name="sgd", learning_rate=0.1), key="optimizer") == (
      "sgd", 0.1, 0.0)
  with pytest.raises(ConfigError, match=r"`optimizer.momentumm`.*accepts: learning_rate, "
                                        r"momentum"):
    registry.build(reg, dict(name="sgd", learning_rate=0.1, momentumm=0.9), key="optimizer")
  with pytest.raises(ConfigError, match=r"needs `optimizer.learning_rate`"):
    registry.build(reg, dict(name="sgd"), key="optimizer")
  with pytest.raises(ConfigError, match=r"`optimizer.name` is missing"):
    registry.build(reg, dict(learning_rate=0.1), key="optimizer")
  with pytest.raises(ConfigError, match=r"must be a section"):
    registry.build(reg, 3, key="optimizer")
  with pytest.raises(ConfigError, match=r"set by the builder"):
    registry.build(reg, dict(name="sgd", learning_rate=0.1), key="optimizer",
                   learning_rate=0.2)


def test_builtin_components_are_registered():
  register_components_and_agents()
  assert {"cartpole", "catch"} <= set(registry.environments.names())
  assert "mlp_actor_critic" in registry.networks
  assert "ppo" in registry.losses and "ppo" in registry.agents
  assert "adam" in registry.optimizers and "replicate" in registry.topologies
  assert "anakin" in registry.runtimes


def test_builder_builds_each_role_from_its_own_section_with_its_own_step_count():
  """`<role>_optimizer` / `<role>_network` parameters get the section of that name, and
  each optimizer the run's steps of its role."""
  from ml_collections import config_dict
  from podracer.builder import build_agent

  built = []

  @registry.optimizers.register("test_recording_opt", override=True)
  def recording_opt(total_steps, learning_rate):
    built.append((learning_rate, total_steps))
    return ("opt", learning_rate, total_steps)

  @registry.agents.register("test_two_role_agent", override=True)
  class TwoRoles:
    def __init__(self, spec, actor_optimizer, critic_optimizer, critic_network, tau=0.1):
      self.actor_optimizer, self.critic_optimizer = actor_optimizer, critic_optimizer
      self.critic_network = critic_network

    @classmethod
    def gradient_steps_per_update(cls, tau=0.1):
      return {"actor_optimizer": 1, "critic_optimizer": 3}

  register_components_and_agents()
  config = config_dict.ConfigDict(dict(
      agent=dict(name="test_two_role_agent", tau=0.5),
      actor_optimizer=dict(name="test_recording_opt", learning_rate=1e-3),
      critic_optimizer=dict(name="test_recording_opt", learning_rate=2e-3),
      critic_network=dict(name="mlp_actor_critic")))
  from podracer.types import ArraySpec, DiscreteSpec, EnvSpec
  import numpy as np
  spec = EnvSpec(ArraySpec((4,), np.float32), DiscreteSpec(2))
  try:
    agent = build_agent(config, spec, total_updates=10)
    assert agent.actor_optimizer == ("opt", 1e-3, 10)
    assert agent.critic_optimizer == ("opt", 2e-3, 30)
    assert hasattr(agent.critic_network, "apply")  # the network got its spec
    del config.critic_optimizer
    with pytest.raises(ConfigError, match="needs the section `critic_optimizer`"):
      build_agent(config, spec, total_updates=10)
  finally:
    registry.optimizers.unregister("test_recording_opt")
    registry.agents.unregister("test_two_role_agent")


def test_schedules_are_sized_with_the_constructors_defaults_for_keys_a_config_leaves_out():
  """PPO's gradient steps per update come from num_epochs and num_minibatches, whose only
  defaults are its constructor's: a config without them still sizes the optimizer."""
  from ml_collections import config_dict
  from podracer.builder import build_agent
  from podracer.types import ArraySpec, DiscreteSpec, EnvSpec
  import numpy as np

  sized = []

  @registry.optimizers.register("test_sized_opt", override=True)
  def sized_opt(total_steps, learning_rate):
    sized.append(total_steps)
    return registry.optimizers.get("adam")(total_steps=total_steps, learning_rate=learning_rate)

  register_components_and_agents()
  config = config_dict.ConfigDict(dict(
      agent=dict(name="ppo"), loss=dict(name="ppo"), network=dict(name="mlp_actor_critic"),
      optimizer=dict(name="test_sized_opt", learning_rate=1e-3)))
  spec = EnvSpec(ArraySpec((4,), np.float32), DiscreteSpec(2))
  try:
    build_agent(config, spec, total_updates=10)
    assert sized == [10 * 4 * 4]  # PPO's defaults: 4 epochs x 4 minibatches
    config.agent.num_epochs = 2
    build_agent(config, spec, total_updates=10)
    assert sized[-1] == 10 * 2 * 4
  finally:
    registry.optimizers.unregister("test_sized_opt")
