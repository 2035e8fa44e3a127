"""An Equinox actor-critic (PureJaxRL's shape: 2 x 64 tanh torsos, orthogonal
initialisation at sqrt(2), 0.01 for the policy and 1 for the value), trained by PPO:

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin \
      --import=examples/networks/equinox_actor_critic.py \
      --config.network=equinox_actor_critic --workdir=runs/equinox

As Equinox's own layers, it is called on one observation; podracer vmaps it over the
batch. `obs_dim` and `action_dim` come from the environment, `key` from the run.
"""

import distrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components import networks


def _orthogonal(layer: eqx.nn.Linear, scale: float, key: jax.Array) -> eqx.nn.Linear:
  """`layer` with an orthogonal weight at `scale` and a zero bias (CleanRL's)."""
  weight = jax.nn.initializers.orthogonal(scale)(key, layer.weight.shape)
  layer = eqx.tree_at(lambda l: l.weight, layer, weight)
  return eqx.tree_at(lambda l: l.bias, layer, jnp.zeros_like(layer.bias))


def _mlp(sizes, scales, key):
  keys = jax.random.split(key, 2 * len(scales))
  return [_orthogonal(eqx.nn.Linear(i, o, key=k1), s, k2)
          for i, o, s, k1, k2 in zip(sizes[:-1], sizes[1:], scales, keys[::2], keys[1::2])]


class ActorCritic(eqx.Module):
  actor: list
  critic: list

  def __init__(self, obs_dim: int, action_dim: int, hidden: int = 64, *, key: jax.Array):
    actor_key, critic_key = jax.random.split(key)
    root2 = float(np.sqrt(2))
    self.actor = _mlp((obs_dim, hidden, hidden, action_dim), (root2, root2, 0.01), actor_key)
    self.critic = _mlp((obs_dim, hidden, hidden, 1), (root2, root2, 1.0), critic_key)

  def __call__(self, x):
    actor, critic = x, x
    for layer in self.actor[:-1]:
      actor = jnp.tanh(layer(actor))
    for layer in self.critic[:-1]:
      critic = jnp.tanh(layer(critic))
    return distrax.Categorical(logits=self.actor[-1](actor)), self.critic[-1](critic)[0]


registry.networks.register("equinox_actor_critic", networks.module(ActorCritic))
