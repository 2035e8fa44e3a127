"""Watch a saved run's agent play: its newest checkpoint's evaluation policy, as a video.

  python -m podracer.play --workdir=runs/catch            # runs/catch/videos/play.mp4
  python -m podracer.play --workdir=runs/sweep --run=3 --episodes=5 --format=gif

Rebuilds the run from WORKDIR/config.json, restores its newest checkpoint and plays
`--episodes` episodes of one environment (podracer.lifecycle.video). The environment must
render: Anakin's JAX ones (cartpole, catch, pixel_catch, navix, craftax, jaxtari...) or,
for a Sebulba or SEED run, EnvPool's (Atari, classic control); anything else is one line
saying so, exit 2.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from typing import Any, Dict, Optional, Sequence, Tuple

from absl import flags
import jax
import ml_collections

from podracer import builder
from podracer.errors import ConfigError
from podracer.lifecycle import checkpoint, video
from podracer.lifecycle.workdir import CONFIG_FILE

def load_config(workdir: str) -> ml_collections.ConfigDict:
  path = os.path.join(workdir, CONFIG_FILE)
  try:
    with open(path, encoding="utf-8") as f:
      return ml_collections.ConfigDict(json.load(f))
  except (OSError, ValueError) as e:
    raise ConfigError(f"No run to play in {workdir}: cannot read {path} ({e}).") from e


def _on_saved_mesh(config: ml_collections.ConfigDict, meta: Dict[str, Any]) -> None:
  """Lays the run on the mesh its checkpoint was saved on (runs x data devices)."""
  mesh = meta.get("mesh")
  if mesh and config.topology.get("name") == "replicate":
    runs, data = mesh
    if runs * data > jax.device_count():
      raise ConfigError(
          f"The checkpoint was saved on {runs} x {data} devices and this machine has "
          f"{jax.device_count()}; play it where there are as many (on a CPU, "
          f"XLA_FLAGS=--xla_force_host_platform_device_count={runs * data}).")
    config.topology.update(dict(num_devices=runs * data, runs=runs, data=data))


def play(workdir: str, episodes: int = 2, run: int = 0, fmt: Optional[str] = None,
         out: Optional[str] = None, seed: int = 0) -> str:
  """Writes a video of the newest checkpoint of `workdir` playing; returns its path."""
  from podracer import launch  # pylint: disable=import-outside-toplevel
  launch.register_components_and_agents()
  config = load_config(workdir)
  if not checkpoint.has_checkpoint(workdir):
    raise ConfigError(f"{workdir} has no checkpoint to play (runs write one at their end "
                      "and every `checkpoint_interval` seconds).")
  checkpointer = checkpoint.Checkpointer(workdir)
  try:
    _on_saved_mesh(config, checkpointer.meta() or {})
    experiment = builder.build(config)
    runtime = experiment.runtime
    nets = runtime.saved_nets(checkpointer, run)
  finally:
    checkpointer.close()
  env = video.watchable_env(runtime, "podracer.play", seed=seed)
  frames = video.record_run(experiment.agent, env, nets, jax.random.PRNGKey(seed), episodes)
  return video.write(out or os.path.join(workdir, "videos", "play"), frames, fmt=fmt)


def _flags() -> Tuple[flags.FlagValues, Dict[str, Any]]:
  """podracer.play's flags, in values of their own (launch's share the global ones)."""
  values = flags.FlagValues()
  define = dict(flag_values=values)
  return values, dict(
      workdir=flags.DEFINE_string("workdir", None, "A run's directory (what launch wrote).",
                                  **define),
      episodes=flags.DEFINE_integer("episodes", 2, "Episodes to play.", **define),
      run=flags.DEFINE_integer("run", 0, "Which run of a many-runs directory.", **define),
      fmt=flags.DEFINE_enum("format", None, ["mp4", "gif"],
                            "mp4 (where ffmpeg is found, the default) or gif.", **define),
      out=flags.DEFINE_string("out", None, "Where to write, without suffix (default "
                              "WORKDIR/videos/play).", **define),
      seed=flags.DEFINE_integer("seed", 0, "Seed of the episodes' resets and actions.",
                                **define))


def main(argv: Optional[Sequence[str]] = None) -> int:
  """`python -m podracer.play --workdir=RUN ...`: 0, or 2 with one paragraph."""
  values, named = _flags()
  try:
    values(list(sys.argv if argv is None else argv))
    if not named["workdir"].value:
      raise ConfigError("podracer.play needs --workdir=RUN_DIR (a directory a run wrote).")
    path = play(**{k: flag.value for k, flag in named.items()})
  except (ConfigError, flags.Error) as e:
    sys.stderr.write("\n".join(textwrap.wrap(f"podracer.play: {e}", 88,
                                             break_long_words=False)) + "\n")
    return 2
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
