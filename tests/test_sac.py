"""SAC: its experience, the separation of its three optimizers, and learning Pendulum."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.sac import SAC
from agents.sac import config as sac_config
from agents.sac.agent import transitions
from podracer import builder
from podracer.components import networks
from podracer.components.environments import Pendulum
from podracer.components.replay.device import DeviceReplay
from podracer.errors import ConfigError
from podracer.types import REPLICA_AXIS, StepType, TimeStep, Trajectory
from tests.learning import assert_reached_and_held, launch_runs

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def _agent(**optimizers):
  spec = Pendulum().spec()
  kwargs = dict(actor_optimizer=optax.adam(1e-2), critic_optimizer=optax.adam(1e-2),
                alpha_optimizer=optax.adam(1e-2))
  kwargs.update(optimizers)
  return SAC(spec, networks.gaussian_policy(spec, hidden_sizes=(16,)),
             networks.twin_q(spec, hidden_sizes=(16,)),
             replay=DeviceReplay(max_size=64, batch_size=16, priority_exponent=0.0),
             **kwargs)


def _trajectory(step_types, seed=0):
  """A [T+1, B=2] trajectory with the given step types (the same in both envs)."""
  t = len(step_types)
  keys = jax.random.split(jax.random.PRNGKey(seed), 3)
  step_type = jnp.broadcast_to(jnp.asarray(step_types, jnp.int32)[:, None], (t, 2))
  timestep = TimeStep(step_type, jax.random.normal(keys[0], (t, 2)),
                      jnp.where(step_type == L, 0.0, 1.0),
                      jax.random.normal(keys[1], (t, 2, 3)))
  action = jax.random.uniform(keys[2], (t, 2, 1), minval=-2, maxval=2)
  return Trajectory(timestep, (), action, {})


def test_transitions_pair_each_step_with_the_next_and_flag_resets():
  trajectory = _trajectory([F, M, L, F])
  items, real = transitions(trajectory)
  ts = trajectory.timestep
  # [T=3, B=2] -> 6 transitions, time-major: (t=0, b=0), (t=0, b=1), (t=1, b=0), ...
  np.testing.assert_array_equal(items.observation[3], ts.observation[1, 1])
  np.testing.assert_array_equal(items.next_observation[3], ts.observation[2, 1])
  np.testing.assert_array_equal(items.action[3], trajectory.action[1, 1])
  assert items.reward[3] == ts.reward[2, 1] and items.discount[3] == 0.0  # into the LAST
  # Out of the LAST step the action was ignored: not a real transition.
  np.testing.assert_array_equal(real, [True, True, True, True, False, False])


def test_transitions_out_of_last_steps_are_never_sampled():
  agent = _agent()
  trajectory = _trajectory([F, M, L, F, M, M, L, F, M])
  experience = agent.init_experience(jax.eval_shape(lambda: trajectory))
  experience = agent.observe(experience, trajectory)
  assert int(experience.size) == 16
  sample = agent.replay.sample(experience, jax.random.PRNGKey(0))
  drawn = jax.jit(jax.vmap(lambda k: agent.replay.sample(experience, k).ids))(
      jax.random.split(jax.random.PRNGKey(0), 200)).reshape(-1)
  _, real = transitions(trajectory)
  assert set(np.asarray(drawn)) == set(np.flatnonzero(real))
  assert sample.items.reward.shape == (16,)


def _learn_once(agent):
  """One update from a replay holding a random trajectory, as one replica of a pmap."""
  nets = agent.init_nets(jax.random.PRNGKey(0))
  trajectory = _trajectory([F] + [M] * 20, seed=1)
  experience = agent.observe(agent.init_experience(jax.eval_shape(lambda: trajectory)),
                             trajectory)
  update = jax.jit(jax.vmap(agent.update, axis_name=REPLICA_AXIS))
  one = lambda x: jnp.asarray(x)[None]
  new_nets, opt, _, metrics = update(*jax.tree.map(one, (
      nets, agent.init_opt(nets), experience, jax.random.PRNGKey(1))))
  new_nets, opt = jax.tree.map(lambda x: x[0], (new_nets, opt))
  changed = {k: not all(np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves(nets[k]), jax.tree.leaves(new_nets[k]))) for k in nets}
  # The target critic is in the learner state (TargetState), one update counted. Polyak
  # averaging of equal values rounds: "changed" means more than rounding.
  assert int(opt.updates) == 1
  changed["target_critic"] = not all(np.allclose(a, b, rtol=1e-6, atol=0) for a, b in zip(
      jax.tree.leaves(nets["critic"]), jax.tree.leaves(opt.target)))
  return changed, opt.optimizer, metrics


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_each_optimizer_updates_only_its_own_parameters():
  """The actor's optimizer never touches the critic's parameters and vice versa: with one
  role's optimizer frozen (zero updates) that role's parameters stay bit for bit the same
  through a full update, while the others' still change."""
  changed, opt, metrics = _learn_once(_agent(critic_optimizer=optax.set_to_zero()))
  assert float(metrics["learning"][0]) == 1.0
  # The target critic is a Polyak average of the unchanged critic it started equal to.
  assert changed == dict(actor=True, critic=False, target_critic=False, log_alpha=True)
  # Each optimizer's state covers its own parameters only.
  assert set(opt["actor"][0].mu) == {"actor"} and set(opt["alpha"][0].mu) == {"log_alpha"}
  changed, _, _ = _learn_once(_agent(actor_optimizer=optax.set_to_zero()))
  assert changed == dict(actor=False, critic=True, target_critic=True, log_alpha=True)
  changed, _, _ = _learn_once(_agent(alpha_optimizer=optax.set_to_zero()))
  assert changed == dict(actor=True, critic=True, target_critic=True, log_alpha=False)


