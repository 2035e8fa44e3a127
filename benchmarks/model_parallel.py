"""A replica over K devices (issue 78): bytes a device holds and what XLA compiles.

For K = 1, 2, 4, 8 on 8 devices (data = 8 / K) and each sharding policy, one learner
step of podracer's gradient step (Adam) on an MLP actor-critic of `--width` units,
compiled with `podracer.components.shardings.spmd`; printed:

  param_bytes_per_device  parameters + Adam state on one device, from the arrays' shards
  replicated_bytes        the same, all of it on every device (K = 1's figure)
  xla_argument_bytes      the compiled step's arguments per device (memory_analysis())
  xla_temp_bytes          its temporaries per device
  step_ms                 the median of `--repeats` steps (on a CPU the virtual devices
                          share cores and have no fast links: said, not tuned for)

    python benchmarks/model_parallel.py                      # 8 virtual CPU devices
    python benchmarks/model_parallel.py --width=2048 --sharding=fsdp

With `--ppo_env_steps=N`, PPO CartPole (`cartpole_anakin`, `--config.runtime.fixed_batch`:
8 environments in all) trained for N env steps at data 2 x model 4 (`--sharding`'s first
policy) and at data 8 x model 1, the same seed: each run's figures (the mean return of its
last 20 % of records, the median env steps/s) and how far the first's records are from
the second's. With `--wide_env_steps=N`, PPO's `wide_anakin` (1024-wide torsos) with a
fixed batch of 8 environments at each K of `--models` (data 8 / K): the bytes a device
holds and the median env steps/s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8").strip()

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import optax  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from podracer import mesh, registry  # pylint: disable=g-import-not-at-top,wrong-import-position
from podracer.builder import register_builtin_components  # pylint: disable=wrong-import-position
from podracer.components import shardings  # pylint: disable=wrong-import-position
from podracer.learning import Objective, gradient_step, init_opt_state  # pylint: disable=wrong-import-position
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec  # pylint: disable=wrong-import-position

P = jax.sharding.PartitionSpec


def objectives(network):
  """PPO-shaped enough: a policy log-likelihood and a value regression, with Adam."""
  def loss(nets, batch, key):
    del key
    out = network.apply(nets["policy"], batch["obs"])
    logp = jax.nn.log_softmax(out.logits)
    policy = -jnp.mean(jnp.take_along_axis(logp, batch["action"][:, None], 1))
    return policy + jnp.mean((out.value - batch["ret"]) ** 2), {}
  return (Objective("ac", loss, optax.adam(3e-4), owns=("policy",)),)


def measure(width: int, sharding: str, model: int, batch_size: int, repeats: int) -> dict:
  """One configuration's figures."""
  devices = jax.devices()
  data = len(devices) // model
  spec = EnvSpec(observation=ArraySpec((4,), np.float32), action=DiscreteSpec(2))
  network = registry.networks.get("mlp_actor_critic")(spec, hidden_sizes=(width, width))
  obs = np.random.default_rng(0).normal(size=(data, batch_size, 4)).astype(np.float32)
  batch = dict(obs=obs, action=(obs[..., 0] > 0).astype(np.int32),
               ret=obs.sum(-1).astype(np.float32))
  nets = {"policy": network.init(jax.random.PRNGKey(0), obs[0])}
  objs = objectives(network)
  opt = init_opt_state(objs, nets)
  rows = lambda t: jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (data, *x.shape)), t)
  grid = mesh.device_mesh(devices, 1, model) if model > 1 else mesh.device_mesh(devices)
  if model > 1:
    net_specs = shardings.param_specs(shardings.build(sharding, model), nets, model)
    opt_specs = shardings.state_specs(nets, net_specs, opt)
    step = shardings.spmd(lambda n, o, b: gradient_step(objs, n, o, b, None), grid,
                          (net_specs, opt_specs, P()), (net_specs, opt_specs, P()))
    state = shardings.place(grid, (rows(nets), rows(opt)), (net_specs, opt_specs))
  else:
    step = mesh.spmd(lambda n, o, b: gradient_step(objs, n, o, b, None), grid)
    state = mesh.put(grid, (rows(nets), rows(opt)))
  memory = step.lower(*state, batch).compile().memory_analysis()
  times = []
  for _ in range(repeats + 1):
    start = time.perf_counter()
    out = step(*state, batch)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - start)
    state = out[:2]
  whole = sum(np.asarray(x[0]).nbytes for x in jax.tree.leaves(state))
  return dict(sharding=sharding if model > 1 else "replicated", model=model, data=data,
              param_bytes_per_device=shardings.bytes_per_device(state),
              replicated_bytes=whole,
              xla_argument_bytes=getattr(memory, "argument_size_in_bytes", None),
              xla_temp_bytes=getattr(memory, "temp_size_in_bytes", None),
              step_ms=round(1e3 * float(np.median(times[1:])), 2))


