"""Conv-torso gradients on the CPU, alone and inside a loop: `hk.Conv2D` (JAX's own
gradient) against podracer's `conv2d` (components/networks/conv.py).

  python benchmarks/conv_grad.py [--batch=120] [--torsos=impala,nature] [--repeats=3]
  python benchmarks/conv_grad.py --maps [--batch=64]

For each torso, on `batch` uint8 84x84x4 frames, it times one SGD step on the sum of the
squared features, jitted alone ("alone") and as a one-step `lax.scan` ("in a scan", as
learners run it), with each convolution; medians of `repeats` calls after a warm-up.

`--maps`: one 3x3 convolution's value and gradients (35 channels in, 32 out, stride 1,
SAME) on small maps, `lax.conv_general_dilated` against `conv2d`, which computes it as a
matrix product where the kernel overhangs the map (MuZero's dynamics on pixel Catch's
3x2 map).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import haiku as hk  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.timing import median_seconds  # noqa: E402
from podracer.components.networks import conv, torsos  # noqa: E402

TORSOS = {"impala": torsos.ImpalaResNet, "nature": torsos.NatureCNN}


def sgd_steps(torso: str, conv_module, frames):
  torsos.Conv2D = conv_module  # The torsos look it up when called.
  net = hk.without_apply_rng(hk.transform(lambda x: TORSOS[torso]()(x)))
  params = net.init(jax.random.PRNGKey(0), frames[:1])
  grad = jax.grad(lambda p, x: jnp.sum(jnp.square(net.apply(p, x))))
  step = lambda p, x: jax.tree.map(lambda a, g: a - 1e-6 * g, p, grad(p, x))
  in_scan = lambda p, x: jax.lax.scan(lambda p, _: (step(p, x), None), p, None, length=1)[0]
  return params, jax.jit(step), jax.jit(in_scan)


def maps(batch: int, repeats: int) -> None:
  """`--maps`: a 3x3 convolution's forward and backward on small maps."""
  print(f"{'map':>6} {'lax conv ms':>12} {'conv2d ms':>10} {'lax/conv2d':>11}")
  rng = np.random.default_rng(0)
  w = jnp.asarray(rng.standard_normal((3, 3, 35, 32), np.float32))
  for height, width in ((2, 2), (3, 2), (5, 3), (6, 6), (11, 11)):
    x = jnp.asarray(rng.standard_normal((batch, height, width, 35), np.float32))
    times = []
    for f in (lambda x, w: jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
              lambda x, w: conv.conv2d(x, w, 1, "SAME")):
      step = jax.jit(jax.grad(lambda x, w, f=f: jnp.sum(jnp.sin(f(x, w))), (0, 1)))
      times.append(median_seconds(step, x, w, repeats=repeats) * 1e3)
    print(f"{height}x{width:<4} {times[0]:>12.3f} {times[1]:>10.3f} "
          f"{times[0] / times[1]:>11.2f}", flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=120)
  parser.add_argument("--torsos", default="impala,nature")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--maps", action="store_true",
                      help="Time one convolution on small maps instead (module doc).")
  args = parser.parse_args()
  if args.maps:
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, batch {args.batch}, "
          f"median of {args.repeats}")
    return maps(args.batch, args.repeats)
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPU "
        f"core(s); {args.batch} frames [4, 84, 84] uint8; median of {args.repeats}")
  frames = jnp.asarray(np.random.default_rng(0).integers(0, 256, (args.batch, 4, 84, 84),
                                                         dtype=np.uint8))
  header = f"{'torso':>7} {'convolution':>12} {'alone s':>9} {'in a scan s':>12} {'scan/alone':>11}"
  print(header)
  print("-" * len(header))
  original = torsos.Conv2D
  try:
    for torso in args.torsos.split(","):
      for name, module in (("hk.Conv2D", hk.Conv2D), ("podracer", conv.Conv2D)):
        params, alone, in_scan = sgd_steps(torso, module, frames)
        a = median_seconds(alone, params, frames, repeats=args.repeats)
        s = median_seconds(in_scan, params, frames, repeats=args.repeats)
        print(f"{torso:>7} {name:>12} {a:>9.3f} {s:>12.3f} {s / a:>11.2f}", flush=True)
  finally:
    torsos.Conv2D = original


if __name__ == "__main__":
  main()
