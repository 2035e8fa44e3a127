"""A fifth new user, continuous control (issue 81): an environment of one's own with
bounds (examples/point_mass), the messages about bounds, and configs that give what the
docs promise. Each mistake is taken as input: one paragraph naming it and its fix (exit 2
from the launcher), not a traceback."""

import io
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import builder, contracts, registry, testing
from podracer.components.distributions import continuous_bounds
from podracer.components.distributions.normal import ClippedNormal
from podracer.components.environments.dm_env_adapter import CatchDmEnv
from podracer.components.environments.masked import MaskedBanditDmEnv
from podracer.components.environments.memory import RepeatFirstDmEnv
from podracer.errors import ConfigError
from podracer.logs.meters import learner_record
from podracer.registry import imports
from podracer.types import ArraySpec, EnvSpec
from tests.learning import ROOT, last_fifth_means, launch_runs
from tests.test_first_agent import one_paragraph
from tests.test_launch import launch

sys.path.insert(0, str(ROOT / "examples" / "point_mass"))
import point_mass  # noqa: E402  pylint: disable=wrong-import-position

EXAMPLE = ROOT / "examples" / "point_mass" / "configs.py"


def _spec(minimum, maximum, shape=(2,)):
  return EnvSpec(ArraySpec((4,), np.float32, "observation"),
                 ArraySpec(shape, np.float32, "action", minimum=minimum, maximum=maximum))


class _Bounded(point_mass.PointMass):
  """The point mass with the action bounds of its `bounds` attribute."""
  bounds = (-1.0, 1.0)

  def spec(self):
    return self.spec_with(*self.bounds)

  def spec_with(self, minimum, maximum):
    spec = super().spec()
    return spec._replace(action=ArraySpec((2,), np.float32, "action", minimum=minimum,
                                          maximum=maximum))


# -- bounds at the environment's door ---------------------------------------------------


def test_float64_array_bounds_make_a_spec_equal_to_itself_hashable_and_float32():
  spec = ArraySpec((2,), np.float32, "action", minimum=-np.ones(2, np.float64),
                   maximum=np.array([1.0, 0.1], np.float64))
  assert spec == spec and hash(spec) == hash(spec)  # pylint: disable=comparison-with-itself
  assert spec.minimum == -1.0 and spec.maximum == (1.0, float(np.float32(0.1)))
  same = ArraySpec((2,), np.float32, "action", minimum=-1.0,
                   maximum=(1.0, float(np.float32(0.1))))
  assert spec == same and {spec: 1}[same] == 1


@pytest.mark.parametrize("minimum,maximum,said", [
    (np.array([np.nan, -1.0]), 1.0, r"minimum has a NaN"),
    (-1.0, np.array([1.0, np.nan]), r"maximum has a NaN"),
    (np.array([-1.0, 2.0]), np.array([1.0, 1.0]), r"minimum .* is not below its maximum"),
    (np.array([0.0, 0.5, 0.2]), 1.0, r"minimum .* does not fit the action's shape \[2\]"),
])
def test_check_environment_refuses_bad_bounds_naming_the_environment(minimum, maximum, said):
  env = _Bounded()
  env.bounds = (minimum, maximum)
  with pytest.raises(ConfigError, match=r"environment 'pm': its action spec's " + said +
                     r".*minimum < maximum per dimension.*minimum=None, maximum=None"):
    contracts.check_environment(env, "environment 'pm'")
  contracts.check_environment(_Bounded())  # The example's own bounds pass.


@pytest.mark.slow
def test_a_nan_bound_exits_2_from_the_launcher_in_one_paragraph(tmp_path):
  (tmp_path / "usermod81.py").write_text(textwrap.dedent(f"""\
      import sys
      import numpy as np
      sys.path.insert(0, {str(ROOT / 'examples' / 'point_mass')!r})
      from point_mass import PointMass
      from podracer import registry
      from podracer.types import ArraySpec

      @registry.environments.register("test_pm_nan81")
      class PMNaN(PointMass):
        def spec(self):
          spec = super().spec()
          return spec._replace(action=ArraySpec((2,), np.float32, "action",
                                                minimum=np.array([-1.0, np.nan]), maximum=1.0))
      """))
  said = one_paragraph(launch(f"--import={tmp_path / 'usermod81.py'}", f"--config={EXAMPLE}:ppo",
                              "--config.env.name=test_pm_nan81", f"--workdir={tmp_path / 'r'}"))
  assert "environment 'test_pm_nan81': its action spec's minimum has a NaN" in said, said


# -- what each distribution accepts -----------------------------------------------------


