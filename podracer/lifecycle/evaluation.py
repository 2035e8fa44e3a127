"""Evaluation: every `eval_interval` env steps (0: never), the agent's evaluation policy
plays `eval_episodes` episodes on environments of its own, and the mean return of those
episodes goes into the metrics record as `eval_return`, beside the training return. An
environment may evaluate on another (`Environment.evaluation_env`: a self-play game plays
a fixed opponent), and a self-play game's record adds `eval_win_rate`.

The policy is `Agent.eval_act` from `Agent.init_eval_actor`: greedy for PPO and IMPALA
(the logits' argmax), the squashed Gaussian's mean for SAC, and for R2D2 its small
`eval_epsilon`, so R2D2's `eval_return` includes exploration. Each of the
`eval_episodes` environments plays exactly one episode from its reset (none is cut
short, and none counts twice); actions and resets follow a key made from the seed and
the env step, so an evaluation is repeatable.

  Anakin   `jax_return`: one jitted `while_loop` over a fresh batch of JAX environments,
           with replica 0's parameters, between two calls of the compiled step.
  Sebulba  `host_return`: the learner thread steps a host environment built for it,
           between two updates (the learner waits; the actors go on).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np

# Steps after which an evaluation ends even if an episode has not (that one counts 0).
MAX_STEPS = 100_000
EVAL_STREAM = 2  # Evaluation keys: a stream of their own, folded into the seed's key.


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """When to evaluate and for how many episodes (the config's `eval_*` keys)."""
  interval: int
  episodes: int
  seed: int

  def due(self, env_steps_before: int, env_steps: int) -> bool:
    """Whether a multiple of `interval` env steps was passed since the last check."""
    return env_steps // self.interval > env_steps_before // self.interval

  def key(self, env_steps: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(self.seed),
                                                 EVAL_STREAM), env_steps)


def for_run(config: Any, runtime: Any) -> Optional[Evaluation]:
  """The run's Evaluation, or None: `eval_interval` 0 or missing, or a runtime whose
  `evaluates()` is False."""
  interval = config.get("eval_interval", 0)
  if not interval or not runtime.evaluates():
    return None
  return Evaluation(int(interval), int(config.get("eval_episodes", 10)), int(config.seed))


def jax_returns(agent: Any, env: Any, nets: Any, key: jax.Array) -> jax.Array:
  """The return [E] of one episode in each of `env`'s E environments (a VectorEnv),
  acting with `agent.eval_act` (0 for one unfinished after MAX_STEPS). Jit it with
  `agent` and `env` static (closed over)."""
  reset_key, actor_key, key = jax.random.split(key, 3)
  env_state, timestep = env.reset(reset_key)
  actor_state = agent.init_eval_actor(actor_key, env.num_envs)
  finished = jnp.zeros((env.num_envs,), bool)
  returns = jnp.zeros((env.num_envs,), jnp.float32)

  def unfinished(carry):
    *_, finished, _, t = carry
    return ~jnp.all(finished) & (t < MAX_STEPS)

  def step(carry):
    env_state, timestep, actor_state, key, finished, returns, t = carry
    key, act_key = jax.random.split(key)
    out, actor_state = agent.eval_act(nets, actor_state, timestep, act_key)
    env_state, timestep, stats = env.step(env_state, out.action)
    returns = jnp.where(stats.done & ~finished, stats.episode_return, returns)
    return (env_state, timestep, actor_state, key, finished | stats.done, returns, t + 1)

  carry = jax.lax.while_loop(unfinished, step, (env_state, timestep, actor_state, key,
                                                finished, returns, jnp.int32(0)))
  return carry[-2]


def jax_return(agent: Any, env: Any, nets: Any, key: jax.Array) -> jax.Array:
  """Mean return of one episode in each of `env`'s environments (`jax_returns`)."""
  return jnp.mean(jax_returns(agent, env, nets, key))


def jax_results(agent: Any, env: Any, nets: Any, key: jax.Array, games: bool
                ) -> Dict[str, jax.Array]:
  """`eval_return`, and for `games` (a self-play game's evaluation against a fixed
  opponent, results +1/0/-1) `eval_win_rate`: the fraction of episodes won."""
  returns = jax_returns(agent, env, nets, key)
  results = dict(eval_return=jnp.mean(returns))
  if games:
    results["eval_win_rate"] = jnp.mean((returns > 0).astype(jnp.float32))
  return results


def host_return(act: Callable[..., Any], init_actor: Callable[..., Any], env: Any,
                nets: Any, key: jax.Array,
                stop: Optional[threading.Event] = None) -> Optional[float]:
  """Mean return of one episode in each of the host `env`'s environments; None if the
  run `stop`s first (a stopping run must not wait for long episodes).

  `act(nets, actor_state, timestep, key) -> (ActorOutput, actor_state, key)` is the
  jitted evaluation policy (Sebulba's `act_and_advance_key` of `agent.eval_act`);
  `init_actor(key, num_envs)` its state.
  """
  timestep, _ = env.reset()
  num_envs = np.asarray(timestep.step_type).shape[0]
  key, actor_key = jax.random.split(key)
  actor_state = init_actor(actor_key, num_envs)
  finished = np.zeros(num_envs, bool)
  returns = np.zeros(num_envs, np.float64)
  for _ in range(MAX_STEPS):
    if finished.all():
      break
    if stop is not None and stop.is_set():
      return None
    out, actor_state, key = act(nets, actor_state, timestep, key)
    timestep, stats = env.step(np.asarray(out.action))
    done = np.asarray(stats.done, bool)
    new = done & ~finished
    returns[new] = np.asarray(stats.episode_return)[new]
    finished |= done
  return float(returns.mean())
