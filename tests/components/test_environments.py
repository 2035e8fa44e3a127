"""Tests of the JAX environments and of VectorEnv's auto-reset and episode statistics."""

import sys
import types
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import gymnasium
from gymnasium.envs.classic_control import cartpole as gym_cartpole
from gymnasium.envs.classic_control import pendulum as gym_pendulum

from podracer import registry
from podracer.components import environments as envs
from podracer.components.environments import (CartPole, Catch, Gymnax, Pendulum, VectorEnv,
                                              VectorEnvState)
from podracer.components.environments.cartpole import CartPoleState
from podracer.components.environments.catch import CatchState, PixelCatch
from podracer.components.environments.pendulum import PendulumState
from podracer.errors import ConfigError
from podracer.types import ArraySpec, DiscreteSpec, StepType

KEY = jax.random.PRNGKey(0)
THETA_MAX = 12 * 2 * np.pi / 360


def _cartpole_state(x, x_dot, theta, theta_dot, t=0):
  f = lambda v: jnp.asarray(v, jnp.float32)
  return CartPoleState(f(x), f(x_dot), f(theta), f(theta_dot), jnp.asarray(t, jnp.int32))


def _assert_strong(tree, what):
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    assert not leaf.weak_type, f"{what}{jax.tree_util.keystr(path)} is weakly typed"


# CartPole.


def test_cartpole_step_matches_gymnasium():
  rng = np.random.default_rng(0)
  n = 256
  # float32-representable states, so only the arithmetic's precision differs.
  states = np.stack([rng.uniform(-2.6, 2.6, n), rng.uniform(-3, 3, n),
                     rng.uniform(-0.25, 0.25, n), rng.uniform(-3, 3, n)], 1).astype(np.float32)
  actions = rng.integers(0, 2, n).astype(np.int32)
  env = CartPole()
  new_state, ts = jax.jit(jax.vmap(env.step))(
      _cartpole_state(*states.T, t=np.zeros(n, np.int32)), actions)

  gym_env = gym_cartpole.CartPoleEnv()
  gym_env.reset(seed=0)
  for i in range(n):
    gym_env.unwrapped.state = states[i].astype(np.float64)
    gym_env.unwrapped.steps_beyond_terminated = None
    obs, reward, terminated, truncated, _ = gym_env.step(int(actions[i]))
    np.testing.assert_allclose(ts.observation[i], obs, rtol=1e-5, atol=1e-6)
    assert float(ts.reward[i]) == reward == 1.0
    assert not truncated
    x, theta = obs[0], obs[2]
    margin = min(abs(abs(x) - 2.4), abs(abs(theta) - THETA_MAX))
    if margin > 1e-5:  # Float32 and float64 may disagree right at a threshold.
      assert bool(ts.discount[i] == 0) == terminated, i
      assert int(ts.step_type[i]) == (StepType.LAST if terminated else StepType.MID)
  np.testing.assert_array_equal(new_state.t, 1)
  # Both outcomes were exercised.
  assert 0 < int((ts.discount == 0).sum()) < n


@pytest.mark.reverb_lane
def test_cartpole_trajectory_matches_gymnasium():
  env = CartPole()
  step = jax.jit(env.step)
  gym_env = gym_cartpole.CartPoleEnv()
  obs, _ = gym_env.reset(seed=3)
  state = _cartpole_state(*obs)
  gym_env.unwrapped.state = obs.astype(np.float64)
  rng = np.random.default_rng(1)
  for t in range(1, 501):
    action = int(rng.integers(0, 2))
    obs, _, terminated, _, _ = gym_env.step(action)
    state, ts = step(state, jnp.int32(action))
    np.testing.assert_allclose(ts.observation, obs, rtol=1e-4, atol=1e-5)
    assert bool(ts.last()) == terminated
    if terminated:
      break
  assert 5 < t < 500


