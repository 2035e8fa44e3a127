"""Watching an agent play: its evaluation policy's episodes as a video.

A JAX environment that renders has `render(state) -> uint8 [H, W, 3]` (CartPole, Catch,
PixelCatch, gymnax's MinAtar, Navix, Craftax-Classic, JAXtari, Pgx's boards); `record`
plays `episodes` episodes of one environment with `Agent.eval_act` in one jitted
`lax.scan`, rendering every state. A host environment that renders (EnvPool's, made with
`render_mode="rgb_array"`) has `render()` of its environment 0; `record_host` plays it
step by step (Sebulba's and SEED's runs). And
`write` encodes the frames: MP4 where imageio finds ffmpeg (imageio-ffmpeg), GIF
otherwise (Pillow, which matplotlib brings). `--config.eval_video=N` writes N episodes
into `WORKDIR/videos/` at the end of a run (and into TensorBoard and W&B, where
those loggers are on); `python -m podracer.play --workdir=RUN` does it for a saved run.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from podracer.errors import ConfigError, MissingPackage, require
from podracer.runtime import NotSupported
from podracer.types import StepType

FPS = 10


def renders(env: Any) -> bool:
  return callable(getattr(env, "render", None))


def check_renders(env: Any, what: str) -> None:
  """A ConfigError, one line, for an environment that cannot be watched (or no imageio)."""
  try:
    require_imageio()
  except MissingPackage as e:
    raise ConfigError(f"{what}: {e}") from e
  listed = ("Environments that render: cartpole, catch, pixel_catch, gymnax (MinAtar), "
            "navix, craftax (Classic), jaxtari, pgx (board games of two stone colours); "
            "on the host, envpool.")
  if not renders(env):
    raise ConfigError(f"{what}: environment {env!r} does not render (no "
                      f"`render(state)`), so it cannot be watched. {listed}")
  if getattr(env, "kind", None) == "jax":
    try:  # Traced, not run: some draw only some of their games (Craftax-Classic...).
      jax.eval_shape(lambda key: env.render(env.reset(key)[0]), jax.random.PRNGKey(0))
    except NotImplementedError as e:
      raise ConfigError(f"{what}: environment {env!r} does not render ({e}). "
                        f"{listed}") from e


def watchable_env(runtime: Any, what: str, seed: int = 0) -> Any:
  """What a run is watched in, if it can be (imageio installed): the runtime's
  `environment_to_watch` (a JAX environment, or one host environment made to render,
  which the caller closes) once it is known to render; else a ConfigError saying why
  not, naming `what` asked."""
  try:
    env = runtime.environment_to_watch(seed)
  except NotSupported as e:
    raise ConfigError(f"{what}: {e}") from None
  except (TypeError, ValueError, ConfigError) as e:  # It takes no render_mode.
    raise ConfigError(f"{what}: this host environment cannot be made to render ({e}). "
                      f"Host environments that render: envpool (Atari, classic control).") from e
  try:
    check_renders(env, what)
  except ConfigError:
    if getattr(env, "kind", None) != "jax":
      env.close()
    raise
  return env


def record_host(agent: Any, env: Any, nets: Any, key: jax.Array, episodes: int,
                max_steps: int = 30_000) -> np.ndarray:
  """As `record`, on a host environment of one (`watchable_env`), step by step: frame t
  is the screen step t acts on; the frame after the last episode's LAST shows its end."""
  act = jax.jit(agent.eval_act)
  timestep, _ = env.reset()
  key, actor_key = jax.random.split(key)
  actor = agent.init_eval_actor(actor_key, 1)
  frames, ended = [], 0
  for _ in range(max_steps):
    frames.append(np.asarray(env.render(), np.uint8))
    if ended >= episodes:
      break
    key, act_key = jax.random.split(key)
    out, actor = act(nets, actor, timestep, act_key)
    timestep, _ = env.step(np.asarray(out.action))
    ended += int(np.asarray(timestep.step_type)[0] == StepType.LAST)
  return np.stack(frames)


