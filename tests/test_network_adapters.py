"""Networks of Flax linen, Flax NNX and Equinox (podracer/components/networks/adapters.py)
wrapped to podracer's contract: the examples' PureJaxRL-style actor-critics
(examples/networks/) train PPO on CartPole through PPO's own config and resume exactly,
learn over 5 seeds in one program as the Haiku network does (linen's in CI, all three in
the extended tier), and the linen one under SEED, podracer.play and meta-gradients (under
Sebulba: extended) (and PureJaxRL's continuous module on Pendulum); stateful modules, modules of no library, a library not installed and outputs
that do not fit are refused by name."""

import json
import os
import pathlib
import re
import subprocess
import sys

import distrax
import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from ml_collections import config_dict

from agents.ppo import config as ppo_config
from podracer import builder, launch, registry, testing
from podracer.components import networks
from podracer.components.networks import PolicyValueOutput
from podracer.config import presets
from podracer.errors import ConfigError
from podracer.registry import imports
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec
from tests.learning import assert_reached_and_held, best_by_run, launch_runs

launch.register_components_and_agents()
ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = {library: str(ROOT / "examples" / "networks" / f"{name}_actor_critic.py")
            for library, name in (("linen", "linen"), ("nnx", "nnx"), ("equinox", "equinox"))}
NAMES = {"linen": "linen_actor_critic", "nnx": "nnx_actor_critic",
         "equinox": "equinox_actor_critic"}
CARTPOLE = EnvSpec(observation=ArraySpec((4,), np.float32), action=DiscreteSpec(2))


@pytest.fixture(autouse=True, scope="module")
def _examples_registered():
  """The examples' networks registered for this module's tests, and unregistered after:
  other modules check the registries against the docs."""
  before = set(registry.networks.names())
  imports.import_all(tuple(EXAMPLES.values()))
  yield
  for name in set(registry.networks.names()) - before:
    registry.networks.unregister(name)


@pytest.mark.parametrize("library", sorted(EXAMPLES))
def test_each_library_s_network_keeps_the_contract(library):
  net = registry.networks.get(NAMES[library])(spec=CARTPOLE)
  observation = jnp.ones((3, 4))
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  params = jax.vmap(net.init, in_axes=(0, None))(keys, observation)  # Many runs.
  assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(params))
  first = jax.tree.map(lambda x: x[0], params)
  second = jax.tree.map(lambda x: x[1], params)
  assert any(not np.allclose(a, b)  # Each run its own initialisation.
             for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(second)))
  out = jax.jit(net.apply)(first, observation)
  assert isinstance(out, PolicyValueOutput)
  assert out.logits.shape == (3, 2) and out.value.shape == (3,)
  # PureJaxRL's initialisation: a policy close to uniform at the start.
  np.testing.assert_allclose(jax.nn.softmax(out.logits), 0.5, atol=0.05)
  # The parameters are plain nested dicts: what a checkpoint saves and restores.
  assert isinstance(first, dict)


class _LinenBatchNorm(nn.Module):
  action_dim: int

  @nn.compact
  def __call__(self, x):
    x = nn.BatchNorm(use_running_average=True)(nn.Dense(8)(x))
    return distrax.Categorical(logits=nn.Dense(self.action_dim)(x)), x[:, 0]


class _NNXBatchNorm(nnx.Module):

  def __init__(self, obs_dim: int, action_dim: int, *, rngs: nnx.Rngs):
    self.dense = nnx.Linear(obs_dim, action_dim, rngs=rngs)
    self.norm = nnx.BatchNorm(action_dim, rngs=rngs)

  def __call__(self, x):
    x = self.norm(self.dense(x))
    return distrax.Categorical(logits=x), x[:, 0]


