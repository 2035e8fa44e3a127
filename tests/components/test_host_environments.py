"""Host environments (EnvPool, Gymnasium, dm_env) follow the JAX environments' convention.

Every adapter must give: FIRST from reset, [B] numpy arrays with fixed dtypes, LAST
followed by FIRST (reward 0, discount 1, action ignored), discount 0 at termination and 1
at truncation, and EpisodeStats holding true episode totals.
"""

import os
import subprocess
import sys

import dm_env
import gymnasium
import numpy as np
import pytest

from podracer import registry
from podracer.components.environments import (CatchDmEnv, DmEnv, EnvPool, Gymnasium,
                                              HostEnvironment)
from podracer.components.environments.host import EpisodeTracker, env_seeds
from podracer.errors import ConfigError
from podracer.types import ArraySpec, DiscreteSpec, StepType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CATCH = "podracer.components.environments.dm_env_adapter:CatchDmEnv"


def _check_types(timestep, stats, num_envs, obs_shape, obs_dtype):
  assert timestep.step_type.dtype == np.int32 and timestep.step_type.shape == (num_envs,)
  assert timestep.reward.dtype == np.float32 and timestep.reward.shape == (num_envs,)
  assert timestep.discount.dtype == np.float32 and timestep.discount.shape == (num_envs,)
  assert timestep.observation.shape == (num_envs, *obs_shape)
  assert timestep.observation.dtype == obs_dtype
  assert stats.done.dtype == np.bool_ and stats.episode_return.dtype == np.float32
  assert stats.episode_length.dtype == np.int32


def _run_and_check(env, policy, num_steps):
  """Steps `env`, checking the convention; returns the LAST discounts and step counts."""
  timestep, stats = env.reset()
  n = env.num_envs
  np.testing.assert_array_equal(timestep.step_type, StepType.FIRST)
  np.testing.assert_array_equal(timestep.reward, 0.0)
  np.testing.assert_array_equal(timestep.discount, 1.0)
  assert not stats.done.any() and not stats.episode_return.any()
  assert not stats.episode_length.any()
  ret, length, ends = np.zeros(n), np.zeros(n, int), []
  for _ in range(num_steps):
    was_last = timestep.step_type == StepType.LAST
    timestep, stats = env.step(policy(timestep))
    st = timestep.step_type
    # The step after LAST is FIRST, with reward 0 and discount 1; FIRST only comes then.
    np.testing.assert_array_equal(st == StepType.FIRST, was_last)
    np.testing.assert_array_equal(timestep.reward[was_last], 0.0)
    np.testing.assert_array_equal(timestep.discount[was_last], 1.0)
    np.testing.assert_array_equal(timestep.discount[st == StepType.MID], 1.0)
    ret = np.where(was_last, 0.0, ret + timestep.reward)
    length = np.where(was_last, 0, length + 1)
    np.testing.assert_array_equal(stats.done, st == StepType.LAST)
    np.testing.assert_allclose(stats.episode_return, ret)
    np.testing.assert_array_equal(stats.episode_length, length)
    ends += [(float(timestep.discount[i]), int(length[i])) for i in np.flatnonzero(stats.done)]
  return ends


def _balance(timestep):
  """Keeps CartPole up for dozens of steps: push towards where the pole is falling."""
  obs = timestep.observation
  return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int32)


def _push_left(timestep):
  return np.zeros(timestep.step_type.shape, np.int32)


# The interface.


def test_registered_names_build_host_environments():
  assert registry.environments.get("envpool") is EnvPool
  assert registry.environments.get("gymnasium") is Gymnasium
  assert registry.environments.get("dm_env") is DmEnv
  for cls in (EnvPool, Gymnasium, DmEnv):
    assert issubclass(cls, HostEnvironment) and cls.kind == "host"
  # As the Sebulba runtime builds them: config keys, plus num_envs and seed injected.
  env = registry.build(registry.environments,
                       {"name": "envpool", "task_id": "CartPole-v1", "max_episode_steps": 7},
                       key="env", num_envs=2, seed=3)
  with env:
    assert isinstance(env, EnvPool) and env.num_envs == 2
    assert env.spec().action == DiscreteSpec(2)


