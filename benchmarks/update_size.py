"""How far one learner update moves the policy: IMPALA (summed or mean losses) against PPO.

Built to find why IMPALA with the paper's Atari settings did not learn Pong (issue 9). All
variants start from the same parameters and learn from the same batch of trajectories,
acted by those parameters; each then makes K updates on it. Printed per variant:

  grad norms   of the loss's raw gradient (before clipping), globally and by layer group
  update rms   root mean square of the parameter change of one update, over lr: for
               RMSProp and Adam, about 1 when the gradient dominates eps, far less when
               eps dominates
  KL           mean KL(pi_before || pi_after) over the batch's observations, per update

  .venv/bin/python benchmarks/update_size.py                   # pixel Catch, CPU seconds
  .venv/bin/python benchmarks/update_size.py --env=pong --num_envs=8   # real Pong frames
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from agents.impala import config as impala_config  # noqa: E402
from agents.ppo import config as ppo_config  # noqa: E402
from podracer import builder, registry  # noqa: E402
from podracer.components.environments import VectorEnv  # noqa: E402
from podracer import mesh  # noqa: E402
from podracer.types import Trajectory  # noqa: E402

GROUPS = ("section_0", "section_1", "section_2", "torso/linear", "head")


def configs(env: str):
  impala = impala_config.pixel_catch_anakin() if env == "catch" else impala_config.pong_sebulba()
  ppo = ppo_config.pixel_catch_anakin() if env == "catch" else ppo_config.pong_sebulba()
  mean = impala_config.pixel_catch_anakin() if env == "catch" else impala_config.pong_sebulba()
  mean.loss.reduction = "mean"  # The code before the fix: a mean, with the same optimizer.
  return {"impala (sum, the fix)": impala, "impala (mean, before)": mean, "ppo": ppo}


def collect(env: str, agent, nets, num_envs: int, length: int, seed: int) -> Trajectory:
  """[length+1, num_envs] steps acted by `nets` (PPO's extras: log-probs and values)."""
  def act(nets, timestep, key):  # PPO's act: its extras are a superset of IMPALA's.
    out = agent.network.apply(nets, timestep.observation)
    action = jax.random.categorical(key, out.logits).astype(jnp.int32)
    log_prob = jnp.take_along_axis(jax.nn.log_softmax(out.logits), action[:, None], -1)[:, 0]
    return action, dict(log_prob=log_prob, value=out.value)
  act = jax.jit(act)
  key = jax.random.PRNGKey(seed)
  if env == "catch":
    venv = VectorEnv(registry.build(registry.environments,
                                    impala_config.pixel_catch_anakin().env, key="env"),
                     num_envs)
    state, timestep = venv.reset(key)
    step = jax.jit(venv.step)
  else:
    section = dict(impala_config.pong_sebulba().env)
    venv = registry.build(registry.environments, section, key="env", num_envs=num_envs,
                          seed=seed)
    timestep, _ = venv.reset()
  entries = []
  for _ in range(length + 1):
    key, act_key = jax.random.split(key)
    action, extras = act(nets, timestep, act_key)
    entries.append(Trajectory(timestep, (), action, extras))
    if env == "catch":
      state, timestep, _ = step(state, action)
    else:
      timestep, _ = venv.step(np.asarray(action))
  if env != "catch":
    venv.close()
  return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *entries)


def group_norms(tree) -> Dict[str, float]:
  norms = {g: 0.0 for g in GROUPS}
  for module, params in tree.items():
    for group in GROUPS:
      if group in module:
        norms[group] += sum(float(jnp.sum(jnp.square(p))) for p in params.values())
  norms = {g: np.sqrt(v) for g, v in norms.items()}
  norms["global"] = float(optax.global_norm(tree))
  return norms


def kl(network, before, after, observation) -> float:
  flat = observation.reshape(-1, *observation.shape[2:])
  p = jax.nn.log_softmax(network.apply(before, flat).logits)
  q = jax.nn.log_softmax(network.apply(after, flat).logits)
  return float(jnp.mean(jnp.sum(jnp.exp(p) * (p - q), axis=-1)))


