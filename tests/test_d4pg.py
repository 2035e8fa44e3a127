"""D4PG: its losses on a tiny batch against numpy, its per-actor exploration noise, the
support refused where it cannot hold returns, an Anakin run's updates learning (CI),
Pendulum over 5 seeds in one program (extended), the pixel encoder that actor and critic
share trained by the critic's loss alone, and a run from pixels under SEED with two
rendering workers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.d4pg import config as d4pg_config
from podracer import builder
from podracer.errors import ConfigError
from podracer.types import StepType, TimeStep, Trajectory
from tests.components.test_categorical import categorical_td_loss_np, tiny_sequences
from tests.components.test_dm_control import NO_EGL
from tests.learning import assert_reached_and_held, launch_runs, one_call_learning


@pytest.fixture(scope="module")
def agent():
  """pendulum_anakin's agent, its per-actor noise spread (exploration_alpha 2)."""
  config = d4pg_config.pendulum_anakin()
  config.agent.exploration_alpha = 2.0
  return builder.build(config).agent


def _tiny_batch(agent, steps, batch):
  """Items [B, S] of Pendulum-shaped steps (tiny_sequences' resets), importance weights."""
  step_type, discount, reward = tiny_sequences(steps, batch, seed=1)
  rng = np.random.default_rng(2)
  observation = rng.normal(size=(steps, batch, 3)).astype(np.float32)
  action = rng.uniform(-2, 2, size=(steps, batch, 1)).astype(np.float32)
  weights = rng.uniform(0.5, 1.0, size=batch).astype(np.float32)
  swap = lambda x: jnp.swapaxes(jnp.asarray(x), 0, 1)
  items = Trajectory(timestep=TimeStep(swap(step_type), swap(reward * 100), swap(discount),
                                       swap(observation)),
                     actor_state=(), action=swap(action), extras={})
  return items, jnp.asarray(weights), (step_type, discount, reward * 100, observation,
                                       action, weights)


def test_d4pg_losses_on_a_tiny_batch_are_numpys(agent):
  """The critic's: the categorical TD loss of Z(s_t, a_t) against the target critic at
  the target actor's action, n-step, across a termination and a time limit; the actor's:
  -E[Z(s, mu(s))] over the learned steps that are not resets."""
  nets = agent.init_nets(jax.random.PRNGKey(0))
  target = agent.init_nets(jax.random.PRNGKey(1))
  steps, batch, n = 8, 3, agent.critic_loss.n_step
  items, weights, (step_type, discount, reward, obs, action, w) = _tiny_batch(agent, steps,
                                                                              batch)
  loss, out = agent._critic_loss(nets, (items, weights, target), None)
  flat = lambda x: jnp.asarray(x.reshape(steps * batch, -1))
  logits = np.asarray(agent.critic.apply(nets["critic"], flat(obs), flat(action)))
  mu_target = agent.actor.apply(target["actor"], flat(obs))
  next_logits = np.asarray(agent.critic.apply(target["critic"], flat(obs), mu_target))
  support = np.linspace(-1000.0, 0.0, 51)
  expected, per = categorical_td_loss_np(logits.reshape(steps, batch, -1),
                                         next_logits.reshape(steps, batch, -1), step_type,
                                         reward, discount, w, 0.99, n, support)
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(out["abs_td"]) * np.asarray(out["mask"]), per,
                             rtol=1e-5, atol=1e-5)

  actor_loss, _ = agent._actor_loss(nets, (items, weights, target), None)
  learned = jnp.asarray(obs[:steps - n].reshape(-1, 3))
  mu = agent.actor.apply(nets["actor"], learned)
  z = np.asarray(agent.critic.apply(nets["critic"], learned, mu))
  q = (np.exp(z) / np.exp(z).sum(-1, keepdims=True) * support).sum(-1)
  real = (step_type[:steps - n] != StepType.LAST).reshape(-1)
  np.testing.assert_allclose(float(actor_loss), -q[real].mean(), rtol=1e-5)


def test_the_actor_loss_moves_only_the_actor(agent):
  nets = agent.init_nets(jax.random.PRNGKey(0))
  items, weights, _ = _tiny_batch(agent, 8, 2)
  grads = jax.grad(lambda n: agent._actor_loss(n, (items, weights, nets), None)[0])(nets)
  assert all(float(jnp.abs(g).max()) == 0 for g in jax.tree.leaves(grads["critic"]))
  assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads["actor"]))