def record_run(agent: Any, env: Any, nets: Any, key: jax.Array, episodes: int) -> np.ndarray:
  """`record` on a JAX environment, `record_host` on a host one (which it closes)."""
  if getattr(env, "kind", None) == "jax":
    return record(agent, env, nets, key, episodes)
  try:
    return record_host(agent, env, nets, key, episodes)
  finally:
    env.close()


def record(agent: Any, env: Any, nets: Any, key: jax.Array, episodes: int,
           max_steps: int = 2_000) -> np.ndarray:
  """Frames uint8 [T, H, W, 3] of `episodes` whole episodes of the evaluation policy, each
  from its reset to its last state (fewer if `max_steps` steps end first)."""
  frames, step_type = _play(agent, env, nets, key, max_steps)
  frames, step_type = np.asarray(frames), np.asarray(step_type)
  ends = np.flatnonzero(step_type == StepType.LAST)
  # Frame t is the state step t acted on; the frame after a LAST step shows the end.
  stop = int(ends[episodes - 1]) + 2 if len(ends) >= episodes else len(frames)
  return frames[:stop]


def _play(agent, env, nets, key, max_steps):
  @jax.jit
  def play(nets, key):
    reset_key, actor_key, key = jax.random.split(key, 3)
    env_state, timestep = env.reset(reset_key)
    actor = agent.init_eval_actor(actor_key, 1)

    def step(carry, key):
      env_state, timestep, actor = carry
      frame = env.render(env_state)
      act_key, reset_key = jax.random.split(key)
      batched = jax.tree.map(lambda x: x[None], timestep)
      out, actor = agent.eval_act(nets, actor, batched, act_key)
      stepped = env.step(env_state, out.action[0])
      restarted = env.reset(reset_key)
      last = timestep.step_type == StepType.LAST
      env_state, timestep = jax.tree.map(lambda a, b: jnp.where(last, a, b), restarted,
                                         stepped)
      return (env_state, timestep, actor), (frame, timestep.step_type)

    return jax.lax.scan(step, (env_state, timestep, actor),
                        jax.random.split(key, max_steps))[1]
  return play(nets, key)


def require_imageio() -> Any:
  """imageio.v3, or a MissingPackage naming the extra that installs it."""
  return require("imageio.v3", "Videos", "pip install -e \".[video]\" (the default lane "
                 "has it; the reverb lane does not)")


def encode(frames: np.ndarray, fmt: str, fps: int = FPS) -> bytes:
  """The frames as a GIF's or an MP4's bytes."""
  iio = require_imageio()
  frames = np.asarray(frames, np.uint8)
  if fmt == "gif":
    return iio.imwrite("<bytes>", list(frames), extension=".gif",
                       duration=1000 / fps, loop=0)
  return iio.imwrite("<bytes>", frames, extension=".mp4", fps=fps, plugin="FFMPEG")


def has_ffmpeg() -> bool:
  try:
    import imageio_ffmpeg  # pylint: disable=import-outside-toplevel
    return bool(imageio_ffmpeg.get_ffmpeg_exe())
  except (ImportError, RuntimeError):
    return False


def write(path_without_suffix: str, frames: np.ndarray, fps: int = FPS,
          fmt: Optional[str] = None) -> str:
  """Writes `frames` as PATH.mp4 (ffmpeg found) or PATH.gif; returns the path."""
  fmt = fmt or ("mp4" if has_ffmpeg() else "gif")
  path = f"{path_without_suffix}.{fmt}"
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  data = encode(frames, fmt, fps)
  with open(path, "wb") as f:
    f.write(data)
  return path


def gif_summary(tag: str, frames: np.ndarray, fps: int = FPS) -> Any:
  """A TensorBoard image summary whose image is an animated GIF (what TensorBoard's
  image dashboard plays, and what tensorboardX's add_video writes through moviepy)."""
  from tensorboardX.proto.summary_pb2 import Summary  # pylint: disable=import-outside-toplevel
  _, height, width, channels = np.shape(frames)
  image = Summary.Image(height=height, width=width, colorspace=channels,
                        encoded_image_string=encode(frames, "gif", fps))
  return Summary(value=[Summary.Value(tag=tag, image=image)])
