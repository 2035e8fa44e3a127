"""A minimal single-file jitted PPO: the ceiling `benchmarks/anakin.py` measures podracer against.

Hand-fused in the PureJaxRL style, with the same math as podracer's PPO agent and loss
(agents/ppo, components/losses/actor_critic.py): the same CartPole environment and
network, GAE(0.95) with truncation bootstrapping, per-minibatch advantage
normalisation, clipped policy and value losses, entropy bonus, Adam with global-norm
clipping, 4 epochs x 4 minibatches over a fresh permutation each epoch. Nothing else: no
metrics beyond the loss, no episode statistics kept across calls, no replicas.

  python benchmarks/ppo_reference.py --num_envs=4    # prints its own steps/s
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from podracer.components.environments.base import VectorEnv  # noqa: E402
from podracer.components.environments.cartpole import CartPole  # noqa: E402
from podracer.components.networks import mlp_actor_critic  # noqa: E402
from podracer.types import StepType  # noqa: E402


def make(num_envs: int, rollout_length: int, updates: int, *, seed: int = 0,
         num_epochs: int = 4, num_minibatches: int = 4, discount: float = 0.99,
         gae_lambda: float = 0.95, clip_epsilon: float = 0.2, value_coef: float = 0.5,
         entropy_coef: float = 0.01, learning_rate: float = 2.5e-4, anneal: bool = True):
  """(init_state, train): `train(state)` runs `updates` PPO updates in one jitted call."""
  env = VectorEnv(CartPole(), num_envs)
  network = mlp_actor_critic(env.spec(), (64, 64), "tanh")
  num_transitions = num_envs * rollout_length
  if anneal:  # Linearly to 0 over the optimizer steps of `updates` updates, as podracer's.
    learning_rate = optax.linear_schedule(learning_rate, 0.0,
                                          updates * num_epochs * num_minibatches)
  optimizer = optax.chain(optax.clip_by_global_norm(0.5),
                          optax.adam(learning_rate, eps=1e-5))

  def policy(params, observation, key):
    out = network.apply(params, observation)
    action = jax.random.categorical(key, out.logits)
    log_prob = jnp.take_along_axis(jax.nn.log_softmax(out.logits), action[:, None], 1)[:, 0]
    return action, log_prob, out.value

  def env_step(carry, key):
    params, env_state, timestep = carry
    action, log_prob, value = policy(params, timestep.observation, key)
    env_state, next_timestep, _ = env.step(env_state, action)
    transition = (timestep.observation, action, log_prob, value, next_timestep.reward,
                  next_timestep.discount, next_timestep.step_type == StepType.LAST,
                  timestep.step_type == StepType.LAST)
    return (params, env_state, next_timestep), transition

  def advantages(values, last_value, reward, env_discount, next_last, mask):
    # GAE backwards; lambda is cut where the next step is LAST, truncations bootstrap.
    def back(gae, t):
      value, next_value, r, d, nl, m = t
      delta = r * m + discount * d * m * next_value - value
      gae = (delta + discount * d * m * gae_lambda * (1.0 - nl) * gae) * m
      return gae, gae
    next_values = jnp.concatenate([values[1:], last_value[None]], 0)
    _, adv = jax.lax.scan(back, jnp.zeros_like(last_value),
                          (values, next_values, reward, env_discount, next_last, mask),
                          reverse=True)
    return adv, adv + values

  def loss_fn(params, batch):
    observation, action, old_log_prob, old_value, advantage, target, mask = batch
    masked_mean = lambda x: jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    mean = masked_mean(advantage)
    advantage = (advantage - mean) / (jnp.sqrt(masked_mean((advantage - mean) ** 2)) + 1e-8)
    out = network.apply(params, observation)
    log_probs = jax.nn.log_softmax(out.logits)
    ratio = jnp.exp(jnp.take_along_axis(log_probs, action[:, None], 1)[:, 0] - old_log_prob)
    policy_loss = -masked_mean(jnp.minimum(
        ratio * advantage,
        jnp.clip(ratio, 1 - clip_epsilon, 1 + clip_epsilon) * advantage))
    clipped = old_value + jnp.clip(out.value - old_value, -clip_epsilon, clip_epsilon)
    value_loss = 0.5 * masked_mean(jnp.maximum((out.value - target) ** 2,
                                               (clipped - target) ** 2))
    entropy = masked_mean(-jnp.sum(jnp.exp(log_probs) * log_probs, -1))
    return policy_loss + value_coef * value_loss - entropy_coef * entropy

  def minibatch_step(carry, batch):
    params, opt_state = carry
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates_, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates_), opt_state), loss

  def update(state, _):
    params, opt_state, env_state, timestep, key = state
    key, rollout_key, last_key, epoch_key = jax.random.split(key, 4)
    (_, env_state, timestep), (obs, action, log_prob, value, reward, env_discount,
                               next_last, last) = jax.lax.scan(
        env_step, (params, env_state, timestep),
        jax.random.split(rollout_key, rollout_length))
    _, _, last_value = policy(params, timestep.observation, last_key)
    mask = 1.0 - last.astype(jnp.float32)
    advantage, target = advantages(value, last_value, reward, env_discount,
                                   next_last.astype(jnp.float32), mask)
    batch = jax.tree.map(lambda x: x.reshape(num_transitions, *x.shape[2:]),
                         (obs, action, log_prob, value, advantage, target, mask))

    def epoch(carry, k):
      order = jax.random.permutation(k, num_transitions)
      minibatches = jax.tree.map(
          lambda x: x[order].reshape(num_minibatches, -1, *x.shape[1:]), batch)
      return jax.lax.scan(minibatch_step, carry, minibatches)

    (params, opt_state), losses = jax.lax.scan(
        epoch, (params, opt_state), jax.random.split(epoch_key, num_epochs))
    return (params, opt_state, env_state, timestep, key), losses.mean()

  @jax.jit
  def train(state):
    return jax.lax.scan(update, state, None, length=updates)

  def init_state():
    key = jax.random.PRNGKey(seed)
    net_key, env_key, key = jax.random.split(key, 3)
    env_state, timestep = env.reset(env_key)
    params = network.init(net_key, timestep.observation)
    return params, optimizer.init(params), env_state, timestep, key

  return init_state, train


if __name__ == "__main__":
  num_envs = int(next((a.split("=")[1] for a in sys.argv if a.startswith("--num_envs=")), 4))
  rollout, updates = 128, max(1, 131072 // (num_envs * 128))
  init_state, train = make(num_envs, rollout, updates)
  state = jax.block_until_ready(train(init_state())[0])
  start = time.perf_counter()
  state, losses = jax.block_until_ready(train(state))
  print(f"{num_envs} envs: {num_envs * rollout * updates / (time.perf_counter() - start):,.0f}"
        f" env steps/s, last loss {float(losses[-1]):.3f}")