def test_each_actor_explores_with_its_own_noise_scale_and_evaluation_with_none(agent):
  nets = agent.init_nets(jax.random.PRNGKey(0))
  sigma = agent.init_actor(None, 4)
  np.testing.assert_allclose(sigma, 0.3 ** (1 + 2.0 * np.arange(4) / 3), rtol=1e-6)
  n = 4 * 2000  # 2,000 draws of each of the 4 actors' scales
  obs = jnp.zeros((n, 3))
  timestep = TimeStep(jnp.full(n, StepType.MID), jnp.zeros(n), jnp.ones(n), obs)
  mu = agent.actor.apply(nets["actor"], obs)
  out, _ = agent.act(nets, jnp.tile(sigma, 2000), timestep, jax.random.PRNGKey(1))
  noise = np.asarray(out.action - mu)[:, 0].reshape(2000, 4)
  # Pendulum's half-width is 2; the scales small enough that clipping at +-2 is rare.
  np.testing.assert_allclose(noise.std(axis=0), 2 * np.asarray(sigma), rtol=0.1)
  evaluated, _ = agent.eval_act(nets, agent.init_eval_actor(None, n), timestep,
                                jax.random.PRNGKey(3))
  np.testing.assert_allclose(evaluated.action, mu)


@pytest.mark.parametrize("key, value, says", [
    ("v_min", 0.0, r"`v_min` \(0.0\) must be below `v_max` \(0.0\)"),
    ("v_max", -2000.0, r"`v_min` \(-1000.0\) must be below `v_max` \(-2000.0\)"),
    ("num_atoms", 1, r"`num_atoms` must be an integer of at least 2")])
def test_a_support_that_cannot_hold_returns_is_a_config_error_naming_the_key(key, value,
                                                                              says):
  config = d4pg_config.pendulum_anakin()
  config.critic_loss[key] = value
  with pytest.raises(ConfigError, match=r"`critic_loss`.*" + says):
    builder.build(config)


def test_d4pg_updates_learn_under_anakin():
  """One compiled call of 120 updates (960 env steps), learning from the 25th item: the
  critic's cross-entropy falls, priorities are written (not all 1), values within the
  support."""
  config = d4pg_config.pendulum_anakin()
  config.runtime.updates_per_call = 120
  config.replay.min_size = 25
  learned = one_call_learning(config)
  loss = learned["loss"]
  assert loss.size > 100 and np.all(np.isfinite(loss))
  real = loss > 0  # The first items are the trajectories' padding, all masked.
  assert real.sum() > 100 and loss[real][:10].mean() > loss[real][-10:].mean()
  priority = learned["priority_mean"][real]
  assert np.all(priority > 0) and not np.allclose(priority, 1.0)
  q = learned["q_mean"]
  assert np.all((q >= -1000.0) & (q <= 0.0))


@pytest.mark.extended
@pytest.mark.learning
def test_d4pg_pendulum_anakin_over_5_seeds_holds_minus_200(tmp_path):
  """Seeds 0-4 in one program (num_runs), the config's whole 100K steps each, as a
  user's command runs it: the issue's bar, Pendulum above -200 held over the last 20 %
  (the IQM of the runs' last-fifth means; docs/results/d4pg.md). 2026-12-07: -175.1,
  -192.5, -169.8, -312.5, -186.9 (IQM -184.8), 2,189 s on a loaded 2-core machine."""
  records = launch_runs("agents/d4pg/config.py:pendulum_anakin", tmp_path,
                        "--config.num_runs=5", timeout=3600)
  assert_reached_and_held(records, 5, held_iqm=-200)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["control_sebulba", "control_seed"])
def test_d4pg_runs_on_the_control_suites_states_under_sebulba_and_seed(tmp_path, name):
  """EnvPool's cartpole swingup (dict observations: position, velocity) under Sebulba's
  actor threads and SEED's two worker processes, as a user launches it: 6K env steps,
  learning from the 100th item, every update's record finite and within the support."""
  records = launch_runs(f"agents/d4pg/config.py:{name}", tmp_path,
                        "--config.total_env_steps=6000", "--config.replay.min_size=100")
  assert records[-1]["env_steps"] >= 6000
  learned = [r for r in records if r.get("learning", 0) > 0]
  assert learned and all(np.isfinite(r["loss"]) and -150 <= r["q_mean"] <= 150
                         for r in learned)


