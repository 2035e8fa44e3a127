"""Fakes and helpers for testing components alone, as a user's tests or podracer's own do.

    from podracer import testing

    spec = testing.fake_spec(observation_shape=(4,), num_actions=2)
    env = testing.FakeEnvironment(spec, episode_length=3)           # JAX, for Anakin
    timesteps, stats = testing.rollout(env, num_envs=2, num_steps=7)
    host = testing.FakeHostEnvironment(spec, num_envs=2, episode_length=3)  # for Sebulba
    testing.check_dm_env(MyDmEnv)       # dm_env's own conformance tests, on one of yours
    testing.check_network(network, spec, policy_logits=(2,), value=())
    before, after, metrics = testing.one_update(config)
    sample, metrics = testing.traced_update(agent, trajectory_spec, batch_size=64)
    records = testing.fake_records(count=5)                          # for loggers
    logger = testing.log_records("my_logger", workdir, records, my_key=1)

Fake environments are driven by a spec: every step's observation is the step count
within the episode (in the spec's dtype and shape), the reward is 1, and an episode ends
after `episode_length` steps, terminated (discount 0) or, with `truncate=True`, cut by a
time limit (discount 1). `pytest` fixtures live in `podracer.testing_fixtures`: add
`pytest_plugins = ["podracer.testing_fixtures"]` to a conftest.py.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.components.environments.base import Environment, VectorEnv, restart, transition
from podracer.components.environments.host import (EpisodeTracker, HostEnvironment,
                                                   host_timestep)
from podracer.contracts import CHECK_BATCH  # noqa: F401 -- re-exported
from podracer.errors import ConfigError
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec, PyTree, StepType, TimeStep
from podracer.types import EpisodeStats, Trajectory, bound_arrays

# -- specs and observations ---------------------------------------------------------------


def fake_spec(observation_shape: Tuple[int, ...] = (4,), num_actions: int = 2,
              observation_dtype: Any = np.float32) -> EnvSpec:
  """A spec with one array observation and `num_actions` discrete actions."""
  return EnvSpec(ArraySpec(tuple(observation_shape), np.dtype(observation_dtype)),
                 DiscreteSpec(num_actions))


def fake_observations(spec: EnvSpec, batch_size: int, seed: int = 0) -> PyTree:
  """Random observations [batch_size, ...] in the spec's shapes and dtypes."""
  rng = np.random.default_rng(seed)

  def one(s: ArraySpec):
    shape = (batch_size, *s.shape)
    dtype = np.dtype(s.dtype)
    if np.issubdtype(dtype, np.integer):
      return rng.integers(0, min(np.iinfo(dtype).max, 255), shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
  return jax.tree.map(one, spec.observation)


def _observation_at(spec: EnvSpec, count, xp: Any) -> PyTree:
  return jax.tree.map(lambda s: xp.full(s.shape, count, s.dtype), spec.observation)


# -- environments ---------------------------------------------------------------------------


class FakeEnvironment(Environment):
  """A JAX environment of `spec` whose episodes last `episode_length` steps."""

  def __init__(self, spec: Optional[EnvSpec] = None, episode_length: int = 5,
               truncate: bool = False):
    self._spec, self.episode_length, self.truncate = spec or fake_spec(), episode_length, truncate

  def spec(self) -> EnvSpec:
    return self._spec

  def reset(self, key):
    del key
    return jnp.int32(0), restart(_observation_at(self._spec, 0, jnp))

  def step(self, state, action):
    del action
    count = state + 1
    ended = count >= self.episode_length
    return count, transition(_observation_at(self._spec, count, jnp), 1.0,
                             terminated=ended & (not self.truncate),
                             truncated=ended & self.truncate)


class FakeHostEnvironment(HostEnvironment):
  """`num_envs` host environments of `spec`, episodes of `episode_length` steps, with
  `VectorEnv`'s auto-reset and true episode statistics; `fail_at` raises at that step."""

  def __init__(self, spec: Optional[EnvSpec] = None, num_envs: int = 2, seed: int = 0,
               episode_length: int = 5, truncate: bool = False,
               fail_at: Optional[int] = None):
    super().__init__(num_envs, seed)
    self._spec, self.episode_length, self.truncate = spec or fake_spec(), episode_length, truncate
    self.fail_at, self.steps = fail_at, 0
    self._count = np.zeros(num_envs, np.int64)
    self._tracker = EpisodeTracker(num_envs)

  def spec(self) -> EnvSpec:
    return self._spec

  def _timestep(self, step_type, reward, discount) -> TimeStep:
    observation = jax.tree.map(
        lambda s: np.broadcast_to(self._count.reshape(-1, *([1] * len(s.shape))),
                                  (self.num_envs, *s.shape)).astype(s.dtype),
        self._spec.observation)
    return host_timestep(step_type, reward, discount, observation)

  def reset(self):
    self._count[:] = 0
    n = self.num_envs
    return (self._timestep(np.full(n, StepType.FIRST), np.zeros(n), np.ones(n)),
            self._tracker.reset())

  def step(self, action):
    self._check_action(action)
    self.steps += 1
    if self.fail_at is not None and self.steps >= self.fail_at:
      raise RuntimeError(f"FakeHostEnvironment failed at step {self.steps} (fail_at)")
    restarting = self._count >= self.episode_length
    self._count = np.where(restarting, 0, self._count + 1)
    ended = self._count >= self.episode_length
    step_type = np.where(restarting, StepType.FIRST,
                         np.where(ended, StepType.LAST, StepType.MID))
    reward = np.where(restarting, 0.0, 1.0)
    discount = np.where(ended & (not self.truncate), 0.0, 1.0)
    stats = self._tracker.update(step_type, reward, ended)
    return self._timestep(step_type, reward, discount), stats


# -- rollouts and batches -------------------------------------------------------------------


def rollout(env: Environment, num_envs: int, num_steps: int, seed: int = 0,
            policy: Optional[Callable[[TimeStep, jax.Array], jax.Array]] = None
            ) -> Tuple[TimeStep, EpisodeStats]:
  """Steps `num_envs` copies of a JAX environment (auto-reset, as Anakin does) with
  random actions (uniform within finite bounds, never NaN for infinite ones), or `policy(timestep, key)`: timesteps [num_steps + 1, B] from the first
  and episode statistics [num_steps, B]."""
  vector = VectorEnv(env, num_envs)
  spec = env.spec()

  def act(timestep, key):
    if policy is not None:
      return policy(timestep, key)
    return _random_actions(spec, key, (num_envs,))

  def body(carry, key):
    state, timestep = carry
    state, timestep, stats = vector.step(state, act(timestep, key))
    return (state, timestep), (timestep, stats)

  @jax.jit
  def run(key):
    reset_key, key = jax.random.split(key)
    state, first = vector.reset(reset_key)
    _, (timesteps, stats) = jax.lax.scan(body, (state, first),
                                         jax.random.split(key, num_steps))
    return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, timesteps), stats

  return run(jax.random.PRNGKey(seed))


