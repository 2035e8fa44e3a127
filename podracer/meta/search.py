"""podracer.meta's search loop: generations of ask, train every member, tell, each one's
record and state saved before the next (`train`)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np

from podracer.lifecycle import preemption
from podracer.meta import files
from podracer.meta.config import MetaConfig, load_task
from podracer.meta.strategy import Strategy, initial_theta, worst_where_nonfinite
from podracer.meta.trainings import Tasks, check_generation, inner_config

def train(config: Any, meta: MetaConfig, workdir: str, stream=sys.stdout) -> Dict[str, Any]:
  """Runs (or resumes) the meta-training into `workdir`; returns its last record."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  os.makedirs(workdir, exist_ok=True)
  experiments = [builder.build(inner_config(c, meta))
                 for c in [config, *map(load_task, meta.task_list())]]
  for task in experiments:
    check_generation(task, meta)
  experiment = experiments[0]
  strategy = Strategy(meta, initial_theta(meta))
  root = jax.random.PRNGKey(meta.seed)
  init_key, root = jax.random.split(root)
  state, done = files.load_state(workdir, strategy.init(init_key))
  files.write_config(workdir, config, meta)
  tasks = Tasks(experiments, meta, root)
  evaluate = tasks.evaluate if meta.eval_every else None
  inner_steps = sum(e.plan.env_steps_per_round * e.runtime.num_calls for e in experiments)
  stream.write(f"meta: {meta.population * meta.member_seeds} PPO trainings of "
               f"{inner_steps:,} env steps a generation in one program a task "
               f"({meta.population} members x {meta.member_seeds}, {len(experiments)} "
               f"task{'s' * (len(experiments) > 1)}), generations "
               f"{done + 1}-{meta.generations}\n" + tasks.describe())
  last = dict(state=state, generation=done, record={})
  try:
    for g in range(done, meta.generations):
      state, record = _one_generation(strategy, tasks, state, g, root, meta, inner_steps)
      record.update(_where(meta, experiment.agent.loss, strategy.mean(state)))
      if evaluate is not None and ((g + 1) % meta.eval_every == 0 or g + 1 == meta.generations):
        record.update(_evaluated(evaluate, strategy.mean(state), root, g + 1))
      with preemption.deferred():  # A SIGTERM waits: state, records, objective agree.
        files.save_state(workdir, state, g + 1)
        files.append_record(workdir, record)
        last.update(state=state, generation=g + 1, record=record)
        stream.write(_progress(record) + "\n")
        stream.flush()
  finally:  # Also when stopped (Ctrl-C, SIGTERM): the mean theta of the last whole generation.
    theta = strategy.mean(last["state"])
    if last["generation"]:
      files.save_objective(workdir, theta,
                           files.objective_about(meta, theta, experiment.agent.loss))
  return last["record"]


def _one_generation(strategy, generation, state, g, root, meta, inner_steps):
  key = jax.random.fold_in(root, g)
  ask_key, run_key, tell_key = jax.random.split(key, 3)
  start = time.perf_counter()
  thetas, state = strategy.ask(ask_key, state)
  fitness, episodes, finite, per_task = generation(thetas, run_key)
  finite = finite & np.isfinite(fitness)
  told = worst_where_nonfinite(fitness, finite, g + 1)
  state = strategy.tell(tell_key, thetas, jnp.asarray(told), state)
  fitness = fitness[finite]  # The records' figures are the finite members'.
  jax.block_until_ready(state)
  wall = time.perf_counter() - start
  trainings = meta.population * meta.member_seeds
  return state, dict(generation=g + 1, fitness_best=float(fitness.max()),
                     fitness_mean=float(fitness.mean()), fitness_min=float(fitness.min()),
                     episodes=int(np.asarray(episodes).sum()),
                     nonfinite=int(np.sum(~finite)),
                     inner_env_steps=trainings * inner_steps,
                     sps=trainings * inner_steps / wall, wall_s=wall, **per_task)


def _evaluated(evaluate: Callable, theta: Any, root: jax.Array, generation: int):
  """The record's `mean_theta_fitness`: the mean theta's fitness over held-out seeds (a
  key stream the members' never draw from)."""
  value, finite = jax.device_get(evaluate(theta, jax.random.fold_in(
      jax.random.fold_in(root, 2**31 - 1), generation)))
  return dict(mean_theta_fitness=float(value) if finite else None)


def _where(meta: MetaConfig, loss: Any, theta: Dict[str, jax.Array]) -> Dict[str, float]:
  """Where the search's mean is, in the loss's own terms: DPO's alpha and beta, or the
  drift's clip scale c (PPO's clip range times exp(c))."""
  if meta.objective == "dpo":
    found = loss.with_drift(theta)
    return dict(alpha=float(found.alpha), beta=float(found.beta))
  return {k: float(theta[k][0]) for k in ("log_clip", "log_value_clip") if k in theta}


def _progress(record: Dict[str, Any]) -> str:
  # 4 significant figures: a return (238.6) or, over several tasks, a ratio (1.018).
  return (f"generation {record['generation']}: fitness best {record['fitness_best']:.4g} "
          f"mean {record['fitness_mean']:.4g} min {record['fitness_min']:.4g}, "
          + (f"{record['nonfinite']} non-finite, " if record.get("nonfinite") else "")
          + (f"mean theta {record['mean_theta_fitness']:.4g}, "
             if record.get("mean_theta_fitness") is not None else "")
          + (f"alpha {record['alpha']:.3g} beta {record['beta']:.3g}, "
             if "alpha" in record else "")
          + (f"c {record['log_clip']:.2f}, " if "log_clip" in record else "")
          + (f"c_v {record['log_value_clip']:.2f}, " if "log_value_clip" in record else "")
          + f"{record['sps']:,.0f} inner env steps/s")
