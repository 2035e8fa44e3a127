"""MuZero: its targets and model unroll against hand computations, the search on a known
MDP, bad input, each config traced, and learning on the small tasks."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from agents.muzero import config as muzero_config
from agents.muzero.agent import (n_step_value_targets, scale_gradient, unroll_model,
                                 unroll_targets)
from podracer import builder
from podracer.components.networks import MuZeroNetwork
from podracer.errors import ConfigError
from podracer.experience import Sample
from podracer.logs.metrics import windowed_returns
from podracer.types import REPLICA_AXIS, StepType, TimeStep, Trajectory
from tests.learning import assert_reached_and_held, last_fifth_means, launch_runs
from tests.reverb_support import current_lane
from tests.test_launch import launch

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST
# The reverb lane (XLA:CPU 2.3x slower) runs MuZero's unit tests and traces each config;
# the learning tests run in the default lane (tests/conftest.py).
learning = pytest.mark.learning


def _catch(**agent):
  config = muzero_config.catch_anakin()
  config.topology.num_devices = 1
  config.agent.update(agent)
  return config


@pytest.fixture(scope="module")
def catch_agent():
  return builder.build(_catch()).agent


def test_value_transform_and_two_hot_projection_round_trip_at_the_configs_support():
  for name, values in (("catch_anakin", [-1.0, -0.3, 0.0, 0.25, 1.0]),
                       ("cartpole_anakin", [0.0, 1.0, 17.5, 100.0, 259.0]),
                       ("atari_sebulba", [-21.0, 0.0, 3.0, 500.0, 2000.0])):
    config = getattr(muzero_config, name)()
    a = config.agent
    tx = rlax.muzero_pair(a.support_min, a.support_max, a.num_bins,
                          rlax.SIGNED_HYPERBOLIC_PAIR)
    x = jnp.array(values)
    two_hot = tx.apply(x)
    chex.assert_shape(two_hot, (len(values), a.num_bins))
    np.testing.assert_allclose(two_hot.sum(-1), 1.0, rtol=1e-5)
    assert int((two_hot > 0).sum(-1).max()) <= 2  # two hot at most
    np.testing.assert_allclose(tx.apply_inv(two_hot), x, rtol=2e-3, atol=2e-3)


def test_agent_transform_is_rlax_muzero_pair(catch_agent):
  x = jnp.linspace(-1.0, 1.0, 9)
  expected = rlax.muzero_pair(-1.0, 1.0, 21, rlax.SIGNED_HYPERBOLIC_PAIR).apply(x)
  np.testing.assert_allclose(catch_agent.tx_pair.apply(x), expected, atol=1e-6)
  logits = jnp.log(expected + 1e-12)
  np.testing.assert_allclose(catch_agent.scalar(logits), x, atol=1e-3)


def test_n_step_targets_match_a_hand_computation():
  step_type = jnp.array([F, M, M, L, F, M, M])[:, None]
  reward = jnp.array([0., 1., 2., 3., 0., 1., 1.])[:, None]
  discount = jnp.array([1., 1., 1., 0., 1., 1., 1.])[:, None]
  value = jnp.array([10., 20., 30., 40., 50., 60., 70.])[:, None]
  z = n_step_value_targets(step_type, reward, discount, value, 0.5, 2)[:, 0]
  expected = [1 + .5 * 2 + .25 * 30,   # two rewards, then the value two steps on
              2 + .5 * 3,              # the episode terminates at step 3: no bootstrap
              3.0,
              0.0,                     # a terminal LAST step is worth 0
              1 + .5 * 1 + .25 * 70,
              1 + .5 * 70,             # truncated by the end of the sequence
              70.0]
  np.testing.assert_allclose(z, expected, rtol=1e-6)
  # A LAST step cut by a time limit (discount 1) keeps its own value.
  truncated = n_step_value_targets(step_type, reward, jnp.ones_like(discount), value, 0.5,
                                   2)[:, 0]
  assert float(truncated[3]) == 40.0 and float(truncated[2]) == 3 + .5 * 40


@pytest.mark.slow
def test_targets_bootstrap_from_search_values_or_the_target_network():
  config = _catch(value_bootstrap="target", sgd_steps=1)
  config.runtime.updates_per_call = 1  # One rollout of 16 x 16 fills items to sample.
  experiment = builder.build(config)
  agent = experiment.agent
  state, _, _ = experiment.runtime.step(experiment.runtime.init())
  experience = jax.tree.map(lambda x: x[0], state.agent.experience)
  sample = agent.replay.sample(experience, jax.random.PRNGKey(0))
  items = sample.items
  nets = jax.tree.map(lambda x: x[0], state.agent.nets)
  time_major = lambda x: jnp.swapaxes(x, 0, 1)
  ts = items.timestep
  for bootstrap in ("search", "target"):
    agent.value_bootstrap = bootstrap
    targets, priorities = agent.targets(items, nets, jax.random.PRNGKey(1))
    if bootstrap == "search":
      value = items.extras["search_value"]
    else:
      b, s = items.action.shape
      obs = ts.observation.reshape(b * s, *ts.observation.shape[2:])
      _, logits = agent.network.predict(nets, agent.network.represent(nets, obs))
      value = agent.scalar(logits).reshape(b, s)
    z = time_major(n_step_value_targets(*map(time_major, (ts.step_type, ts.reward,
                                                          ts.discount, value)),
                                        agent.discount, agent.td_steps))
    starts = items.action.shape[1] - agent.num_unroll_steps - agent.td_steps
    np.testing.assert_allclose(
        priorities, np.max(np.abs(items.extras["search_value"] - z)[:, :starts], 1),
        rtol=1e-5, atol=1e-6)
    # Each item's first value target is its n-step target at one of its start positions.
    gap = np.min(np.abs(np.asarray(z)[:, :starts] - np.asarray(targets.value[:, :1])), 1)
    np.testing.assert_allclose(gap, 0.0, atol=1e-6)
    assert targets.value.shape == (agent.replay.batch_size, agent.num_unroll_steps + 1)


def test_absorbing_targets_after_an_episode_ends_inside_the_unroll():
  step_type = jnp.array([[F, M, M, L, F, M, M]])
  reward = jnp.array([[0., 1., 2., 3., 0., 1., 1.]])
  items = Trajectory(TimeStep(step_type, reward, jnp.ones_like(reward),
                              jnp.arange(7.0)[None]), (), jnp.arange(7)[None],
                     dict(search_policy=jnp.full((1, 7, 3), 1 / 3),
                          search_value=jnp.arange(7.0)[None]))
  value = jnp.array([[9., 8., 7., 6., 5., 4., 3.]])
  t = unroll_targets(items, jnp.array([1]), value, 4)
  np.testing.assert_array_equal(t.observation, [1.0])
  np.testing.assert_array_equal(t.action, [[1, 2, 3, 4]])
  # Steps 1, 2, 3 (LAST) are in the episode; 4 and 5 are past its end.
  np.testing.assert_allclose(t.value, [[8., 7., 6., 0., 0.]])
  np.testing.assert_allclose(t.reward, [[1., 2., 3., 0., 0.]])
  np.testing.assert_allclose(t.policy_mask, [[1., 1., 0., 0., 0.]])
  assert float(t.search_value[0]) == 1.0


@pytest.mark.slow
def test_unroll_shapes_and_the_hidden_states_gradient_halves_at_each_step(catch_agent):
  agent = catch_agent
  net = agent.network
  params = agent.init_nets(jax.random.PRNGKey(0))
  obs = jax.random.uniform(jax.random.PRNGKey(1), (3, *agent.spec.observation.shape))
  k = 4
  action = jnp.array([[0, 1, 2, 1]] * 3)
  policy, value, reward = unroll_model(net, params, obs, action)
  chex.assert_shape(policy, (3, k + 1, 3))
  chex.assert_shape(value, (3, k + 1, 21))
  chex.assert_shape(reward, (3, k, 21))

  embedding = net.represent(params, obs)

  def value_at_step(emb, step, scale):
    for i in range(step):
      emb = scale_gradient(emb, scale)
      _, emb = net.dynamics(params, emb, action[:, i])
    return jnp.sum(net.predict(params, emb)[1])

  for step in range(1, k + 1):
    scaled = jax.grad(value_at_step)(embedding, step, 0.5)
    unscaled = jax.grad(value_at_step)(embedding, step, 1.0)
    np.testing.assert_allclose(scaled, unscaled * 0.5 ** step, rtol=1e-4, atol=1e-7)
    assert float(jnp.abs(unscaled).sum()) > 0


def _known_mdp(agent):
  """A perfect model of a 3-action MDP over one-hot states 0..4, uniform priors and zero
  values: from state 0, action 0 pays 0.5 and ends (state 4); action 1 pays 0 and leads
  to state 1, where any action pays 1 and ends; action 2 pays 0 and ends. With discount
  1 the best first action is 1 (1 > 0.5), which a one-step look-ahead misses."""
  low, high, bins = agent.support
  two_hot = lambda r: jnp.log(agent.tx_pair.apply(r) + 1e-12)
  next_state = jnp.array([[4, 1, 4], [4, 4, 4], [4, 4, 4], [4, 4, 4], [4, 4, 4]])
  reward = jnp.array([[0.5, 0.0, 0.0], [1.0, 1.0, 1.0], [0., 0., 0.], [0., 0., 0.],
                      [0., 0., 0.]])

  def represent(params, observation):
    return jax.nn.one_hot(jnp.zeros(observation.shape[0], jnp.int32), 5)

  def dynamics(params, embedding, action):
    state = jnp.argmax(embedding, -1)
    return (two_hot(reward[state, action]),
            jax.nn.one_hot(next_state[state, action], 5))

  def predict(params, embedding):
    b = embedding.shape[0]
    return jnp.zeros((b, 3)), two_hot(jnp.zeros(b))

  del low, high, bins
  return MuZeroNetwork(lambda *a: {}, represent, dynamics, predict)


@pytest.mark.slow
@pytest.mark.parametrize("search", ["gumbel", "muzero"])
def test_with_a_perfect_model_both_searches_pick_the_optimal_action(search):
  agent = builder.build(_catch(search=search, num_simulations=64, discount=1.0,
                               max_num_considered_actions=3)).agent
  agent.network = _known_mdp(agent)
  obs = jnp.zeros((8, *agent.spec.observation.shape))
  out = agent.run_search({}, obs, jax.random.PRNGKey(0), explore=False)
  np.testing.assert_array_equal(out.action, np.ones(8))
  # The root's Q-values rank the actions as the MDP does: 1 (pays 1), 0 (0.5), 2 (0).
  q = np.asarray(out.search_tree.summary().qvalues)
  assert np.all(q[:, 1] > q[:, 0]) and np.all(q[:, 0] > q[:, 2]), q[0]


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_eval_act_is_deterministic_for_a_key_and_act_returns_the_search_targets(catch_agent):
  agent = catch_agent
  nets = agent.init_nets(jax.random.PRNGKey(0))
  obs = jax.random.uniform(jax.random.PRNGKey(1), (6, *agent.spec.observation.shape))
  ts = TimeStep(jnp.full(6, M), jnp.zeros(6), jnp.ones(6), obs)
  a1, _ = agent.eval_act(nets, (), ts, jax.random.PRNGKey(2))
  a2, _ = agent.eval_act(nets, (), ts, jax.random.PRNGKey(2))
  np.testing.assert_array_equal(a1.action, a2.action)
  out, _ = agent.act(nets, (), ts, jax.random.PRNGKey(3))
  chex.assert_shape(out.extras["search_policy"], (6, 3))
  chex.assert_shape(out.extras["search_value"], (6,))
  np.testing.assert_allclose(out.extras["search_policy"].sum(-1), 1.0, rtol=1e-5)


BAD_AGENT_KEYS = {
    "search": ("gumble", "did you mean 'gumbel'"),
    "num_simulations": (0, "`agent.num_simulations` must be an integer >= 1"),
    "max_num_considered_actions": (1, "`agent.max_num_considered_actions` must be"),
    "td_steps": (0, "`agent.td_steps`"),
    "num_unroll_steps": (0, "`agent.num_unroll_steps`"),
    "num_bins": (2, "`agent.num_bins`"),
    "support_max": (-1.0, "`agent.support_min` < `agent.support_max`"),
    "value_bootstrap": ("targets", "did you mean 'target'"),
}


@pytest.mark.parametrize("key", list(BAD_AGENT_KEYS))
def test_bad_agent_keys_are_config_errors_naming_them(key):
  value, named = BAD_AGENT_KEYS[key]
  config = _catch(**{key: value})
  with pytest.raises(ConfigError) as error:
    builder.build(config)
  assert named in str(error.value), str(error.value)


def test_the_network_contract_refuses_other_bins_and_continuous_actions():
  config = _catch()
  config.network.num_bins = 11
  with pytest.raises(ConfigError,
                     match=r"`value_logits` of shape \[5, 11\].*needs shape \[5, 21\]"):
    builder.build(config)
  config = _catch()
  config.env = config.env.__class__(dict(name="pendulum"))
  with pytest.raises(ConfigError, match="discrete action"):
    builder.build(config)


def test_replay_min_size_above_max_size_is_refused():
  config = _catch()
  config.replay.min_size = config.replay.max_size + 1
  with pytest.raises(ConfigError, match="min_size"):
    builder.build(config)


@pytest.mark.parametrize("args, named", [
    (["--config.agent.search=gumble"], "did you mean 'gumbel'"),
    (["--config=agents/muzero/config.py:atari_sebulba", "--config.replay.name=device"],
     "bytes"),
])
def test_bad_input_exits_2_with_one_paragraph(args, named):
  if not args[0].startswith("--config="):
    args = ["--config=agents/muzero/config.py:catch_anakin", *args]
  result = launch(*args, timeout=120)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr + result.stdout
  assert result.stderr.startswith("Config error: ") and result.stderr.count("\n\n") == 0
  assert named in result.stderr.replace("\n", " "), result.stderr


def _trace_one_update(experiment):
  """One learner update of `experiment`'s agent, traced on a batch of its replay items."""
  agent = experiment.agent
  runtime = experiment.runtime
  if hasattr(runtime, "trajectory_spec"):
    spec = runtime.trajectory_spec(experiment.config.runtime.num_envs_per_actor)
  else:
    from podracer import trajectories
    spec = trajectories.trajectory_spec(agent, runtime.env.spec(),
                                        runtime.num_envs_per_device, runtime.rollout_length)
  items = jax.eval_shape(agent.replay_items, spec)
  n = agent.replay.batch_size
  key = jax.random.PRNGKey(0)
  nets = jax.eval_shape(agent.init_nets, key)
  opt = jax.eval_shape(agent.init_opt, nets)
  if agent.replay.kind == "host":
    batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct((n, *x.shape[1:]), x.dtype), items)
    experience = Sample(batch, *(jax.ShapeDtypeStruct((n,), d) for d in (jnp.int32,
                                                                          jnp.float32)),
                        jax.ShapeDtypeStruct((), jnp.int32),
                        jax.ShapeDtypeStruct((n,), jnp.float32))
  else:
    one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), items)
    experience = jax.eval_shape(agent.replay.init, one)
  update = jax.vmap(agent.update, axis_name=REPLICA_AXIS)
  lift = lambda t: jax.tree.map(lambda x: jax.ShapeDtypeStruct((1, *x.shape), x.dtype), t)
  out = jax.eval_shape(update, *map(lift, (nets, opt, experience)), lift(key))
  return items, out[3]


