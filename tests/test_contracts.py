"""Contracts checked when a program is built: environments (reset, step, spec()) and the
agent's network outputs, directly and through the launcher (exit 2, one paragraph)."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import podracer
from podracer.components.environments import Environment, restart, transition
from podracer.errors import ConfigError
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec
from tests.test_launch import launch


class Grid(Environment):
  """Observations [6, 6]; `step_shape` and `spec_shape` break the contract on purpose."""

  def __init__(self, step_shape=(6, 6), spec_shape=(6, 6)):
    self.step_shape, self.spec_shape = tuple(step_shape), tuple(spec_shape)

  def reset(self, key):
    return jnp.int32(0), restart(jnp.zeros((6, 6), jnp.float32))

  def step(self, state, action):
    return state + 1, transition(jnp.zeros(self.step_shape, jnp.float32), 1.0,
                                 terminated=state >= 3, truncated=False)

  def spec(self):
    return EnvSpec(ArraySpec(self.spec_shape, np.float32), DiscreteSpec(2))


def test_check_environment_accepts_a_consistent_environment():
  podracer.check_environment(Grid())  # Raises on any disagreement.


def test_check_environment_names_a_step_observation_that_differs_from_reset():
  with pytest.raises(ConfigError) as error:
    podracer.check_environment(Grid(step_shape=(36,)))
  message = str(error.value)
  assert "environment Grid" in message and "step returns `observation`" in message
  assert "[36]" in message and "[6, 6]" in message and "reset gives" in message


def test_check_environment_names_a_spec_that_disagrees_with_observations():
  with pytest.raises(ConfigError) as error:
    podracer.check_environment(Grid(spec_shape=(36,)))
  message = str(error.value)
  assert "reset returns `observation` of shape [6, 6]" in message
  assert "spec() gives shape [36]" in message


def test_check_environment_names_a_wrong_dtype():
  class IntReward(Grid):
    def step(self, state, action):
      state, timestep = super().step(state, action)
      return state, timestep._replace(reward=jnp.int32(1))

  with pytest.raises(ConfigError, match="`reward` of shape \\[\\] and dtype int32"):
    podracer.check_environment(IntReward())


# A config file registering Grid and a network with broken heads, run by PPO on Anakin.
CONFIG = textwrap.dedent("""
    import haiku as hk
    from agents.ppo.config import cartpole_anakin
    from podracer import registry
    from podracer.components.networks.heads import PolicyValueOutput
    from tests.test_contracts import Grid

    registry.environments.register("grid")(Grid)

    @registry.networks.register("bad_heads")
    def bad_heads(spec, num_logits=2, value_size=None):
      def forward(x):
        x = hk.Flatten()(x)
        value = hk.Linear(value_size or 1)(x)
        return PolicyValueOutput(hk.Linear(num_logits)(x),
                                 value if value_size else value[:, 0])
      return hk.without_apply_rng(hk.transform(forward))

    def get_config():
      config = cartpole_anakin()
      config.env = dict(name="grid", step_shape=(6, 6), spec_shape=(6, 6))
      config.network = dict(name="bad_heads", num_logits=2, value_size=0)
      return config
""")


@pytest.mark.parametrize("override, expected", [
    ("--config.network.num_logits=3",
     ["network 'bad_heads' returns `logits` of shape [5, 3]", "needs shape [5, 2]",
      "agent PPO", "(the environment has 2 actions)"]),
    ("--config.network.value_size=1",
     ["network 'bad_heads' returns `value` of shape [5, 1]", "needs shape [5]"]),
    ("--config.env.step_shape=(36,)",
     ["environment 'grid': step returns `observation` of shape [36]", "[6, 6]"]),
    ("--config.env.spec_shape=(36,)",
     ["environment 'grid': reset returns `observation` of shape [6, 6]",
      "spec() gives shape [36]"]),
])
def test_contract_violations_exit_2_with_one_paragraph(tmp_path, override, expected):
  config = tmp_path / "broken.py"
  config.write_text(CONFIG)
  result = launch(f"--config={config}", override, f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2, result.stderr
  message = " ".join(result.stderr.split())  # The launcher wraps the paragraph.
  for part in expected:
    assert part in message, message
  assert "Traceback" not in result.stderr + result.stdout
  assert not (tmp_path / "run" / "metrics.jsonl").exists()  # Nothing trained.


def test_host_environment_first_reset_is_checked_against_its_spec():
  from podracer.components.environments.host import HostEnvironment, host_timestep
  from podracer.contracts import check_host_timestep

  class Host(HostEnvironment):
    obs_shape = (4,)

    def spec(self):
      return EnvSpec(ArraySpec((4,), np.float32), DiscreteSpec(2))

    def reset(self):
      zeros = np.zeros(self.num_envs)
      return host_timestep(zeros, zeros, zeros + 1,
                           np.zeros((self.num_envs, *self.obs_shape), np.float32)), None

    def step(self, action):
      return self.reset()

  env = Host(num_envs=3)
  check_host_timestep(env, env.reset()[0])  # Matches: [3, 4] float32.
  env.obs_shape = (5,)
  with pytest.raises(ConfigError, match=r"environment Host: reset returns `observation` of "
                     r"shape \[3, 5\] and dtype float32, but spec\(\) gives shape \[3, 4\]"):
    check_host_timestep(env, env.reset()[0])


HOST_CONFIG = textwrap.dedent("""
    import numpy as np
    from agents.ppo.config import cartpole_sebulba
    from podracer import registry
    from podracer.components.environments.host import HostEnvironment, host_timestep
    from podracer.types import ArraySpec, DiscreteSpec, EnvSpec

    @registry.environments.register("wrong_reset")
    class WrongReset(HostEnvironment):
      def __init__(self, num_envs, seed=0, obs_size=5):
        super().__init__(num_envs, seed)
        self.obs_size = obs_size

      def spec(self):
        return EnvSpec(ArraySpec((4,), np.float32), DiscreteSpec(2))

      def reset(self):
        zeros = np.zeros(self.num_envs)
        return host_timestep(zeros, zeros, zeros + 1,
                             np.zeros((self.num_envs, self.obs_size), np.float32)), None

      def step(self, action):
        return self.reset()

    def get_config():
      config = cartpole_sebulba()
      config.env = dict(name="wrong_reset", obs_size=5)
      return config
""")


def test_host_environment_contract_fails_at_build_time_with_exit_2(tmp_path):
  """Checked on the environment the builder makes for the spec, before any thread."""
  config = tmp_path / "host.py"
  config.write_text(HOST_CONFIG)
  result = launch(f"--config={config}", f"--workdir={tmp_path / 'run'}")
  assert result.returncode == 2, result.stderr
  message = " ".join(result.stderr.split())
  assert ("environment 'wrong_reset': reset returns `observation` of shape [1, 5] and "
          "dtype float32, but spec() gives shape [1, 4]") in message, message
  assert "Traceback" not in result.stderr + result.stdout
  assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_float64_spec_with_x64_off_says_jax_converted_it():
  class Float64Grid(Grid):
    def spec(self):
      return EnvSpec(ArraySpec((6, 6), np.float64), DiscreteSpec(2))

  assert not jax.config.jax_enable_x64
  with pytest.raises(ConfigError) as error:
    podracer.check_environment(Float64Grid())
  message = str(error.value)
  assert "spec() gives shape [6, 6] and dtype float64" in message
  assert "JAX turned the float64 into float32: its 64-bit mode is off" in message
  assert "Declare float32 in spec(), or enable 64-bit mode (JAX_ENABLE_X64=1" in message