class _EquinoxBatchNorm(eqx.Module):
  dense: eqx.nn.Linear
  norm: eqx.nn.BatchNorm

  def __init__(self, obs_dim: int, action_dim: int, *, key):
    self.dense = eqx.nn.Linear(obs_dim, action_dim, key=key)
    self.norm = eqx.nn.BatchNorm(action_dim, axis_name="batch", mode="batch")

  def __call__(self, x, state):
    x, state = self.norm(self.dense(x), state)
    return distrax.Categorical(logits=x), x[0]


@pytest.mark.parametrize("module, says", [
    (_LinenBatchNorm, r"_LinenBatchNorm \(flax linen\).*\(batch_stats\)"),
    (_NNXBatchNorm, r"_NNXBatchNorm \(flax nnx\).*\(BatchStat\)"),
    (_EquinoxBatchNorm, r"_EquinoxBatchNorm \(equinox\).*\(StateIndex at \.norm\.")])
def test_a_module_that_keeps_state_is_refused_by_name_at_build(module, says):
  _refused_at_build(f"stateful_{module.__name__.lower()}", module, says)


def _refused_at_build(name, module, says):
  """`module` registered as network `name`: PPO's build raises a ConfigError saying `says`."""
  registry.networks.register(name, networks.module(module))
  with pytest.raises(ConfigError, match=says):
    builder.build(small_config(name, 8192))


class _LinenDropout(nn.Module):
  action_dim: int

  @nn.compact
  def __call__(self, x):
    x = nn.Dropout(0.1, deterministic=False)(nn.Dense(8)(x))
    return distrax.Categorical(logits=nn.Dense(self.action_dim)(x)), nn.Dense(1)(x)[:, 0]


def test_a_module_that_needs_a_random_key_when_applied_is_refused_by_name_at_build():
  _refused_at_build("dropout_linen", _LinenDropout,
                    r"_LinenDropout \(flax linen\) draws random numbers.*deterministic=True")


class _LinenNActions(nn.Module):
  n_actions: int

  @nn.compact
  def __call__(self, x):
    return distrax.Categorical(logits=nn.Dense(self.n_actions)(x)), nn.Dense(1)(x)[:, 0]


def test_an_action_count_under_another_name_says_which_names_are_filled():
  _refused_at_build("n_actions_linen", _LinenNActions,
                    r"needs `network.n_actions` in the config\. .*"
                    r"`action_dim`, `num_actions` or `action_size`")


def test_a_class_of_no_library_is_refused():
  class NotAModule:  # pylint: disable=too-few-public-methods
    pass
  with pytest.raises(ConfigError, match="NotAModule.*flax.linen.Module"):
    networks.module(NotAModule)


def test_a_network_of_a_library_not_installed_is_one_paragraph_and_exit_2(tmp_path):
  """Equinox missing (its import made to fail, as where it is not installed): the
  launcher names the import that needs it and the package, without a traceback."""
  launcher = ("import runpy, sys; sys.modules['equinox'] = None; "
              "sys.argv = ['podracer.launch', *sys.argv[1:]]; "
              "runpy.run_module('podracer.launch', run_name='__main__')")
  out = subprocess.run(
      [sys.executable, "-c", launcher, "--config=agents/ppo/config.py:cartpole_anakin",
       f"--import={EXAMPLES['equinox']}", "--config.network=equinox_actor_critic",
       f"--workdir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
      check=False)
  assert out.returncode == 2, out.stderr[-3000:]
  assert "Traceback" not in out.stderr
  said = " ".join(out.stderr.split())
  assert re.fullmatch(r"Config error: --import=\S*equinox_actor_critic\.py: module "
                      r"'equinox_actor_critic' could not import module 'equinox' .*"
                      r"install it in this Python .*: pip install 'podracer\[equinox\]'\.",
                      said), said


class _ThreeActions(nn.Module):

  @nn.compact
  def __call__(self, x):
    return distrax.Categorical(logits=nn.Dense(3)(x)), nn.Dense(1)(x)[:, 0]


def test_an_output_that_does_not_fit_the_agent_is_named_at_build():
  registry.networks.register("three_actions", networks.module(_ThreeActions))
  c = small_config("three_actions", 8192)
  with pytest.raises(ConfigError, match=r"network 'three_actions' returns `logits` of shape"):
    builder.build(c)


def small_config(network, total_env_steps):
  """PPO on CartPole (PureJaxRL's settings, one device: 8,192 env steps a call) with a
  constant learning rate, so a run resumed with a larger budget is the longer run."""
  c = ppo_config.cartpole_anakin()
  c.topology.num_devices = 1
  c.optimizer.anneal = False
  c.network = presets.section(network)
  c.total_env_steps = total_env_steps
  c.checkpoint_interval = 600.0  # (And at the end.)
  return c


def _records(workdir):
  unequal = {"sps", "wall_time", "includes_compilation", "compile_s"}
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(line).items() if k not in unequal} for line in f]


