"""A user's own runtime gets checkpoints, `eval_video` and `podracer.play` by implementing
the Runtime interface (podracer/runtime.py), asked by method; what a runtime does not
implement is refused in one paragraph naming the runtime and the method; one written to
the 0.21 interface is asked what it supports from its `train`'s parameters; a runtime
written before 0.17 (its `run`) still trains, with a DeprecationWarning."""

import glob
import warnings

import jax
import numpy as np
import pytest

from podracer import builder, deprecation, launch, play, registry
from podracer.errors import ConfigError
from podracer.components.environments.base import VectorEnv
from podracer.lifecycle import evaluation as evaluation_lib, video
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
    steps = self.plan.env_steps_per_round
    for call in range(first, self.plan.num_rounds):
      state, (metrics, episodes) = self._call(state)
      window = Window()
      window.add_steps(steps, np.asarray(episodes)[0])
      window.add_metrics({k: np.asarray(v)[0] for k, v in metrics.items()})
      record = window.record(env_steps=(call + 1) * steps,
                             updates=(call + 1) * self.plan.updates_per_round)
      if evaluation is not None and evaluation.due(call * steps, (call + 1) * steps):
        record["eval_return"] = self._evaluate(evaluation, state, (call + 1) * steps)
      logger.write(record)
    if checkpointer is not None:
      checkpointer.save(self.plan.num_rounds, state, len(logger.records),
                        env_steps=self.plan.total_env_steps)
    return state

  def _evaluate(self, evaluation, state, env_steps):
    env = VectorEnv(self.env.evaluation_env(), evaluation.episodes)
    return float(evaluation_lib.jax_return(self.agent, env, self.final_nets(state),
                                           evaluation.key(env_steps)))

  def final_nets(self, state, run=0):
    if run:
      raise ConfigError(f"--run={run}: a {type(self).__name__} run is one run (run 0).")
    return jax.tree.map(lambda x: np.asarray(x[0]), state.agent.nets)  # the replica axis

  def saved_nets(self, checkpointer, run=0):
    like = self._init(*jax.random.split(jax.random.PRNGKey(self.seed)))
    return self.final_nets(checkpointer.restore(like)[0], run)

  def environment_to_watch(self, seed=0):
    return self.env


@registry.runtimes.register("test_0_21")
class Today(UserLoop):
  """A runtime written to the 0.21 interface only: its `train` takes a checkpointer and
  an evaluation, and it declares nothing more (the interface's `checkpoints` and
  `evaluates`)."""
  checkpoints = Runtime.checkpoints


@registry.runtimes.register("test_bare")
class Bare(UserLoop):
  """Trains (its `train` takes neither a checkpointer nor an evaluation), and says
  nothing of what it trained: the interface's defaults."""
  checkpoints = Runtime.checkpoints
  final_nets = Runtime.final_nets
  saved_nets = Runtime.saved_nets
  environment_to_watch = Runtime.environment_to_watch

  def train(self, logger):  # pylint: disable=arguments-differ
    return UserLoop.train(self, logger)


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


def test_a_runtime_written_to_the_0_21_interface_gets_checkpoints_and_evaluation(tmp_path):
  """Its `train` takes both, and it declares nothing else: it is asked from `train`."""
  experiment = builder.build(_config("test_0_21", eval_interval=512, eval_episodes=2))
  assert experiment.runtime.checkpoints() and experiment.runtime.evaluates()
  summary = experiment.train(workdir=str(tmp_path), stream=None)
  assert [("eval_return" in r) for r in summary["records"]] == [False, True, False]
  assert np.isfinite(summary["records"][1]["eval_return"])
  assert glob.glob(str(tmp_path / "checkpoints" / "*"))
  again = builder.build(_config("test_0_21", total_env_steps=8 * 16 * 2 * 4))
  assert len(again.train(workdir=str(tmp_path), stream=None)["records"]) == 4  # resumed


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
