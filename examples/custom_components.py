"""A new environment and a new loss, registered in a config file, trained by PPO's agent.

  python -m podracer.launch --config=examples/custom_components.py --workdir=runs/custom
"""

import jax
import jax.numpy as jnp
import numpy as np

from agents.ppo.config import cartpole_anakin
from podracer import registry
from podracer.components.environments import Environment, restart, transition
from podracer.components.losses import categorical_entropy, categorical_log_prob
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec


@registry.environments.register("match_sign")
class MatchSign(Environment):
  """Each step shows a random sign; action 1 says "+", 0 says "-". Reward 1 if right."""

  def __init__(self, horizon: int = 5):
    self.horizon = horizon

  def reset(self, key):
    state = (key, jnp.int32(0))
    return state, restart(self._sign(key))

  def step(self, state, action):
    key, t = state
    reward = jnp.where((action == 1) == (self._sign(key)[0] > 0), 1.0, 0.0)
    key = jax.random.split(key)[0]
    return (key, t + 1), transition(self._sign(key), reward,
                                    terminated=t + 1 >= self.horizon, truncated=False)

  def spec(self):
    return EnvSpec(ArraySpec((1,), np.float32), DiscreteSpec(2))

  def _sign(self, key):
    return jnp.where(jax.random.bernoulli(key), 1.0, -1.0)[None].astype(jnp.float32)


@registry.losses.register("a2c")
def a2c_loss(value_coef: float = 0.5, entropy_coef: float = 0.01):
  """Advantage actor-critic: -log pi(a|s) A + c_v (V - G)^2 / 2 - c_H H(pi)."""

  def loss(logits, value, batch):
    mean = lambda x: jnp.sum(x * batch.mask) / jnp.maximum(jnp.sum(batch.mask), 1.0)
    pg_loss = -mean(categorical_log_prob(logits, batch.action) * batch.advantage)
    value_loss = 0.5 * mean(jnp.square(value - batch.value_target))
    entropy = mean(categorical_entropy(logits))
    total = pg_loss + value_coef * value_loss - entropy_coef * entropy
    return total, dict(pg_loss=pg_loss, value_loss=value_loss, entropy=entropy)

  return loss


def get_config():
  config = cartpole_anakin()  # Reuse PPO's agent, network and runtime settings.
  config.env = dict(name="match_sign", horizon=5)
  config.loss = dict(name="a2c", value_coef=0.5, entropy_coef=0.01)
  config.total_env_steps = 40_000
  config.topology.num_devices = 1
  return config