# Per library: 40,960 env steps (5 calls), then 24,576 (3 calls) resumed to 40,960 in a
# second launch. Most of a test's time is compiling: the launch once, and the resumed
# launch again (its restored state is laid out unlike the step's outputs: a new program);
# 20-30 s each on 2 loaded cores (2026-12-07).
@pytest.mark.slow
@pytest.mark.parametrize("library", sorted(EXAMPLES))
def test_each_library_s_network_trains_ppo_and_resumes_exactly(library, tmp_path):
  whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
  launch.launch(small_config(NAMES[library], 40_960), whole, stream=None)
  launch.launch(small_config(NAMES[library], 24_576), split, stream=None)
  launch.launch(small_config(NAMES[library], 40_960), split, stream=None)  # Resumes.
  records = _records(whole)
  assert len(records) == 5 and _records(split) == records
  returns = [r["episode_return"] for r in records if "episode_return" in r]
  assert returns[-1] > 100, (library, returns)  # A random policy holds about 22.


# Extended (CI time): under Sebulba the network is called as under Anakin (its adapter is
# the runtime's parameters and outputs, nothing else); CI runs the linen network under
# SEED's learner and actors (below) and learning under Anakin.
@pytest.mark.extended
@pytest.mark.learning
def test_sebulba_with_a_linen_network_learns(tmp_path):
  """PPO's cartpole_sebulba config, its network the linen example's, as a user types it:
  acting and learning in turns (`max_policy_lag=0`: the run is fixed by its seed), the
  bar and budget of the Haiku network's test (tests/test_sebulba.py: a record's mean
  return reaches 450 within 2M env steps; Haiku's by 333K). 2026-12-07: 469 by 240K env
  steps, 28 s on 2 loaded cores."""
  records = launch_runs("agents/ppo/config.py:cartpole_sebulba", tmp_path,
                        f"--import={EXAMPLES['linen']}", "--config.network=linen_actor_critic",
                        "--config.runtime.max_policy_lag=0", "--config.stop_at_return=450")
  assert max(r["policy_lag"] for r in records if "policy_lag" in r) == 0
  assert records[-1]["env_steps"] <= 2_000_000
  best = max(best_by_run(records))
  assert best >= 450, f"best mean episode return {best:.1f} < 450"


# PPO cartpole_anakin over seeds 0-4 in one program, as a user's command runs it: the
# Haiku network's bars, beside which the other libraries' same-sized, same-initialised
# actor-critics are judged (docs/results/networks.md).
SHORT_BUDGET = 65_536
# At 65,536 env steps (the learning rate annealed over them) the Haiku network's IQM of
# 5 runs' last-20 % means was 277, 228, 242 and 236 on seeds 0-4, 5-9, 10-14 and 15-19
# (2026-12-07), its runs' spread about 30: the bar is its lowest figure less two standard
# errors of a 5-seed mean. Seeds 0-4 gave linen 227, NNX 249, Equinox 260; 25-36 s each.
SHORT_BAR = 200


# In CI: linen's (NNX's and Equinox's in the extended tier, for CI time; in CI each of them
# trains and resumes exactly above, so its adapter's gradients and state are checked).
@pytest.mark.learning
@pytest.mark.parametrize("library", [
    "linen", *(pytest.param(name, marks=pytest.mark.extended) for name in ("nnx", "equinox"))])
