"""The Anakin runtime: determinism, replication over devices, gradient averaging, one compile."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.ppo import PPO
from agents.ppo.config import cartpole_anakin
from podracer import builder, mesh, registry
from podracer.components.losses import PPOLoss, policy_gradient_batch
from podracer.errors import ConfigError, RecompilationError
from podracer.logs.metrics import MetricsLogger
from podracer.runtimes.compile_once import compile_once
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec, StepType, TimeStep, Trajectory


def small_config(num_devices, seed=0, calls=2):
  c = cartpole_anakin()
  c.seed = seed
  c.topology.num_devices = num_devices
  c.runtime.num_envs_per_device = 4
  c.runtime.rollout_length = 16
  c.runtime.updates_per_call = 4
  c.total_env_steps = num_devices * 4 * 16 * 4 * calls
  return c


def run_records(config):
  experiment = builder.build(config)
  logger = MetricsLogger(stream=None)
  state = experiment.runtime.train(logger)
  drop = ("sps", "wall_time", "includes_compilation", "compile_s")
  return [{k: v for k, v in r.items() if k not in drop} for r in logger.records], state


@pytest.mark.slow
def test_eight_devices_is_deterministic_and_seed_dependent():
  assert jax.local_device_count() == 8, "tests/conftest.py sets 8 virtual CPU devices"
  first, _ = run_records(small_config(8))
  second, _ = run_records(small_config(8))
  other_seed, _ = run_records(small_config(8, seed=1))
  assert len(first) == 2 and first[-1]["env_steps"] == 8 * 4 * 16 * 4 * 2
  assert first == second
  assert first != other_seed


@pytest.mark.slow
@pytest.mark.reverb_lane
def test_replicas_act_on_different_data_but_keep_identical_parameters():
  _, state = run_records(small_config(8))
  observations = np.asarray(state.env.timestep.observation)  # [devices, envs, 4]
  assert not np.allclose(observations[0], observations[1])
  for leaf in jax.tree.leaves(state.agent.nets):
    leaf = np.asarray(leaf)
    np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape))


def _toy_trajectory(key, steps=5, envs=3):
  k1, k2, k3, k4 = jax.random.split(key, 4)
  step_type = jnp.full((steps + 1, envs), StepType.MID, jnp.int32)
  timestep = TimeStep(step_type, jax.random.normal(k1, (steps + 1, envs)),
                      jnp.ones((steps + 1, envs)), jax.random.normal(k2, (steps + 1, envs, 4)))
  action = jax.random.bernoulli(k3, shape=(steps + 1, envs)).astype(jnp.int32)
  extras = dict(log_prob=jnp.full((steps + 1, envs), jnp.log(0.5)),
                value=jax.random.normal(k4, (steps + 1, envs)))
  return Trajectory(timestep, (), action, extras)


@pytest.mark.slow
def test_ppo_update_averages_gradients_across_replicas():
  """With SGD(lr=1) and one minibatch, each replica must apply minus the mean gradient."""
  registry_network = registry.networks.get("mlp_actor_critic")
  spec = EnvSpec(ArraySpec((4,), np.float32), DiscreteSpec(2))
  agent = PPO(spec, registry_network(spec=spec), PPOLoss(), optax.sgd(1.0),
              num_epochs=1, num_minibatches=1)
  nets = agent.init_nets(jax.random.PRNGKey(0))
  trajectories = [_toy_trajectory(jax.random.PRNGKey(i)) for i in (1, 2)]
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *trajectories)

  def update(nets, trajectory):
    nets, _, _, _ = agent.update(nets, agent.init_opt(nets), trajectory, jax.random.PRNGKey(3))
    return nets

  replicated = jax.tree.map(lambda x: jnp.stack([x, x]), nets)
  updated = mesh.spmd(update, mesh.device_mesh(jax.local_devices()[:2]))(replicated, stacked)

  def grad_of(trajectory):
    batch = policy_gradient_batch(trajectory, agent.discount, agent.gae_lambda)
    def loss(params):
      out = agent.network.apply(params, batch.observation)
      return agent.loss(out.logits, out.value, batch)[0]
    return jax.grad(loss)(nets)

  grads = [grad_of(t) for t in trajectories]
  expected = jax.tree.map(lambda p, g0, g1: p - (g0 + g1) / 2, nets, *grads)
  for replica in (0, 1):
    got = jax.tree.map(lambda x: x[replica], updated)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 got, expected)
  # Not averaging would have applied each replica's own gradient: make sure that differs.
  own = jax.tree.map(lambda p, g: p - g, nets, grads[0])
  assert not all(np.allclose(a, b, atol=1e-6) for a, b in
                 zip(jax.tree.leaves(own), jax.tree.leaves(expected)))


def test_compile_once_names_the_input_that_changed():
  f = jax.jit(compile_once(lambda state: state["x"] * 2, "toy step"))
  f({"x": jnp.float32(1.0)})
  f({"x": jnp.float32(2.0)})
  with pytest.raises(RecompilationError, match=r"toy step.*\['x'\].*weak_type=True"):
    f({"x": jnp.asarray(1.0)})  # A Python float becomes a weakly typed array.


@pytest.mark.slow
@pytest.mark.reverb_lane
def test_anakin_step_compiles_once_and_rejects_changed_state():
  experiment = builder.build(small_config(2))
  runtime = experiment.runtime
  state = runtime.init()
  for _ in range(3):
    state, _, _ = runtime.step(state)
  bad = state._replace(key=state.key.astype(jnp.int32))
  with pytest.raises(RecompilationError, match=r"key"):
    runtime.step(bad)


def test_anakin_rejects_host_environments():
  @registry.environments.register("test_host_env", override=True)
  class HostEnv:
    kind = "host"

  c = small_config(1)
  c.env.name = "test_host_env"
  with pytest.raises(ConfigError, match="needs an environment written in JAX"):
    builder.build(c)
  registry.environments.unregister("test_host_env")


def test_too_many_devices_is_a_config_error():
  with pytest.raises(ConfigError, match="topology.num_devices"):
    builder.build(small_config(64))


@pytest.mark.slow
def test_stop_at_return_ends_the_run_at_the_first_record_that_reaches_it():
  from agents.ppo.config import catch_anakin
  config = catch_anakin()
  config.topology.num_devices = 1
  config.stop_at_return = 0.0  # Catch returns are -1 or 1: reached once learning starts.
  summary = builder.build(config).train(stream=None)
  records = summary["records"]
  assert records[-1]["episode_return"] >= 0.0 and records[-1]["target_reached"]
  assert all(r.get("episode_return", -1) < 0.0 for r in records[:-1])
  assert summary["env_steps"] < config.total_env_steps
  assert summary["stopped_at_return"] == 0.0


@pytest.mark.reverb_lane
def test_state_is_donated_only_where_it_pays_and_results_do_not_depend_on_it(monkeypatch):
  from podracer.runtimes import anakin
  small = builder.build(small_config(2)).runtime
  assert not small._donates(small._state_bytes())  # A few KiB of CPU state: donation would slow it down.
  monkeypatch.setattr(anakin, "DONATE_MIN_CPU_BYTES", 0)
  donating = builder.build(small_config(2)).runtime
  assert donating._donates(donating._state_bytes())
  kept, donated = small.init(), donating.init()
  kept_out, donated_out = small.step(kept)[1:], donating.step(donated)[1:]
  assert not any(x.is_deleted() for x in jax.tree.leaves(kept))
  assert all(x.is_deleted() for x in jax.tree.leaves(donated))
  jax.tree.map(np.testing.assert_array_equal, kept_out, donated_out)


@pytest.mark.slow
def test_a_budget_that_is_not_whole_calls_is_rounded_up_and_said_so():
  import io
  config = cartpole_anakin()
  config.topology.num_devices = 1
  config.runtime.update(dict(num_envs_per_device=4, rollout_length=16, updates_per_call=4))
  config.agent.num_minibatches = 2
  config.total_env_steps = 300  # calls of 4 x 16 x 4 = 256 env steps: 2 calls
  stream = io.StringIO()
  summary = builder.build(config).train(stream=stream)
  first_line = stream.getvalue().splitlines()[0]
  assert first_line.startswith("total_env_steps=300 runs 512 env steps: a run takes whole "
                               "calls (Anakin) or learner batches (Sebulba) of 256 env steps")
  assert summary["env_steps"] == 512
  assert summary["requested_env_steps"] == 300 and summary["planned_env_steps"] == 512
  config.total_env_steps = 512
  stream = io.StringIO()
  summary = builder.build(config).train(stream=stream)
  assert "total_env_steps=" not in stream.getvalue() and "requested_env_steps" not in summary