@pytest.mark.parametrize("name", [  # The reverb lane: one (its mctx and Haiku).
    pytest.param(n, marks=pytest.mark.reverb_lane) if n == "catch_anakin" else n
    for n in muzero_config.CONFIGS])
def test_every_config_builds_and_traces_one_update(name):
  from tests.test_sebulba import one_device
  config = muzero_config.CONFIGS[name]()
  if config.runtime.name == "anakin":
    config.topology.num_devices = 1
  else:
    one_device(config)
  experiment = builder.build(config)
  items, metrics = _trace_one_update(experiment)
  agent = experiment.agent
  assert items.timestep.step_type.shape[1] > agent.num_unroll_steps + agent.td_steps
  learned_model = config.agent.name == "muzero"  # AlphaZero's is the game: no reward loss.
  for key in ("loss", "policy_loss", "value_loss", "reward_loss", "search_value",
              "search_policy_entropy", "search_prior_kl", "value_target_clipped"):
    if learned_model or key != "reward_loss":
      assert metrics[key].shape == (1,), key


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_atari_config_is_the_papers_agent_scaled_to_one_gpu():
  config = muzero_config.atari_sebulba()
  experiment = builder.build(config)
  agent = experiment.agent
  assert (agent.num_unroll_steps, agent.td_steps, agent.discount) == (5, 10, 0.997)
  assert agent.support == (-300.0, 300.0, 601)
  assert experiment.runtime.spec.observation.shape == (4, 84, 84)
  assert config.env.reward_clip is False
  expected = "reverb" if current_lane() == "reverb" else "host"
  assert config.replay.name == expected
  nets = agent.init_nets(jax.random.PRNGKey(0))
  assert nets["value_head_out"]["w"].shape[-1] == 601
  assert nets["policy_head_out"]["w"].shape[-1] == 6