def test_importing_podracer_imports_neither_envpool_nor_gymnasium():
  code = ("import sys, podracer.components.environments as e; "
          "print(sorted({'envpool', 'gymnasium'} & set(sys.modules)))")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "[]"


def test_episode_tracker_keeps_the_game_going_over_lost_lives():
  tracker = EpisodeTracker(1)
  f, m, l = StepType.FIRST, StepType.MID, StepType.LAST
  # Two lives: LAST (life lost) is no true end; FIRST adds nothing.
  steps = [(m, 2.0, False), (l, 0.0, False), (f, 0.0, False), (m, 5.0, False),
           (l, 1.0, True), (f, 0.0, False), (m, 3.0, False)]
  got = [tracker.update([st], [r], [d]) for st, r, d in steps]
  assert [float(s.episode_return[0]) for s in got] == [2, 2, 2, 7, 8, 0, 3]
  assert [int(s.episode_length[0]) for s in got] == [1, 2, 2, 3, 4, 0, 1]
  assert [bool(s.done[0]) for s in got] == [False] * 4 + [True, False, False]


def test_env_seeds_differ_across_envs_and_neighbouring_seeds():
  seeds = np.concatenate([env_seeds(s, 4) for s in range(3)])
  assert len(set(seeds.tolist())) == 12
  assert seeds.min() >= 0 and seeds.max() < 2**31
  np.testing.assert_array_equal(env_seeds(5, 4), env_seeds(5, 4))


# EnvPool.


def test_envpool_cartpole_reset_spec_and_dtypes():
  with EnvPool("CartPole-v1", num_envs=2, seed=0) as env:
    spec = env.spec()
    assert spec.observation == ArraySpec((4,), np.float32, "obs")
    assert spec.action == DiscreteSpec(2)
    timestep, stats = env.reset()
    _check_types(timestep, stats, 2, (4,), np.float32)
    np.testing.assert_array_equal(timestep.step_type, StepType.FIRST)
    timestep, stats = env.step(np.zeros(2, np.int32))
    _check_types(timestep, stats, 2, (4,), np.float32)


def test_envpool_cartpole_termination_and_auto_reset():
  with EnvPool("CartPole-v1", num_envs=2, seed=0) as env:
    ends = _run_and_check(env, _push_left, 60)
  # Pushing left drops the pole within a dozen steps, several times over.
  assert len(ends) >= 6
  assert all(discount == 0.0 and 0 < length < 30 for discount, length in ends)


def test_envpool_truncation_has_discount_one():
  # EnvPool's own dm_env output says discount 0 here; the adapter reads its `trunc` flag.
  with EnvPool("CartPole-v1", num_envs=2, seed=0, max_episode_steps=10) as env:
    ends = _run_and_check(env, _balance, 33)
  assert ends == [(1.0, 10)] * 6


def test_envpool_ignores_the_action_on_the_step_after_last():
  firsts = []
  for action in (0, 1):
    with EnvPool("CartPole-v1", num_envs=1, seed=4) as env:
      timestep, _ = env.reset()
      while timestep.step_type[0] != StepType.LAST:
        timestep, _ = env.step(np.zeros(1, np.int32))
      timestep, _ = env.step(np.full(1, action, np.int32))
      assert timestep.step_type[0] == StepType.FIRST
      firsts.append(timestep.observation)
  np.testing.assert_array_equal(*firsts)


def test_envpool_seeds_give_every_env_its_own_episode():
  # Sebulba gives actor threads consecutive seeds; EnvPool alone would seed env i with
  # seed + i, so thread 0's env 1 would replay thread 1's env 0.
  obs = []
  for seed in (0, 1):
    with EnvPool("CartPole-v1", num_envs=2, seed=seed) as env:
      obs.extend(env.reset()[0].observation)
  assert len({o.tobytes() for o in obs}) == 4


