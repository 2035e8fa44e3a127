"""Action masks: `legal`, masked exploration, the builder's refusals, the door's check of
an empty mask, and every discrete agent on `masked_bandit` (an illegal action costs its
episode's return) under Anakin, Sebulba and SEED."""

import importlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from podracer import builder
from podracer.agent import legal
from podracer.components.environments.masked import MaskedBandit
from podracer.config import presets
from podracer.errors import ConfigError, EnvironmentStepError
from podracer.kits.q_learning import epsilon_greedy_actions
from podracer.runtimes import door
from podracer.types import (ACTION_MASK, ILLEGAL, ArraySpec, DiscreteSpec, EnvSpec,
                            TimeStep, observation_features)

MASK = np.array([[True, False, True, False], [False, False, False, True]])


def test_legal_leaves_mask_free_values_alone_and_hides_illegal_ones():
  q = jnp.arange(8.0).reshape(2, 4)
  assert legal(q, jnp.zeros((2, 3))) is q
  masked = legal(q, {"observation": jnp.zeros((2, 3)), ACTION_MASK: MASK})
  np.testing.assert_array_equal(masked, [[0, ILLEGAL, 2, ILLEGAL], [ILLEGAL] * 3 + [7]])
  samples = jax.random.categorical(jax.random.PRNGKey(0), masked, shape=(1000, 2))
  assert MASK[np.arange(2), np.asarray(samples)].all()
  # Finite entropies: a softmax over masked logits has no NaN, nor its gradient.
  entropy = lambda x: -jnp.sum(jax.nn.softmax(x) * jax.nn.log_softmax(x))
  assert np.isfinite(jax.grad(entropy)(masked)).all()


def test_epsilon_greedy_explores_legal_actions_only_and_is_unchanged_without_a_mask():
  q = jnp.tile(jnp.array([[5.0, 9.0, 1.0, 2.0]]), (2, 1))
  keys = jax.random.split(jax.random.PRNGKey(1), 500)
  act = jax.vmap(lambda k: epsilon_greedy_actions(q, 1.0, k, jnp.asarray(MASK)))(keys)
  assert MASK[np.arange(2), np.asarray(act)].all()
  assert set(np.asarray(act)[:, 0]) == {0, 2}  # Uniform over the legal ones: both drawn.
  greedy = epsilon_greedy_actions(q, 0.0, keys[0], jnp.asarray(MASK))
  np.testing.assert_array_equal(greedy, [0, 3])
  # No mask: the draws of before (randint), so mask-free runs' records stay as they were.
  explore_key, action_key = jax.random.split(keys[0])
  before = jnp.where(jax.random.uniform(explore_key, (2,)) < 0.5,
                     jax.random.randint(action_key, (2,), 0, 4), jnp.argmax(q, axis=-1))
  np.testing.assert_array_equal(epsilon_greedy_actions(q, 0.5, keys[0]), before)


def test_torsos_never_see_the_mask():
  obs = {"pixels": np.zeros((2, 8, 8, 3)), ACTION_MASK: MASK}
  assert observation_features(obs) is obs["pixels"]
  tree = {"a": 1, "b": 2, ACTION_MASK: 3}
  assert observation_features(tree) == {"a": 1, "b": 2}


def _config(agent="ppo", name="cartpole_anakin"):
  return ml_collections.ConfigDict(dict(agent=dict(name=agent), env=dict(name=name)))


def _spec(mask_shape=(4,), mask_dtype=np.bool_):
  return EnvSpec({"observation": ArraySpec((3,), np.float32),
                  ACTION_MASK: ArraySpec(mask_shape, mask_dtype)}, DiscreteSpec(4))


def test_the_builder_refuses_a_masked_environment_to_an_agent_that_ignores_masks():
  class Unmasked:  # pylint: disable=too-few-public-methods
    action_masks = False
  with pytest.raises(ConfigError, match=r"Agent 'mine' does not honour action masks.*"
                     r"environment 'masked_bandit'"):
    builder._check_action_mask(_config("mine", "masked_bandit"), Unmasked, _spec())
  with pytest.raises(ConfigError, match=r"must be bool \[4\].*float32 \[5\]"):
    builder._check_action_mask(_config(), type("M", (), dict(action_masks=True)),
                               _spec((5,), np.float32))