def _returns(records):
  return [(r["env_steps"], r["episode_return"]) for r in records
          if r.get("episode_return") is not None]


def _best_by(records, env_steps):
  return max((ret for steps, ret in _returns(records) if steps <= env_steps),
             default=float("-inf"))


@pytest.mark.extended  # for CI's time: MuZero's mechanism tests are in CI
@learning
def test_muzero_pixel_catch_anakin_learns_from_frames_with_the_atari_model(tmp_path):
  """The Atari model (IMPALA ResNet representation, residual dynamics on its map) and
  optimizer (Adam 5e-4) on [4, 20, 10] uint8 frame stacks: 0.5 within 150K env steps,
  as PPO's and IMPALA's pixel tests ask (the run ends once it is reached). Seed 0, one
  host device: 0.59 at 80K (2026-11-27). About 95 s: the Atari ResNet and a search of
  its model at every step, on the CPU, until it learns (175 s before `conv2d` computed
  the convolutions on the 3x2 map as a matrix product); smaller shapes learned later
  (docs/muzero.md)."""
  config = muzero_config.pixel_catch_anakin()
  assert config.seed == 0 and config.total_env_steps == 150_000
  assert config.network.name == "muzero_resnet" and config.optimizer.learning_rate == 5e-4
  records = launch_runs("agents/muzero/config.py:pixel_catch_anakin", tmp_path,
                        "--config.stop_at_return=0.5")
  best = _best_by(records, 150_000)
  assert best >= 0.5, f"best mean episode return {best:.2f} < 0.5"


