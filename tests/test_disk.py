"""A full or failing disk: one paragraph naming what was written, where and the free space,
exit 1, everything written before intact, no partial checkpoint left, and a relaunch after
space is freed resumes from the last complete checkpoint. The disk fills by a patched
writer raising ENOSPC (the same error a full filesystem gives), so the tests run anywhere.
"""

import errno
import json
import os
import pathlib
import subprocess
import sys

import pytest

from podracer.logs import disk
from podracer.errors import DiskError
from tests.test_launch import launch

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARGS = ["--config=agents/ppo/config.py:cartpole_anakin", "--config.topology.num_devices=1",
        "--config.runtime.num_envs_per_device=4", "--config.runtime.rollout_length=32",
        "--config.runtime.updates_per_call=4", "--config.checkpoint_interval=0",
        "--config.total_env_steps=4096"]  # 8 calls of 512 env steps, a checkpoint after each

# Runs the launcher with one writer failing as a full disk does after `after` writes.
FULL_DISK = r'''
import errno, os, sys
kind, after = sys.argv[1], int(sys.argv[2])
del sys.argv[1:3]
writes = [0]

def fill():
  writes[0] += 1
  if writes[0] > after:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

if kind == "checkpoint":
  from podracer import checkpoint
  write = checkpoint.Checkpointer._write
  def failing_write(self, step, *args):
    if writes[0] >= after:  # what orbax leaves: its temporary directory, half written
      partial = os.path.join(self.directory, f"{step}.orbax-checkpoint-tmp-1")
      os.makedirs(partial, exist_ok=True)
      open(os.path.join(partial, "half"), "w").write("x")
    fill()
    return write(self, step, *args)
  checkpoint.Checkpointer._write = failing_write
elif kind == "metrics":
  from podracer import logs
  init = logs.JsonlLogger.__init__
  class FullFile:
    def __init__(self, f): self.f = f
    def write(self, text): fill(); return self.f.write(text)
    def flush(self): return self.f.flush()
    def close(self): return self.f.close()
  import functools
  @functools.wraps(init)  # The run injects the arguments its signature names.
  def patched_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self._file = FullFile(self._file)
  logs.JsonlLogger.__init__ = patched_init
elif kind == "events":  # in tensorboardX's own writer thread
  from tensorboardX import event_file_writer
  write_event = event_file_writer.EventsWriter.write_event
  def failing_write_event(self, event):
    fill()
    return write_event(self, event)
  event_file_writer.EventsWriter.write_event = failing_write_event
sys.argv[0] = "podracer.launch"
from podracer import launch
launch.entry_point()
'''


def launch_on_full_disk(kind, after, *args, timeout=240):
  path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
  env = dict(os.environ, PYTHONPATH=path)
  env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, "-c", FULL_DISK, kind, str(after), *args], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=timeout)


def test_a_disk_error_deep_in_a_library_becomes_one_paragraph_naming_the_write(tmp_path):
  target = tmp_path / "metrics.jsonl"
  with pytest.raises(DiskError) as raised:
    with disk.writing("metrics", str(target)):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
  text = str(raised.value)
  assert f"Could not write the metrics to {target}: No space left on device" in text
  assert " free of " in text and "\n" not in text
  # Wrapped by a library that keeps only the text (tensorstore's ValueError, say).
  with pytest.raises(DiskError, match="Disk quota exceeded"):
    with disk.writing("checkpoint 3", str(tmp_path)):
      try:
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
      except OSError as e:
        raise ValueError(f"INTERNAL: write failed: {e}") from None
  # Anything else is not the disk's: it passes unchanged.
  with pytest.raises(PermissionError):
    with disk.writing("metrics", str(target)):
      raise PermissionError(errno.EACCES, "Permission denied")
  assert disk.free_space(str(tmp_path / "not" / "yet")).endswith("B")  # an existing parent


def _steps(run):
  return sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())


