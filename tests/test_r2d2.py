"""R2D2: its pieces against hand-computed values, trajectory overlap, and learning."""

import io

import chex
import jax
import jax.numpy as jnp
import numpy as np
import psutil
import pytest

from agents.ppo import PPO
from agents.ppo.config import cartpole_anakin
from agents.r2d2 import config as r2d2_config
from podracer import builder
from podracer.errors import ConfigError
from podracer.kits.q_learning import annealed_epsilon, apex_epsilons, sequence_priorities
from podracer.types import StepType, TimeStep
from tests.learning import assert_reached_and_held, best_by_run, last_fifth_means, launch_runs
from tests.reverb_support import requires_reverb



def test_value_rescaling_and_its_inverse():
  agent = builder.build(_catch(1)).agent
  x = jnp.array([-1000.0, -3.5, -1e-3, 0.0, 0.5, 42.0, 1e4])
  h = agent.tx_pair.apply(x)
  # h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x, eps = 1e-3 (R2D2's value_rescaling_eps)
  np.testing.assert_allclose(h, np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + 1e-3 * x,
                             rtol=1e-6)
  np.testing.assert_allclose(agent.tx_pair.apply_inv(h), x, rtol=1e-4, atol=1e-4)  # float32


def test_priorities_mix_max_and_mean_absolute_td_over_unmasked_steps():
  abs_td = jnp.array([[1.0, 0.0], [3.0, 2.0], [100.0, 4.0]])
  mask = jnp.array([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
  p = sequence_priorities(abs_td, mask, eta=0.9)
  np.testing.assert_allclose(p, [0.9 * 3 + 0.1 * 2, 0.9 * 4 + 0.1 * 2], rtol=1e-6)


def test_apex_epsilons_span_base_to_base_to_the_1_plus_alpha():
  eps = np.asarray(apex_epsilons(8, base=0.4, alpha=7.0))
  np.testing.assert_allclose(eps[[0, -1]], [0.4, 0.4 ** 8], rtol=1e-6)
  assert np.all(np.diff(eps) < 0)


@pytest.mark.slow
def test_epsilon_anneals_from_random_to_the_apex_value_when_asked():
  eps = jnp.array([0.1, 0.01])
  at = lambda step, anneal: np.asarray(annealed_epsilon(eps, jnp.full(2, step), anneal))
  np.testing.assert_allclose(at(0, 100), [1.0, 1.0])
  np.testing.assert_allclose(at(50, 100), [0.55, 0.505], rtol=1e-6)
  np.testing.assert_allclose(at(100, 100), eps, rtol=1e-6)
  np.testing.assert_allclose(at(10**6, 100), eps, rtol=1e-6)
  np.testing.assert_allclose(at(0, 0), eps, rtol=1e-6)  # 0: the paper's fixed epsilons

  # Acting counts each environment's steps; with 10**6 anneal steps it acts at random.
  config = _catch(1)
  config.agent.epsilon_anneal_steps = 10**6
  agent = builder.build(config).agent
  nets = agent.init_nets(jax.random.PRNGKey(0))
  state = agent.init_actor(jax.random.PRNGKey(1), 4000)
  obs = jnp.zeros((4000, *agent.spec.observation.shape), agent.spec.observation.dtype)
  timestep = jax.tree.map(jnp.asarray, TimeStep(jnp.full(4000, StepType.MID),
                                                jnp.zeros(4000), jnp.ones(4000), obs))
  out, state = agent.act(nets, state, timestep, jax.random.PRNGKey(2))
  np.testing.assert_array_equal(state.steps, np.ones(4000))
  counts = np.bincount(np.asarray(out.action), minlength=3)
  assert np.all(np.abs(counts / 4000 - 1 / 3) < 0.05), counts  # same obs, uniform actions


@pytest.mark.slow
def test_burn_in_steps_get_no_gradient():
  config = _catch(1)
  experiment = builder.build(config)
  agent = experiment.agent
  state = experiment.runtime.init()
  # A batch of real sequences from the replay after one call.
  state, _, _ = experiment.runtime.step(state)
  experience = jax.tree.map(lambda x: x[0], state.agent.experience)
  sample = agent.replay.sample(experience, jax.random.PRNGKey(0))
  nets = jax.tree.map(lambda x: x[0], state.agent.nets)

  def loss_of_observations(observation):
    items = sample.items._replace(timestep=sample.items.timestep._replace(
        observation=observation))
    return agent._loss(nets, (items, jnp.ones(observation.shape[0]), nets), None)[0]

  grads = jax.grad(loss_of_observations)(sample.items.timestep.observation)
  burn = agent.burn_in
  assert burn > 0
  chex.assert_trees_all_close(grads[:, :burn], jnp.zeros_like(grads[:, :burn]))
  assert float(jnp.abs(grads[:, burn:]).sum()) > 0


@pytest.mark.slow
def test_a_time_limit_bootstraps_from_the_last_step_and_a_termination_does_not():
  """The transition into a LAST step is learned towards r + gamma * d * Q'(s_LAST): with a
  time limit's d = 1 its target keeps the value, with a termination's d = 0 it drops."""
  config = _catch(1)
  experiment = builder.build(config)
  agent = experiment.agent
  state, _, _ = experiment.runtime.step(experiment.runtime.init())
  sample = agent.replay.sample(jax.tree.map(lambda x: x[0], state.agent.experience),
                               jax.random.PRNGKey(0))
  nets = jax.tree.map(lambda x: x[0], state.agent.nets)
  last = agent.burn_in + 2   # learned transition 1 leads into it; 2 is the reset after it

  def abs_td(last_discount):
    ts = sample.items.timestep
    step_type = ts.step_type.at[:, last].set(StepType.LAST).at[:, last + 1].set(
        StepType.FIRST).at[:, last + 2:].set(StepType.MID)
    discount = jnp.ones_like(ts.discount).at[:, last].set(last_discount)
    reward = jnp.zeros_like(ts.reward)
    items = sample.items._replace(timestep=ts._replace(step_type=step_type,
                                                       discount=discount, reward=reward))
    _, out = agent._loss(nets, (items, jnp.ones(step_type.shape[0]), nets), None)
    return out["abs_td"], out["mask"]

  truncated, mask = abs_td(1.0)
  terminated, _ = abs_td(0.0)
  np.testing.assert_array_equal(mask[2], 0.0)             # the reset is not learned
  assert float(jnp.max(jnp.abs(truncated[1] - terminated[1]))) > 1e-3
  np.testing.assert_allclose(truncated[3:], terminated[3:])  # the next episode: the same


class OverlappingPPO(PPO):
  trajectory_overlap = 3


@pytest.mark.slow
def test_trajectories_repeat_the_last_overlap_entries_of_the_previous_one():
  config = cartpole_anakin()
  config.topology.num_devices = 1
  config.runtime.update(dict(num_envs_per_device=2, rollout_length=4, updates_per_call=1))
  config.agent.num_minibatches = 2
  agent = builder.build(config).agent
  overlapping = OverlappingPPO(agent.spec, agent.network, agent.loss,
                               agent.objectives[0].optimizer, num_minibatches=2)
  runtime = builder.build(config, agent=overlapping).runtime
  state = runtime.init()
  trajectories = []
  for _ in range(2):
    state, _, _ = runtime.step(state)
    trajectories.append(jax.tree.map(lambda x: np.asarray(x[0]), state.agent.experience))
  first, second = trajectories
  assert first.action.shape == (4 + 3, 2)
  # K-1 = 2 padding entries open the run: LAST steps with no reward and no discount.
  np.testing.assert_array_equal(first.timestep.step_type[:2], StepType.LAST)
  np.testing.assert_array_equal(first.timestep.reward[:2], 0.0)
  np.testing.assert_array_equal(first.timestep.step_type[2], StepType.FIRST)
  chex.assert_trees_all_close(jax.tree.map(lambda x: x[-3:], first),
                              jax.tree.map(lambda x: x[:3], second))


def test_runtimes_refuse_replays_they_cannot_drive():
  import tests.test_sebulba_replay  # noqa: F401 -- registers the host replay test_memory
  config = r2d2_config.catch_anakin()
  config.replay = dict(name="test_memory", batch_size=4)  # a host replay, like Reverb
  with pytest.raises(ConfigError, match="replay.name=device"):
    builder.build(config)
  config = r2d2_config.catch_anakin()
  config.replay.name = "host"  # host memory: Anakin's program cannot reach it either
  with pytest.raises(ConfigError, match="replay.name=device"):
    builder.build(config)
  config = r2d2_config.catch_anakin()
  config.replay.address = "localhost:1234"
  with pytest.raises(ConfigError, match="address"):
    builder.build(config)


@pytest.mark.extended  # R2D2's CI test: Sebulba, device replay
@pytest.mark.learning
def test_r2d2_catch_anakin_over_5_seeds_holds_0_9_over_the_last_fifth(tmp_path):
  """Seeds 0-4 in one program, one host device, the whole 300K each: reaching is not
  holding. 2026-11-28: last-20 % means 0.982, 0.974, 0.590, 0.920, 0.971 (IQM 0.955) with
  256 sequences sampled per update (8 per insert); with 128 (4 per insert) 0.940, 0.954,
  0.591, 0.579, 0.981 (IQM 0.829): seeds 2 and 3 learned late. Seed 2 still does, so the
  IQM, not each seed, is the claim (issue 49 asks 0.9). About 100 s: five runs of an LSTM
  over replayed sequences."""
  config = _catch(1)
  assert config.seed == 0 and config.total_env_steps == 300_000
  assert config.replay.samples_per_insert == 8.0
  records = launch_runs("agents/r2d2/config.py:catch_anakin", tmp_path, "--config.num_runs=5")
  assert_reached_and_held(records, 5, held_iqm=0.9)
  assert all(r["replay_size"] <= config.replay.max_size for r in records
             if "replay_size" in r)


@pytest.mark.slow
def test_anakin_says_while_the_device_replay_warms_up_and_when_it_never_would():
  config = _catch(1)
  config.replay.min_size = 7_900  # 8 steps a sequence: about 1,000 in 8,192 env steps
  config.total_env_steps = 8_192
  out = io.StringIO()
  summary = builder.build(config).train(stream=out)
  records = summary["records"]
  assert records and all(r["learning_started"] is False and r["learning"] == 0
                         and r["replay_min_size"] == 7_900 for r in records)
  assert summary["learning_started"] is False and summary["replay_size"] < 7_900
  said = out.getvalue()
  assert "Warning: replay.min_size=7,900 items will not be reached" in said
  assert "warming up replay " in said and "/7,900" in said

  config = _catch(1)  # 512 sequences a call: reached in the second, said of none after
  config.replay.min_size = 1_000
  config.total_env_steps = 16_384
  out = io.StringIO()
  records = builder.build(config).train(stream=out)["records"]
  assert records[0]["learning_started"] is False
  assert all("learning_started" not in r for r in records[1:]) and records[-1]["learning"] > 0
  assert "will not be reached" not in out.getvalue()


def _catch(num_devices):
  config = r2d2_config.catch_anakin()
  config.topology.num_devices = num_devices
  return config


@pytest.mark.learning
@pytest.mark.parametrize("replay", ["host", "device"])  # Both in the extended tier; CI
@pytest.mark.extended  # trains R2D2 in test_checkpoint's r2d2_catch and the tests above.
def test_r2d2_sebulba_cartpole_holds_400_over_the_last_fifth(replay, tmp_path):
  """The same agent under Sebulba, replaying in host memory or on the learner device:
  EnvPool CartPole-v1, seed 0, one host device as a user's command runs it, the whole
  500K env steps. The mean episode return (the actors' own, exploration included)
  reaches 450, and its mean over the last 20 % holds 400: it learned, and did not fall
  back. Acting and learning take turns (`max_policy_lag=0`), one update of 64 per
  trajectory of 12 sequences, from a replay of 20,000 sequences, so a run is fixed by its
  seed (2026-11-27: host best 483, held 466.6; device best 499, held 473.7). About 60-85
  s: the whole budget, since holding is the claim.

  With a replay of 5,000 sequences runs slid back after reaching 500; until the n-step
  targets bootstrapped at CartPole's time limit, runs held 120-370 (that defect has a
  test of its own, above). Reverb samples with a generator it does not let anyone seed,
  so its runs are draws: the reverb lane's test below asserts the mechanism, and
  `benchmarks/draws.py --cases=r2d2_sebulba_reverb` the figure."""
  config = r2d2_config.cartpole_sebulba()
  assert config.replay.name == "reverb" and config.runtime.max_policy_lag == 0
  assert config.seed == 0 and config.total_env_steps == 500_000
  records = launch_runs("agents/r2d2/config.py:cartpole_sebulba", tmp_path,
                        f"--config.replay.name={replay}")
  end = records[-1]["env_steps"]
  runtime = config.runtime
  assert 500_000 <= end <= 500_000 + 2 * runtime.num_envs_per_actor * runtime.rollout_length
  _check_diagnostics(records, config, replay)
  assert 30 < _learned(records)[-1]["target_mean"] < 1 / (1 - config.agent.discount)
  best, kept = max(best_by_run(records)), last_fifth_means(records)[0]
  assert best >= 450 and kept >= 400, f"best mean return {best:.1f}, last-20% {kept:.1f}"


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_r2d2_sebulba_replays_through_reverb_and_learns_at_its_rate():
  """Reverb under Sebulba: the actors' sequences go into its table, the learner samples
  them at the configured samples per insert, writes their priorities back, and its
  records carry the same diagnostics as the other replays' (sampled ages within the
  replay, finite losses). A short run: the figure is a draw (see above)."""
  from tests.test_sebulba import one_device, run_in_process, sebulba_threads
  requires_reverb()
  config = one_device(r2d2_config.cartpole_sebulba())
  config.total_env_steps = 60_000
  records, _, _ = run_in_process(config)
  assert sebulba_threads() == []
  _check_diagnostics(records, config, "reverb")


def _learned(records):
  return [r for r in records if r.get("learning", 0) > 0]


def _check_diagnostics(records, config, replay):
  learned = _learned(records)
  assert learned and all(np.isfinite(r["loss"]) and r["priority_mean"] > 0 for r in learned)
  # Env steps since the sampled items went in, within the replay's capacity (Reverb's
  # embedded server too: its items carry their serials).
  capacity = config.replay.max_size * config.runtime.rollout_length
  assert all(0 < r["sampled_age"] <= capacity for r in learned[1:]), learned[-1]
  # Values in return units (h-space values stay under 10): CartPole pays 1 a step, so
  # late values are tens of steps' worth, below the horizon's 1 / (1 - discount) (with
  # the replay of 20,000 sequences runs end at 73-99: close to it, never past it).
  assert all(r["q_max"] >= r["q_mean"] for r in learned)
  assert all(0 < r["replay_size"] <= config.replay.max_size for r in records[1:])
  # The replays' rate limits hold the learner to the configured samples per insert. The
  # rates are per record interval: the last one, written as the run stops, may have none.
  for key in ("replay_inserts_per_s", "replay_samples_per_s"):
    rates = [r[key] for r in learned if key in r]
    assert rates and min(rates) >= 0 and np.median(rates) > 0, (key, rates)
  ratios = [r["sample_to_insert_ratio"] for r in learned[2:]]
  assert abs(np.median(ratios) - config.replay.samples_per_insert) < 1.0, ratios


def test_r2d2_without_reverb_installed_says_which_lane_has_it(monkeypatch):
  from podracer.components.replay.reverb_replay import ReverbReplay
  from tests.test_sebulba import one_device
  try:
    import reverb  # noqa: F401 -- the reverb lane: make start() fail as without Reverb.
    def no_reverb(self, item_spec, overlap=0):
      raise ImportError("Reverb is only in the reverb install lane (simulated).")
    monkeypatch.setattr(ReverbReplay, "start", no_reverb)
  except ImportError:
    pass
  experiment = builder.build(one_device(r2d2_config.cartpole_sebulba()))
  with pytest.raises(ConfigError, match="reverb.*replay.name=device"):
    experiment.runtime.train(None)


@pytest.mark.reverb_lane
@pytest.mark.slow
def test_r2d2_atari_config_builds_the_papers_agent_and_traces_an_update():
  """The paper's Atari setup, built (Pong frames, Nature torso, LSTM 512, dueling 512) and
  one learner update traced on a batch of 64 sequences of 40 + 40 + 5 steps."""
  from podracer.testing import traced_update
  config = r2d2_config.atari_sebulba()
  experiment = builder.build(config)
  agent = experiment.agent
  assert (agent.discount, agent.n_step, agent.burn_in, agent.target_update_period) == (
      0.997, 5, 40, 2500)
  assert (agent.importance_sampling_exponent, agent.priority_eta) == (0.6, 0.9)
  assert (agent.epsilon_base, agent.epsilon_alpha) == (0.4, 7.0)
  assert (agent.replay.batch_size, agent.replay.max_size * 40) == (64, 4_000_000)
  assert agent.replay.priority_exponent == 0.9
  assert experiment.runtime.spec.observation.shape == (4, 84, 84)
  nets = agent.init_nets(jax.random.PRNGKey(0))
  assert nets["torso/conv_0"]["w"].shape == (8, 8, 4, 32)
  assert nets["torso/linear"]["w"].shape == (7 * 7 * 64, 512)
  assert nets["core/~/lstm/linear"]["w"].shape == (512 + 512, 4 * 512)
  assert nets["head/~/advantage_stream/~/linear_1"]["w"].shape == (512, 6)

  spec = experiment.runtime.trajectory_spec(config.runtime.num_envs_per_actor)
  items = jax.eval_shape(agent.replay_items, spec)
  assert items.timestep.observation.shape == (32, 40 + 40 + 5, 4, 84, 84)
  assert items.actor_state.hidden.shape == (32, 512)
  sample, metrics = traced_update(agent, spec, batch_size=64)
  assert sample.priorities.shape == (1, 64) and metrics["loss"].shape == (1,)


@pytest.mark.slow
def test_r2d2_anakin_on_8_devices_averages_gradients_over_sharded_replays():
  """Each replica acts, fills its own replay shard and samples it; updates stay equal."""
  config = _catch(8)
  config.runtime.updates_per_call = 8
  # Per call: 8 devices x 32 envs x 8 steps x 8 updates; the replay can sample in call 2.
  config.total_env_steps = 4 * 8 * 32 * 8 * 8
  config.replay.min_size = 64
  experiment = builder.build(config)
  from podracer.logs.metrics import MetricsLogger
  logger = MetricsLogger(stream=None)
  state = experiment.runtime.train(logger)
  records = logger.records
  assert len(records) == 4 and records[-1]["env_steps"] == config.total_env_steps
  assert records[-1]["learning"] == 1.0 and np.isfinite(records[-1]["loss"])
  replay = state.agent.experience
  # Every replica inserted its own 32 sequences per update (and sampled its own batch).
  np.testing.assert_array_equal(np.asarray(replay.inserts), np.full(8, 4 * 8 * 32))
  assert not np.array_equal(replay.items.action[0], replay.items.action[1])
  for leaf in jax.tree.leaves(state.agent.nets):
    np.testing.assert_array_equal(leaf[0], leaf[7])  # one averaged gradient for all
  # Throughput from the replay's counters: 8 x 32 items per update, 8 x batch sampled.
  batch = config.replay.batch_size
  last = records[-1]
  assert last["replay_inserts_per_s"] > 0 and last["replay_samples_per_s"] > 0
  assert last["sample_to_insert_ratio"] == pytest.approx(batch / 32)
  # 8 x batch x 8 items sampled per call of 8 x 32 x 8 x 8 env steps: batch / 256 per env
  # step (two timers' rates, so roughly).
  assert last["replay_ratio"] == pytest.approx(batch / 256, rel=0.3)
  # The actors' Ape-X epsilons (no annealing here), averaged over each replica's 32.
  assert config.agent.epsilon_anneal_steps == 0
  assert last["epsilon_mean"] == pytest.approx(float(jnp.mean(apex_epsilons(
      32, config.agent.epsilon_base, config.agent.epsilon_alpha))), rel=1e-5)


def _atari_host(config):
  config.replay.name = "host"  # The default lane's default; Reverb in its own lane.
  return config


@pytest.mark.reverb_lane
def test_r2d2_atari_replay_is_host_in_the_default_lane_and_reverb_in_reverbs():
  from tests.reverb_support import current_lane
  expected = "reverb" if current_lane() == "reverb" else "host"
  assert r2d2_config.atari_sebulba().replay.name == expected


def test_r2d2_atari_host_replay_holds_at_most_1_25_frames_per_env_step_at_full_size():
  """At the paper's 84x84 frames and 4M observations: each env step costs its newest
  frame and a little (scalars, the LSTM state per sequence, keys for episode starts)."""
  from podracer.agent import item_spec
  config = _atari_host(r2d2_config.atari_sebulba())
  experiment = builder.build(config)
  agent, runtime = experiment.agent, experiment.runtime
  spec = item_spec(agent, runtime.trajectory_spec(config.runtime.num_envs_per_actor))
  assert spec.timestep.observation.shape == (85, 4, 84, 84)
  needed = agent.replay.bytes_needed(spec, overlap=agent.trajectory_overlap)
  frame = 84 * 84
  assert agent.replay.bytes_per_step <= 1.25 * frame, agent.replay.bytes_per_step
  assert needed <= 1.25 * frame * 4_000_000
  # Stored as whole stacked sequences (as the device replay does): 7.8x as much.
  assert agent.replay.max_size * 85 * 4 * frame > 7.5 * needed


@pytest.mark.extended  # CI: the config's trace test
@pytest.mark.slow
def test_r2d2_atari_host_replay_at_papers_capacity_runs_20k_env_steps_of_36x36_frames():
  """The paper's replay capacity (100k sequences, 4M observations) on this CPU machine:
  the replay allocates what it fills. A small network and batch keep the test short."""
  from tests.test_sebulba import one_device, run_in_process, sebulba_threads
  config = _atari_host(one_device(r2d2_config.atari_sebulba()))
  assert config.replay.max_size * config.runtime.rollout_length == 4_000_000
  config.total_env_steps = 20_000
  config.env.img_height = config.env.img_width = 36
  config.network.update(dict(hidden_sizes=(32,), lstm_size=32, head_hidden_sizes=(32,)))
  config.replay.update(dict(batch_size=8, min_size=64))
  config.runtime.num_envs_per_actor = 16
  process = psutil.Process()
  before = process.memory_info().rss
  records, _, runtime = run_in_process(config)
  grown = process.memory_info().rss - before
  assert sebulba_threads() == []
  # The whole run (JAX, EnvPool, compiled steps: about 1 GB) grew by less than half the
  # replay's 5.7 GB capacity: it allocated what it filled.
  capacity = runtime.replay.max_size * (runtime.replay.chunk_bytes + runtime.replay.key_bytes)
  assert capacity > 5e9 and grown < capacity / 2, (grown, capacity)
  assert records[-1]["env_steps"] >= 20_000
  assert any(r.get("learning", 0) > 0 for r in records)
  last = records[-1]
  assert 0 < last["replay_size"] <= config.replay.max_size and last["replay_bytes"] > 0
  # Bytes per stored env step, measured: at most 1.25 frames of 36x36.
  replay = runtime.replay
  assert replay.steps_stored >= replay.info()["replay_inserts"] * 40
  assert replay.info()["replay_bytes"] / replay.steps_stored <= 1.25 * 36 * 36
