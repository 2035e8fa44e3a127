"""PPO + Random Network Distillation (Burda et al. 2019, arXiv:1810.12894) on bsuite's
DeepSea, composed on podracer's PPO without copying it (docs/components.md, "Composing
on an existing agent"): an environment, a network of three parts, and an agent that
subclasses PPO with a second objective, an intrinsic reward and statistics of its own.
"""

from typing import Any, Callable, NamedTuple, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from agents.ppo.agent import PPO
from podracer import registry
from podracer.components.environments import Environment, restart, transition
from podracer.components.networks import MLP, mlp_actor_critic
from podracer.learning import Objective
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec, replica_mean


@registry.environments.register("deep_sea")
class DeepSea(Environment):
  """bsuite's DeepSea (Osband et al.): a `size` x `size` grid, one row down a step from
  the top-left; one action moves right (at a cost of 0.01 / size), the other left,
  which is which drawn per cell from `seed`. Going right all the way pays 1 at the
  bottom-right: 0.99, found by chance once in 2^size episodes."""

  def __init__(self, size: int = 10, seed: int = 0):
    self.size = size
    self.right = jnp.asarray(np.random.default_rng(seed).integers(0, 2, (size, size)))

  def reset(self, key):
    del key
    return (jnp.int32(0), jnp.int32(0)), restart(self._observe(0, 0))

  def step(self, state, action):
    row, column = state
    right = action == self.right[row, column]
    reward = jnp.where(right & (column == self.size - 1), 1.0, 0.0)
    reward -= jnp.where(right, 0.01 / self.size, 0.0)
    column = jnp.clip(column + jnp.where(right, 1, -1), 0, self.size - 1)
    return (row + 1, column), transition(self._observe(row, column), reward,
                                         terminated=row + 1 >= self.size, truncated=False)

  def spec(self):
    return EnvSpec(ArraySpec((self.size, self.size), np.float32), DiscreteSpec(2))

  def _observe(self, row, column):
    return jnp.zeros((self.size, self.size), jnp.float32).at[row, column].set(1.0)


class RNDNetwork(NamedTuple):
  """`apply(nets, obs)` is PPO's actor-critic on nets["policy"]; `novelty(nets, obs)`
  [B] the predictor's squared error against the fixed random target."""
  init: Callable[..., Any]
  apply: Callable[..., Any]
  novelty: Callable[..., Any]


@registry.networks.register("rnd_actor_critic")
def rnd_actor_critic(spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64),
                     activation: str = "tanh", embedding_size: int = 64) -> RNDNetwork:
  policy = mlp_actor_critic(spec, hidden_sizes, activation)
  embed = hk.without_apply_rng(hk.transform(
      lambda obs: hk.Linear(embedding_size)(MLP((128,), "relu")(obs))))

  def init(key, observation):
    keys = jax.random.split(key, 3)
    return dict(policy=policy.init(keys[0], observation),
                predictor=embed.init(keys[1], observation),
                target=embed.init(keys[2], observation))

  def novelty(nets, observation):
    target = jax.lax.stop_gradient(embed.apply(nets["target"], observation))
    return jnp.mean(jnp.square(embed.apply(nets["predictor"], observation) - target), -1)

  return RNDNetwork(init, lambda nets, obs: policy.apply(nets["policy"], obs), novelty)


class Moments(NamedTuple):
  """Running count, mean and variance (Chan et al.'s parallel merge), as learner state."""
  count: jax.Array
  mean: jax.Array
  var: jax.Array


def merged(moments: Moments, x: jax.Array) -> Moments:
  """`moments` with the batch `x` (the same on every replica: its moments are averaged)."""
  n = jnp.float32(x.size)
  mean = replica_mean(jnp.mean(x))
  var = replica_mean(jnp.mean(jnp.square(x - mean)))
  total = moments.count + n
  delta = mean - moments.mean
  return Moments(total, moments.mean + delta * n / total,
                 (moments.var * moments.count + var * n
                  + jnp.square(delta) * moments.count * n / total) / total)


@registry.agents.register("ppo_rnd")
class PPORND(PPO):
  """PPO learning from extrinsic + `intrinsic_coef` x novelty / its running std; the
  predictor is a second objective (its own optimizer, the `rnd_optimizer` section) that
  owns only its parameters; the target stays fixed (no objective owns it)."""

  def __init__(self, spec, network, loss, optimizer, rnd_optimizer,
               intrinsic_coef: float = 1.0, **ppo):
    super().__init__(spec, network, loss, optimizer, **ppo)
    self.intrinsic_coef = intrinsic_coef
    self.add_objective(Objective("rnd", self._rnd_loss, rnd_optimizer, owns=("predictor",)),
                       others_own=("policy",))

  def init_opt(self, nets):
    return dict(super().init_opt(nets), rnd_novelty=Moments(*jnp.array([1e-4, 0.0, 1.0])))

  def shape_trajectory(self, nets, opt, trajectory):
    observation = trajectory.timestep.observation  # [T+1, B, ...]: reward t came with t
    novelty = self.network.novelty(nets, observation.reshape(-1, *observation.shape[2:]))
    moments = merged(opt["rnd_novelty"], novelty)
    intrinsic = novelty.reshape(observation.shape[:2]) / jnp.sqrt(moments.var + 1e-8)
    timestep = trajectory.timestep._replace(
        reward=trajectory.timestep.reward + self.intrinsic_coef * intrinsic)
    return (trajectory._replace(timestep=timestep), dict(opt, rnd_novelty=moments),
            dict(intrinsic_reward=jnp.mean(intrinsic)))

  def _rnd_loss(self, nets, minibatch, key):
    del key  # Every row, not only `minibatch.mask`'s: terminal observations are novel too.
    novelty = jnp.mean(self.network.novelty(nets, minibatch.observation))
    return novelty, dict(novelty=novelty)