def test_envpool_observations_survive_later_steps():
  # Sebulba keeps a rollout's timesteps; EnvPool must not reuse their buffers.
  with EnvPool("CartPole-v1", num_envs=2, seed=0) as env:
    kept = [env.reset()[0].observation]
    for _ in range(30):
      kept.append(env.step(np.zeros(2, np.int32))[0].observation)
    copies = [k.copy() for k in kept]
    for _ in range(30):
      env.step(np.ones(2, np.int32))
  for k, c in zip(kept, copies):
    np.testing.assert_array_equal(k, c)


def test_envpool_pong_observations_are_uint8_frame_stacks():
  with EnvPool("Pong-v5", num_envs=2, seed=0) as env:
    spec = env.spec()
    assert spec.observation == ArraySpec((4, 84, 84), np.uint8, "obs")
    assert spec.action == DiscreteSpec(6)
    timestep, stats = env.reset()
    _check_types(timestep, stats, 2, (4, 84, 84), np.uint8)
    rng = np.random.default_rng(0)
    for _ in range(20):
      timestep, stats = env.step(rng.integers(0, 6, 2))
    _check_types(timestep, stats, 2, (4, 84, 84), np.uint8)
    assert timestep.observation.any()


def test_envpool_atari_stats_are_true_game_totals_under_episodic_life():
  # SpaceInvaders: 3 lives, rewards of 5 to 30 points, over in a few hundred random steps.
  env = EnvPool("SpaceInvaders-v5", num_envs=2, seed=0, episodic_life=True,
                reward_clip=True)
  rng = np.random.default_rng(0)
  timestep, _ = env.reset()
  clipped, length, life_ends = np.zeros(2), np.zeros(2, int), np.zeros(2, int)
  games = []
  for _ in range(2000):
    timestep, stats = env.step(rng.integers(0, 6, 2))
    st = timestep.step_type
    assert set(np.unique(timestep.reward)) <= {-1.0, 0.0, 1.0}
    counted = st != StepType.FIRST
    clipped += np.where(counted, timestep.reward, 0)
    length += counted
    lost_life = (st == StepType.LAST) & ~stats.done
    np.testing.assert_array_equal(timestep.discount[lost_life], 0.0)
    life_ends += lost_life
    assert not (stats.done & (st != StepType.LAST)).any()
    for i in np.flatnonzero(stats.done):
      games.append((life_ends[i], clipped[i], stats.episode_return[i],
                    stats.episode_length[i], length[i]))
      clipped[i] = length[i] = life_ends[i] = 0
    if len(games) >= 2:
      break
  env.close()
  assert len(games) >= 2
  for lives_lost, clipped_sum, ret, ep_length, steps in games:
    assert lives_lost == 2  # LAST at the first two lost lives; the game ended at the third.
    assert ep_length == steps  # The whole game: every step of every life.
    assert ret % 5 == 0 and ret >= 5 * clipped_sum  # Unclipped points.
  assert any(ret > clipped_sum > 0 for _, clipped_sum, ret, _, _ in games)


def test_envpool_atari_time_limit_ends_the_game_with_discount_one():
  with EnvPool("Pong-v5", num_envs=2, seed=0, episodic_life=True,
               max_episode_steps=12) as env:
    ends = _run_and_check(env, lambda ts: np.zeros(2, np.int32), 26)
  assert ends == [(1.0, 12)] * 4


def test_envpool_unknown_task_suggests_close_names():
  with pytest.raises(ValueError, match="Did you mean 'CartPole-v1'"):
    EnvPool("cartpole-v1", num_envs=1)
  with pytest.raises(ConfigError, match="Pong-v5"):
    registry.build(registry.environments, {"name": "envpool", "task_id": "Pong-v4"},
                   key="env", num_envs=1, seed=0)


def test_envpool_rejects_unknown_and_reserved_options():
  with pytest.raises(ValueError, match="accepts: .*max_episode_steps"):
    EnvPool("CartPole-v1", num_envs=1, max_steps=3)
  with pytest.raises(ValueError, match="batch_size"):
    EnvPool("CartPole-v1", num_envs=2, batch_size=1)