def fake_trajectory(spec: EnvSpec, num_envs: int = 2, length: int = 5, seed: int = 0,
                    extras: Optional[Dict[str, Tuple[int, ...]]] = None,
                    episode_length: int = 3) -> Trajectory:
  """A [length, num_envs] trajectory of `FakeEnvironment(spec, episode_length)` with
  random actions, no actor state and zero `extras` of the given per-step shapes (what an
  agent's `act` returns: log-probs, values, search policies)."""
  timesteps, _ = rollout(FakeEnvironment(spec, episode_length), num_envs, length - 1, seed)
  actions = _random_actions(spec, jax.random.PRNGKey(seed + 1), (length, num_envs))
  zeros = {k: jnp.zeros((length, num_envs, *shape), jnp.float32)
           for k, shape in (extras or {}).items()}
  return Trajectory(timesteps, (), actions, zeros)


def _random_actions(spec: EnvSpec, key: jax.Array, batch: Tuple[int, ...]) -> jax.Array:
  """Random actions of `spec`: int32 indices; floats uniform within finite bounds, N(0, 1)
  where there are none, and a finite bound plus or minus |N(0, 1)| where one side is
  infinite."""
  if isinstance(spec.action, DiscreteSpec):
    return jax.random.randint(key, batch, 0, spec.action.num_values).astype(jnp.int32)
  shape = (*batch, *spec.action.shape)
  if spec.action.minimum is None or spec.action.maximum is None:  # Unbounded: N(0, 1).
    return jax.random.normal(key, shape, jnp.float32)
  low, high = bound_arrays(spec.action)
  uniform_key, normal_key = jax.random.split(key)
  finite_low, finite_high = np.isfinite(low), np.isfinite(high)
  bounded = finite_low & finite_high
  uniform = jax.random.uniform(uniform_key, shape, jnp.float32, np.where(bounded, low, 0.0),
                               np.where(bounded, high, 1.0))
  # An infinite bound leaves that side unbounded: N(0, 1), or its half past a finite bound.
  normal = jax.random.normal(normal_key, shape, jnp.float32)
  unbounded = jnp.where(finite_low, low + jnp.abs(normal),
                        jnp.where(finite_high, high - jnp.abs(normal), normal))
  return jnp.where(bounded, uniform, unbounded)


