"""Watching an agent play: environments' renders, `record`, the written files decoded
(frame counts and sizes), `eval_video` at the end of a run into the workdir and
TensorBoard, `python -m podracer.play` on a saved run, and the refusals. imageio is the
default lane's (extra `video`); the reverb lane selects none of these tests."""

import glob
import os
import re
import struct
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import builder
from podracer.components.environments import CartPole, Catch
from podracer.errors import ConfigError
from podracer.lifecycle import video
from tests.learning import ROOT
from tests.test_launch import launch


def test_cartpole_draws_its_pole_where_the_angle_points():
  env = CartPole()
  state, _ = env.reset(jax.random.PRNGKey(0))
  upright = np.asarray(env.render(state._replace(theta=jnp.float32(0.0))))
  leaning = np.asarray(env.render(state._replace(theta=jnp.float32(0.2))))
  assert upright.shape == (120, 240, 3) and upright.dtype == np.uint8
  pole = lambda img: np.argwhere((img == [202, 152, 101]).all(-1))
  # The tip (the pole's topmost pixels) moves right when the pole leans right.
  top = lambda img: pole(img)[pole(img)[:, 0] == pole(img)[:, 0].min(), 1].mean()
  assert top(leaning) > top(upright) + 5


def test_minatar_is_drawn_in_gymnax_visualizers_colours():
  """Breakout-MinAtar's 10 x 10 grid at 20 pixels a cell: black where empty, each
  channel's cubehelix colour (gymnax's visualizer's) where it is the highest present."""
  from podracer.components.environments import Gymnax  # pylint: disable=import-outside-toplevel
  from podracer.components.environments.gymnax_adapter import minatar_palette  # pylint: disable=import-outside-toplevel
  env = Gymnax("Breakout-MinAtar")
  state, timestep = env.reset(jax.random.PRNGKey(0))
  image = np.asarray(env.render(state))
  assert image.shape == (200, 200, 3) and image.dtype == np.uint8
  grid = np.asarray(timestep.observation)
  highest = np.max(grid * np.arange(1, 5), axis=-1).astype(int)
  np.testing.assert_array_equal(image[10::20, 10::20], minatar_palette(4)[highest])
  assert len(np.unique(highest)) >= 3 and (image[10::20, 10::20][highest == 0] == 0).all()


def test_pgx_draws_each_players_stones_in_its_colour_and_go_is_refused():
  """Connect four after moves 3, 3, 2: the first mover's two stones and the second's one
  in their colours, wherever the turn is; a game of more planes (Go) is refused by name."""
  from podracer.components.environments import Pgx  # pylint: disable=import-outside-toplevel
  env = Pgx("connect_four", opponent="self")
  state, _ = env.reset(jax.random.PRNGKey(0))
  first = int(state.game.current_player)
  for action in (3, 3, 2):
    state, _ = env.step(state, jnp.int32(action))
  image = np.asarray(env.render(state))
  assert image.shape == (6 * 24, 7 * 24, 3) and image.dtype == np.uint8
  red, yellow = (image == [220, 40, 40]).all(-1), (image == [240, 210, 40]).all(-1)
  stones_of = {0: red, 1: yellow}
  centre = lambda row, col: (row * 24 + 12, col * 24 + 12)
  assert stones_of[first][centre(5, 3)] and stones_of[first][centre(5, 2)]
  assert stones_of[1 - first][centre(4, 3)] and not (red | yellow)[centre(5, 4)]
  assert stones_of[first].sum() == 2 * stones_of[1 - first].sum()
  with pytest.raises(ConfigError, match=r"does not render.*go_9x9's is \(9, 9, 17\)"):
    video.check_renders(Pgx("go_9x9"), "eval_video")


def _catch_experiment():
  from agents.ppo.config import catch_anakin  # pylint: disable=import-outside-toplevel
  c = catch_anakin()
  c.topology.num_devices = 1
  return builder.build(c)


@pytest.mark.parametrize("fmt", ["gif", "mp4"])
def test_record_plays_whole_episodes_and_the_file_decodes_to_them(tmp_path, fmt):
  import imageio.v3 as iio  # pylint: disable=import-outside-toplevel
  experiment = _catch_experiment()
  runtime = experiment.runtime
  nets = runtime.per_run(runtime.init().agent.nets)
  frames = video.record(experiment.agent, Catch(), nets, jax.random.PRNGKey(0), 3)
  # Catch lasts 9 steps: each episode is its reset, 8 more states and its last.
  assert frames.shape == (30, 160, 80, 3) and frames.dtype == np.uint8
  path = video.write(str(tmp_path / "catch"), frames, fmt=fmt)
  assert path.endswith(f".{fmt}")
  decoded = iio.imread(path, plugin="FFMPEG" if fmt == "mp4" else None)
  assert decoded.shape[1:3] == (160, 80)
  # GIF drops no frame here (consecutive Catch frames always differ: the ball falls).
  assert len(decoded) == 30
  if fmt == "gif":
    np.testing.assert_array_equal(decoded[..., :3], frames)


def test_without_ffmpeg_the_video_is_a_gif(tmp_path, monkeypatch):
  monkeypatch.setattr(video, "has_ffmpeg", lambda: False)
  frames = np.zeros((4, 8, 8, 3), np.uint8)
  frames[np.arange(4), 0, np.arange(4)] = 255
  assert video.write(str(tmp_path / "v"), frames).endswith("v.gif")


