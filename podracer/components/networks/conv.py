"""A 2-D convolution whose gradient stays on XLA:CPU's fast kernels inside loops.

Learners run their gradient steps inside `lax.scan`s (PPO's epochs and minibatches,
Anakin's updates per call, Sebulba's updates per batch). Inside a loop body, XLA:CPU
keeps the gradient convolutions that JAX's transpose rules emit in their transposed
dimension orders and runs them on a slow generic path, where outside a loop it moves
them to its fast kernels. On 2 cores, with jax 0.10.2 and 0.4.34 alike, a conv torso's
gradient step was about 19x slower in a one-step scan than alone
(`benchmarks/conv_grad.py`); a Sebulba IMPALA learner step on 480 Pong frames took 130 s
(5.6 s for the same update outside a loop), PPO's Pong update 535 s.

`conv2d` computes the same convolution (NHWC input, HWIO kernel), and on CPU writes both
gradients as plain NHWC/HWIO convolutions with explicit transposes around them, which
XLA:CPU runs fast wherever they are. Elsewhere it uses JAX's own gradient: cuDNN and
TPUs want those forms, and the kernel gradient below, a convolution with the image as
its window, would be a poor one for them.

On a map that a side of the kernel overhangs (a stride-1 convolution on a map narrower
than the kernel: MuZero's dynamics and the IMPALA torso's last section on pixel Catch's
3x2 map), XLA:CPU's convolution is slow at any batch: 2.5-5x slower, forward and
backward, than the same sums as one matrix product over the kernel's shifted views of
the padded map, which `conv2d` computes there on CPU instead (`_shifted_matmul`; on a
5x3 map or larger the convolution is as fast or faster).
"""

from __future__ import annotations

from functools import partial
from typing import Optional, Sequence, Tuple, Union

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

_DIMS = ("NHWC", "HWIO", "NHWC")
Pads = Tuple[Tuple[int, int], Tuple[int, int]]


def _forward(x, w, stride, pads):
  return jax.lax.conv_general_dilated(x, w, stride, pads, dimension_numbers=_DIMS)


def _overhangs(x_shape, w_shape, stride, pads) -> bool:
  """Whether `conv2d` computes this convolution as `_shifted_matmul` on CPU."""
  (height, width), (kh, kw) = x_shape[1:3], w_shape[:2]
  return (tuple(stride) == (1, 1) and height * width > 1 and (height < kh or width < kw)
          and min(min(p) for p in pads) >= 0)


def _shifted_matmul(x, w, pads):
  """The stride-1 convolution as one matrix product: each output position's window of
  the padded map, the kernel's kh x kw shifted views side by side on the channel axis,
  times the kernel flattened in the same (row, column, channel) order."""
  kh, kw, channels, out = w.shape
  padded = jnp.pad(x, ((0, 0), *pads, (0, 0)))
  rows, cols = padded.shape[1] - kh + 1, padded.shape[2] - kw + 1
  views = [padded[:, i:i + rows, j:j + cols, :] for i in range(kh) for j in range(kw)]
  return jnp.concatenate(views, axis=-1) @ w.reshape(kh * kw * channels, out)


def _canonical_grads(x, w, dy, stride: Tuple[int, int], pads: Pads):
  """d/dx and d/dw of `_forward`, each one NHWC/HWIO convolution."""
  kernel = w.shape[:2]
  # dx: the output gradient, dilated by the stride, convolved in full with the flipped
  # kernel (input and output channels swapped).
  flipped = jnp.transpose(jnp.flip(w, (0, 1)), (0, 1, 3, 2))
  dx_pads = tuple((k - 1 - lo, n - 1 + lo - (m - 1) * s) for k, (lo, _), n, m, s in zip(
      kernel, pads, x.shape[1:3], dy.shape[1:3], stride))
  dx = jax.lax.conv_general_dilated(dy, flipped, (1, 1), dx_pads, lhs_dilation=stride,
                                    dimension_numbers=_DIMS)
  # dw[i, j, c, o] = sum_{b, h, w} x_pad[b, s h + i, s w + j, c] dy[b, h, w, o]: a
  # convolution with the channels as its batch, the batch as its features and the
  # (stride-dilated) output gradient as its kernel.
  dw = jax.lax.conv_general_dilated(
      jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(dy, (1, 2, 0, 3)), (1, 1), pads,
      rhs_dilation=stride, dimension_numbers=_DIMS)
  dw = jnp.transpose(dw[:, :kernel[0], :kernel[1], :], (1, 2, 0, 3))
  return dx, dw


def _jax_grads(x, w, dy, stride, pads):
  return jax.vjp(lambda x, w: _forward(x, w, stride, pads), x, w)[1](dy)


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _conv(x, w, stride, pads):
  return _forward(x, w, stride, pads)


def _conv_fwd(x, w, stride, pads):
  return _forward(x, w, stride, pads), (x, w)


def _conv_bwd(stride, pads, residuals, dy):
  x, w = residuals
  return jax.lax.platform_dependent(
      x, w, dy, cpu=partial(_canonical_grads, stride=stride, pads=pads),
      default=partial(_jax_grads, stride=stride, pads=pads))


_conv.defvjp(_conv_fwd, _conv_bwd)


def conv2d(x: jax.Array, w: jax.Array, stride: Union[int, Sequence[int]] = 1,
           padding: Union[str, Sequence[Tuple[int, int]]] = "SAME") -> jax.Array:
  """`lax.conv_general_dilated(x, w, stride, padding)` for x [B, H, W, C] and w
  [kh, kw, C, O]: the same values and gradients, fast gradients on CPU (module doc)."""
  stride = (stride, stride) if isinstance(stride, int) else tuple(stride)
  if isinstance(padding, str):
    padding = jax.lax.padtype_to_pads(x.shape[1:3], w.shape[:2], stride, padding)
  pads = tuple((int(lo), int(hi)) for lo, hi in padding)
  if _overhangs(x.shape, w.shape, stride, pads):  # JAX differentiates the matmul.
    return jax.lax.platform_dependent(x, w, cpu=partial(_shifted_matmul, pads=pads),
                                      default=lambda x, w: _conv(x, w, stride, pads))
  return _conv(x, w, stride, pads)


class Conv2D(hk.Module):
  """`hk.Conv2D` for NHWC inputs through `conv2d`: the same parameters ("w" [k, k, C, O]
  and "b" [O]), created in the same order, so checkpoints and seeds carry over."""

  def __init__(self, output_channels: int, kernel_shape: int, stride: int = 1,
               padding: str = "SAME", w_init: Optional[hk.initializers.Initializer] = None,
               name: Optional[str] = None):
    super().__init__(name=name)
    self.output_channels, self.kernel_shape = output_channels, kernel_shape
    self.stride, self.padding, self.w_init = stride, padding, w_init

  def __call__(self, x: jax.Array) -> jax.Array:
    shape = (self.kernel_shape, self.kernel_shape, x.shape[-1], self.output_channels)
    w_init = self.w_init
    if w_init is None:  # hk.Conv2D's default
      w_init = hk.initializers.TruncatedNormal(1.0 / np.sqrt(np.prod(shape[:-1])))
    w = hk.get_parameter("w", shape, x.dtype, init=w_init)
    b = hk.get_parameter("b", (self.output_channels,), x.dtype, init=jnp.zeros)
    return conv2d(x, w, self.stride, self.padding) + b