def check_dm_env(make_env: Callable[[], Any]) -> int:
  """Runs dm_env's own conformance tests (`dm_env.test_utils.EnvironmentTestMixin`) on
  the environment `make_env()` builds: reset gives FIRST, step() on a fresh environment
  or after LAST gives FIRST, every step conforms to the specs. Returns how many tests
  ran; raises AssertionError naming each failure. For a dm_env environment of one's own
  (`env.name=dm_env`); a test class may also inherit the mixin itself."""
  import unittest  # pylint: disable=import-outside-toplevel
  from dm_env import test_utils  # pylint: disable=import-outside-toplevel

  class Conformance(test_utils.EnvironmentTestMixin, unittest.TestCase):
    def make_object_under_test(self):
      return make_env()

  result = unittest.TestResult()
  suite = unittest.defaultTestLoader.loadTestsFromTestCase(Conformance)
  suite.run(result)
  failed = [f"{test.id().rsplit('.', 1)[-1]}: {text.strip().splitlines()[-1]}"
            for test, text in result.failures + result.errors]
  if failed:
    raise AssertionError(f"{len(failed)} of dm_env's {result.testsRun} conformance tests "
                         "failed: " + "; ".join(failed))
  return result.testsRun


# -- networks and updates -------------------------------------------------------------------


def check_network(network: Any, spec: EnvSpec, batch_size: int = CHECK_BATCH,
                  **expected: Tuple[int, ...]) -> PyTree:
  """Applies `network` (a Haiku transform: `init(key, obs)`, `apply(params, obs)`) to a
  batch of fake observations and checks each named output's shape after the batch axis:
  `check_network(net, spec, logits=(2,), value=())`. Returns {output path: shape}; raises
  ConfigError naming the output that differs."""
  observation = jax.tree.map(
      lambda s: jax.ShapeDtypeStruct((batch_size, *s.shape), s.dtype), spec.observation)
  outputs = jax.eval_shape(lambda k, o: network.apply(network.init(k, o), o),
                           jax.random.PRNGKey(0), observation)
  for name, shape in expected.items():
    value = outputs.get(name) if isinstance(outputs, dict) else getattr(outputs, name, None)
    want = (batch_size, *shape)
    if value is None or tuple(value.shape) != want:
      got = "nothing" if value is None else f"shape {list(value.shape)}"
      raise ConfigError(f"the network returns {got} for `{name}`; expected shape "
                        f"{list(want)} for a batch of {batch_size} observations.")
  leaves, _ = jax.tree_util.tree_flatten_with_path(outputs)
  return {jax.tree_util.keystr(path).lstrip(".") or "output": tuple(x.shape)
          for path, x in leaves}