@pytest.mark.parametrize("x,theta,terminated", [
    (2.41, 0.0, True), (-2.41, 0.0, True), (2.39, 0.0, False), (-2.39, 0.0, False),
    (0.0, THETA_MAX + 1e-3, True), (0.0, -THETA_MAX - 1e-3, True),
    (0.0, THETA_MAX - 1e-3, False), (0.0, -THETA_MAX + 1e-3, False)])
def test_cartpole_termination_thresholds(x, theta, terminated):
  # Zero velocities keep x and theta where they are for one Euler step.
  _, ts = CartPole().step(_cartpole_state(x, 0.0, theta, 0.0), jnp.int32(1))
  assert int(ts.step_type) == (StepType.LAST if terminated else StepType.MID)
  assert float(ts.discount) == (0.0 if terminated else 1.0)
  assert float(ts.reward) == 1.0


def test_cartpole_truncates_at_500_with_discount_one():
  env = CartPole()
  state, ts = env.step(_cartpole_state(0.0, 0.0, 0.0, 0.0, t=498), jnp.int32(1))
  assert int(ts.step_type) == StepType.MID
  state, ts = env.step(state, jnp.int32(0))
  assert int(state.t) == 500
  assert int(ts.step_type) == StepType.LAST
  assert float(ts.discount) == 1.0 and float(ts.reward) == 1.0
  # Failing on the last allowed step is a termination: discount 0.
  _, ts = env.step(_cartpole_state(2.41, 0.0, 0.0, 0.0, t=499), jnp.int32(0))
  assert int(ts.step_type) == StepType.LAST and float(ts.discount) == 0.0


def test_cartpole_custom_max_episode_steps():
  env = CartPole(max_episode_steps=7)
  state, ts = env.reset(KEY)
  step_types = []
  for i in range(7):
    state, ts = env.step(state, jnp.int32(i % 2))  # Alternating keeps the pole up.
    step_types.append(int(ts.step_type))
  assert step_types == [StepType.MID] * 6 + [StepType.LAST]
  assert float(ts.discount) == 1.0
  with pytest.raises(ValueError):
    CartPole(max_episode_steps=0)


def test_cartpole_reset_distribution():
  states, ts = jax.vmap(CartPole().reset)(jax.random.split(KEY, 512))
  obs = np.asarray(ts.observation)
  assert np.all(np.abs(obs) <= 0.05) and np.abs(obs).max() > 0.045
  assert np.all(states.t == 0)
  np.testing.assert_array_equal(ts.step_type, StepType.FIRST)
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.discount, 1.0)


@pytest.mark.parametrize("env", [CartPole(), Catch()], ids=["cartpole", "catch"])
def test_dtypes_are_strong_and_match_spec(env):
  spec = env.spec()
  state, ts = jax.eval_shape(env.reset, KEY)
  action = jax.ShapeDtypeStruct((), jnp.int32)
  next_state, next_ts = jax.eval_shape(env.step, state, action)
  for what, t in [("reset", ts), ("step", next_ts)]:
    assert t.step_type.dtype == jnp.int32, what
    assert t.reward.dtype == jnp.float32 and t.discount.dtype == jnp.float32, what
    assert t.observation.dtype == jnp.float32, what
    assert t.observation.shape == spec.observation.shape, what
    assert t.step_type.shape == t.reward.shape == t.discount.shape == (), what
    _assert_strong(t, f"{what} timestep")
  _assert_strong(state, "reset state")
  _assert_strong(next_state, "step state")
  # The state keeps its types across a step, so a scan or jit sees one signature.
  chex.assert_trees_all_equal_shapes_and_dtypes(state, next_state)
  assert isinstance(spec.action, DiscreteSpec)


# Catch.


def _track(state: CatchState) -> jax.Array:
  return (jnp.sign(state.ball_x - state.paddle_x) + 1).astype(jnp.int32)


def _run_catch(env, policy, keys):
  """Runs one episode per key for rows-1 steps; returns the states and timesteps."""
  def one(key):
    state, ts = env.reset(key)

    def body(state, _):
      state, ts = env.step(state, policy(state))
      return state, (state, ts)
    _, out = jax.lax.scan(body, state, None, length=env.rows - 1)
    return ts, out
  return jax.vmap(one)(keys)