@pytest.mark.parametrize("minimum,maximum", [(None, None), (-np.inf, np.inf), (-1.0, np.inf)])
def test_tanh_normal_without_finite_bounds_offers_normal_which_then_builds(minimum, maximum):
  spec = _spec(minimum, maximum)
  with pytest.raises(ConfigError, match=r"Distribution 'tanh_normal'.*squashes its samples "
                     r"with tanh onto finite action bounds.*set `--config\.distribution\.name="
                     r"normal`"):
    continuous_bounds(spec, "tanh_normal")
  normal = ClippedNormal(spec)  # The fix offered works: the unbounded Gaussian.
  params = jnp.concatenate([jnp.full((3, 2), 5.0), jnp.zeros((3, 2))], axis=-1)
  action, raw = normal.sample(params, jax.random.PRNGKey(0))
  low = -np.inf if minimum is None else minimum
  np.testing.assert_allclose(action, np.maximum(raw, low))  # Clipped only where bounded.
  assert float(action.min()) > 1.0 and np.isfinite(normal.log_prob(params, raw)).all()


def test_a_nan_bound_is_named_as_a_nan_by_the_distribution():
  with pytest.raises(ConfigError, match=r"Distribution 'normal'.*bounds have a NaN.*give "
                     r"numbers, or None for no bound") as raised:
    continuous_bounds(_spec(np.array([np.nan, -1.0]), 1.0), "normal", unbounded=True)
  assert "infinite" not in str(raised.value)


@pytest.mark.slow
def test_ppo_trains_on_actions_without_bounds_with_the_normal_distribution():
  """The unbounded Gaussian end to end: the point mass with no action bounds (it clips
  its force itself) builds and runs an update with `distribution.name=normal`."""
  from examples.point_mass import configs  # pylint: disable=import-outside-toplevel
  registry.environments.register("test_pm_unbounded81", _Unbounded, override=True)
  try:
    config = configs.ppo()
    config.env.name = "test_pm_unbounded81"
    config.runtime.num_envs_per_device, config.runtime.rollout_length = 2, 8
    config.runtime.updates_per_call, config.agent.num_minibatches = 1, 1
    before, after, metrics = testing.one_update(config)
    assert np.isfinite(metrics["loss"]).all()
    assert any(not np.allclose(a, b) for a, b in
               zip(jax.tree.leaves(before), jax.tree.leaves(after)))
    config.distribution.name = "tanh_normal"
    with pytest.raises(ConfigError, match=r"has no bounds: set `--config\.distribution"):
      builder.build(config)
  finally:
    registry.environments.unregister("test_pm_unbounded81")


class _Unbounded(_Bounded):
  bounds = (None, None)


# -- registry and command line ----------------------------------------------------------


def test_a_class_whose_register_was_forgotten_is_named_as_such(tmp_path):
  (tmp_path / "usermod81b.py").write_text(textwrap.dedent("""\
      class PointMass:
        pass

      class PMUnregistered(PointMass):
        pass
      """))
  imports.import_all([str(tmp_path / "usermod81b.py")])
  with pytest.raises(ConfigError, match=r"Unknown environment 'pm_unregistered'.*Module "
                     r"'usermod81b' defines class `PMUnregistered` \(named 'pm_unregistered' "
                     r"in the config\) but does not register it: decorate it with "
                     r"`@registry\.environments\.register\(\"pm_unregistered\"\)`"):
    registry.environments.get("pm_unregistered", key="env.name")


@pytest.mark.slow
@pytest.mark.parametrize("override", ["--config.observation_normaliser=running_mean_std",
                                      "--config.observation_normaliser.clip=5"])
def test_a_misspelt_section_at_the_command_line_gets_a_did_you_mean(tmp_path, override):
  said = one_paragraph(launch("--config=agents/ppo/config.py:pendulum_anakin", override,
                              f"--workdir={tmp_path}"))
  assert ("the config has no key `observation_normaliser`; did you mean "
          "`observation_normalizer`?") in said, said


@pytest.mark.parametrize("minimum, maximum", [(None, None), (-np.inf, np.inf)])
def test_sac_and_td3_networks_without_finite_bounds_offer_a_fix_that_works(minimum, maximum):
  """A tanh policy network (SAC's, TD3's) given no or infinite bounds names the fix: finite
  bounds with clipping, or PPO's `normal`, the one agent that takes unbounded actions."""
  from podracer.components.networks.continuous import action_bounds  # pylint: disable=import-outside-toplevel
  with pytest.raises(ValueError, match=r"'gaussian_policy'.*finite bounds and clip.*"
                     r"examples/point_mass.*distribution\.name=normal"):
    action_bounds(_spec(minimum, maximum), "gaussian_policy")


def test_a_misspelt_section_in_a_config_file_gets_a_did_you_mean():
  """The same typo as at the command line, written in a config file (`check_used`)."""
  from agents.ppo import config as ppo_config  # pylint: disable=import-outside-toplevel
  from podracer.config import compose  # pylint: disable=import-outside-toplevel
  config = ppo_config.pendulum_anakin()
  with config.unlocked():
    config.observation_normaliser = dict(config.observation_normalizer)
  with pytest.raises(ConfigError, match=r"`observation_normaliser` is not read by anything; "
                     r"did you mean `observation_normalizer`\?"):
    compose.check_used(config)


