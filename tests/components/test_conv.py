"""Tests for `conv2d` / `Conv2D` (components/networks/conv.py): JAX's convolution with
gradients that XLA:CPU runs on its fast kernels inside loops."""

import re

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.components.networks import conv, torsos

DIMS = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize("size,kernel,stride,padding", [
    (12, 3, 1, "SAME"), (36, 8, 4, "VALID"), (13, 4, 2, "VALID"), (11, 3, 2, "SAME"),
    (10, 3, 1, ((2, 0), (1, 3)))])
@pytest.mark.reverb_lane
def test_conv2d_values_and_gradients_equal_jax_convolution(size, kernel, stride, padding):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((3, size, size + 1, 5), np.float32))
  w = jnp.asarray(rng.standard_normal((kernel, kernel, 5, 7), np.float32))
  reference = lambda x, w: jax.lax.conv_general_dilated(
      x, w, (stride, stride), padding, dimension_numbers=DIMS)
  ours = lambda x, w: conv.conv2d(x, w, stride, padding)
  np.testing.assert_allclose(jax.jit(ours)(x, w), jax.jit(reference)(x, w),
                             rtol=1e-5, atol=1e-5)
  loss = lambda f: lambda x, w: jnp.sum(jnp.sin(f(x, w)))
  for got, want in zip(jax.jit(jax.grad(loss(ours), (0, 1)))(x, w),
                       jax.jit(jax.grad(loss(reference), (0, 1)))(x, w)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  # Both branches of the backward pass (CPU and accelerators) agree.
  stride2 = (stride, stride)
  pads = tuple(jax.lax.padtype_to_pads(x.shape[1:3], w.shape[:2], stride2, padding)
               if isinstance(padding, str) else padding)
  dy = jnp.cos(reference(x, w))
  branches = [jax.jit(f, static_argnums=(3, 4))(x, w, dy, stride2, pads)
              for f in (conv._canonical_grads, conv._jax_grads)]
  for got, want in zip(*branches):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("height,width,padding", [
    (3, 2, "SAME"), (2, 2, "SAME"), (1, 5, ((1, 1), (0, 2))), (2, 7, ((1, 0), (1, 1)))])
def test_a_kernel_overhanging_the_map_is_a_matmul_on_cpu_with_jaxs_values_and_gradients(
    height, width, padding):
  """On a map a side of the kernel overhangs (MuZero's dynamics on pixel Catch's 3x2
  map), the CPU computes the convolution as one matrix product of shifted views, forward
  and backward (no convolution compiled), with the convolution's values and gradients."""
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.standard_normal((4, height, width, 35), np.float32))
  w = jnp.asarray(rng.standard_normal((3, 3, 35, 32), np.float32))
  reference = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), padding,
                                                        dimension_numbers=DIMS)
  ours = lambda x, w: conv.conv2d(x, w, 1, padding)
  np.testing.assert_allclose(jax.jit(ours)(x, w), jax.jit(reference)(x, w),
                             rtol=1e-4, atol=1e-4)
  loss = lambda f: lambda x, w: jnp.sum(jnp.sin(f(x, w)))
  grads = jax.jit(jax.grad(loss(ours), (0, 1)))
  for got, want in zip(grads(x, w), jax.jit(jax.grad(loss(reference), (0, 1)))(x, w)):
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
  assert "convolution" not in grads.lower(x, w).compile().as_text()
  # A map the kernel fits keeps XLA's convolution.
  wide = jnp.zeros((4, 5, 5, 35), jnp.float32)
  assert "convolution" in jax.jit(ours).lower(wide, w).compile().as_text()


def test_conv2d_module_has_hk_conv2d_parameters_and_outputs():
  x = jnp.asarray(np.random.default_rng(1).standard_normal((2, 9, 9, 4), np.float32))
  for w_init in (None, hk.initializers.Orthogonal(np.sqrt(2))):
    nets = [hk.without_apply_rng(hk.transform(
        lambda x, m=module: m(6, 3, stride=2, padding="VALID", w_init=w_init, name="c")(x)))
        for module in (hk.Conv2D, conv.Conv2D)]
    params = [net.init(jax.random.PRNGKey(0), x) for net in nets]
    assert jax.tree.map(jnp.shape, params[0]) == jax.tree.map(jnp.shape, params[1])
    jax.tree.map(np.testing.assert_array_equal, params[0], params[1])
    np.testing.assert_allclose(nets[1].apply(params[0], x), nets[0].apply(params[0], x),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("torso,size", [(torsos.ImpalaResNet, 36), (torsos.NatureCNN, 84)])
def test_torso_gradients_in_a_loop_compile_to_plain_nhwc_convolutions(torso, size):
  """Inside a scan, as learners run them, every convolution of the compiled gradient is
  NHWC x HWIO -> NHWC (XLA's `b01f_01io->b01f`): JAX's own transposed forms run on
  XLA:CPU's slow path there, about 19x slower (benchmarks/conv_grad.py)."""
  frames = jnp.zeros((2, 4, size, size), jnp.uint8)
  net = hk.without_apply_rng(hk.transform(lambda x: torso(hidden_size=8)(x)))
  params = net.init(jax.random.PRNGKey(0), frames)
  grad = jax.grad(lambda p: jnp.sum(net.apply(p, frames)))
  step = lambda p: jax.lax.scan(
      lambda p, _: (jax.tree.map(lambda a, g: a - g, p, grad(p)), None), p, None, length=2)[0]
  text = jax.jit(step).lower(params).compile().as_text()
  labels = re.findall(r"dim_labels=([\w>-]+)", text)
  # Forward and dw for every layer, dx for all but the first.
  assert len(labels) >= 3 * len([k for k in params if "conv" in k]) - 1
  assert set(labels) == {"b01f_01io->b01f"}