@pytest.mark.parametrize("rows,columns", [(10, 5), (6, 3)])
def test_catch_tracking_policy_always_catches(rows, columns):
  env = Catch(rows=rows, columns=columns)
  first, (states, ts) = _run_catch(env, _track, jax.random.split(KEY, 64))
  step_type = np.asarray(ts.step_type)  # [B, rows-1]
  np.testing.assert_array_equal(first.step_type, StepType.FIRST)
  np.testing.assert_array_equal(step_type[:, :-1], StepType.MID)
  np.testing.assert_array_equal(step_type[:, -1], StepType.LAST)
  np.testing.assert_array_equal(ts.reward[:, :-1], 0.0)
  np.testing.assert_array_equal(ts.reward[:, -1], 1.0)
  np.testing.assert_array_equal(ts.discount[:, :-1], 1.0)
  np.testing.assert_array_equal(ts.discount[:, -1], 0.0)
  # The ball starts anywhere in the top row; the paddle in the middle of the bottom one.
  assert set(np.asarray(states.ball_x[:, 0]).tolist()) == set(range(columns))
  np.testing.assert_array_equal(first.observation[:, 0].sum(-1), 1.0)
  np.testing.assert_array_equal(first.observation[:, rows - 1, columns // 2], 1.0)


def test_catch_staying_put_misses_unless_ball_is_above():
  env = Catch()
  first, (states, ts) = _run_catch(env, lambda s: jnp.int32(1), jax.random.split(KEY, 64))
  ball_x = np.asarray(states.ball_x[:, -1])
  expected = np.where(ball_x == env.columns // 2, 1.0, -1.0)
  np.testing.assert_array_equal(ts.reward[:, -1], expected)
  assert (expected == -1.0).any() and (expected == 1.0).any()


def test_catch_observation_has_ball_and_paddle():
  env = Catch()
  first, (states, ts) = _run_catch(env, lambda s: jnp.int32(0), jax.random.split(KEY, 32))
  obs = np.asarray(ts.observation)  # [B, T, rows, columns]
  assert obs.dtype == np.float32
  assert set(np.unique(obs).tolist()) == {0.0, 1.0}
  np.testing.assert_array_equal(first.observation.sum((-1, -2)), 2.0)
  np.testing.assert_array_equal(obs[:, :-1].sum((-1, -2)), 2.0)
  # At the end ball and paddle share a cell exactly when the ball was caught.
  caught = np.asarray(ts.reward[:, -1]) == 1.0
  np.testing.assert_array_equal(obs[:, -1].sum((-1, -2)), np.where(caught, 1.0, 2.0))
  # Pressing left pins the paddle to the left edge.
  np.testing.assert_array_equal(states.paddle_x[:, -1], 0)
  np.testing.assert_array_equal(obs[:, -1, env.rows - 1, 0], 1.0)
  # Ball row t+1 after t+1 steps, in the ball's column.
  b = np.arange(obs.shape[0])
  for t in range(env.rows - 2):
    np.testing.assert_array_equal(obs[b, t, t + 1, np.asarray(states.ball_x[:, t])], 1.0)


def test_pixel_catch_is_catch_rendered_as_stacked_uint8_frames():
  env = PixelCatch(rows=10, columns=5, scale=2, stack=4)
  spec = env.spec()
  assert spec.observation.shape == (4, 20, 10) and spec.observation.dtype == np.uint8
  assert spec.action == Catch().spec().action
  state, ts = env.reset(KEY)
  catch_state, catch_ts = Catch().reset(KEY)
  frames = [np.asarray(ts.observation)]
  assert frames[0].dtype == np.uint8 and set(np.unique(frames[0]).tolist()) == {0, 255}
  # The first frame fills the stack; each cell is a 2x2 block of 255.
  np.testing.assert_array_equal(frames[0], np.broadcast_to(frames[0][-1], (4, 20, 10)))
  board = np.asarray(catch_ts.observation)
  np.testing.assert_array_equal(frames[0][-1, ::2, ::2] // 255, board)
  np.testing.assert_array_equal(frames[0][-1, 1::2, 1::2] // 255, board)
  for action in (0, 2, 1):
    state, ts = env.step(state, jnp.int32(action))
    catch_state, catch_ts = Catch().step(catch_state, jnp.int32(action))
    frames.append(np.asarray(ts.observation))
    # Same dynamics and rewards as Catch; the newest frame last, older ones shifted.
    assert (ts.step_type, ts.reward, ts.discount) == \
        (catch_ts.step_type, catch_ts.reward, catch_ts.discount)
    np.testing.assert_array_equal(frames[-1][-1, ::2, ::2] // 255, catch_ts.observation)
    np.testing.assert_array_equal(frames[-1][:-1], frames[-2][1:])
  chex.assert_trees_all_equal_shapes_and_dtypes(env.reset(KEY)[0], state)


# VectorEnv.


@pytest.mark.reverb_lane
def test_vector_env_resets_after_last_and_ignores_action():
  env = Catch()
  venv = VectorEnv(env, num_envs=4)
  state, ts = venv.reset(KEY)
  step = jax.jit(venv.step)
  for _ in range(env.rows - 1):
    state, ts, stats = step(state, jax.vmap(_track)(state.env_state))
  np.testing.assert_array_equal(ts.step_type, StepType.LAST)
  np.testing.assert_array_equal(stats.done, True)
  np.testing.assert_array_equal(stats.episode_return, 1.0)
  np.testing.assert_array_equal(stats.episode_length, env.rows - 1)

  left = step(state, jnp.zeros(4, jnp.int32))
  right = step(state, jnp.full(4, 2, jnp.int32))
  chex.assert_trees_all_equal(left, right)
  next_state, ts, stats = left
  np.testing.assert_array_equal(ts.step_type, StepType.FIRST)
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.discount, 1.0)
  np.testing.assert_array_equal(next_state.env_state.ball_y, 0)
  np.testing.assert_array_equal(next_state.env_state.paddle_x, env.columns // 2)
  np.testing.assert_array_equal(stats.done, False)
  np.testing.assert_array_equal(stats.episode_return, 0.0)
  np.testing.assert_array_equal(stats.episode_length, 0)


def _rollout(venv, num_steps):
  """A jitted (key, policy_key) -> (first timestep, timesteps, stats) of random play."""
  def run(key, policy_key):
    state, first = venv.reset(key)

    def body(state, k):
      actions = jax.random.randint(k, (venv.num_envs,), 0, venv.spec().action.num_values)
      state, ts, stats = venv.step(state, actions.astype(jnp.int32))
      return state, (ts, stats)
    _, (ts, stats) = jax.lax.scan(body, state, jax.random.split(policy_key, num_steps))
    return first, ts, stats
  return jax.jit(run)


def test_vector_env_episode_stats_match_timesteps():
  venv = VectorEnv(CartPole(max_episode_steps=30), num_envs=8)
  first, ts, stats = jax.tree.map(np.asarray, _rollout(venv, 150)(KEY, jax.random.PRNGKey(1)))
  step_type, reward = ts.step_type, ts.reward
  ended = 0
  for b in range(venv.num_envs):
    length, ret = 0, 0.0
    for t in range(step_type.shape[0]):
      if step_type[t, b] == StepType.FIRST:
        length, ret = 0, 0.0
        assert reward[t, b] == 0.0
      else:
        length, ret = length + 1, ret + reward[t, b]
      assert stats.done[t, b] == (step_type[t, b] == StepType.LAST)
      assert stats.episode_length[t, b] == length
      assert stats.episode_return[t, b] == ret
      if step_type[t, b] == StepType.LAST:
        ended += 1
        assert 1 <= length <= 30 and ret == length  # CartPole pays 1 per step.
      if t > 0 and step_type[t - 1, b] == StepType.LAST:
        assert step_type[t, b] == StepType.FIRST
  assert ended >= venv.num_envs * 3
  # Some episodes were cut by the time limit (discount 1), others terminated.
  last = step_type == StepType.LAST
  assert (ts.discount[last] == 1.0).any() and (ts.discount[last] == 0.0).any()
  np.testing.assert_array_equal(stats.episode_length[last & (ts.discount == 1.0)], 30)


def test_vector_env_new_episodes_start_from_new_states():
  venv = VectorEnv(CartPole(), num_envs=4)
  first, ts, _ = _rollout(venv, 120)(KEY, jax.random.PRNGKey(2))
  starts = [np.asarray(first.observation)]
  step_type = np.asarray(ts.step_type)
  for t, b in zip(*np.nonzero(step_type == StepType.FIRST)):
    starts.append(np.asarray(ts.observation[t, b])[None])
  starts = np.concatenate(starts)
  assert len(starts) > 8
  assert np.all(np.abs(starts) <= 0.05)
  assert len(np.unique(starts, axis=0)) == len(starts)


@pytest.mark.parametrize("env", [CartPole(), Catch()], ids=["cartpole", "catch"])
def test_vector_env_step_compiles_once(env):
  venv = VectorEnv(env, num_envs=3)
  traces = []

  def step(state, action):
    traces.append(1)  # Runs only while tracing.
    return venv.step(state, action)
  jitted = jax.jit(step)
  state, _ = venv.reset(KEY)
  for _ in range(3):
    state, _, _ = jitted(state, jnp.ones((3,), jnp.int32))
  assert isinstance(state, VectorEnvState)
  assert len(traces) == 1


def test_vector_env_is_deterministic_per_key():
  venv = VectorEnv(CartPole(), num_envs=4)
  rollout = _rollout(venv, 40)
  a = rollout(KEY, jax.random.PRNGKey(5))
  b = rollout(KEY, jax.random.PRNGKey(5))
  chex.assert_trees_all_equal(a, b)
  c = rollout(jax.random.PRNGKey(1), jax.random.PRNGKey(5))
  assert not np.array_equal(a[0].observation, c[0].observation)


def test_vector_env_rejects_host_environments():
  class HostEnv(CartPole):
    kind = "host"
  with pytest.raises(TypeError):
    VectorEnv(HostEnv(), num_envs=2)


# Registry and gymnax.


def test_registry_lookup_and_build():
  assert registry.environments.get("cartpole") is CartPole
  assert registry.environments.get("catch") is Catch
  assert registry.environments.get("gymnax") is Gymnax
  env = registry.build(registry.environments,
                       {"name": "cartpole", "max_episode_steps": 10}, key="env")
  assert isinstance(env, CartPole) and env.max_episode_steps == 10
  env = registry.build(registry.environments, {"name": "catch", "rows": 6}, key="env")
  assert (env.rows, env.columns) == (6, 5)
  with pytest.raises(ConfigError, match="env.rowz"):
    registry.build(registry.environments, {"name": "catch", "rowz": 6}, key="env")
  assert set(envs.__all__) >= {"Environment", "VectorEnv", "VectorEnvState", "restart",
                               "transition", "CartPole", "Catch", "Gymnax"}


@pytest.mark.reverb_lane
def test_gymnax_missing_says_how_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, "gymnax", None)  # Makes `import gymnax` fail.
  with pytest.raises(ImportError, match="pip install gymnax"):
    Gymnax("CartPole-v1")


class _FakeState(NamedTuple):
  pos: jax.Array
  time: jax.Array


class _FakeParams(NamedTuple):
  max_steps_in_episode: int = 4
  goal: int = 3

  def replace(self, **kw):
    return self._replace(**kw)


class _FakeGymnaxEnv:
  """gymnax's interface: walk right (action 1) to reach `goal`; discount 0 on any done."""

  def reset_env(self, key, params):
    del key, params
    return jnp.zeros((2,)), _FakeState(pos=0, time=0)  # Weak types, as gymnax has.

  def step_env(self, key, state, action, params):
    del key
    state = _FakeState(state.pos + action, state.time + 1)
    done = (state.pos >= params.goal) | (state.time >= params.max_steps_in_episode)
    obs = jnp.stack([state.pos, state.time]).astype(jnp.float32)
    return obs, state, 1.0, done, {"discount": jnp.where(done, 0.0, 1.0)}

  def action_space(self, params):
    del params
    return types.SimpleNamespace(n=2, shape=())


def test_gymnax_adapter_separates_truncation_from_termination(monkeypatch):
  fake = types.ModuleType("gymnax")
  fake.make = lambda env_id, **kw: (_FakeGymnaxEnv(), _FakeParams())
  monkeypatch.setitem(sys.modules, "gymnax", fake)
  env = Gymnax("Fake-v0", env_params={"max_steps_in_episode": 5})
  assert env.spec().action == DiscreteSpec(2)
  assert env.spec().observation.shape == (2,)

  def run(action, steps):
    state, ts = env.reset(KEY)
    _assert_strong((state, ts), "gymnax reset")
    out = []
    for _ in range(steps):
      state, ts = jax.jit(env.step)(state, jnp.int32(action))
      out.append((int(ts.step_type), float(ts.discount), float(ts.reward)))
    return out
  # Reaching the goal terminates; standing still runs into the time limit.
  assert run(1, 3) == [(1, 1.0, 1.0), (1, 1.0, 1.0), (2, 0.0, 1.0)]
  assert run(0, 5) == [(1, 1.0, 1.0)] * 4 + [(2, 1.0, 1.0)]


def test_gymnax_box_action_spaces_keep_their_bounds(monkeypatch):
  class Continuous(_FakeGymnaxEnv):
    def action_space(self, params):
      del params
      return types.SimpleNamespace(shape=(1,), dtype=jnp.float32, low=jnp.array(-2.0),
                                   high=jnp.array(2.0))

  fake = types.ModuleType("gymnax")
  fake.make = lambda env_id, **kw: (Continuous(), _FakeParams())
  monkeypatch.setitem(sys.modules, "gymnax", fake)
  assert Gymnax("Fake-v0").spec().action == ArraySpec((1,), jnp.float32, "action", -2.0, 2.0)


# Pendulum.


def _pendulum_state(theta, theta_dot, t=0):
  f = lambda v: jnp.asarray(v, jnp.float32)
  return PendulumState(f(theta), f(theta_dot), jnp.asarray(t, jnp.int32))


def test_pendulum_step_matches_gymnasium():
  rng = np.random.default_rng(0)
  n = 256
  # Angles beyond [-pi, pi) test the cost's normalisation; speeds near 8 the clipping.
  states = np.stack([rng.uniform(-7, 7, n), rng.uniform(-8, 8, n)], 1).astype(np.float32)
  actions = rng.uniform(-2.5, 2.5, (n, 1)).astype(np.float32)  # beyond the bounds: clipped
  new_state, ts = jax.jit(jax.vmap(Pendulum().step))(
      _pendulum_state(*states.T, t=np.zeros(n, np.int32)), actions)
  gym_env = gym_pendulum.PendulumEnv()
  gym_env.reset(seed=0)
  for i in range(n):
    gym_env.unwrapped.state = states[i].astype(np.float64)
    obs, reward, terminated, truncated, _ = gym_env.step(actions[i])
    np.testing.assert_allclose(ts.observation[i], obs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ts.reward[i], reward, rtol=1e-5, atol=1e-5)
    assert not terminated and not truncated
  assert np.all(np.asarray(ts.step_type) == StepType.MID) and np.all(ts.discount == 1.0)


def test_pendulum_step_matches_the_formulas_by_hand():
  # theta = pi/2 (horizontal), thetadot = 1, torque 2 (beyond 2 is clipped to it):
  # cost = (pi/2)^2 + 0.1 * 1 + 0.001 * 4; thetadot' = 1 + (15 sin(pi/2) + 3 * 2) * 0.05.
  state, ts = Pendulum().step(_pendulum_state(np.pi / 2, 1.0), jnp.array([3.0]))
  np.testing.assert_allclose(float(ts.reward), -((np.pi / 2) ** 2 + 0.1 + 0.004), rtol=1e-6)
  np.testing.assert_allclose(float(state.theta_dot), 2.05, rtol=1e-6)
  np.testing.assert_allclose(float(state.theta), np.pi / 2 + 2.05 * 0.05, rtol=1e-6)
  np.testing.assert_allclose(ts.observation, [np.cos(state.theta), np.sin(state.theta), 2.05],
                             rtol=1e-6)
  # Speeds clip at 8; the angle moves with the clipped speed.
  state, _ = Pendulum().step(_pendulum_state(np.pi / 2, 7.9), jnp.array([2.0]))
  assert float(state.theta_dot) == 8.0
  np.testing.assert_allclose(float(state.theta), np.pi / 2 + 0.4, rtol=1e-6)


def test_pendulum_trajectory_matches_gymnasium_to_the_200_step_limit():
  env = Pendulum()
  state, ts = env.reset(KEY)
  gym_env = gymnasium.make("Pendulum-v1")
  gym_env.reset(seed=0)
  gym_env.unwrapped.state = np.array([state.theta, state.theta_dot], np.float64)
  step = jax.jit(env.step)
  rng = np.random.default_rng(1)
  for t in range(1, 201):
    action = rng.uniform(-2, 2, (1,)).astype(np.float32)
    state, ts = step(state, action)
    obs, reward, terminated, truncated, _ = gym_env.step(action)
    # float32 against float64 over 200 chaotic-ish steps: a loose tolerance.
    np.testing.assert_allclose(ts.observation, obs, atol=2e-3)
    np.testing.assert_allclose(float(ts.reward), reward, atol=1e-2)
    assert int(ts.step_type) == (StepType.LAST if t == 200 else StepType.MID)
    assert truncated == (t == 200) and not terminated
  # Truncation, not termination: the agent bootstraps through the last step.
  assert float(ts.discount) == 1.0


def test_pendulum_reset_distribution_spec_and_dtypes():
  env = Pendulum()
  states, ts = jax.vmap(env.reset)(jax.random.split(KEY, 512))
  theta, theta_dot = np.asarray(states.theta), np.asarray(states.theta_dot)
  assert np.all(np.abs(theta) <= np.pi) and np.abs(theta).max() > 3.0
  assert np.all(np.abs(theta_dot) <= 1.0) and np.abs(theta_dot).max() > 0.95
  np.testing.assert_allclose(ts.observation, np.stack(
      [np.cos(theta), np.sin(theta), theta_dot], 1), rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(ts.step_type, StepType.FIRST)
  spec = env.spec()
  assert spec.action == ArraySpec((1,), np.float32, "action", -2.0, 2.0)
  assert spec.observation.shape == (3,)
  state, ts = jax.eval_shape(env.reset, KEY)
  next_state, next_ts = jax.eval_shape(env.step, state,
                                       jax.ShapeDtypeStruct((1,), jnp.float32))
  chex.assert_trees_all_equal_shapes_and_dtypes(state, next_state)
  chex.assert_trees_all_equal_shapes_and_dtypes(ts, next_ts)
  _assert_strong((state, next_state, ts, next_ts), "pendulum")
  assert next_ts.observation.dtype == jnp.float32 and next_ts.observation.shape == (3,)


def test_vector_env_steps_continuous_actions():
  env = VectorEnv(Pendulum(max_episode_steps=3), 4)
  state, ts = env.reset(KEY)
  step = jax.jit(env.step)
  actions = jnp.linspace(-2.0, 2.0, 4)[:, None]
  for _ in range(3):
    state, ts, stats = step(state, actions)
  np.testing.assert_array_equal(ts.step_type, StepType.LAST)
  np.testing.assert_array_equal(stats.episode_length, 3)
  # Different torques, different swings.
  assert len(set(np.asarray(ts.observation[:, 2]).round(5))) == 4
  _, ts, _ = step(state, actions)
  np.testing.assert_array_equal(ts.step_type, StepType.FIRST)