def one_update(config: Any, agent: Any = None) -> Tuple[PyTree, PyTree, Dict[str, Any]]:
  """Builds `config` (an Anakin config; `agent` replaces its agent) and runs one compiled
  call of its updates: (parameters before, parameters after, that call's metrics), the
  parameters of replica 0. Use a tiny config: `runtime.updates_per_call=1`."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  experiment = builder.build(config, agent)
  runtime = experiment.runtime
  state = runtime.init()
  first = lambda tree: jax.device_get(jax.tree.map(lambda x: x[0], tree))
  before = first(state.agent.nets)
  state, metrics, _ = runtime.step(state)
  return before, first(state.agent.nets), {k: np.asarray(v) for k, v in metrics.items()}


def traced_update(agent: Any, trajectory_spec: Trajectory, batch_size: int) -> Tuple[Any, Any]:
  """Traces one `agent.update` (no compile, no data) on a replay sample of `batch_size`
  items of `trajectory_spec`'s shapes, as on a mesh of one replica: returns the
  sample and metrics it gives, as shapes ([1, ...] leaves). For agents with a replay."""
  from podracer.experience import Sample  # pylint: disable=import-outside-toplevel
  from podracer.types import REPLICA_AXIS  # pylint: disable=import-outside-toplevel
  items = jax.eval_shape(agent.replay_items, trajectory_spec)
  batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct((batch_size, *x.shape[1:]), x.dtype),
                       items)
  per_item = lambda dtype: jax.ShapeDtypeStruct((batch_size,), dtype)
  sample = Sample(batch, per_item(jnp.int32), per_item(jnp.float32),
                  jax.ShapeDtypeStruct((), jnp.int32), per_item(jnp.float32))
  nets = jax.eval_shape(agent.init_nets, jax.random.PRNGKey(0))
  opt = jax.eval_shape(agent.init_opt, nets)
  one_replica = lambda x: jax.ShapeDtypeStruct((1, *x.shape), x.dtype)
  update = jax.vmap(agent.update, axis_name=REPLICA_AXIS)
  _, _, sample, metrics = jax.eval_shape(
      update, *jax.tree.map(one_replica, (nets, opt, sample, jax.random.PRNGKey(1))))
  return sample, metrics


# -- loggers ------------------------------------------------------------------------------


def fake_records(count: int = 5, num_runs: Optional[int] = None,
                 seed: int = 0) -> List[Dict[str, Any]]:
  """Records like a run's (`env_steps`, `sps`, `episode_return`, `loss`, `learning`, a
  bool), one NaN `loss` among them (the second record's), with `run` and `seed` per run
  when `num_runs` is given: what `log_records` hands a logger."""
  rng = np.random.default_rng(seed)
  records = []
  for i in range(count):
    for run in range(num_runs or 1):
      record = dict(env_steps=1024 * (i + 1), sps=float(rng.uniform(1e3, 1e4)),
                    episode_return=float(rng.uniform(0, 500)),
                    loss=float("nan") if i == 1 else float(rng.uniform(0, 2)),
                    learning=1.0, includes_compilation=i == 0)
      if num_runs:
        record.update(run=run, seed=seed + run)
      records.append(record)
  return records


def log_records(logger: Any, workdir: str, records: List[Dict[str, Any]],
                num_runs: Optional[int] = None, config: Optional[Dict[str, Any]] = None,
                **options: Any) -> Any:
  """Builds the logger registered as `logger` (a name) with `options` (its `log.<name>`
  keys), as a run does, and hands it `records` the way a run does (through
  `MetricsLogger`: strict JSON, disk failures as one DiskError), then closes it. Returns
  the logger, closed."""
  from podracer.components.loggers import build_loggers  # pylint: disable=import-outside-toplevel
  from podracer.logs.metrics import MetricsLogger  # pylint: disable=import-outside-toplevel
  built = {}

  def make(resumed):
    built.update(build_loggers((logger,), {logger: options}, workdir=workdir,
                               num_runs=num_runs, resumed=resumed, config=config))
    return built

  metrics = MetricsLogger(workdir, stream=None, loggers=make)
  for record in records:
    metrics.write(dict(record))
  metrics.close()
  return built[logger]