def test_each_library_s_actor_critic_learns_cartpole_as_haiku_s_does_in_ci(library, tmp_path):
  records = launch_runs("agents/ppo/config.py:cartpole_anakin", tmp_path,
                        f"--import={EXAMPLES[library]}", f"--config.network={NAMES[library]}",
                        "--config.num_runs=5", f"--config.total_env_steps={SHORT_BUDGET}")
  assert_reached_and_held(records, 5, held_iqm=SHORT_BAR)


@pytest.mark.extended
@pytest.mark.learning
@pytest.mark.parametrize("library", sorted(EXAMPLES))
def test_each_library_s_actor_critic_reaches_475_and_holds_it_as_haiku_s_does(library,
                                                                              tmp_path):
  """The Haiku network's test (tests/test_learning.py: 500K env steps, every run reaches
  475, the IQM holds 475) with each library's network."""
  records = launch_runs("agents/ppo/config.py:cartpole_anakin", tmp_path,
                        f"--import={EXAMPLES[library]}", f"--config.network={NAMES[library]}",
                        "--config.num_runs=5")
  assert_reached_and_held(records, 5, reached=475, held_iqm=475)


@pytest.mark.slow
def test_seed_with_a_linen_network_runs_and_ships_its_parameters(tmp_path):
  """PPO's cartpole_seed (two worker processes, one inference thread) with the linen
  example's network, as a user types it: every learner batch within the config's policy
  lag of 1 over 20 updates, so the inference thread received each update's parameters
  (parameters never shipped would leave the actors on version 0 and the run waiting); the
  workers' steps learned from. How well a SEED run learns depends on the workers' timing
  (docs/seed.md), so no return is asserted. 21-34 s on 2 loaded cores."""
  records = launch_runs("agents/ppo/config.py:cartpole_seed", tmp_path,
                        f"--import={EXAMPLES['linen']}", "--config.network=linen_actor_critic",
                        "--config.total_env_steps=40960", "--config.runtime.log_interval=0")
  learned = [r for r in records if "policy_loss" in r]
  assert records[-1]["env_steps"] >= 40_960 and learned[-1]["updates"] == 20
  assert all(np.isfinite(r["policy_loss"]) for r in learned)
  assert max(r["policy_lag_max"] for r in records if "policy_lag_max" in r) <= 1


# Extended (CI time): CI plays a Haiku run's checkpoint (tests/test_video.py) and resumes
# each library's network exactly from its checkpoint (above).
@pytest.mark.extended
def test_play_from_a_linen_network_s_checkpoint(tmp_path):
  """`python -m podracer.play` rebuilds a linen-network run from its workdir (the import
  is in its config.json) and plays its saved parameters: PPO cartpole_anakin, 40,960 env
  steps, whose greedy policy keeps the pole up for hundreds of steps an episode (2026-12-07:
  897 frames in 2 episodes; a policy that learned nothing pushes one way and falls within
  tens). 21-33 s."""
  import imageio.v3 as iio  # pylint: disable=import-outside-toplevel
  launch_runs("agents/ppo/config.py:cartpole_anakin", tmp_path,
              f"--import={EXAMPLES['linen']}", "--config.network=linen_actor_critic",
              "--config.total_env_steps=40960")
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # As a user runs it.
  played = subprocess.run(
      [sys.executable, "-m", "podracer.play", f"--workdir={tmp_path}", "--episodes=2",
       "--format=gif"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
      check=False)
  assert played.returncode == 0, played.stderr[-2000:]
  frames = iio.imread(tmp_path / "videos" / "play.gif")
  assert frames.shape[0] >= 300, frames.shape


@pytest.mark.slow
def test_meta_gradients_adapt_through_a_linen_network():
  """PPO with `meta_loss=meta_gradient` (the discount and lambda adapted through one inner
  update of the network's parameters) on the linen example: one compiled call of 16
  updates moves the discount up from 0.9 towards the reference 0.99, as with Haiku's
  network (tests/test_meta_gradient.py), and trains the parameters."""
  c = small_config(NAMES["linen"], 8192)
  c.agent.discount = 0.9
  c.meta_loss = config_dict.ConfigDict(dict(name="meta_gradient", learning_rate=0.05))
  before, after, metrics = testing.one_update(c)
  assert np.all(np.isfinite(metrics["meta_discount"]))
  assert metrics["meta_discount"].reshape(-1)[-1] > 0.9, metrics["meta_discount"]
  assert not np.allclose(before["params"]["Dense_0"]["kernel"],
                         after["params"]["Dense_0"]["kernel"])


class _LinenGaussian(nn.Module):
  """PureJaxRL's continuous actor-critic (ppo_continuous_action.py), smaller: a diagonal
  Gaussian with a state-independent log-std, as a distrax MultivariateNormalDiag."""
  action_dim: int

  @nn.compact
  def __call__(self, x):
    mean = nn.Dense(self.action_dim)(nn.tanh(nn.Dense(16)(x)))
    log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
    pi = distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))
    return pi, nn.Dense(1)(nn.tanh(nn.Dense(16)(x)))[:, 0]


