"""A user's own runtime gets checkpoints, `eval_video` and `podracer.play` by implementing
the Runtime interface (podracer/runtime.py), asked by method; what a runtime does not
implement is refused in one paragraph naming the runtime and the method; a runtime
written before 0.17 (its `run`) still trains, with a DeprecationWarning."""

import glob
import warnings

import jax
import numpy as np
import pytest

from podracer import builder, deprecation, launch, play, registry
from podracer.errors import ConfigError
from podracer.lifecycle import video
from podracer.logs.meters import Window
from podracer.runtime import NotSupported, Runtime
from podracer.runtimes.anakin import Anakin, AnakinOptions

from agents.ppo.config import catch_anakin


@registry.runtimes.register("test_user_loop")
class UserLoop(Runtime):
  """A user's runtime: Anakin's compiled program for one replica (`replica_program`)
  under a host loop of its own, which reads each call's metrics and saves at the end."""

  Options = AnakinOptions
  environment_kind = "jax"

  def __init__(self, agent, env_factory, topology, options, plan, seed):
    self.agent, self.plan, self.seed, self.topology = agent, plan, seed, topology
    self.env = env_factory()
    init, call = Anakin(agent, env_factory, topology, options, plan, seed).replica_program(
        agent)
    self._init, self._call = jax.jit(init), jax.jit(call)

  def checkpoints(self):
    return True

  def train(self, logger, checkpointer=None, evaluation=None):
    state = self._init(*jax.random.split(jax.random.PRNGKey(self.seed)))
    first = 0
    if checkpointer is not None and checkpointer.latest() is not None:
      state, first = checkpointer.restore(state)
    for call in range(first, self.plan.num_rounds):
      state, (metrics, episodes) = self._call(state)
      window = Window()
      window.add_steps(self.plan.env_steps_per_round, np.asarray(episodes)[0])
      window.add_metrics({k: np.asarray(v)[0] for k, v in metrics.items()})
      logger.write(window.record(env_steps=(call + 1) * self.plan.env_steps_per_round,
                                 updates=(call + 1) * self.plan.updates_per_round))
    if checkpointer is not None:
      checkpointer.save(self.plan.num_rounds, state, len(logger.records),
                        env_steps=self.plan.total_env_steps)
    return state

  def final_nets(self, state, run=0):
    if run:
      raise ConfigError(f"--run={run}: a {type(self).__name__} run is one run (run 0).")
    return jax.tree.map(lambda x: np.asarray(x[0]), state.agent.nets)  # the replica axis

  def saved_nets(self, checkpointer, run=0):
    like = self._init(*jax.random.split(jax.random.PRNGKey(self.seed)))
    return self.final_nets(checkpointer.restore(like)[0], run)

  def environment_to_watch(self, seed=0):
    return self.env


@registry.runtimes.register("test_bare")
class Bare(UserLoop):
  """Trains, and says nothing of what it trained: the interface's defaults."""
  checkpoints = Runtime.checkpoints
  final_nets = Runtime.final_nets
  saved_nets = Runtime.saved_nets
  environment_to_watch = Runtime.environment_to_watch


@registry.runtimes.register("test_before_0_17")
class BeforeTrain(UserLoop):
  """A runtime of before 0.17: its training is `run`, which takes a checkpointer."""
  train = Runtime.train
  checkpoints = Runtime.checkpoints

  def run(self, logger, checkpointer=None):
    return UserLoop.train(self, logger, checkpointer)


def _config(runtime_name, **extra):
  c = catch_anakin()
  c.runtime.name = runtime_name
  c.topology.num_devices = 1
  c.runtime.num_envs_per_device, c.runtime.rollout_length = 8, 16
  c.runtime.updates_per_call = 2
  c.total_env_steps = 8 * 16 * 2 * 3  # three calls
  c.update(extra)
  return c


@pytest.mark.slow
def test_a_users_runtime_gets_videos_and_play_by_implementing_the_interface(tmp_path):
  summary = launch.launch(_config("test_user_loop", eval_video=1), str(tmp_path), stream=None)
  assert summary["env_steps"] == 768
  assert len(glob.glob(str(tmp_path / "videos" / "final.*"))) == 1  # eval_video
  path = play.play(str(tmp_path), episodes=1, fmt="gif")  # from the checkpoint it saved
  frames = video.require_imageio().imread(path)
  assert frames.ndim == 4 and frames.shape[1:] == (160, 80, 3)
  with pytest.raises(ConfigError, match=r"--run=1"):
    play.play(str(tmp_path), run=1)


def test_what_a_runtime_does_not_implement_is_refused_naming_it():
  with pytest.raises(ConfigError, match=r"eval_video.*runtime Bare has no environment to "
                                        r"watch.*Runtime.environment_to_watch"):
    builder.build(_config("test_bare", eval_video=1))
  bare = builder.build(_config("test_bare")).runtime
  assert not bare.checkpoints() and not bare.evaluates()
  for call, method in ((lambda: bare.final_nets(None), "final_nets"),
                       (lambda: bare.saved_nets(None), "saved_nets")):
    with pytest.raises(NotSupported, match=rf"runtime Bare .*Runtime\.{method} is not"):
      call()


def test_a_runtime_written_before_train_still_trains_and_checkpoints(tmp_path):
  experiment = builder.build(_config("test_before_0_17"))
  assert experiment.runtime.checkpoints()  # Its `run` takes a checkpointer.
  deprecation._warned.discard("Runtime.run")  # pylint: disable=protected-access
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    summary = experiment.train(workdir=str(tmp_path), stream=None)
  assert len(summary["records"]) == 3
  assert glob.glob(str(tmp_path / "checkpoints" / "*"))
  assert any("Runtime.run` was renamed `Runtime.train`" in str(w.message) for w in caught
             if issubclass(w.category, DeprecationWarning))
