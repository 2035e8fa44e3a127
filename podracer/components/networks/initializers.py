"""Weight initializers that are safe to vmap on a CPU.

`Orthogonal` is haiku's `hk.initializers.Orthogonal` (the same draws, the same
matrices, bit for bit), except that its QR stays one matrix at a time under `vmap`.
A vmapped init (many runs or a population in one program, podracer.meta's members
with seeds of their own) otherwise asks jaxlib for one batched LAPACK QR, which splits
the batch over XLA:CPU's intra-op thread pool from inside a task of that same pool:
with two such QRs in flight on a 2-core machine, both pool threads wait for work only
they could run, and the program hangs with every thread idle (jax 0.10.2; one device,
as a user runs; `tests/components/test_networks.py` has the reproduction).
`unbatched_qr` is `jnp.linalg.qr` with a batching rule that maps over the batch (one
matrix per step of a loop) instead.
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching


@custom_batching.custom_vmap
def unbatched_qr(matrix: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """(Q, R) of one matrix, as `jnp.linalg.qr`; under vmap, one matrix at a time."""
  q, r = jnp.linalg.qr(matrix)
  return q, r


@unbatched_qr.def_vmap
def _qr_over_the_batch(axis_size: int, in_batched: Sequence[bool], matrix: jax.Array):
  del axis_size
  if not in_batched[0]:
    return unbatched_qr(matrix), (False, False)
  return jax.lax.map(unbatched_qr, matrix), (True, True)


class Orthogonal(hk.initializers.Orthogonal):
  """haiku's orthogonal initializer (row-orthonormal along `axis`, times `scale`), its
  QR `unbatched_qr`'s (module docstring)."""

  def __call__(self, shape: Sequence[int], dtype: Any) -> jax.Array:
    if len(shape) < 2:
      raise ValueError("Orthogonal initializer requires at least a 2D shape.")
    n_rows = shape[self.axis]
    n_cols = int(np.prod(shape)) // n_rows
    matrix_shape = (n_rows, n_cols) if n_rows > n_cols else (n_cols, n_rows)
    draw = jax.random.normal(hk.next_rng_key(), matrix_shape, dtype)
    q, r = unbatched_qr(draw)
    q = q * jnp.sign(jnp.diag(r))  # Q uniformly distributed (Mezzadri 2007)
    if n_rows < n_cols:
      q = q.T
    q = jnp.reshape(q, (n_rows,) + tuple(np.delete(shape, self.axis)))
    q = jnp.moveaxis(q, 0, self.axis)
    return jax.lax.convert_element_type(self.scale, dtype) * q
