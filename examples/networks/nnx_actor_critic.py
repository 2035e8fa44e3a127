"""A Flax NNX actor-critic (PureJaxRL's shape: 2 x 64 tanh torsos, orthogonal
initialisation at sqrt(2), 0.01 for the policy and 1 for the value), trained by PPO:

  python -m podracer.launch --config=agents/ppo/config.py:cartpole_anakin \
      --import=examples/networks/nnx_actor_critic.py \
      --config.network=nnx_actor_critic --workdir=runs/nnx

`obs_dim` and `action_dim` come from the environment; `hidden` is a config key
(`--config.network.hidden=128`); `rngs` is made from the run's key.
"""

import distrax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from podracer import registry
from podracer.components import networks


class ActorCritic(nnx.Module):

  def __init__(self, obs_dim: int, action_dim: int, hidden: int = 64, *, rngs: nnx.Rngs):
    def dense(size_in, size_out, scale):
      return nnx.Linear(size_in, size_out, kernel_init=nnx.initializers.orthogonal(scale),
                        bias_init=nnx.initializers.zeros, rngs=rngs)
    self.actor = nnx.List([dense(obs_dim, hidden, np.sqrt(2)),
                           dense(hidden, hidden, np.sqrt(2))])
    self.policy = dense(hidden, action_dim, 0.01)
    self.critic = nnx.List([dense(obs_dim, hidden, np.sqrt(2)),
                            dense(hidden, hidden, np.sqrt(2))])
    self.value = dense(hidden, 1, 1.0)

  def __call__(self, x):
    actor, critic = x, x
    for layer in self.actor:
      actor = jnp.tanh(layer(actor))
    for layer in self.critic:
      critic = jnp.tanh(layer(critic))
    return distrax.Categorical(logits=self.policy(actor)), self.value(critic)[..., 0]


registry.networks.register("nnx_actor_critic", networks.module(ActorCritic))
