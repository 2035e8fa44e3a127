"""benchmarks/actors.py: a host runtime's producers measured alone, through the runtime's
`initial_store` and `producing` (the library keeps no benchmark-only method)."""

import pytest

from agents.ppo import config as ppo_config
from benchmarks.actors import run_actors
from podracer import builder
from podracer.errors import ConfigError
from podracer.launch import register_components_and_agents

pytest.importorskip("envpool")


def _runtime(**runtime):
  register_components_and_agents()
  config = ppo_config.cartpole_sebulba()
  config.runtime.update(runtime)
  return builder.build(config).runtime


def test_the_producers_alone_step_and_stop():
  runtime = _runtime()
  assert not hasattr(runtime, "run_actors")
  assert run_actors(runtime, 0.5, warmup_batches=1) > 0
  with runtime.producing(runtime.initial_store()) as (stop, poll):
    assert runtime.channel.get(stop) is not None  # a trajectory put by a producer
    poll()
  # The block's exit shut its threads down: the producers start again, afresh.
  assert run_actors(runtime, 0.2, warmup_batches=1) > 0


def test_a_host_replay_is_refused_naming_the_rate_limiter():
  register_components_and_agents()
  from agents.dqn import config as dqn_config  # pylint: disable=import-outside-toplevel
  config = dqn_config.cartpole_sebulba()
  config.replay.name = "host"  # (the config's own keeps it on the devices)
  with pytest.raises(ConfigError, match="rate limiter"):
    run_actors(builder.build(config).runtime, 0.1)