def test_envpool_step_before_reset_is_an_error():
  with EnvPool("CartPole-v1", num_envs=2) as env:
    with pytest.raises(RuntimeError, match="reset"):
      env.step(np.zeros(2, np.int32))
    env.reset()
    with pytest.raises(ValueError, match="one action each"):
      env.step(np.zeros(3, np.int32))


def test_envpool_pendulum_has_bounded_continuous_actions_and_our_jax_dynamics():
  """EnvPool's Pendulum-v1 (Sebulba) and podracer's JAX `pendulum` (Anakin) agree step
  for step, so an agent sees one task under both runtimes."""
  import jax
  from podracer.components.environments import Pendulum
  from podracer.components.environments.pendulum import PendulumState
  rng = np.random.default_rng(0)
  with EnvPool("Pendulum-v1", num_envs=3, seed=0) as env:
    spec = env.spec()
    assert spec.action == ArraySpec((1,), np.float32, "action", -2.0, 2.0)
    assert spec.observation.shape == (3,)
    timestep, _ = env.reset()
    step = jax.jit(jax.vmap(Pendulum().step))
    for t in range(1, 201):
      action = rng.uniform(-2, 2, (3, 1)).astype(np.float32)
      obs = timestep.observation
      state = PendulumState(np.arctan2(obs[:, 1], obs[:, 0]), obs[:, 2],
                            np.zeros(3, np.int32))
      _, ours = step(state, action)
      timestep, stats = env.step(action)
      np.testing.assert_allclose(timestep.observation, ours.observation, atol=1e-4)
      np.testing.assert_allclose(timestep.reward, ours.reward, rtol=1e-4, atol=1e-4)
    # Truncated at 200 steps with discount 1, as the JAX environment.
    np.testing.assert_array_equal(timestep.step_type, StepType.LAST)
    np.testing.assert_array_equal(timestep.discount, 1.0)
    np.testing.assert_array_equal(stats.episode_length, 200)


def test_gymnasium_box_actions_keep_their_bounds():
  with Gymnasium("Pendulum-v1", num_envs=2, seed=0) as env:
    assert env.spec().action == ArraySpec((1,), np.float32, "action", -2.0, 2.0)
    env.reset()
    timestep, _ = env.step(np.full((2, 1), 0.5, np.float32))
    assert timestep.reward.shape == (2,) and timestep.observation.shape == (2, 3)


# Gymnasium.


def test_gymnasium_cartpole_follows_the_convention():
  with Gymnasium("CartPole-v1", num_envs=2, seed=0, asynchronous=False) as env:
    assert env.spec().observation == ArraySpec((4,), np.float32, "observation")
    assert env.spec().action == DiscreteSpec(2)
    timestep, stats = env.reset()
    _check_types(timestep, stats, 2, (4,), np.float32)
    ends = _run_and_check(env, _push_left, 60)
  assert len(ends) >= 6 and all(d == 0.0 and 0 < n < 30 for d, n in ends)
  with Gymnasium("CartPole-v1", num_envs=2, seed=0, asynchronous=False,
                 max_episode_steps=10) as env:
    assert _run_and_check(env, _balance, 33) == [(1.0, 10)] * 6