def test_windowed_returns_weigh_each_episode_of_the_last_window_alike():
  """The batch split's measure (benchmarks/muzero_split.py): a record of two 500-step
  episodes among records of 200 does not reach 400 once its neighbours count."""
  records = [dict(env_steps=512 * i, episodes=3.0, episode_return=200.0) for i in (1, 2, 3)]
  records += [dict(env_steps=2048, episodes=2.0, episode_return=500.0),
              dict(env_steps=2560, learning=1.0)]  # No episode ended: no point.
  points = windowed_returns(records, window=2048)
  assert [steps for steps, _ in points] == [512, 1024, 1536, 2048]
  assert points[0][1] == 200.0
  # At 2048 the window (0, 2048] holds 9 episodes of 200 and 2 of 500.
  assert points[-1][1] == pytest.approx((9 * 200 + 2 * 500) / 11)
  assert windowed_returns(records, window=1)[-1][1] == 500.0  # The record alone.


@pytest.mark.extended  # MuZero's CI test: pixel Catch
@learning
def test_muzero_cartpole_anakin_reaches_450_and_holds_300_over_the_last_fifth(tmp_path):
  """Seed 0 alone, one host device as a user's command runs it, the whole 500K: reaches
  500 and holds 372.5 (2026-11-27); a random policy gets about 22. The claim over seeds
  is docs/muzero.md's table: 5 seeds in one program hold an IQM of 463.5 (one host
  device) and 419.0 (the suite's 8 virtual devices), with one seed of the five far
  below either way (its value function still far from the returns at 500K). Five seeds
  cost 6 minutes on the 2-core CPU, too dear for CI; this one costs 2: a search of 16
  simulations at every step of the whole budget, since holding is the claim."""
  config = muzero_config.cartpole_anakin()
  assert config.seed == 0 and config.total_env_steps == 500_000
  assert config.optimizer.anneal
  records = launch_runs("agents/muzero/config.py:cartpole_anakin", tmp_path)
  best = _best_by(records, 500_000)
  assert best >= 450, f"best mean episode return {best:.2f} < 450"
  kept = last_fifth_means(records)[0]
  assert kept >= 300, f"mean return over the last 20% of the run {kept:.2f} < 300"