def _pixel_agent():
  """control_pixels_seed's agent (its shared `replicator_resnet`, small) on 24 x 24 x 9
  frames and one action in [-1, 1]."""
  from podracer.types import ArraySpec, EnvSpec  # pylint: disable=import-outside-toplevel
  config = d4pg_config.control_pixels_seed()
  config.encoder_network.channels = (4, 8, 8)
  config.actor_network.hidden_sizes = config.critic_network.hidden_sizes = (16, 16)
  spec = EnvSpec(observation=ArraySpec((24, 24, 9), np.dtype(np.uint8), "pixels"),
                 action=ArraySpec((1,), np.dtype(np.float32), "action", -1.0, 1.0))
  return builder.build_agent(config, spec, total_updates=10)


def test_a_shared_pixel_encoder_is_trained_by_the_critics_loss_alone():
  """From pixels actor and critic read one embedding e(s) [B, 64] of the encoder; the
  critic's objective owns the encoder and its loss's gradient reaches it; the actor's
  loss moves the actor only (its gradient stopped at the embedding)."""
  agent = _pixel_agent()
  nets = jax.jit(agent.init_nets)(jax.random.PRNGKey(0))
  assert set(nets) == {"encoder", "actor", "critic"}
  assert {o.name: tuple(o.owns) for o in agent.objectives} == {
      "critic": ("critic", "encoder"), "actor": ("actor",)}
  steps, batch = 8, 2
  step_type, discount, reward = tiny_sequences(steps, batch, seed=1)
  rng = np.random.default_rng(2)
  frames = rng.integers(0, 256, size=(batch, steps, 24, 24, 9), dtype=np.uint8)
  swap = lambda x: jnp.swapaxes(jnp.asarray(x), 0, 1)
  items = Trajectory(timestep=TimeStep(swap(step_type), swap(reward), swap(discount),
                                       jnp.asarray(frames)),
                     actor_state=(), action=jnp.asarray(
                         rng.uniform(-1, 1, (batch, steps, 1)), jnp.float32), extras={})
  assert agent.embedded(nets, jnp.asarray(frames[:, 0])).shape == (batch, 64)
  batch_args = (items, jnp.ones(batch), nets)
  critic = jax.jit(jax.grad(lambda n: agent._critic_loss(n, batch_args, None)[0]))(nets)
  actor = jax.jit(jax.grad(lambda n: agent._actor_loss(n, batch_args, None)[0]))(nets)
  moved = lambda tree: any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(tree))
  assert moved(critic["encoder"]) and moved(critic["critic"])
  assert moved(actor["actor"]) and not moved(actor["encoder"]) and not moved(
      actor["critic"])


@pytest.mark.slow
@pytest.mark.skipif(NO_EGL, reason="this machine has no libEGL (apt install libegl1): "
                    "dm_control's headless renderer cannot load")
def test_d4pg_from_pixels_under_seed_with_two_rendering_workers_runs(tmp_path):
  """control_pixels_seed as a user launches it, small: two worker processes rendering
  cartpole swingup at 24 x 24 (three frames, actions repeated 4 times), a small encoder
  and networks, 800 env steps learning from the 20th item; both workers alive at the
  end, every learning record's loss, Q-values and priorities finite."""
  records = launch_runs("agents/d4pg/config.py:control_pixels_seed", tmp_path,
                        "--config.total_env_steps=800", "--config.replay.min_size=20",
                        "--config.runtime.num_local_workers=2", "--config.env.height=24",
                        "--config.env.width=24", "--config.encoder_network.channels=(4,8,8)",
                        "--config.actor_network.hidden_sizes=(32,32)",
                        "--config.critic_network.hidden_sizes=(32,32)")
  assert records[-1]["env_steps"] >= 800 and records[-1]["workers_alive"] == 2
  learned = [r for r in records if r.get("learning", 0) > 0]
  assert learned and all(np.isfinite([r["loss"], r["q_mean"], r["priority_max"]]).all()
                         for r in learned)
