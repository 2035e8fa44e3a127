"""Installs podracer.

Two install lanes, each with a lock file used as pip constraints (see scripts/setup_env.sh):

  default: pip install -c requirements/default.txt -e ".[test,jax-envs,wandb,meta,suites,video]"  (Python >= 3.11)
  reverb:  pip install -c requirements/reverb.txt -e ".[reverb,test]"     (Python 3.11 only)

The lower bounds below admit both lanes: the reverb lane holds JAX at 0.4.34 (the last
JAX that shares a numpy < 2 / TensorFlow 2.15 world with dm-reverb 0.14), the default lane
takes current JAX.
"""

import os
import re

from setuptools import find_packages, setup

_HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
  with open(os.path.join(_HERE, "podracer", "__init__.py"), encoding="utf-8") as f:
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
  if not match:
    raise RuntimeError("podracer/__init__.py does not define __version__")
  return match.group(1)


INSTALL_REQUIRES = [
    "absl-py>=1.4",
    "chex>=0.1.87",
    "dm-env>=1.6",
    "dm-haiku>=0.0.13",
    "dm-tree>=0.1.8",
    "envpool>=1.2.5",
    "jax>=0.4.34",
    "jaxlib>=0.4.34",
    "matplotlib>=3.8",
    # Search for MuZero (agents/muzero/): 0.0.5 in the reverb lane (jax 0.4.34), current in the default.
    "mctx>=0.0.5",
    "ml-collections>=0.1.1",
    "numpy>=1.26",
    "optax>=0.2.3",
    "rlax>=0.1.7",
    # TensorBoard event files without TensorFlow (needs protobuf only).
    "tensorboardX>=2.6",
    # Checkpoints (podracer/lifecycle/checkpoint.py).
    "orbax-checkpoint>=0.11.5",
    # Memory checks before allocation (podracer/lifecycle/memory.py).
    "psutil>=5.9",
    # SEED's workers on other machines (podracer/distributed/transport.py); dm-reverb
    # brings 1.85 too.
    "grpcio>=1.60",
    # Reports across runs (podracer/report.py): IQM and stratified bootstrap intervals.
    # Its arch (7.2) breaks on pandas 3's deprecation helper, so pandas stays below 3.
    "rliable>=1.2.0",
    "pandas<3",
]

EXTRAS_REQUIRE = {
    # Reverb (replay over gRPC). dm-reverb 0.14 ships wheels for CPython 3.11 only and needs
    # TensorFlow 2.15, hence numpy < 2 and the older JAX stack pinned here.
    "reverb": [
        'dm-reverb[tensorflow]==0.14.0; python_version == "3.11"',
        "jax==0.4.34",
        "jaxlib==0.4.34",
        "dm-haiku==0.0.13",
        "ml-dtypes==0.3.2",
        "numpy<2",
        "rlax==0.1.7",
        # Newest releases that still support JAX 0.4.34 (keeps the resolver from backtracking).
        "chex<0.1.91",
        "optax<0.2.6",
        "orbax-checkpoint<0.12",
    ],
    "test": ["pytest", "pytest-xdist", "gymnasium"],
    # Testing your own components with podracer.testing and its pytest fixtures
    # (podracer.testing_fixtures; docs/first-agent.md).
    "testing": ["pytest"],
    # The `tensorboard` command, to look at the event files runs write (tensorboardX).
    "tensorboard": ["tensorboard"],
    # The `wandb` logger (podracer/logs/wandb.py): Weights & Biases, offline by default.
    "wandb": ["wandb>=0.19"],
    "gymnasium": ["gymnasium"],
    # JAX environment suites for Anakin (gymnax: classic control, bsuite, MinAtar; Brax:
    # physics). The default lane installs them; gymnax 1.x needs jax >= 0.6 and Brax 0.14
    # current JAX, so the reverb lane has neither.
    "jax-envs": ["gymnax>=1.0.1", "brax>=0.14.2", "playground>=0.2.0"],
    # Meta-learning a policy objective (podracer/meta/): evosax's evolution strategies.
    # evosax 0.2 needs jax >= 0.5: the default lane installs it, the reverb lane cannot.
    "meta": ["evosax>=0.2.0"],
    # Networks of your own in Flax (linen or NNX) or Equinox, wrapped by
    # podracer.components.networks.module (adapters.py); Haiku's are podracer's own.
    "flax": ["flax>=0.10.0"],
    "equinox": ["equinox>=0.11.0"],
    # The JAX suites researchers report on (podracer/components/environments/; docs/
    # environments.md), each its own extra; `suites` installs them all (the default lane
    # does; all need current JAX, so the reverb lane has none).
    "craftax": ["craftax>=1.6.1"],
    "jaxtari": ["jaxtari>=0.2.0"],
    "jumanji": ["jumanji>=1.1.2"],
    "navix": ["navix>=0.7.4"],
    "pgx": ["pgx>=2.6.0"],
    "xminigrid": ["xminigrid>=0.9.3"],
    # Videos of an agent playing (podracer/lifecycle/video.py): GIF through Pillow, MP4
    # through imageio-ffmpeg's ffmpeg.
    "video": ["imageio>=2.31", "imageio-ffmpeg>=0.5"],
    # The DeepMind Control Suite from states or pixels (dm_control source, for Sebulba's
    # threads and SEED's workers). dm-control 1.0.50 does not load on mujoco 4.0 (its
    # MjModel lacks flex_vertedge), so the lane pins mujoco at mujoco-mjx's own 3.17.0,
    # which MJX, Brax and Playground accept (docs/environments.md); `suites` includes it.
    "dm-control": ["dm-control>=1.0.50", "mujoco>=3.17.0,<4"],
    "suites": ["craftax>=1.6.1", "jaxtari>=0.2.0", "jumanji>=1.1.2", "navix>=0.7.4",
               "pgx>=2.6.0", "xminigrid>=0.9.3", "dm-control>=1.0.50", "mujoco>=3.17.0,<4"],
}

setup(
    name="podracer",
    version=_version(),
    description="The Podracer architectures (Anakin, Sebulba) as a pluggable JAX framework.",
    packages=find_packages(include=["podracer", "podracer.*", "agents", "agents.*"]),
    python_requires=">=3.11",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": ["podracer-launch = podracer.launch:entry_point"]},
)
