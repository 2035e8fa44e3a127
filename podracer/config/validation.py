"""Checks made before anything is built, so that bad input costs no build and no compile.

Each check raises `ConfigError` with one paragraph naming the key and saying what would
work; the launcher prints it and exits with status 2. Components still check their own
arguments when they are built: these are the mistakes that would otherwise surface as a
ZeroDivisionError or a JAX shape error deep in a runtime, or after the whole build.
The workdir is checked by `podracer.lifecycle.workdir`.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from podracer.errors import ConfigError, minibatches_do_not_divide

# Keys that count something: each must be a positive integer wherever a config has it.
POSITIVE_INTS = (
    "runtime.num_envs_per_device", "runtime.rollout_length", "runtime.updates_per_call",
    "runtime.num_envs_per_actor", "runtime.actor_threads_per_device",
    "runtime.updates_per_batch", "runtime.queue_size",
    "topology.num_devices", "topology.num_actors", "topology.num_learners",
    "topology.runs", "topology.data",
    "agent.num_epochs", "agent.num_minibatches", "agent.n_step", "loss.n_step",
    "agent.target_update_period",
    "replay.batch_size", "replay.max_size", "checkpoints_to_keep", "eval_episodes",
)


def check_config_file(flag_value: str) -> None:
  """`--config=path/to/config.py:NAME` must name a file that exists and can be read."""
  from podracer.config import files as config_files  # pylint: disable=import-outside-toplevel
  config_files.check_readable(config_files.split(flag_value)[0])


def check_config(config: Any) -> None:
  """Sizes positive; Anakin's per-replica batch divisible into the agent's minibatches."""
  for key in POSITIVE_INTS:
    value = _lookup(config, key)
    if value is None:
      continue
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
      raise ConfigError(f"Config key `{key}` counts something and must be a positive "
                        f"integer, got {value!r}; set it with --config.{key}=N, N >= 1.")
  _check_minibatches(config)
  _check_seed(config.get("seed", 0))
  for name, section in config.items():
    if name == "network" or name.endswith("_network"):
      _check_layer_sizes(name, section)
  interval = config.get("checkpoint_interval", 0.0)
  if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
    raise ConfigError(f"Config key `checkpoint_interval` is the number of seconds between "
                      f"checkpoints, >= 0, got {interval!r}.")
  every = config.get("eval_interval", 0)
  if isinstance(every, bool) or not isinstance(every, int) or every < 0:
    raise ConfigError(f"Config key `eval_interval` is the number of env steps between "
                      f"evaluations, an integer >= 0 (0: none), got {every!r}.")
  episodes = config.get("eval_video", 0)
  if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 0:
    raise ConfigError(f"Config key `eval_video` is the number of evaluation episodes to "
                      f"record as a video, an integer >= 0 (0: none), got {episodes!r}.")
  # Imports JAX: keep the file check above fast.
  from podracer.lifecycle.guards import NAN_POLICIES  # pylint: disable=import-outside-toplevel
  policy = config.get("nan_policy", "stop")
  if policy not in NAN_POLICIES:
    raise ConfigError(f"Config key `nan_policy` is one of {', '.join(map(repr, NAN_POLICIES))}"
                      f" (what a non-finite loss or parameter does), got {policy!r}.")


def _check_seed(seed: Any) -> None:
  if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
    raise ConfigError(f"Config key `seed` seeds JAX's random keys and must be an integer in "
                      f"[0, 2**63), got {seed!r}; set it with --config.seed=N.")


# Layer widths of podracer's networks (a user's network may give other `*_size` keys
# other meanings, such as 0 for "none"); any `*_sizes` key is a sequence of widths.
LAYER_WIDTHS = ("hidden_size", "head_hidden_size", "embedding_size", "lstm_size")


def _check_layer_sizes(name: str, network: Any) -> None:
  """A network section's layer widths (`LAYER_WIDTHS`, `*_sizes`, `channels`): positive
  integers (None, where a network allows it, leaves a layer out)."""
  if not hasattr(network, "items"):
    return
  for key, value in network.items():
    if value is None:
      continue
    if key in LAYER_WIDTHS:
      values = (value,)
    elif key.endswith("_sizes") or key == "channels":
      values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    else:
      continue
    if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in values):
      raise ConfigError(f"Config key `{name}.{key}` gives layer widths, each a positive "
                        f"integer, got {value!r}; e.g. --config.{name}.{key}=(64,64).")


def _check_minibatches(config: Any) -> None:
  minibatches = _lookup(config, "agent.num_minibatches")
  envs = _lookup(config, "runtime.num_envs_per_device")
  length = _lookup(config, "runtime.rollout_length")
  if None in (minibatches, envs, length):
    return
  transitions = envs * length
  if transitions % minibatches:
    raise minibatches_do_not_divide(
        transitions, minibatches, f"transitions (`runtime.num_envs_per_device` x "
        f"`runtime.rollout_length` = {envs} x {length} per replica)",
        "`runtime.num_envs_per_device` or `runtime.rollout_length`")


def _lookup(config: Any, dotted: str) -> Any:
  node = config
  for part in dotted.split("."):
    if not hasattr(node, "get"):
      return None
    node = node.get(part)
    if node is None:
      return None
  return node
