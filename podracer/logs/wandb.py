"""`wandb`: Weights & Biases, offline unless the user says otherwise.

W&B writes into WORKDIR/wandb/ with nothing to sign into: `WANDB_MODE` is `offline`
unless the environment sets it (`WANDB_MODE=online` streams to the server, the user's
choice), and `wandb sync WORKDIR/wandb/offline-run-*` uploads a run later. Keys
(`log.wandb.*`): `project` (default "podracer"), `entity`, `group` (default the workdir's
name) and `tags`; the run's config is the W&B run's config. Each run of a many-runs
program is a W&B run of its own (`run_0`, `run_1`, ...) in the one group. Numeric
values are logged at step `env_steps`; None (NaN in the run) is left out. The package is
the `[wandb]` extra: `pip install -e ".[wandb]"`.
"""

from __future__ import annotations

import glob
import json
import os
import struct
from typing import Any, Dict, List, Optional, Sequence

from podracer.errors import require
from podracer.logs import Logger

MODE_VARIABLE = "WANDB_MODE"


class WandbLogger(Logger):
  """A W&B run per podracer run (see the module's docstring)."""

  what = "Weights & Biases run files"

  def __init__(self, workdir: str, num_runs: Optional[int] = None,
               config: Optional[Dict[str, Any]] = None,
               resumed: Optional[List[Dict[str, Any]]] = None,
               project: Optional[str] = None, entity: Optional[str] = None,
               group: Optional[str] = None, tags: Sequence[str] = ()):
    wandb = require("wandb", "Config key `log.loggers` names 'wandb', which",
                    "pip install -e \".[wandb]\" (or pip install wandb), or leave 'wandb' "
                    "out of log.loggers")
    self.where = os.path.join(workdir, "wandb")
    mode = os.environ.get(MODE_VARIABLE, "offline")
    # W&B takes podracer's `agents` package for OpenAI's and suggests Weave at each run.
    os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
    group = group or os.path.basename(os.path.abspath(workdir))
    self._runs = [wandb.init(
        project=project or "podracer", entity=entity, group=group, tags=list(tags),
        config=config, dir=workdir, mode=mode, reinit="create_new",
        name=f"run_{r}" if num_runs else group,
        settings=wandb.Settings(silent=True, console="off"))
        for r in range(num_runs or 1)]
    for record in resumed or ():  # The new W&B runs start with what the run kept.
      self.write(record)

  def write(self, record: Dict[str, Any]) -> None:
    values = {k: v for k, v in record.items()
              if k not in ("env_steps", "run") and isinstance(v, (int, float))
              and not isinstance(v, bool)}
    self._runs[record.get("run", 0)].log(values, step=int(record["env_steps"]))

  def write_video(self, tag: str, video: Any, step: int) -> None:
    import wandb  # pylint: disable=import-outside-toplevel
    self._runs[0].log({tag: wandb.Video(video.path)}, step=step)

  def close(self) -> None:
    for run in self._runs:
      run.finish()


# -- reading an offline run back ------------------------------------------------------------

_HEADER = 7          # ":W&B", the file's identifier (2 bytes) and version (1 byte)
_BLOCK = 32768       # LevelDB log blocks: a record never crosses one; its header is 7 bytes
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def offline_runs(workdir: str) -> List[str]:
  """The offline W&B run directories a run wrote, oldest first."""
  return sorted(glob.glob(os.path.join(workdir, "wandb", "offline-run-*")))


def read_offline_run(run_dir: str) -> Dict[str, Any]:
  """(name, group, config and history) of an offline W&B run, decoded with W&B's own
  record definitions (`wandb.proto.wandb_internal_pb2.Record`) from its `.wandb` file (a
  LevelDB log of those records; wandb 0.31 ships no Python reader for it)."""
  from wandb.proto import wandb_internal_pb2  # pylint: disable=import-outside-toplevel
  (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
  out: Dict[str, Any] = dict(history=[])
  for payload in _log_records(path):
    record = wandb_internal_pb2.Record.FromString(payload)
    kind = record.WhichOneof("record_type")
    if kind == "run":
      out.update(name=record.run.display_name, group=record.run.run_group,
                 config={_key(i): json.loads(i.value_json) for i in record.run.config.update})
    elif kind == "history":
      out["history"].append({_key(i): _value(i) for i in record.history.item})
  return out


def _key(item: Any) -> str:
  return item.key or ".".join(item.nested_key)


def _value(item: Any) -> Any:
  """A history item's value: typed (number, integer, boolean, text, none) or JSON."""
  kind = item.WhichOneof("value")
  if kind in ("number", "integer", "boolean", "text"):
    return getattr(item, kind)
  if kind == "none":
    return None
  return json.loads(item.json if kind == "json" else item.value_json)


def _log_records(path: str):
  with open(path, "rb") as f:
    data = f.read()
  if data[:4] != b":W&B":
    raise ValueError(f"{path} is not a W&B run file")
  pos, pending = _HEADER, b""
  while pos + 7 <= len(data):
    if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header: padding
      pos += _BLOCK - pos % _BLOCK
      continue
    _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
    chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
    if kind == FULL:
      yield chunk
    elif kind in (FIRST, MIDDLE):
      pending = (b"" if kind == FIRST else pending) + chunk
    elif kind == LAST:
      yield pending + chunk
