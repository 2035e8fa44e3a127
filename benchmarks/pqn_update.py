"""Where one PQN `minatar_anakin` update's time goes on this machine.

  python benchmarks/pqn_update.py [--game=Breakout-MinAtar] [--repeats=10]

Prints the medians of `repeats` compiled calls (after a warm-up) of:
  rollout         the 32 steps x 128 environments of acting (env steps + forward passes);
  update          the whole update, with each setting of `agent.acting_q_targets`
                  (False adds a forward pass over the rollout's [33, 128] frames);
  gradient step   one of the update's 64 (a minibatch of 128), with and without the
                  network's LayerNorm, in a 16-step `lax.scan` as learners run them;
and the env steps/s each setting of the update gives with the rollout. It explains the
env steps/s of `benchmarks/minatar.py` (docs/agents.md, PQN's speed against DQN).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from agents.pqn import config as pqn_config  # noqa: E402
from benchmarks.timing import median_seconds  # noqa: E402
from podracer import builder  # noqa: E402
from podracer.learning import gradient_step  # noqa: E402
from podracer.types import REPLICA_AXIS  # noqa: E402

_GAME = flags.DEFINE_string("game", "Breakout-MinAtar", "gymnax MinAtar game.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per figure.")


def _median_seconds(fn, *args) -> float:
  return median_seconds(fn, *args, repeats=_REPEATS.value)


def _experiment(**network):
  config = pqn_config.minatar_anakin()
  config.env.env_id = _GAME.value
  config.topology.num_devices = 1
  config.network.update(network)
  return builder.build(config)


def _one_replica(fn):
  """`fn` on one replica's values, as Anakin's program runs it (the replica axis named)."""
  add_axis = lambda tree: jax.tree.map(lambda x: x[None], tree)
  mapped = jax.jit(jax.vmap(fn, axis_name=REPLICA_AXIS))
  return lambda *args: mapped(*add_axis(args))


def _gradient_step_seconds(agent, batch) -> float:
  def steps(nets, opt):
    def body(carry, _):
      return gradient_step(agent.objectives, *carry, batch, None)[:2], None
    return jax.lax.scan(body, (nets, opt), None, length=16)[0]
  nets = agent.init_nets(jax.random.PRNGKey(0))
  return _median_seconds(_one_replica(steps), nets, agent.init_opt(nets)) / 16


def main(argv):
  del argv
  experiment = _experiment()
  runtime, agent = experiment.runtime, experiment.agent
  nets_key, key = runtime._replica_keys(0)  # pylint: disable=protected-access
  init = runtime._init_replica  # pylint: disable=protected-access
  state = jax.jit(init)(nets_key[0], key[0])
  rollout = jax.jit(lambda s, k: runtime._rollout(  # pylint: disable=protected-access
      agent, s.agent.nets, s.env, s.pending, s.agent.actor, k)[0])
  trajectory = rollout(state, jax.random.PRNGKey(1))
  steps = (trajectory.action.shape[0] - 1) * trajectory.action.shape[1]
  t_rollout = _median_seconds(rollout, state, jax.random.PRNGKey(1))
  print(f"{_GAME.value}: rollout of {steps:,} env steps {1e3 * t_rollout:.1f} ms")
  for kept in (True, False):
    agent.acting_q_targets = kept
    update = _one_replica(lambda s, tr, k: agent.update(s.agent.nets, s.agent.opt, tr, k))
    t_update = _median_seconds(update, state, trajectory, jax.random.PRNGKey(2))
    print(f"update, acting_q_targets={kept}: {1e3 * t_update:.1f} ms; with the rollout "
          f"{steps / (t_rollout + t_update):,.0f} env steps/s")
  size = steps // agent.num_minibatches
  frames = trajectory.timestep.observation
  frames = frames.reshape(-1, *frames.shape[2:])[:size]
  batch = (frames, jnp.zeros(size, jnp.int32), jnp.zeros(size), jnp.ones(size))
  for layer_norm in (True, False):
    seconds = _gradient_step_seconds(_experiment(layer_norm=layer_norm).agent, batch)
    per_update = agent.num_epochs * agent.num_minibatches
    print(f"gradient step on {size} transitions, layer_norm={layer_norm}: "
          f"{1e3 * seconds:.2f} ms (x {per_update} per update)")


if __name__ == "__main__":
  app.run(main)
