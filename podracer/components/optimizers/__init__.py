"""Optimizer components: optax transformations built from config.

The builder injects `total_steps`, the number of optimizer steps of the whole run, so a
schedule can be written as a fraction of training.
"""

from __future__ import annotations

from typing import Annotated, Optional

import optax

from podracer import registry
from podracer.registry.ranges import NonNegative, Positive, Probability


def _clipped(max_grad_norm: Optional[float], transform: optax.GradientTransformation
             ) -> optax.GradientTransformation:
  """`transform` after global-norm clipping at `max_grad_norm` (None: no clipping)."""
  chain = [] if max_grad_norm is None else [optax.clip_by_global_norm(max_grad_norm)]
  return optax.chain(*chain, transform)


def _learning_rate(learning_rate: float, anneal: bool, total_steps: int):
  if not anneal:
    return learning_rate
  return optax.linear_schedule(learning_rate, 0.0, transition_steps=max(total_steps, 1))


@registry.optimizers.register("adam")
def adam(total_steps: int, learning_rate: Annotated[float, Positive] = 3e-4,
         eps: Annotated[float, Positive] = 1e-5,
         max_grad_norm: Optional[Annotated[float, Positive]] = 0.5, anneal: bool = False,
         b1: Annotated[float, Probability] = 0.9, b2: Annotated[float, Probability] = 0.999) -> optax.GradientTransformation:
  """Adam with optional global-norm clipping and linear decay to zero."""
  return _clipped(max_grad_norm, optax.adam(_learning_rate(learning_rate, anneal, total_steps),
                                            b1=b1, b2=b2, eps=eps))


@registry.optimizers.register("rmsprop")
def rmsprop(total_steps: int, learning_rate: Annotated[float, Positive] = 6e-4,
            decay: Annotated[float, Probability] = 0.99, eps: Annotated[float, Positive] = 1e-8,
            momentum: Annotated[float, NonNegative] = 0.0,
            max_grad_norm: Optional[Annotated[float, Positive]] = 40.0,
            anneal: bool = False) -> optax.GradientTransformation:
  """RMSProp as IMPALA used it, with optional clipping and linear decay."""
  return _clipped(max_grad_norm, optax.rmsprop(
      _learning_rate(learning_rate, anneal, total_steps), decay=decay, eps=eps,
      momentum=momentum or None))


@registry.optimizers.register("radam")
def radam(total_steps: int, learning_rate: Annotated[float, Positive] = 2.5e-4,
          eps: Annotated[float, Positive] = 1e-8,
          max_grad_norm: Optional[Annotated[float, Positive]] = 10.0, anneal: bool = False,
          b1: Annotated[float, Probability] = 0.9,
          b2: Annotated[float, Probability] = 0.999) -> optax.GradientTransformation:
  """Rectified Adam (Liu et al. 2020) with optional clipping and linear decay: PQN's
  optimizer (purejaxql: global-norm clipping at 10, then RAdam)."""
  return _clipped(max_grad_norm, optax.radam(
      _learning_rate(learning_rate, anneal, total_steps), b1=b1, b2=b2, eps=eps))
