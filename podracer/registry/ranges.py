"""The range of a numeric config key, declared once where the key is defined: in the
component's signature, with `typing.Annotated`:

    from podracer.registry.ranges import Positive, Probability

    def adam(total_steps: int, learning_rate: Annotated[float, Positive] = 3e-4, ...)

`registry.build` (through `check_kwargs`) refuses a value outside its range before the
component is built: a ConfigError naming the key, the value and the range, which the
launcher prints as one paragraph with exit status 2. None passes (a key left unset or
switched off, such as `max_grad_norm=None`); NaN and infinities never do.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from typing import Any, Callable, Dict, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class Range:
  """low <= x <= high (or strict where `open_low` / `open_high`), finite, a real number."""
  words: str
  low: float = -math.inf
  high: float = math.inf
  open_low: bool = False
  open_high: bool = False

  def admits(self, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
      return False
    x = float(value)
    if not math.isfinite(x):
      return False
    above = x > self.low if self.open_low else x >= self.low
    below = x < self.high if self.open_high else x <= self.high
    return above and below

  def interval(self) -> str:
    left = "(" if self.open_low else "["
    right = ")" if self.open_high else "]"
    fmt = lambda v: "inf" if math.isinf(v) else f"{v:g}"
    return f"{left}{fmt(self.low)}, {fmt(self.high)}{right}"


Probability = Range("a probability", 0.0, 1.0)
Fraction = Range("a fraction", 0.0, 1.0, open_low=True)          # (0, 1]: e.g. Polyak tau
Positive = Range("a positive number", 0.0, open_low=True)          # rates, clip bounds
NonNegative = Range("a non-negative number", 0.0)                   # loss coefficients
Finite = Range("a finite number")


def declared_ranges(factory: Callable[..., Any]) -> Dict[str, Range]:
  """{parameter: Range} from `factory`'s `Annotated[..., Range]` annotations (for a class,
  its constructor's)."""
  target = factory.__init__ if isinstance(factory, type) else factory
  try:
    hints = typing.get_type_hints(target, include_extras=True)
  except Exception:  # pylint: disable=broad-except -- unresolvable hints declare nothing
    return {}
  ranges = {}
  for name, hint in hints.items():
    for meta in getattr(hint, "__metadata__", ()):
      if isinstance(meta, Range):
        ranges[name] = meta
  return ranges


def out_of_range(factory: Callable[..., Any],
                 kwargs: Dict[str, Any]) -> Optional[Tuple[str, str]]:
  """(parameter, why) for the first value of `kwargs` outside its declared range; None."""
  for name, allowed in declared_ranges(factory).items():
    value = kwargs.get(name)
    # One run's swept value (podracer/config/runs.py), checked before tracing.
    if _traced(value):
      continue
    if value is not None and not allowed.admits(value):
      return name, f"is {allowed.words} in {allowed.interval()}, got {value!r}"
  return None


def _traced(value: Any) -> bool:
  """Whether `value` is an array inside a JAX trace rather than a config number."""
  return (not isinstance(value, (numbers.Number, str, bytes)) and hasattr(value, "shape")
          and type(value).__name__.endswith("Tracer"))
