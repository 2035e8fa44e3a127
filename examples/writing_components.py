"""One minimal component of each kind, as docs/components.md's "Writing components" shows them, trained
together (tests/test_writing_components.py runs this file and checks each contract):

  python -m podracer.launch --config=examples/writing_components.py --workdir=runs/coin
"""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from podracer import registry
from podracer.config import presets
from podracer.agent import Agent
from podracer.components.environments import Environment, restart, transition
from podracer.components.losses import categorical_log_prob, policy_gradient_batch
from podracer.components.networks.heads import PolicyValueOutput
from podracer.contracts import actor_critic_outputs
from podracer.experience import Sample
from podracer.learning import Objective, gradient_step
from podracer.logs import Logger
from podracer.types import ActorOutput, ArraySpec, DiscreteSpec, EnvSpec


# -- environment ---------------------------------------------------------------------
@registry.environments.register("coin")
class Coin(Environment):
  """A coin shows heads or tails (one-hot, [2]); naming it (action 0 or 1) earns 1."""

  def __init__(self, flips: int = 4):
    self.flips = flips

  def reset(self, key):
    return (key, jnp.int32(0)), restart(self._face(key))

  def step(self, state, action):
    key, flip = state
    reward = (action == jnp.argmax(self._face(key))).astype(jnp.float32)
    key, _ = jax.random.split(key)
    done = flip + 1 >= self.flips
    return (key, flip + 1), transition(self._face(key), reward, terminated=done,
                                       truncated=False)

  def spec(self):
    return EnvSpec(observation=ArraySpec((2,), np.float32), action=DiscreteSpec(2))

  def _face(self, key):
    return jax.nn.one_hot(jax.random.bernoulli(key).astype(jnp.int32), 2)


# -- network -------------------------------------------------------------------------
@registry.networks.register("tiny_actor_critic")
def tiny_actor_critic(spec, hidden_size: int = 32):
  """One hidden layer; logits [B, num_actions] and value [B], as actor-critics read."""

  def forward(observation):
    x = jax.nn.relu(hk.Linear(hidden_size)(observation))
    return PolicyValueOutput(logits=hk.Linear(spec.action.num_values)(x),
                             value=hk.Linear(1)(x)[:, 0])

  return hk.without_apply_rng(hk.transform(forward))


# -- loss ----------------------------------------------------------------------------
@registry.losses.register("reinforce_baseline")
def reinforce_baseline(value_coef: float = 0.5):
  """-log pi(a|s) A + c_v (V - G)^2 / 2, over the real transitions (`batch.mask`)."""

  def loss(logits, value, batch):
    weight = batch.mask / jnp.maximum(jnp.sum(batch.mask), 1.0)
    policy_loss = -jnp.sum(categorical_log_prob(logits, batch.action) * batch.advantage
                           * weight)
    value_loss = 0.5 * jnp.sum(jnp.square(value - batch.value_target) * weight)
    return (policy_loss + value_coef * value_loss,
            dict(policy_loss=policy_loss, value_loss=value_loss))

  return loss


# -- optimizer -----------------------------------------------------------------------
@registry.optimizers.register("sgd_to_zero")
def sgd_to_zero(total_steps: int, learning_rate: float = 0.1):
  """SGD whose step size decays linearly to 0 over the run (`total_steps`: the builder's)."""
  return optax.sgd(optax.linear_schedule(learning_rate, 0.0, total_steps))


# -- replay --------------------------------------------------------------------------
@registry.replay.register("recent")
class Recent:
  """The last `max_size` items, drawn uniformly: a device replay with no priorities."""
  kind = "device"

  def __init__(self, batch_size: int, max_size: int):
    self.batch_size, self.max_size = batch_size, max_size

  def init(self, item_spec):
    slots = lambda s: jnp.zeros((self.max_size, *s.shape), s.dtype)
    return dict(items=jax.tree.map(slots, item_spec), inserted=jnp.zeros((), jnp.int32))

  def add(self, state, items, priorities=None):
    count = jax.tree.leaves(items)[0].shape[0]
    index = (state["inserted"] + jnp.arange(count)) % self.max_size
    items = jax.tree.map(lambda old, new: old.at[index].set(new), state["items"], items)
    return dict(items=items, inserted=state["inserted"] + count)

  def can_sample(self, state):
    return state["inserted"] >= self.batch_size

  def sample(self, state, key):
    size = jnp.minimum(state["inserted"], self.max_size)
    index = jax.random.randint(key, (self.batch_size,), 0, size)
    items = jax.tree.map(lambda x: x[index], state["items"])
    uniform = jnp.full((self.batch_size,), 1.0) / size
    return Sample(items, index, uniform, size, jnp.ones(self.batch_size))

  def update_priorities(self, state, sample, priorities):
    return state  # Uniform: nothing to update.


# -- agent ---------------------------------------------------------------------------
@registry.agents.register("actor_critic")
class ActorCritic(Agent):
  """One gradient step of the loss component per trajectory (advantage actor-critic)."""

  def __init__(self, spec, network, loss, optimizer, discount: float = 0.99):
    super().__init__(spec, network, [Objective("actor_critic", self._loss, optimizer)])
    self.loss, self.discount = loss, discount

  def expected_outputs(self, batch_size):  # Checked against the network at build time.
    return actor_critic_outputs(self.spec, batch_size)

  def act(self, nets, actor_state, timestep, key):
    out = self.network.apply(nets, timestep.observation)
    action = jax.random.categorical(key, out.logits).astype(jnp.int32)
    extras = dict(log_prob=categorical_log_prob(out.logits, action), value=out.value)
    return ActorOutput(action, extras), actor_state

  def observe(self, experience, trajectory):
    return trajectory  # On-policy: learn from the newest trajectory.

  def update(self, nets, opt, experience, key):
    batch = policy_gradient_batch(experience, self.discount, gae_lambda=1.0)
    nets, opt, metrics = gradient_step(self.objectives, nets, opt, batch, key)
    return nets, opt, experience, metrics

  def _loss(self, nets, batch, key):
    out = self.network.apply(nets, batch.observation)
    return self.loss(out.logits, out.value, batch)


# -- logger (not in get_config: `--config.log.loggers='("jsonl", "lines")'` adds it) --

@registry.loggers.register("lines")
class LinesLogger(Logger):
  """Each record as one line of `key=value` pairs, in WORKDIR/records.txt."""
  what = "records.txt"

  def __init__(self, workdir: str, keys=("env_steps", "episode_return")):
    self.where, self.keys = f"{workdir}/records.txt", tuple(keys)
    self.file = open(self.where, "w")

  def write(self, record):
    self.file.write(" ".join(f"{k}={record.get(k)}" for k in self.keys) + "\n")

  def close(self):
    self.file.close()


def get_config():
  c = presets.experiment(total_env_steps=8 * 16 * 8 * 6)  # 6 calls of 8 updates.
  c.env = presets.section("coin", flips=4)
  c.agent = presets.section("actor_critic", discount=0.9)
  c.network = presets.section("tiny_actor_critic", hidden_size=32)
  c.loss = presets.section("reinforce_baseline", value_coef=0.5)
  c.optimizer = presets.section("sgd_to_zero", learning_rate=0.5)
  c.log.progress_metrics = ("loss", "policy_loss", "value_loss")
  presets.anakin(c, num_envs_per_device=8, rollout_length=16, updates_per_call=8)
  c.topology.num_devices = 1
  return c