def test_sac_needs_the_uniform_device_replay():
  config = sac_config.pendulum_anakin()
  config.replay.priority_exponent = 0.6
  with pytest.raises(ConfigError, match="priority_exponent=0"):
    builder.build(config)
  config = sac_config.pendulum_anakin()
  config.critic_optimizer.momentum = 0.9  # not an Adam argument
  with pytest.raises(ConfigError, match="critic_optimizer.momentum"):
    builder.build(config)


def _reached(records, budget):
  returns = [(r["env_steps"], r["episode_return"]) for r in records if "episode_return" in r]
  steps, best = max(returns, key=lambda x: x[1])
  assert best >= -250, f"best mean episode return {best:.0f} < -250 (at {steps} steps)"
  assert steps <= budget
  learned = [r for r in records if r.get("learning", 0) > 0]
  assert learned and all(np.isfinite(r["critic_loss"]) for r in learned)
  # The temperature fell from 1 as the policy's entropy came down towards -1.
  assert 0 < learned[-1]["alpha"] < 0.5
  assert all(r["replay_size"] <= 100_000 for r in records)
  return steps


@pytest.mark.extended
@pytest.mark.learning
def test_sac_pendulum_anakin_over_5_seeds_reaches_and_holds_minus_250(tmp_path):
  """Seeds 0-4 in one program, one host device, the whole 100K each (2026-11-27: best
  -75 to -106, last-20 % means -139 to -158, IQM -148.5; a random policy about -1,200).
  About 70 s: five runs of an update every 8 env steps, the budget whole, since holding
  is the claim."""
  assert sac_config.pendulum_anakin().total_env_steps == 100_000
  records = launch_runs("agents/sac/config.py:pendulum_anakin", tmp_path,
                        "--config.num_runs=5")
  assert_reached_and_held(records, 5, reached=-250, held_iqm=-250)


@pytest.mark.extended  # SAC's CI test: Anakin, 5 seeds
@pytest.mark.learning
def test_sac_pendulum_sebulba_reaches_minus_250_within_150k_steps(tmp_path):
  """The same agent on EnvPool's Pendulum-v1, replay on the learner device, seed 0, one
  host device; acting and learning in turns (`max_policy_lag=0`), so the run is fixed by
  its seed (2026-11-27: -201 by 32K env steps). The config's unbounded lag makes each
  run another draw."""
  config = sac_config.pendulum_sebulba()
  assert config.seed == 0 and config.total_env_steps == 150_000
  records = launch_runs("agents/sac/config.py:pendulum_sebulba", tmp_path,
                        "--config.runtime.max_policy_lag=0", "--config.stop_at_return=-250")
  runtime = config.runtime
  # Within the budget, give or take the last batch of each of the two actor threads.
  _reached(records, 150_000 + 2 * runtime.num_envs_per_actor * runtime.rollout_length)


@pytest.mark.extended  # SAC's CI test: Anakin, 5 seeds
@pytest.mark.learning
def test_sac_brax_inverted_pendulum_holds_950_over_the_last_fifth_of_150k_steps(tmp_path):
  """SAC with Brax's physics compiled into the Anakin program (`brax_anakin`: Brax's
  inverted pendulum, 1 reward per step, 1,000 steps at most), seed 0, one host device:
  holds 1,000 over the last fifth (2026-11-27, 39 s; under the suite's flags seeds 0-2
  reached 1,000 at 96K-114K env steps, docs/agents.md). Through VectorEnv every episode's
  return is its length, and none outlives Brax's limit."""
  config = sac_config.brax_anakin()
  assert config.seed == 0 and config.total_env_steps == 150_000
  records = launch_runs("agents/sac/config.py:brax_anakin", tmp_path)
  episodes = [r for r in records if "episode_return" in r]
  for r in episodes:
    assert r["episode_return"] == pytest.approx(r["episode_length"], rel=1e-5)
    assert r["episode_length"] <= 1000
  last_fifth = [r["episode_return"] for r in episodes if r["env_steps"] > 0.8 * 150_000]
  assert len(last_fifth) >= 5
  assert np.mean(last_fifth) >= 950, f"last-20% mean return {np.mean(last_fifth):.1f}"


@pytest.mark.slow
def test_sac_anakin_on_8_devices_keeps_replicas_equal_with_their_own_replays():
  """Each replica acts in its own environments and fills its own replay shard; the three
  optimizers apply replica-averaged gradients, so every replica's nets stay equal."""
  from podracer.logs.metrics import MetricsLogger
  config = sac_config.pendulum_anakin()
  config.topology.num_devices = 8
  config.runtime.updates_per_call = 10
  config.replay.update(dict(min_size=16, max_size=1_000))
  config.total_env_steps = 2 * 8 * 8 * 10  # two calls of 10 updates of 8 x 8 env steps
  logger = MetricsLogger(stream=None)
  state = builder.build(config).runtime.train(logger)
  assert len(logger.records) == 2 and logger.records[-1]["learning"] == 1.0
  assert np.isfinite(logger.records[-1]["critic_loss"])
  replay = state.agent.experience
  np.testing.assert_array_equal(np.asarray(replay.inserts), np.full(8, 20 * 8))
  assert not np.array_equal(replay.items.observation[0], replay.items.observation[1])
  for leaf in jax.tree.leaves(state.agent.nets):
    np.testing.assert_array_equal(leaf[0], leaf[7])
