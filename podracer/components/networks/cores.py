"""Recurrent cores that reset their state at episode boundaries.

A batch of environments restarts episodes at different steps, so the state is reset
per batch entry, from a `reset` mask that is true at the first step of an episode.
"""

from __future__ import annotations

from typing import Optional, Tuple

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
