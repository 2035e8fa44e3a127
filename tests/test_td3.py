"""TD3: delayed actor and target updates, target policy smoothing within its clip, and
learning Pendulum over 5 seeds; its configs build under Anakin, Sebulba and SEED."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.td3 import TD3
from agents.td3 import config as td3_config
from podracer import builder
from podracer.components import networks
from podracer.components.environments import Pendulum
from podracer.components.replay.device import DeviceReplay
from podracer.errors import ConfigError
from podracer.types import REPLICA_AXIS, StepType, TimeStep, Trajectory
from tests.learning import assert_reached_and_held, launch_runs

F, M = StepType.FIRST, StepType.MID


def _agent(**kwargs):
  spec = Pendulum().spec()
  return TD3(spec, networks.deterministic_policy(spec, hidden_sizes=(16,)),
             networks.twin_q(spec, hidden_sizes=(16,)), actor_optimizer=optax.adam(1e-2),
             critic_optimizer=optax.adam(1e-2),
             replay=DeviceReplay(max_size=64, batch_size=16, priority_exponent=0.0),
             **kwargs)


def _trajectory(length=21, seed=1):
  keys = jax.random.split(jax.random.PRNGKey(seed), 3)
  step_type = jnp.full((length, 2), M, jnp.int32).at[0].set(F)
  timestep = TimeStep(step_type, jax.random.normal(keys[0], (length, 2)),
                      jnp.ones((length, 2)), jax.random.normal(keys[1], (length, 2, 3)))
  action = jax.random.uniform(keys[2], (length, 2, 1), minval=-2, maxval=2)
  return Trajectory(timestep, (), action, {})


def _same(a, b):
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_the_actor_and_the_targets_move_only_every_policy_delay_updates():
  agent = _agent(policy_delay=2)
  nets = agent.init_nets(jax.random.PRNGKey(0))
  trajectory = _trajectory()
  experience = agent.observe(agent.init_experience(jax.eval_shape(lambda: trajectory)),
                             trajectory)
  update = jax.jit(jax.vmap(agent.update, axis_name=REPLICA_AXIS))
  one = lambda x: jnp.asarray(x)[None]
  state = jax.tree.map(one, (nets, agent.init_opt(nets), experience))
  history = [jax.tree.map(lambda x: x[0], state[:2])]
  for i in range(4):
    *state, metrics = update(*state, one(jax.random.PRNGKey(i)))
    history.append(jax.tree.map(lambda x: x[0], tuple(state[:2])))
    assert float(metrics["actor_updated"][0]) == float(i % 2 == 1), i
  for i in range(1, 5):
    (before, opt_before), (after, opt_after) = history[i - 1], history[i]
    assert not _same(before["critic"], after["critic"]), i  # Every update.
    delayed = i % 2 == 0
    assert _same(before["actor"], after["actor"]) != delayed, i
    assert _same(opt_before.target, opt_after.target) != delayed, i
    assert int(opt_after.updates) == i
  # One gradient step counted per update, whether the actor stepped or not.
  assert int(history[-1][1].optimizer["gradient_steps"]) == 4


def test_target_smoothing_noise_stays_within_its_clip_and_the_bounds():
  agent = _agent(target_noise=5.0, target_noise_clip=0.5)
  action = jnp.zeros((4096, 1))
  noisy = agent._noisy(action, jax.random.PRNGKey(0), agent.target_noise,  # pylint: disable=protected-access
                       agent.target_noise_clip)
  assert float(jnp.max(jnp.abs(noisy))) == pytest.approx(1.0)  # 0.5 x half-width 2
  near_bound = agent._noisy(action + 1.9, jax.random.PRNGKey(1), 0.1)  # pylint: disable=protected-access
  assert float(jnp.max(near_bound)) <= 2.0


@pytest.mark.parametrize("name", ["pendulum_anakin", "pendulum_sebulba", "pendulum_seed"])
def test_each_config_builds_and_refuses_a_prioritized_replay(name):
  config = td3_config.get_config(name)
  spec = Pendulum().spec()  # EnvPool's Pendulum-v1 has its spec
  assert builder.build_agent(config, spec, 10).policy_delay == 2
  config.replay.priority_exponent = 0.6
  with pytest.raises(ConfigError, match=r"TD3 replays transitions uniformly"):
    builder.build_agent(config, spec, 10)


@pytest.mark.extended
@pytest.mark.learning
def test_td3_pendulum_anakin_over_5_seeds_holds_minus_200(tmp_path):
  """CleanRL's TD3 settings and pace (one update per env step, 100K steps), seeds 0-4 in
  one program (2026-12-02: last-20 % means -151.7, -160.1, -146.4, -148.8, -143.4, in
  918 s beside the test suite; at one update per 8 env steps one seed held -320). The
  bar: Pendulum above -200, held over the last 20 % by every seed."""
  records = launch_runs("agents/td3/config.py:pendulum_anakin", tmp_path,
                        "--config.num_runs=5", timeout=2400)
  assert_reached_and_held(records, 5, reached=-200, held_iqm=-200, held_each=-200)
