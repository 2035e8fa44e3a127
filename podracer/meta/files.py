"""What podracer.meta writes into its workdir: the strategy's state (an exact resume),
the records, the config (a resume with other settings refused) and the learned
objective with its json."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import __version__
from podracer.config import runs as runs_lib
from podracer.errors import ConfigError
from podracer.lifecycle import workdir as workdir_lib
from podracer.meta.config import MetaConfig

STATE_FILE = "meta_state.npz"
RECORDS_FILE = "meta.jsonl"
OBJECTIVE_FILE = "learned_objective.npz"
# The meta keys 0.17.0 added, at what a meta-training before them ran with: one sigma for
# every parameter, no evaluation of the mean (resuming one takes these flags).
META_ADDED = {"meta.sigma_clip": 0.1, "meta.eval_every": 0, "meta.objective": "drift",
              "meta.drift_form": "squared",  # 0.19.0's first-order drift: squared before.
              "meta.tasks": "",
              "meta.value_clip": False,  # 0.20.0's c_v: none before.
              "meta.lifetime": False,  # 0.21.0's lifetime conditioning: none before.
              "meta.steps_in_std": False}  # 0.21.0's steps in each parameter's std.


def save_state(workdir: str, state: Any, generation: int) -> None:
  """The strategy's state after `generation` generations, written whole or not at all."""
  leaves = [np.asarray(x) for x in jax.tree.leaves(state)]
  tmp = os.path.join(workdir, STATE_FILE + ".tmp.npz")
  np.savez(tmp, generation=np.int64(generation), **{f"leaf_{i}": x for i, x in enumerate(leaves)})
  os.replace(tmp, os.path.join(workdir, STATE_FILE))


def load_state(workdir: str, like: Any) -> Tuple[Any, int]:
  """(state, generations done) from `workdir`, or (like, 0) without a saved one."""
  path = os.path.join(workdir, STATE_FILE)
  if not os.path.isfile(path):
    return like, 0
  leaves, treedef = jax.tree.flatten(like)
  with np.load(path) as saved:
    loaded = [jnp.asarray(saved[f"leaf_{i}"], dtype=jnp.asarray(x).dtype)
              for i, x in enumerate(leaves)]
    return jax.tree.unflatten(treedef, loaded), int(saved["generation"])


def save_objective(workdir: str, theta: Dict[str, jax.Array], about: Dict[str, Any]) -> str:
  path = os.path.join(workdir, OBJECTIVE_FILE)
  np.savez(path, **{k: np.asarray(v) for k, v in theta.items()})
  with open(os.path.splitext(path)[0] + ".json", "w", encoding="utf-8") as f:
    json.dump(about, f, indent=2, sort_keys=True)
  return path


def objective_about(meta: MetaConfig, theta: Dict[str, jax.Array],
                    loss: Any) -> Dict[str, Any]:
  """learned_objective.json: the form and how to train with it."""
  from podracer.components.losses import dpo  # pylint: disable=import-outside-toplevel
  from podracer.components.losses.learned_policy import objective_form  # pylint: disable=import-outside-toplevel
  about = dict(hidden=meta.hidden, generations=meta.generations, agent="ppo",
               version=__version__, meta=dataclasses.asdict(meta))
  if meta.objective != "dpo":
    return dict(about, loss="learned_policy",
                form=objective_form(meta.drift_form, meta.value_clip, meta.lifetime))
  found = loss.with_drift(theta)
  return dict(about, loss="dpo", form=dpo.DPO_FORM, alpha=float(found.alpha),
              beta=float(found.beta))


def append_record(workdir: str, record: Dict[str, Any]) -> None:
  with open(os.path.join(workdir, RECORDS_FILE), "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\n")


def write_config(workdir: str, config: Any, meta: MetaConfig) -> None:
  """config.json: the config and the meta keys; a resume with other ones is refused (but
  for `meta.generations`: a resume may go on for more)."""
  path = os.path.join(workdir, "config.json")
  written = dict(json.loads(config.to_json_best_effort()), meta=dataclasses.asdict(meta))
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      before = json.load(f)
    flat = lambda c: dict(runs_lib.flatten(c), **{"meta.generations": None})
    old, new = flat(before), flat(written)
    # A key a later version added (workdir.ADDED_KEYS, META_ADDED) is, where absent, at
    # the value that version's run had.
    added = {**workdir_lib.ADDED_KEYS, **META_ADDED}
    old = {**{k: v for k, v in added.items() if k not in old}, **old}
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if changed:
      resume = " ".join(f"--config.{k}={old[k]}" for k in changed
                        if k.startswith("meta.") and k in old)
      raise ConfigError(f"{workdir} holds a meta-training with other settings ("
                        f"{', '.join(changed)} differ): give another --workdir"
                        + (f", or resume it with {resume}" if resume else "") + ".")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(written, f, indent=2, sort_keys=True)