@pytest.mark.extended  # MuZero's CI test: pixel Catch
@learning
def test_muzero_catch_anakin_over_5_seeds_reaches_0_9_and_holds_it(tmp_path):
  """Seeds 0-4 in one program, one host device, 200K env steps each (2026-11-27: best
  0.99-1.0, last-20 % means 0.936-0.999, IQM 0.977). About 90 s: five runs of a search
  of 8 simulations at every step."""
  assert _catch().total_env_steps == 200_000
  records = launch_runs("agents/muzero/config.py:catch_anakin", tmp_path,
                        "--config.num_runs=5")
  assert_reached_and_held(records, 5, reached=0.9, held_iqm=0.9)


@pytest.mark.extended  # MuZero's CI test: pixel Catch
@learning
def test_muzero_cartpole_sebulba_reaches_400_within_500k_steps(tmp_path):
  """Actors search on the actor device; the learner keeps a device replay and takes
  `updates_per_batch` updates per actor batch. Seed 0, no retries, up to 500K env steps,
  one host device as a user's command runs it.

  With `max_policy_lag=0` acting and learning take turns, so the run is the same every
  time under the same XLA flags (a record per batch: the records too). Run so it reaches
  400 at about 400K env steps (2026-11-27, about 100 s: a search at every step of 16
  environments, 8 updates per batch, until it gets there); under the suite's 8 virtual
  devices seed 0 reached it at 132K, seeds 1 and 2 at 60K and 106K (docs/muzero.md). A
  random policy gets about 22."""
  config = muzero_config.cartpole_sebulba()
  assert config.seed == 0 and config.total_env_steps == 500_000
  assert config.replay.name == "device" and config.runtime.max_policy_lag == 0
  records = launch_runs("agents/muzero/config.py:cartpole_sebulba", tmp_path,
                        "--config.runtime.log_interval=0", "--config.stop_at_return=400")
  best = _best_by(records, 500_000 + 16 * 32)
  assert best >= 400, f"best mean episode return {best:.1f} < 400 by 500K env steps"


def test_records_carry_simulations_per_s_and_the_progress_line_search_value(catch_agent):
  from podracer.logs.metrics import MetricsLogger
  assert catch_agent.rates_per_env_step == {"simulations_per_s": 8}
  assert "search_value" in muzero_config.catch_anakin().log.progress_metrics
  logger = MetricsLogger(stream=None, rates_per_env_step=catch_agent.rates_per_env_step,
                         progress_metrics=("search_value",))
  logger.write(dict(env_steps=4096, sps=1500.0, search_value=0.25))
  logger.write(dict(env_steps=8192))  # No rate, no derived rate.
  assert logger.records[0]["simulations_per_s"] == 12_000.0
  assert "simulations_per_s" not in logger.records[1]
  assert "search_value 0.25" in logger.format(logger.records[0])