@pytest.mark.slow
def test_a_full_disk_while_checkpointing_is_named_and_the_relaunch_resumes(tmp_path):
  pytest.importorskip("orbax.checkpoint")
  run = tmp_path / "run"
  full = launch_on_full_disk("checkpoint", 3, *ARGS, f"--workdir={run}")
  assert full.returncode == 1, full.stderr
  assert "Traceback" not in full.stderr + full.stdout
  assert "Event loop is closed" not in full.stderr
  message = [l for l in full.stderr.splitlines() if "No space left on device" in l]
  assert len(message) == 1, full.stderr
  assert (f"Could not write the checkpoint 4 to {run / 'checkpoints'}: No space left on "
          "device" in message[0] and " free of " in message[0])
  # Written before: three whole checkpoints and four records; the partial one removed.
  assert _steps(run) == [1, 2, 3]
  assert not [p for p in (run / "checkpoints").iterdir() if "tmp" in p.name]
  before = (run / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(l)["env_steps"] for l in before] == [512, 1024, 1536, 2048]

  resumed = launch(*ARGS, f"--workdir={run}", timeout=240)  # space freed
  assert resumed.returncode == 0, resumed.stderr
  after = (run / "metrics.jsonl").read_text().splitlines()
  assert after[:3] == before[:3] and len(before) < len(after) == 8
  assert json.loads(after[-1])["env_steps"] == 4096


@pytest.mark.parametrize("kind,what", [("metrics", "metrics"),
                                       ("events", "TensorBoard event files")])
@pytest.mark.slow
def test_a_full_disk_while_writing_records_is_named_and_earlier_records_stay(tmp_path, kind,
                                                                             what):
  run = tmp_path / "run"
  # metrics: the fourth record fails; events: tensorboardX's thread fails on its first
  # flush after the first record's scalars, and the next record's write says so.
  after = 3 if kind == "metrics" else 5
  full = launch_on_full_disk(kind, after, *ARGS, f"--workdir={run}")
  assert full.returncode == 1, full.stderr
  assert "Traceback" not in full.stderr + full.stdout
  message = [l for l in full.stderr.splitlines() if "No space left on device" in l]
  assert len(message) == 1 and f"Could not write the {what} to " in message[0], full.stderr
  lines = (run / "metrics.jsonl").read_text().splitlines()
  assert 1 <= len(lines) < 8 and all(json.loads(l) for l in lines)


def _can_mount_a_small_filesystem(directory) -> bool:
  probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                          f"mount -t tmpfs -o size=64k tmpfs {directory}"],
                         capture_output=True, text=True)
  return probe.returncode == 0


def test_a_real_300k_filesystem_fills_and_the_run_says_so_in_one_line(tmp_path):
  """A real full disk, where this machine lets an unprivileged user mount a 300 KB tmpfs
  in a namespace of its own; the patched writers above check the same anywhere."""
  pytest.importorskip("orbax.checkpoint")
  small = tmp_path / "small"
  small.mkdir()
  if not _can_mount_a_small_filesystem(small):
    pytest.skip("this machine does not let a user mount a tmpfs in a user namespace")
  run = small / "run"
  command = " ".join([sys.executable, "-m", "podracer.launch", *ARGS, f"--workdir={run}"])
  result = subprocess.run(
      ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
       f"mount -t tmpfs -o size=300k tmpfs {small} && {command}; echo exit=$?; "
       f"ls {run}/checkpoints; cat {run}/metrics.jsonl"],
      cwd=ROOT, capture_output=True, text=True, timeout=240,
      env={k: v for k, v in os.environ.items() if k != "XLA_FLAGS"})
  assert "exit=1" in result.stdout, result.stdout + result.stderr
  assert "Traceback" not in result.stderr  # (the Reverb lane's TensorFlow logs its own)
  said = [l for l in result.stderr.splitlines() if "No space left on device" in l]
  assert len(said) == 1 and f"to {run}" in said[0] and " free of 300.0 KB" in said[0]
  listed = result.stdout.split("exit=1", 1)[1].split()
  assert "tmp" not in " ".join(listed)  # no partial checkpoint
  records = [json.loads(l) for l in result.stdout.splitlines() if l.startswith("{")]
  assert records and records[0]["env_steps"] == 512