def one_replica(fn):
  """Runs `fn` as the single replica of a learner, so `replica_mean` has its axis."""
  mapped = mesh.spmd(fn, mesh.device_mesh(jax.local_devices()[:1]))
  def call(*args):
    out = mapped(*jax.tree.map(lambda x: jnp.asarray(x)[None], args))
    return jax.tree.map(lambda x: x[0], out)
  return call


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--env", choices=("catch", "pong"), default="catch")
  parser.add_argument("--num_envs", type=int, default=32)
  parser.add_argument("--updates", type=int, default=5)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  builder.register_builtin_components()

  variants = configs(args.env)
  spec = None
  batch = None
  print(f"jax {jax.__version__} on {jax.devices()[0].platform}; env {args.env}, "
        f"{args.num_envs} envs, {args.updates} updates per variant on one fixed batch")
  for name, config in variants.items():
    config.runtime.name = "anakin"  # Only its sizes matter here; no runtime is built.
    if spec is None:
      env = registry.build(registry.environments, config.env, key="env",
                           **({} if args.env == "catch" else dict(num_envs=1)))
      spec = env.spec()
      if args.env != "catch":
        env.close()
    agent = builder.build_agent(config, spec, total_updates=10_000)
    nets = jax.jit(agent.init_nets)(jax.random.PRNGKey(args.seed))
    if batch is None:
      length = config.runtime.rollout_length
      batch = collect(args.env, agent, nets, args.num_envs, length, args.seed)
      print(f"batch: [T+1, B] = {batch.action.shape}, observation "
            f"{batch.timestep.observation.shape[2:]} {batch.timestep.observation.dtype}")
    # The raw gradient: the same agent with plain SGD(1), one step, no clipping.
    raw_agent = builder.build_agent(config, spec, total_updates=10_000)
    raw_agent.objectives = tuple(o._replace(optimizer=optax.sgd(1.0))
                                 for o in raw_agent.objectives)
    if hasattr(raw_agent, "num_epochs"):
      raw_agent.num_epochs = raw_agent.num_minibatches = 1
    sgd_update = one_replica(lambda n, e, k: raw_agent.update(n, raw_agent.init_opt(n), e, k))
    experience = agent.observe(agent.init_experience(batch), batch)
    key = jax.random.PRNGKey(1)
    raw_nets = sgd_update(nets, experience, key)[0]
    grads = jax.tree.map(lambda a, b: a - b, nets, raw_nets)
    norms = group_norms(grads)

    update = one_replica(agent.update)
    opt = agent.init_opt(nets)
    lr = float(config.optimizer.learning_rate)
    n_params = sum(x.size for x in jax.tree.leaves(nets))
    rms, kls = [], []
    for _ in range(args.updates):
      key, update_key = jax.random.split(key)
      new_nets, opt, _, metrics = update(nets, opt, experience, update_key)
      delta = jax.tree.map(lambda a, b: a - b, new_nets, nets)
      rms.append(float(optax.global_norm(delta)) / np.sqrt(n_params) / lr)
      kls.append(kl(agent.network, nets, new_nets, batch.timestep.observation))
      nets = new_nets
    print(f"\n{name}: {config.optimizer.name} lr {lr:g} eps {config.optimizer.eps:g} "
          f"clip {config.optimizer.max_grad_norm}, loss reduction "
          f"{config.loss.get('reduction', 'mean')}")
    print("  grad norms: " + ", ".join(f"{g} {v:.3g}" for g, v in norms.items()))
    print("  update rms / lr per update: " + ", ".join(f"{v:.3g}" for v in rms))
    print("  KL(before || after) per update: " + ", ".join(f"{v:.2e}" for v in kls))
    print(f"  entropy after: {float(metrics['entropy']):.4f}")


if __name__ == "__main__":
  main()