def median_sps(records) -> Optional[int]:
  """The median env steps/s of the records that include no compiling (None: none)."""
  sps = sorted(r["sps"] for r in records if not r.get("includes_compilation"))
  return round(sps[len(sps) // 2]) if sps else None


def ppo(total_env_steps: int, sharding: str, seed: int = 0) -> None:
  """PPO CartPole with a fixed batch of 8 environments at data 2 x model 4 and at data 8
  x model 1: each run's figures, then the largest differences between their records."""
  from agents.ppo import config as ppo_config  # pylint: disable=import-outside-toplevel
  from podracer import builder, launch  # pylint: disable=import-outside-toplevel
  launch.register_components_and_agents()
  records = {}
  for model in (4, 1):
    config = ppo_config.cartpole_anakin()
    config.seed, config.total_env_steps = seed, total_env_steps
    config.runtime.update(dict(num_envs_per_device=8, fixed_batch=True))
    config.topology.model, config.topology.sharding = model, sharding
    records[model] = builder.build(config).train(stream=None)["records"]
    returns = [r["episode_return"] for r in records[model] if "episode_return" in r]
    print(dict(agent="ppo", sharding=sharding if model > 1 else "replicated", model=model,
               data=8 // model, env_steps=records[model][-1]["env_steps"],
               held_return=round(float(np.mean(returns[-max(1, len(returns) // 5):])), 2),
               median_sps=median_sps(records[model])), flush=True)
  keys = ("episode_return", "loss", "value_loss", "policy_loss", "entropy")
  pairs = list(zip(records[4], records[1]))
  same = [all(np.isclose(a.get(k, 0.0), b.get(k, 0.0), rtol=1e-5, atol=1e-6) for k in keys)
          for a, b in pairs]
  print(dict(records_equal_to_rtol_1e5=f"{(same + [False]).index(False)} of {len(pairs)}",
             max_abs_difference={k: float(max(abs(a.get(k, 0.0) - b.get(k, 0.0))
                                              for a, b in pairs)) for k in keys}))


def wide_sps(total_env_steps: int, sharding: str, models) -> None:
  """PPO's `wide_anakin` (1024-wide torsos) with a fixed batch of 8 environments, at
  data 8 / K x model K: the same updates on every layout, so its env steps/s compare
  (two updates, 2,048 env steps, a call: the median of the calls after the first)."""
  from agents.ppo import config as ppo_config  # pylint: disable=import-outside-toplevel
  from podracer import builder, launch  # pylint: disable=import-outside-toplevel
  launch.register_components_and_agents()
  for model in models:
    config = ppo_config.wide_anakin()
    config.total_env_steps = total_env_steps
    config.runtime.update(dict(num_envs_per_device=8, fixed_batch=True, updates_per_call=2))
    config.topology.model = model
    config.topology.sharding = sharding if model > 1 else "replicated"
    result = builder.build(config).train(stream=None)
    print(dict(agent="ppo wide_anakin", sharding=config.topology.sharding, model=model,
               data=8 // model, param_bytes_per_device=result["param_bytes_per_device"],
               median_sps=median_sps(result["records"])), flush=True)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--width", type=int, default=1024)
  parser.add_argument("--batch_size", type=int, default=256, help="per data replica")
  parser.add_argument("--sharding", default="fsdp,tensor")
  parser.add_argument("--models", default="1,2,4,8")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--ppo_env_steps", type=int, default=0)
  parser.add_argument("--seed", type=int, default=0, help="PPO's seed")
  parser.add_argument("--wide_env_steps", type=int, default=0,
                      help="env steps/s of PPO wide_anakin at each K (a fixed batch)")
  args = parser.parse_args(argv)
  register_builtin_components()
  if args.wide_env_steps:
    wide_sps(args.wide_env_steps, args.sharding.split(",")[0],
             list(map(int, args.models.split(","))))
    return
  if args.ppo_env_steps:
    ppo(args.ppo_env_steps, args.sharding.split(",")[0], args.seed)
    return
  print(f"# {jax.device_count()} x {jax.devices()[0].platform}, JAX {jax.__version__}, "
        f"MLP 4-{args.width}-{args.width} actor and critic, Adam")
  for sharding in args.sharding.split(","):
    for model in map(int, args.models.split(",")):
      if model == 1 and sharding != args.sharding.split(",")[0]:
        continue
      print(measure(args.width, sharding, model, args.batch_size, args.repeats), flush=True)


if __name__ == "__main__":
  main()
