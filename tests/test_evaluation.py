"""Evaluation (podracer/lifecycle/evaluation.py): the evaluation policy's return is logged as
`eval_return` under both runtimes, and a greedy policy scores what it should."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.ppo import config as ppo_config
from agents.ppo.agent import PPO
from agents.r2d2 import config as r2d2_config
from podracer.kits.q_learning import annealed_epsilon
from podracer import builder
from podracer.lifecycle import evaluation
from podracer.agent import Agent
from podracer.components.environments import Environment, restart, transition
from podracer.components.environments.base import VectorEnv
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec


class Alternate(Environment):
  """Shows +1, -1, +1, ... for `horizon` steps; reward 1 for action 1 on +1, 0 on -1."""

  def __init__(self, horizon: int):
    self.horizon = horizon

  def reset(self, key):
    del key
    return jnp.int32(0), restart(jnp.ones((1,), jnp.float32))

  def step(self, t, action):
    reward = jnp.float32(action == (t + 1) % 2)
    sign = jnp.where((t + 1) % 2 == 0, 1.0, -1.0)[None].astype(jnp.float32)
    return t + 1, transition(sign, reward, terminated=t + 1 >= self.horizon,
                             truncated=False)

  def spec(self):
    return EnvSpec(ArraySpec((1,), np.float32), DiscreteSpec(2))


class Outputs(NamedTuple):
  logits: jax.Array
  value: jax.Array


class SignNetwork:
  """Logits (-w s, w s) for the sign s: the right action is always the likelier one."""

  def apply(self, w, observation):
    return Outputs(jnp.concatenate([-w * observation, w * observation], -1),
                   jnp.zeros(observation.shape[:1]))


@pytest.mark.reverb_lane
def test_the_greedy_policy_of_a_fixed_network_scores_every_step():
  env = Alternate(horizon=4)
  agent = PPO(env.spec(), SignNetwork(), loss=None, optimizer=optax.sgd(0.0))
  play = jax.jit(lambda policy_agent, w, key: evaluation.jax_return(
      policy_agent, VectorEnv(env, 8), w, key), static_argnums=0)
  w = jnp.float32(0.5)  # The sampling policy is right with probability 0.73 a step.
  assert float(play(agent, w, jax.random.PRNGKey(0))) == 4.0  # argmax: always right
  sampling = Agent.eval_act.__get__(agent)  # The default: the training policy, `act`.

  class Sampling(PPO):
    eval_act = lambda self, *args: sampling(*args)  # noqa: E731

  sampled = Sampling(env.spec(), SignNetwork(), loss=None, optimizer=optax.sgd(0.0))
  assert float(play(sampled, w, jax.random.PRNGKey(0))) < 4.0


def test_r2d2_evaluates_with_its_small_epsilon_not_its_actors_schedule():
  agent = builder.build(r2d2_config.catch_anakin()).agent
  actor = agent.init_eval_actor(jax.random.PRNGKey(0), 3)
  epsilon = annealed_epsilon(actor.epsilon, actor.steps, agent.epsilon_anneal_steps)
  np.testing.assert_allclose(epsilon, [agent.eval_epsilon] * 3)
  assert agent.eval_epsilon == pytest.approx(0.001)


def small(runtime):
  if runtime == "anakin":  # 128 env steps a call: an evaluation every second call.
    config = ppo_config.cartpole_anakin()
    config.topology.num_devices = 1
    config.runtime.update(dict(rollout_length=16, updates_per_call=2))
    config.update(dict(total_env_steps=1024, eval_interval=256))
  else:  # 768 env steps a trajectory; a record after every update.
    config = ppo_config.cartpole_sebulba()
    config.runtime.log_interval = 0.0
    config.update(dict(total_env_steps=6144, eval_interval=2000))
  config.eval_episodes = 3
  return config


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["anakin", "sebulba"])
def test_eval_return_is_logged_beside_the_training_return(runtime):
  config = small(runtime)
  experiment = builder.build(config)
  records = experiment.train(stream=None)["records"]
  evaluated = [r for r in records if "eval_return" in r]
  if runtime == "anakin":
    assert [r["env_steps"] for r in evaluated] == [256, 512, 768, 1024]
  else:  # Records follow updates, which follow the actors' batches.
    assert 2 <= len(evaluated) <= 3, [r["env_steps"] for r in records]
  # CartPole pays 1 a step, and no episode ends before 8 steps.
  assert all(8 <= r["eval_return"] <= 500 for r in evaluated), evaluated
  config.eval_interval = 0  # Off: the runtime is not handed an evaluation.
  assert evaluation.for_run(config, experiment.runtime) is None


def test_eval_return_is_on_the_progress_line_and_in_the_learning_curve(tmp_path):
  import matplotlib.image

  from podracer.logs.metrics import MetricsLogger, plot_learning_curve
  logger = MetricsLogger(stream=None)
  records = [dict(env_steps=i * 1000, sps=100.0, episode_return=float(i),
                  **({"eval_return": 2.0 * i} if i % 2 else {})) for i in range(1, 9)]
  for record in records:
    logger.write(record)
  assert "eval_return 2.000" in logger.format(logger.records[0])
  assert "eval_return" not in logger.format(logger.records[1])

  def orange_pixels(records):
    path = plot_learning_curve(records, str(tmp_path / "curve.png"))
    image = matplotlib.image.imread(path)[..., :3]
    orange = np.array([1.0, 0.498, 0.055])  # matplotlib's tab:orange
    return int(np.sum(np.all(np.abs(image - orange) < 0.05, axis=-1)))

  assert orange_pixels(logger.records) > 100  # the evaluation curve is drawn
  assert orange_pixels([{k: v for k, v in r.items() if k != "eval_return"}
                        for r in logger.records]) == 0


def test_a_progress_metric_no_record_has_is_said_once():
  import io

  from podracer.logs.metrics import MetricsLogger
  stream = io.StringIO()
  logger = MetricsLogger(stream=stream, progress_metrics=("loss", "nope"), print_interval=0)
  logger.write(dict(env_steps=1, sps=1.0))  # No learner metrics yet: nothing to say.
  logger.write(dict(env_steps=2, sps=1.0, loss=0.5))
  logger.write(dict(env_steps=3, sps=1.0, loss=0.4))
  warnings = [l for l in stream.getvalue().splitlines() if l.startswith("Warning")]
  assert warnings == ["Warning: log.progress_metrics names 'nope', which the records do not "
                      "have; they have: env_steps, loss, sps, wall_time."]
  quiet = io.StringIO()
  MetricsLogger(stream=quiet).write(dict(env_steps=1, loss=0.5))  # The defaults: silent.
  assert "Warning" not in quiet.getvalue()
