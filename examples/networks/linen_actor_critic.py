"""A Flax linen actor-critic as PureJaxRL writes it, trained by PPO's own configs:

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin \
      --import=examples/networks/linen_actor_critic.py \
      --config.network=linen_actor_critic --workdir=runs/linen

The module is PureJaxRL's (ppo.py's ActorCritic); the last line is the only podracer
code: `action_dim` comes from the environment.
"""

from typing import Sequence

import distrax
import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax.linen.initializers import constant, orthogonal

from podracer import registry
from podracer.components import networks


class ActorCritic(nn.Module):
  action_dim: Sequence[int]
  activation: str = "tanh"

  @nn.compact
  def __call__(self, x):
    activation = nn.relu if self.activation == "relu" else nn.tanh
    actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x)
    actor_mean = activation(actor_mean)
    actor_mean = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)),
                          bias_init=constant(0.0))(actor_mean)
    actor_mean = activation(actor_mean)
    actor_mean = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01),
                          bias_init=constant(0.0))(actor_mean)
    pi = distrax.Categorical(logits=actor_mean)

    critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x)
    critic = activation(critic)
    critic = nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(critic)
    critic = activation(critic)
    critic = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(critic)
    return pi, jnp.squeeze(critic, axis=-1)


registry.networks.register("linen_actor_critic", networks.module(ActorCritic))
