"""The arguments every replay table takes (device, host, Reverb), checked in one place.

A replay holds `max_size` items, samples `batch_size` of them once `min_size` are in,
with priority^`priority_exponent` (items inserted without one get `initial_priority`),
and, with `samples_per_insert`, a rate limiter that keeps samples within `error_buffer`
of samples_per_insert x inserts. The same keys mean the same thing in every replay, so
`--config.replay.name` switches between them.
"""

from __future__ import annotations

from typing import Any, Optional


def default_error_buffer(samples_per_insert: float, batch_size: int) -> float:
  """Room for one learner batch of samples, or the inserts it takes to earn one.

  Smaller buffers make inserts and samples alternate in single steps; Reverb itself
  refuses anything below max(1, samples_per_insert).
  """
  return max(1.0, float(samples_per_insert)) * batch_size


def _number(name: str, value: Any, minimum: float, integer: bool, strict: bool = False):
  bad = isinstance(value, bool) or not isinstance(value, (int,) if integer else (int, float))
  if bad or value < minimum or (strict and value == minimum):
    kind = "an integer" if integer else "a number"
    raise ValueError(f"`{name}` must be {kind} {'>' if strict else '>='} {minimum}, got "
                     f"{value!r}.")


def check_local_table(address: Optional[str], lives: str, **table_args) -> None:
  """A replay held here (`lives`: "on the devices", "in this process") joins no Reverb
  server (`address` None), and its table could sample (`check_table_args`)."""
  if address is not None:
    raise ValueError(f"`address` ({address!r}) names a Reverb server, but this replay "
                     f"lives {lives}; use `replay.name=reverb` to join a server.")
  check_table_args(smallest_min_size=0, **table_args)


def check_table_args(*, max_size: int, min_size: int, samples_per_insert: Optional[float],
                     error_buffer: Optional[float], priority_exponent: float,
                     batch_size: Optional[int] = None, initial_priority: Optional[float] = None,
                     timeout: Optional[float] = None, smallest_min_size: int = 1) -> None:
  """Raises ValueError for a table that could never sample or that Reverb would refuse.

  Arguments left None are not checked (a replay without them); `smallest_min_size` is 1
  for Reverb, which refuses an empty-table limiter, and 0 where sampling waits anyway.
  """
  if batch_size is not None:
    _number("batch_size", batch_size, 1, integer=True)
  _number("max_size", max_size, 1, integer=True)
  _number("min_size", min_size, smallest_min_size, integer=True)
  if min_size > max_size:
    raise ValueError(f"`min_size` ({min_size}) must be <= `max_size` ({max_size}): the "
                     f"table could never hold enough items to sample.")
  _number("priority_exponent", priority_exponent, 0, integer=False)
  if initial_priority is not None:
    _number("initial_priority", initial_priority, 0, integer=False, strict=True)
  if timeout is not None:
    _number("timeout", timeout, 0, integer=False, strict=True)
  if samples_per_insert is None:
    if error_buffer is not None:
      raise ValueError("`error_buffer` only applies with `samples_per_insert`; set both "
                       "or neither.")
    return
  _number("samples_per_insert", samples_per_insert, 0, integer=False, strict=True)
  if error_buffer is not None and not error_buffer >= max(1.0, samples_per_insert):
    raise ValueError(f"`error_buffer` ({error_buffer}) must be >= max(1, "
                     f"samples_per_insert) = {max(1.0, samples_per_insert)}; Reverb "
                     f"refuses smaller buffers, which could block inserts and samples.")