def test_the_door_names_the_environment_whose_mask_has_no_legal_action():
  mask = np.ones((3, 4), bool)
  mask[2] = False
  step_type = np.array([1, 1, 1], np.int32)
  timestep = TimeStep(step_type, np.zeros(3, np.float32), np.ones(3, np.float32),
                      {"observation": np.zeros((3, 2), np.float32), ACTION_MASK: mask})
  assert "no legal action from environment 2" in door.timestep_problem(timestep)
  # A LAST step's action is ignored: its mask may be empty (a finished board game's).
  assert door.timestep_problem(timestep._replace(step_type=np.array([1, 1, 2]))) is None
  # SEED's door on a STEP's bytes: the mask is observation leaf 0 (keys sorted).
  arrays = [step_type, np.zeros(3, np.float32), np.ones(3, np.float32), mask,
            np.zeros((3, 2), np.float32), np.array([1.0, 0, 1, 0, 0])]
  check = door.Door([(a.shape, a.dtype) for a in arrays], mask_leaf=0)
  payload = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
  assert "environment 2" in check.problem(payload, arrays)
  arrays[3] = np.ones((3, 4), bool)
  payload = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
  assert check.problem(payload, arrays) is None


def test_masked_bandit_pays_exactly_its_length_to_legal_play_only():
  env = MaskedBandit(num_actions=6, episode_length=10)
  state, timestep = env.reset(jax.random.PRNGKey(0))
  legal_total = illegal_total = 0.0
  for _ in range(10):
    mask = np.asarray(timestep.observation[ACTION_MASK])
    assert mask.any()
    if not mask.all():
      illegal_total += float(env.step(state, jnp.int32(np.argmin(mask)))[1].reward)
    state, timestep = env.step(state, jnp.int32(np.argmax(mask)))
    legal_total += float(timestep.reward)
  assert legal_total == 10.0 and illegal_total < 0
  assert int(timestep.step_type) == 2 and float(timestep.discount) == 0.0


def _run_masked(agent, name, env, total_env_steps, **agent_kwargs):
  c = getattr(importlib.import_module(f"agents.{agent}.config"), name)()
  c.env = env
  if c.topology.name == "actor_learner":  # One actor and one learner device.
    c.topology.num_actors = c.topology.num_learners = 1
  else:
    c.topology.num_devices = 1
  c.total_env_steps = total_env_steps
  c.agent.update(agent_kwargs)
  records = builder.build(c).train(stream=None)["records"]
  returns = [r["episode_return"] for r in records if "episode_return" in r]
  assert returns and records[-1]["env_steps"] >= total_env_steps
  return returns


# R2D2 and MuZero share DQN's and PPO's masking code (`legal`, masked epsilon-greedy) or
# mctx's `invalid_actions`: the extended tier runs them.
ANAKIN = [("ppo", "cartpole_anakin", {}), ("impala", "cartpole_anakin", {}),
          ("dqn", "cartpole_anakin", {}), ("pqn", "cartpole_anakin", {}),
          pytest.param("r2d2", "catch_anakin", {}, marks=pytest.mark.extended),
          pytest.param("muzero", "cartpole_anakin",
                       dict(num_simulations=4, max_num_considered_actions=4),
                       marks=pytest.mark.extended)]


@pytest.mark.slow
@pytest.mark.parametrize("agent,name,kwargs", ANAKIN,
                         ids=["ppo", "impala", "dqn", "pqn", "r2d2", "muzero"])
def test_every_discrete_agent_takes_only_legal_actions_under_anakin(agent, name, kwargs):
  """Thousands of steps, exploring (epsilon 1 at first for the Q agents, fresh policies
  otherwise): every episode's return is its length, 10, only if no action was illegal
  (a uniform policy would average about -2)."""
  returns = _run_masked(agent, name, presets.section("masked_bandit"), 4000, **kwargs)
  assert returns == [10.0] * len(returns)


HOST = presets.section("dm_env",
                       factory="podracer.components.environments.masked:MaskedBanditDmEnv")


@pytest.mark.slow
@pytest.mark.parametrize("agent,name", [
    ("ppo", "cartpole_sebulba"), ("impala", "cartpole_seed"),
    pytest.param("dqn", "cartpole_sebulba", marks=pytest.mark.extended)])
def test_masks_hold_under_sebulba_and_seed(agent, name):
  returns = _run_masked(agent, name, HOST, 4000)
  assert returns == [10.0] * len(returns)


@pytest.mark.slow
def test_anakin_stops_mid_run_naming_the_environment_whose_mask_is_empty():
  """A rare empty mask (probability 1e-4 a step) first comes after several calls: the
  run stops at the end of that call, naming the environment, with the records before."""
  from agents.ppo.config import cartpole_anakin  # pylint: disable=import-outside-toplevel
  c = cartpole_anakin()
  c.topology.num_devices = 1
  c.env = presets.section("masked_bandit", empty_mask_prob=1e-4)
  c.total_env_steps = 400_000
  c.runtime.updates_per_call = 2  # 1,024 env steps a call: records come often.
  experiment = builder.build(c)
  with pytest.raises(EnvironmentStepError,
                     match=r"no legal action from environment \d+ \(MaskedBandit"):
    experiment.train(stream=None)
  written = len(experiment.logger.records)
  assert 2 <= written < c.total_env_steps // 1024