def _tensorboard_images(workdir):
  """(tag, height, width, GIF bytes' length, step) of every image summary."""
  from tensorboardX.proto import event_pb2  # pylint: disable=import-outside-toplevel
  found = []
  for path in glob.glob(str(workdir / "events*")):
    data, at = open(path, "rb").read(), 0
    while at < len(data):
      size = struct.unpack("<Q", data[at:at + 8])[0]
      event = event_pb2.Event.FromString(data[at + 12:at + 12 + size])
      at += 16 + size
      found += [(v.tag, v.image.height, v.image.width, len(v.image.encoded_image_string),
                 event.step) for v in event.summary.value if v.HasField("image")]
  return found


@pytest.mark.slow
def test_eval_video_at_the_end_of_a_run_and_play_from_its_checkpoint(tmp_path):
  import imageio.v3 as iio  # pylint: disable=import-outside-toplevel
  result = launch("--config=agents/ppo/config.py:catch_anakin", "--config.eval_video=2",
                  "--config.total_env_steps=8192", f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "videos/final." in result.stdout and "2 episodes" in result.stdout
  final = glob.glob(str(tmp_path / "videos" / "final.*"))
  assert len(final) == 1
  plugin = "FFMPEG" if final[0].endswith(".mp4") else None
  assert iio.imread(final[0], plugin=plugin).shape == (20, 160, 80, 3)
  images = _tensorboard_images(tmp_path)
  assert [(tag, h, w, step) for tag, h, w, _, step in images] == [
      ("eval_video", 160, 80, 8192)] and images[0][3] > 0

  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # As a user runs it.
  played = subprocess.run(
      [sys.executable, "-m", "podracer.play", f"--workdir={tmp_path}", "--episodes=3",
       "--format=gif"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
  assert played.returncode == 0, played.stderr[-2000:]
  assert iio.imread(tmp_path / "videos" / "play.gif").shape[:3] == (30, 160, 80)


def test_play_without_a_run_is_one_line_and_exit_2(tmp_path):
  played = subprocess.run([sys.executable, "-m", "podracer.play", f"--workdir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert played.returncode == 2
  assert "No run to play" in played.stderr and "Traceback" not in played.stderr


def test_eval_video_refuses_what_it_cannot_watch():
  from agents.ppo.config import memory_sebulba, minatar_anakin  # pylint: disable=import-outside-toplevel
  c = minatar_anakin()
  c.topology.num_devices = 1
  c.eval_video = 1
  c.env.env_id = "Acrobot-v1"  # gymnax draws MinAtar only (in a compiled program).
  with pytest.raises(ConfigError, match=r"eval_video.*does not render.*Acrobot.*cartpole"):
    builder.build(c)
  from tests.test_sebulba import one_device  # pylint: disable=import-outside-toplevel
  c = memory_sebulba()  # A dm_env environment on the host: it cannot be made to render.
  one_device(c)
  c.eval_video = 1
  with pytest.raises(ConfigError, match=r"`eval_video`: this host environment cannot be "
                     r"made to render .*envpool"):
    builder.build(c)


@pytest.mark.slow
def test_eval_video_under_sebulba_and_play_from_its_checkpoint(tmp_path):
  """EnvPool's CartPole under Sebulba: the run's video at its end, and podracer.play's
  from the learners' checkpoint, each whole episodes of EnvPool's own screen (400x600)."""
  import imageio.v3 as iio  # pylint: disable=import-outside-toplevel
  result = launch("--config=agents/ppo/config.py:cartpole_sebulba", "--config.eval_video=1",
                  "--config.total_env_steps=20000", f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr[-2000:]
  written = re.search(r"videos/final\.(\w+) \((\d+) frames, 1 episodes", result.stdout)
  assert written, result.stdout[-2000:]
  final = iio.imread(tmp_path / "videos" / f"final.{written.group(1)}",
                     plugin="FFMPEG" if written.group(1) == "mp4" else None)
  assert len(final) == int(written.group(2)) >= 10 and final.shape[1] == 400
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  played = subprocess.run(
      [sys.executable, "-m", "podracer.play", f"--workdir={tmp_path}", "--episodes=2",
       "--format=gif"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
  assert played.returncode == 0, played.stderr[-2000:]
  frames = iio.imread(tmp_path / "videos" / "play.gif")
  assert frames.shape[1:3] == (400, 600) and len(frames) >= 20


@pytest.mark.slow
def test_record_host_plays_envpool_atari_on_its_screen():
  """Pong-v5 (EnvPool, as pong_sebulba's agent sees it: 4 x 84 x 84) is watched on its
  210 x 160 colour screen, one frame per agent step."""
  from agents.ppo.config import pong_sebulba  # pylint: disable=import-outside-toplevel
  from tests.test_sebulba import one_device  # pylint: disable=import-outside-toplevel
  c = pong_sebulba()
  one_device(c)
  experiment = builder.build(c)
  runtime = experiment.runtime
  nets = runtime.final_nets(runtime._start_learner())  # pylint: disable=protected-access
  env = video.watchable_env(runtime, "test")
  frames = video.record_host(experiment.agent, env, nets, jax.random.PRNGKey(0), 1,
                             max_steps=24)
  env.close()
  assert frames.shape == (24, 210, 160, 3) and frames.dtype == np.uint8
  assert len({f.tobytes() for f in frames}) > 2  # The game moves.
