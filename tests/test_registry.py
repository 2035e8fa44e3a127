"""Registries: lookup, errors that help, duplicate protection, config-to-component building."""

import pytest

from podracer import registry
from podracer.builder import register_builtin_components
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
  register_builtin_components()
  assert {"cartpole", "catch"} <= set(registry.environments.names())
  assert "mlp_actor_critic" in registry.networks
  assert "ppo" in registry.losses and "ppo" in registry.agents
  assert "adam" in registry.optimizers and "replicate" in registry.topologies
  assert "anakin" in registry.runtimes
