"""Recurrent cores that reset their state at episode boundaries.

A batch of environments restarts episodes at different steps, so the state is reset
per batch entry, from a `reset` mask that is true at the first step of an episode.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import haiku as hk
import jax
import jax.numpy as jnp


def _where_reset(reset: jax.Array, initial: hk.LSTMState, state: hk.LSTMState):
  def select(i, s):
    mask = jnp.reshape(reset, reset.shape + (1,) * (s.ndim - reset.ndim))
    return jnp.where(mask, i, s)
  return jax.tree.map(select, initial, state)


class LSTMCore(hk.Module):
  """An `hk.LSTM` whose state returns to the initial state where `reset` is true."""

  def __init__(self, hidden_size: int, name: Optional[str] = None):
    super().__init__(name=name)
    self._hidden_size = hidden_size
    # Built here, not in a method, so `__call__` and `unroll` share parameters.
    self._lstm = hk.LSTM(hidden_size, name="lstm")

  def initial_state(self, batch_size: int) -> hk.LSTMState:
    return self._lstm.initial_state(batch_size)

  def __call__(self, inputs: jax.Array, state: hk.LSTMState,
               reset: Optional[jax.Array] = None) -> Tuple[jax.Array, hk.LSTMState]:
    """One step: inputs [B, F], reset [B] (bool) -> output [B, H], next state."""
    if reset is not None:
      initial = self.initial_state(inputs.shape[0])
      state = _where_reset(jnp.asarray(reset, jnp.bool_), initial, state)
    return self._lstm(inputs, state)

  def unroll(self, inputs: jax.Array, state: hk.LSTMState,
             reset: jax.Array) -> Tuple[jax.Array, hk.LSTMState]:
    """T steps: inputs [T, B, F], reset [T, B] -> outputs [T, B, H], final state."""
    def step(state, xs):
      x, r = xs
      out, state = self(x, state, r)
      return state, out
    state, outputs = hk.scan(step, state, (inputs, jnp.asarray(reset, jnp.bool_)))
    return outputs, state


def torso_core_head(torso: Callable[..., Any], core: LSTMCore, head: Callable[..., Any]):
  """(init, (step, unroll, initial_state)) of torso -> core -> head: one step of a batch
  [B, ...], or an unroll of [T, B, ...] (the torso and head over T * B at once)."""
  def step(observation, state, reset):
    features, state = core(torso(observation), state, reset)
    return head(features), state

  def unroll(observation, state, reset):
    t, b = reset.shape
    flat = jax.tree.map(lambda x: x.reshape(t * b, *x.shape[2:]), observation)
    outputs, state = core.unroll(torso(flat).reshape(t, b, -1), state, reset)
    out = head(outputs.reshape(t * b, -1))
    return jax.tree.map(lambda x: x.reshape(t, b, *x.shape[1:]), out), state

  def init(observation):
    batch = jax.tree.leaves(observation)[0].shape[0]
    return step(observation, core.initial_state(batch), jnp.zeros((batch,), bool))

  return init, (step, unroll, core.initial_state)


def recurrent(forward: Callable[[], Any], make: Callable[..., Any]) -> Any:
  """`make(init, initial_state, step, unroll)` from a multi-transform's forward, which
  returns (init, (step, unroll, initial_state))."""
  transformed = hk.without_apply_rng(hk.multi_transform(forward))
  step_fn, unroll_fn, initial_state_fn = transformed.apply
  return make(init=transformed.init, initial_state=lambda batch: initial_state_fn({}, batch),
              step=step_fn, unroll=unroll_fn)
