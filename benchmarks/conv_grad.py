"""Conv-torso gradients on the CPU, alone and inside a loop: `hk.Conv2D` (JAX's own
gradient) against podracer's `conv2d` (components/networks/conv.py).

  python benchmarks/conv_grad.py [--batch=120] [--torsos=impala,nature] [--repeats=3]

For each torso, on `batch` uint8 84x84x4 frames, it times one SGD step on the sum of the
squared features, jitted alone ("alone") and as a one-step `lax.scan` ("in a scan", as
learners run it), with each convolution; medians of `repeats` calls after a warm-up.
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


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=120)
  parser.add_argument("--torsos", default="impala,nature")
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
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