def _probe_spec():
  """An env whose observation reports its process; nested, so workers get it by value."""

  class Probe(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 2**31, (4,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def _obs(self):
      import os  # pylint: disable=g-import-not-at-top,reimported,redefined-outer-name
      import sys  # pylint: disable=g-import-not-at-top,reimported,redefined-outer-name
      env = os.environ
      return np.array([env.get("JAX_PLATFORMS") == "cpu",
                       env.get("CUDA_VISIBLE_DEVICES") == "", "jax" in sys.modules,
                       os.getpid()], np.float64)

    def reset(self, *, seed=None, options=None):
      super().reset(seed=seed)
      return self._obs(), {}

    def step(self, action):
      return self._obs(), 0.0, False, False, {}

  return gymnasium.envs.registration.EnvSpec("PodracerProbe-v0", entry_point=Probe)


def test_gymnasium_async_workers_hide_accelerators(monkeypatch):
  # Workers inherit the parent's environment; they must override it for themselves only.
  monkeypatch.setenv("JAX_PLATFORMS", "cuda")
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
  env = Gymnasium(_probe_spec(), num_envs=2, seed=0, asynchronous=True)
  assert os.environ["JAX_PLATFORMS"] == "cuda" and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
  with env:
    timestep, _ = env.reset()
    obs = timestep.observation
  np.testing.assert_array_equal(obs[:, :3], [[1, 1, 0]] * 2)  # cpu, no GPU, no JAX.
  pids = set(obs[:, 3].astype(int).tolist())
  assert len(pids) == 2 and os.getpid() not in pids


def test_gymnasium_async_cartpole_steps_and_closes():
  env = Gymnasium("CartPole-v1", num_envs=2, seed=0, asynchronous=True,
                  max_episode_steps=10)
  ends = _run_and_check(env, _balance, 22)
  env.close()
  env.close()  # Twice is fine.
  assert ends == [(1.0, 10)] * 4


def test_gymnasium_seeds_differ_per_env_and_persist_over_resets():
  with Gymnasium("CartPole-v1", num_envs=2, seed=0, asynchronous=False) as env:
    first = env.reset()[0].observation
    again = env.reset()[0].observation
  assert not np.array_equal(first[0], first[1])
  assert not np.array_equal(first, again)  # Seeded once, not on every reset.
  with Gymnasium("CartPole-v1", num_envs=2, seed=0, asynchronous=False) as env:
    np.testing.assert_array_equal(env.reset()[0].observation, first)


# dm_env.


def test_dm_env_catch_follows_the_convention():
  with DmEnv(CATCH, num_envs=3, seed=0, rows=6) as env:
    assert env.spec().observation == ArraySpec((6, 5), np.float32, "board")
    assert env.spec().action == DiscreteSpec(3)
    timestep, stats = env.reset()
    _check_types(timestep, stats, 3, (6, 5), np.float32)
    ends = _run_and_check(env, lambda ts: np.ones(3, np.int32), 17)
  # An episode is rows - 1 = 5 steps, ending with reward +-1 and discount 0.
  assert ends == [(0.0, 5)] * 9


class _Counter(dm_env.Environment):
  """Counts to `limit`, then truncates (discount 1)."""

  def __init__(self, limit):
    self.limit, self.t = limit, 0

  def reset(self):
    self.t = 0
    return dm_env.restart(np.float32(self.t))

  def step(self, action):
    self.t += 1
    if self.t == self.limit:
      return dm_env.truncation(2.0, np.float32(self.t))
    return dm_env.transition(2.0, np.float32(self.t))

  def observation_spec(self):
    return dm_env.specs.Array((), np.float32, "t")

  def action_spec(self):
    return dm_env.specs.DiscreteArray(2)


def test_dm_env_truncation_and_factory_without_seed():
  with DmEnv(_Counter, num_envs=2, limit=3) as env:
    ends = _run_and_check(env, lambda ts: np.zeros(2, np.int32), 8)
  assert ends == [(1.0, 3)] * 4


def test_dm_env_takes_the_factory_itself_and_seeds_each_env():
  with DmEnv(CatchDmEnv, num_envs=8, seed=1) as env:
    balls = env.reset()[0].observation[:, 0].argmax(-1)
  assert len(set(balls.tolist())) > 1


def test_dm_env_bad_factories_are_clear():
  with pytest.raises(ValueError, match="module:callable"):
    DmEnv("CatchDmEnv", num_envs=1)
  with pytest.raises(ValueError, match="Cannot import"):
    DmEnv("no_such_module_xyz:Env", num_envs=1)
  with pytest.raises(ValueError, match="has no 'Nope'"):
    DmEnv("podracer.components.environments.dm_env_adapter:Nope", num_envs=1)
  with pytest.raises(TypeError, match="not a dm_env.Environment"):
    DmEnv("builtins:dict", num_envs=1)