# -- SAC's and TD3's records ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_sac_and_td3_configs_name_progress_metrics_their_records_have(agent):
  """No warning on a run of their own configs; TD3's warm-up reads the replay's size at
  the record (250 items after 250 env steps of one environment), not a mean over the
  call's updates."""
  config = __import__(f"agents.{agent}.config", fromlist=["_"]).pendulum_anakin()
  config.total_env_steps, config.replay.min_size = 500, 400
  config.runtime.updates_per_call = 250 // config.runtime.num_envs_per_device
  config.topology.num_devices = 1
  out = io.StringIO()
  records = builder.build(config).train(stream=out)["records"]
  assert "Warning" not in out.getvalue(), out.getvalue()
  assert all(k in records[-1] for k in config.log.progress_metrics), sorted(records[-1])
  if agent == "td3":
    assert records[0]["env_steps"] == 250 and records[0]["replay_size"] == 250
    assert "warming up replay 250/400" in out.getvalue(), out.getvalue()


def test_a_record_gives_the_replays_size_at_its_end_and_other_metrics_means():
  record = learner_record({"replay_size": np.arange(1.0, 251.0), "loss": np.array([1.0, 3.0])})
  assert record == {"replay_size": 250.0, "loss": 2.0}


# -- dm_env's conformance ---------------------------------------------------------------


@pytest.mark.parametrize("make", [RepeatFirstDmEnv, MaskedBanditDmEnv, CatchDmEnv])
def test_podracers_dm_env_environments_pass_dm_envs_own_conformance_tests(make):
  assert testing.check_dm_env(make) == 4


def test_check_dm_env_names_what_a_nonconforming_environment_gets_wrong():
  class NeverResets(RepeatFirstDmEnv):
    """As RepeatFirstDmEnv was before 0.22: MID from step() on a fresh environment."""
    def step(self, action):
      self._needs_reset = False
      return super().step(action)

  with pytest.raises(AssertionError, match=r"of dm_env's 4 conformance tests failed: .*"
                     r"test_step_on_fresh_environment"):
    testing.check_dm_env(NeverResets)


# -- the example learns -----------------------------------------------------------------


def _reference_returns(num_episodes=64):
  """(a uniformly random policy's, the scripted PD controller's) mean returns on the
  point mass: the bar's two ends."""
  env = point_mass.PointMass()

  def episode(key, policy):
    state, timestep = env.reset(key)

    def step(carry, k):
      state, timestep = env.step(carry[0], policy(carry[1].observation, k))
      return (state, timestep), timestep.reward
    return jax.lax.scan(step, (state, timestep), jax.random.split(key, 200))[1].sum()

  keys = jax.random.split(jax.random.PRNGKey(1), num_episodes)
  uniform = lambda o, k: jax.random.uniform(k, (2,), minval=-1.0, maxval=1.0)
  scripted = lambda o, k: point_mass.pd_action(o)
  return tuple(float(jax.vmap(lambda k, p=p: episode(k, p))(keys).mean())
               for p in (uniform, scripted))


# SAC's in the extended tier (CI time): in CI the example trains PPO, and SAC's config of
# it builds without finite bounds and with them (above).
@pytest.mark.learning
@pytest.mark.parametrize("agent,steps", [
    ("ppo", 65_536), pytest.param("sac", 30_000, marks=pytest.mark.extended)])
def test_the_point_mass_example_trains_ppo_and_sac(tmp_path, agent, steps):
  """3 seeds in one program each, the example's configs (PPO at 8 of its 12 calls): every
  run's last-20 % mean is three quarters of the way from the random policy's return (about
  -200) to the scripted PD controller's (about +176)."""
  random_return, scripted_return = _reference_returns()
  assert random_return < 0 < scripted_return
  bar = random_return + 0.75 * (scripted_return - random_return)
  records = launch_runs(f"{EXAMPLE}:{agent}", tmp_path, "--config.num_runs=3",
                        f"--config.total_env_steps={steps}", timeout=600)
  means = last_fifth_means(records)
  assert len(means) == 3 and min(means) >= bar, (means, bar)


def test_float64_observations_are_said_once_a_source_and_cast(capsys):
  from podracer.components.environments.host import float32_observation_spec  # pylint: disable=import-outside-toplevel
  spec = {"position": ArraySpec((2,), np.float64, "position"),
          "count": ArraySpec((), np.int32, "count")}
  for _ in range(3):
    cast = float32_observation_spec(spec, "test source 81")
  assert cast["position"].dtype == np.float32 and cast["count"].dtype == np.int32
  said = capsys.readouterr().err
  assert said.count("test source 81 gives float64 observations") == 1, said
  float32_observation_spec({"count": spec["count"]}, "test source 81b")
  assert "81b" not in capsys.readouterr().err
