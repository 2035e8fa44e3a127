"""Makes a compiled step fail loudly when it is traced a second time.

A second trace means a second compilation, nearly always because some input changed
type between calls (a weak-typed scalar in an initial state is the usual culprit). The
error names the inputs whose shape, dtype or weak type changed.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

import jax

from podracer.errors import RecompilationError


def _signature(args: Any) -> List[Tuple[str, str]]:
  leaves, _ = jax.tree_util.tree_flatten_with_path(args)
  sig = []
  for path, leaf in leaves:
    aval = getattr(leaf, "aval", None)
    desc = (f"{aval.str_short()} weak_type={getattr(aval, 'weak_type', False)}"
            if aval is not None else repr(type(leaf)))
    sig.append((jax.tree_util.keystr(path), desc))
  return sig


def compile_once(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
  """Wraps `fn` (before jit or mesh.spmd) so that tracing it twice raises RecompilationError."""
  first: List[Optional[List[Tuple[str, str]]]] = [None]

  @functools.wraps(fn)
  def traced(*args):
    sig = _signature(args)
    if first[0] is not None:
      changed = [f"{p}: {a} -> {b}" for (p, a), (_, b) in zip(first[0], sig) if a != b]
      if len(first[0]) != len(sig):
        changed.append(f"number of inputs {len(first[0])} -> {len(sig)}")
      raise RecompilationError(
          f"{name} was compiled a second time; it must compile once. Inputs that "
          f"changed: {'; '.join(changed) or 'none visible (static arguments?)'}. Make "
          f"state strongly typed with podracer.types.strip_weak_types.")
    first[0] = sig
    return fn(*args)

  return traced