@pytest.mark.slow
def test_a_linen_gaussian_actor_critic_trains_ppo_on_pendulum():
  """PureJaxRL's `(MultivariateNormalDiag, value)` read as the `normal` distribution's
  parameters (mean, log scale): PPO's pendulum_anakin config builds with it and one
  compiled call of updates trains its mean and its log-std."""
  registry.networks.register("linen_gaussian", networks.module(_LinenGaussian))
  c = ppo_config.pendulum_anakin()
  c.topology.num_devices = 1
  c.network = presets.section("linen_gaussian")
  c.runtime.updates_per_call = 2
  before, after, metrics = testing.one_update(c)
  assert np.all(np.isfinite(metrics["loss"]))
  # The config normalises observations: the network's parameters sit beside the statistics.
  before, after = before["network"]["params"], after["network"]["params"]
  assert not np.allclose(before["log_std"], after["log_std"])
  assert not np.allclose(before["Dense_1"]["kernel"], after["Dense_1"]["kernel"])


def test_a_linen_network_trains_over_the_model_axis_as_over_data_alone():
  """The linen example's network under Anakin at data 2 x model 2, `fsdp`: the records
  of data 2 x model 1 to float32 rounding (as Haiku's: tests/test_model_axis.py), its
  larger kernels split over `model`."""
  from tests.test_mesh import _ppo  # pylint: disable=import-outside-toplevel
  from tests.test_model_axis import _train  # pylint: disable=import-outside-toplevel
  imports.import_all((EXAMPLES["linen"],))

  def run(model):  # tests/test_model_axis.py's run: two calls of 2 updates, 2 replicas.
    c = _ppo(2, num_devices=2 * model)
    c.network = presets.section(NAMES["linen"])
    c.total_env_steps = 2 * 256 * 2
    c.topology.model, c.topology.sharding = model, "fsdp"
    return _train(c)

  (expected, _), (got, state) = run(1), run(2)
  for (metrics, episodes), (want, want_episodes) in zip(got, expected):
    np.testing.assert_array_equal(episodes, want_episodes)
    for k, v in want.items():
      np.testing.assert_allclose(metrics[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
  specs = [leaf.sharding.spec for leaf in jax.tree.leaves(state.agent.nets)]
  assert any("model" in spec[1:] for spec in specs), specs


class _LinenRawTuple(nn.Module):
  action_dim: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(self.action_dim)(x), nn.Dense(1)(x)[:, 0]


def test_a_tuple_of_raw_logits_and_value_says_what_a_tuple_must_hold():
  _refused_at_build("raw_tuple_linen", _LinenRawTuple,
                    r"has no `logits`.*A tuple is read as PureJaxRL's \(pi, value\)"
                    r".*PolicyValueOutput")
