"""DQN on CartPole: a hand-written reference with PureJaxRL's settings beside podracer's
DQN, over the same seeds, held returns and env steps/s side by side.

  python benchmarks/dqn_reference.py [--seeds=0,1,2,3,4] [--total_env_steps=500000]
      [--which=reference,podracer] [--podracer_args="--config.loss.n_step=3 ..."]

The reference is PureJaxRL's `dqn.py` (after CleanRL's) written out in one jitted
function, vmapped over the seeds: 10 environments, a uniform replay of 10,000
transitions, batches of 128, Adam 2.5e-4, one-step max-Q targets (no double Q, no
n-step, no priorities), the squared TD error, the target copied every 500 env steps,
epsilon from 1.0 to 0.05 over 250K env steps, learning from 10K env steps with one update
per 10 env steps, a 120-84 relu network. It steps podracer's own CartPole (`VectorEnv`:
a time limit bootstraps, the step after LAST is the reset and teaches nothing), so the
two differ only in the agent. podracer's side is `python -m podracer.launch` of
`agents/dqn/config.py:cartpole_anakin` with `--config.num_runs` seeds in one program and
`--podracer_args` appended. "held" is the mean over the last 20 % of the records
(`podracer.logs.metrics.tail_mean`): for the reference, of the mean return of the episodes
each 10,240 env steps ended.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from podracer.components.environments.base import VectorEnv  # noqa: E402
from podracer.components.environments.cartpole import CartPole  # noqa: E402
from podracer.components.networks import q_network  # noqa: E402
from podracer.logs.metrics import tail_mean  # noqa: E402
from podracer.types import StepType  # noqa: E402

# PureJaxRL's CartPole-v1 DQN settings (purejaxrl/dqn.py's config), the network initialized
# as flax's Dense initializes PureJaxRL's (until 2026-11-29 this reference took podracer's
# orthogonal init, and held what podracer then held: 4 of 16 seeds below 400).
SETTINGS = dict(num_envs=10, buffer_size=10_000, batch_size=128, learning_rate=2.5e-4,
                target_every=500, epsilon_start=1.0, epsilon_finish=0.05,
                epsilon_anneal=250_000, learning_starts=10_000, train_every=10,
                discount=0.99, hidden_sizes=(120, 84), w_init="lecun_normal")
RECORD_EVERY = 1024  # iterations (x 10 env steps) per record


class Replay(NamedTuple):
  observation: jax.Array
  action: jax.Array
  reward: jax.Array
  discount: jax.Array
  next_observation: jax.Array
  valid: jax.Array  # 0 for the step after LAST (a reset: no transition)
  count: jax.Array


def epsilon_at(env_steps, s=SETTINGS):
  """PureJaxRL's schedule: linear from `epsilon_start` to `epsilon_finish` over the first
  `epsilon_anneal` env steps of all environments together."""
  slope = (s["epsilon_finish"] - s["epsilon_start"]) / s["epsilon_anneal"]
  return jnp.maximum(s["epsilon_start"] + slope * env_steps, s["epsilon_finish"])


def add(replay: Replay, timestep, action, next_timestep, s=SETTINGS) -> Replay:
  """The environments' transitions written over the oldest slots of the ring."""
  slots = (replay.count + jnp.arange(s["num_envs"])) % s["buffer_size"]
  put = lambda buffer, value: buffer.at[slots].set(value)
  return Replay(put(replay.observation, timestep.observation), put(replay.action, action),
                put(replay.reward, next_timestep.reward),
                put(replay.discount, next_timestep.discount),
                put(replay.next_observation, next_timestep.observation),
                put(replay.valid, (timestep.step_type != StepType.LAST).astype(jnp.float32)),
                replay.count + s["num_envs"])


class ReferenceDQN:
  """One whole run as jittable, vmappable functions: `train(key)` -> mean episode returns
  per record of RECORD_EVERY iterations."""

  def __init__(self, total_env_steps: int, s=SETTINGS):
    self.s, self.env = s, VectorEnv(CartPole(), s["num_envs"])
    self.network = q_network(self.env.spec(), torso="mlp", hidden_sizes=s["hidden_sizes"],
                             activation="relu", w_init=s["w_init"])
    self.optimizer = optax.adam(s["learning_rate"])
    self.records = total_env_steps // s["num_envs"] // RECORD_EVERY
    self.env_steps = self.records * RECORD_EVERY * s["num_envs"]

  def loss(self, params, target_params, batch):
    """The squared one-step max-Q TD error (the Huber loss with `huber_delta` set),
    over the batch's real transitions."""
    q = self.network.apply(params, batch.observation)
    q = jnp.take_along_axis(q, batch.action[:, None], 1)[:, 0]
    next_q = jnp.max(self.network.apply(target_params, batch.next_observation), axis=-1)
    target = jax.lax.stop_gradient(batch.reward + batch.discount * self.s["discount"] * next_q)
    per_item = (optax.huber_loss(q, target, delta=self.s["huber_delta"])
                if self.s.get("huber_delta") else jnp.square(q - target))
    return jnp.sum(batch.valid * per_item) / jnp.maximum(batch.valid.sum(), 1)

  def learn(self, params, target_params, opt, replay, key):
    size = jnp.minimum(replay.count, self.s["buffer_size"])
    index = jax.random.randint(key, (self.s["batch_size"],), 0, size)
    batch = jax.tree.map(lambda x: x[index], replay._replace(count=None))
    updates, opt = self.optimizer.update(jax.grad(self.loss)(params, target_params, batch),
                                         opt)
    return optax.apply_updates(params, updates), opt

  def iteration(self, carry, key):
    """One step of every environment, its transitions added, and (when due) an update
    and a target copy: PureJaxRL's `_update_step`."""
    params, target_params, opt, replay, env_state, timestep, env_steps, stats = carry
    act_key, explore_key, learn_key = jax.random.split(key, 3)
    greedy = jnp.argmax(self.network.apply(params, timestep.observation), axis=-1)
    uniform = jax.random.randint(act_key, greedy.shape, 0, 2)
    explore = jax.random.uniform(explore_key, greedy.shape) < epsilon_at(env_steps, self.s)
    action = jnp.where(explore, uniform, greedy).astype(jnp.int32)
    env_state, next_timestep, episode = self.env.step(env_state, action)
    replay = add(replay, timestep, action, next_timestep, self.s)
    env_steps = env_steps + self.s["num_envs"]
    ready = (env_steps > self.s["learning_starts"]) & (env_steps % self.s["train_every"] == 0)
    params, opt = jax.lax.cond(
        ready, lambda: self.learn(params, target_params, opt, replay, learn_key),
        lambda: (params, opt))
    target_params = jax.lax.cond(env_steps % self.s["target_every"] == 0, lambda: params,
                                 lambda: target_params)
    stats = stats + jnp.stack([jnp.sum(episode.done * episode.episode_return),
                               jnp.sum(episode.done)])
    return (params, target_params, opt, replay, env_state, next_timestep, env_steps,
            stats), None

  def record(self, carry, keys):
    carry, _ = jax.lax.scan(self.iteration, carry[:-1] + (jnp.zeros(2),), keys)
    total, episodes = carry[-1]
    return carry, jnp.where(episodes > 0, total / jnp.maximum(episodes, 1), jnp.nan)

  def train(self, key):
    net_key, env_key, key = jax.random.split(key, 3)
    env_state, timestep = self.env.reset(env_key)
    params = self.network.init(net_key, timestep.observation)
    n, shape = self.s["buffer_size"], timestep.observation.shape[1:]
    replay = Replay(jnp.zeros((n, *shape)), jnp.zeros((n,), jnp.int32), jnp.zeros(n),
                    jnp.zeros(n), jnp.zeros((n, *shape)), jnp.zeros(n), jnp.int32(0))
    carry = (params, params, self.optimizer.init(params), replay, env_state, timestep,
             jnp.int32(0), jnp.zeros(2))
    keys = jax.random.split(key, self.records * RECORD_EVERY)
    _, returns = jax.lax.scan(self.record, carry, keys.reshape(self.records, RECORD_EVERY, -1))
    return returns


def reference(seeds: List[int], total_env_steps: int, **changes) -> Dict[str, object]:
  dqn = ReferenceDQN(total_env_steps, dict(SETTINGS, **changes))
  run, env_steps = jax.jit(jax.vmap(dqn.train)), dqn.env_steps
  keys = jnp.stack([jax.random.PRNGKey(seed) for seed in seeds])
  jax.block_until_ready(run.lower(keys).compile())  # Compile outside the timing.
  start = time.perf_counter()
  returns = np.asarray(jax.block_until_ready(run(keys)))
  seconds = time.perf_counter() - start
  held = [tail_mean([r for r in row if np.isfinite(r)]) for row in returns]
  return dict(held=held, sps=len(seeds) * env_steps / seconds, env_steps=env_steps)


def podracer(seeds: List[int], total_env_steps: int, extra: List[str]) -> Dict[str, object]:
  with tempfile.TemporaryDirectory() as workdir:
    command = [sys.executable, "-m", "podracer.launch",
               "--config=agents/dqn/config.py:cartpole_anakin", f"--workdir={workdir}",
               f"--config.seed={seeds[0]}", f"--config.num_runs={len(seeds)}",
               f"--config.total_env_steps={total_env_steps}", "--config.log.loggers=('jsonl',)",
               *extra]
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)  # One device, as a user has.
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f]
  returns = {}
  for r in records:
    if r.get("episode_return") is not None:
      returns.setdefault(r.get("run", 0), []).append(r["episode_return"])
  sps = statistics.median(r["sps"] for r in records if not r.get("includes_compilation"))
  return dict(held=[tail_mean(returns[run]) for run in sorted(returns)], sps=sps,
              env_steps=records[-1]["env_steps"])


def iqm(values: List[float]) -> float:
  from podracer.report import iqm as interquartile_mean  # pylint: disable=import-outside-toplevel
  return float(interquartile_mean(np.asarray(values)))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--seeds", default="0,1,2,3,4")
  parser.add_argument("--total_env_steps", type=int, default=500_000)
  parser.add_argument("--which", default="reference,podracer")
  parser.add_argument("--podracer_args", default="", help="appended to podracer's launch")
  parser.add_argument("--huber_delta", type=float, default=0.0,
                      help="the reference's Huber loss with this delta (0: its squared error)")
  parser.add_argument("--target_every", type=int, default=SETTINGS["target_every"],
                      help="the reference's target copy, in env steps")
  parser.add_argument("--w_init", default=SETTINGS["w_init"],
                      help="the reference's network init: lecun_normal (flax's) or orthogonal")
  args = parser.parse_args()
  seeds = [int(s) for s in args.seeds.split(",")]
  for which in args.which.split(","):
    start = time.perf_counter()
    if which == "reference":
      result = reference(seeds, args.total_env_steps, huber_delta=args.huber_delta,
                         target_every=args.target_every, w_init=args.w_init)
    else:
      result = podracer(seeds, args.total_env_steps, shlex.split(args.podracer_args))
    held = ", ".join(f"{h:.1f}" for h in result["held"])
    print(f"{which:>9}: held {held}; IQM {iqm(result['held']):.1f}, min "
          f"{min(result['held']):.1f}; {result['sps']:,.0f} env steps/s; "
          f"{time.perf_counter() - start:.0f} s wall", flush=True)


if __name__ == "__main__":
  main()
