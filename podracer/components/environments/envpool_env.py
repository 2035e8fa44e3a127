"""EnvPool's C++ environments (Atari, MuJoCo, classic control, ...) as a `HostEnvironment`.

EnvPool runs in synchronous mode (batch_size == num_envs): every `step` steps all
environments on EnvPool's own threads, and returns them in env_id order. `send` returns
as soon as those threads have the actions (`supports_async`), so Sebulba's asynchronous
actors drive two such pools, one stepping while the other's inference runs. Its auto-reset already is ours: the step after a
LAST is a FIRST (reward 0, discount 1) that ignores its action. Two things are fixed up:

* Time limits. EnvPool's dm_env output gives discount 0 at truncation (checked with
  CartPole-v1 and max_episode_steps), as if the episode had terminated. Its raw state
  has a `trunc` flag, which the dm_env output drops, so we read the raw state (what
  `recv()` reads too) and give truncated episodes discount 1.
* True episode statistics. Atari's `info:reward` is the reward before `reward_clip`, and
  `info:terminated` is the real game over: with `episodic_life` a lost life is a LAST
  step (discount 0) but the game goes on, so statistics end only at game over or at the
  time limit, and count every step of the game.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Dict, Tuple

import numpy as np

from podracer import registry
from podracer.components.environments.host import (EpisodeTracker, HostEnvironment,
                                                   env_seeds, float32_observation_spec,
                                                   host_timestep)
from podracer.errors import require
from podracer.types import (ArraySpec, DiscreteSpec, EnvSpec, EpisodeStats, PyTree,
                            StepType, TimeStep, bounds)

# Options EnvPool.make takes that this adapter sets itself.
_RESERVED = ("env_type", "batch_size")


def _import_envpool():
  return require("envpool", "The 'envpool' environment", "pip install envpool")


def unknown_task_message(task_id: str, known) -> str:
  """Names the closest EnvPool task ids (case-insensitively) to a misspelt one."""
  by_lower = {k.lower(): k for k in known}
  close = difflib.get_close_matches(task_id.lower(), list(by_lower), n=5, cutoff=0.6)
  msg = f"EnvPool has no task '{task_id}'."
  if close:
    msg += " Did you mean " + " or ".join(f"'{by_lower[c]}'" for c in close) + "?"
  return msg + " `envpool.list_all_envs()` lists all tasks."


@registry.environments.register("envpool")
class EnvPool(HostEnvironment):
  """`envpool.make(task_id, env_type="dm", num_envs=num_envs, **env_kwargs)`.

  Any EnvPool option passes through `env_kwargs`, e.g. for Atari `episodic_life`,
  `reward_clip`, `stack_num`, `img_height`, `noop_max`, `repeat_action_probability`,
  `max_episode_steps`, `num_threads`. `clip_actions` (podracer's, off by default) clips
  continuous actions to the spec's bounds before EnvPool sees them.
  """

  supports_async = True

  def __init__(self, task_id: str, num_envs: int, seed: int = 0, clip_actions: bool = False,
               **env_kwargs: Any):
    super().__init__(num_envs, seed, clip_actions)
    envpool = _import_envpool()
    known = envpool.list_all_envs()
    if task_id not in known:
      raise ValueError(unknown_task_message(task_id, known))
    reserved = sorted(set(env_kwargs) & set(_RESERVED))
    if reserved:
      raise ValueError(f"EnvPool option(s) {', '.join(reserved)} are set by the adapter "
                       "(synchronous mode, dm_env output) and cannot be given.")
    self.task_id = task_id
    try:
      self._env = envpool.make(task_id, env_type="dm", num_envs=self.num_envs,
                               batch_size=self.num_envs,
                               seed=[int(s) for s in env_seeds(self.seed, self.num_envs)],
                               **env_kwargs)
    except TypeError as e:  # EnvPool's message for an unknown option names no options.
      options = sorted(set(envpool.make_spec(task_id).config._fields)
                       - {"num_envs", "seed", *_RESERVED})
      raise ValueError(f"EnvPool rejected the options {sorted(env_kwargs)} for "
                       f"{task_id} ({e}); it accepts: {', '.join(options)}.") from e
    config = self._env.config
    self._episodic_life = bool(config.get("episodic_life", False))
    keys = list(self._env._state_keys)  # pylint: disable=protected-access
    self._index = {k: i for i, k in enumerate(keys)}
    missing = {"step_type", "reward", "discount", "trunc"} - set(keys)
    if missing:
      raise RuntimeError(f"This EnvPool version's state lacks {sorted(missing)}; "
                         "podracer needs EnvPool >= 0.8.")
    # 'obs' is a single array; 'obs:<name>' keys make a dict observation.
    self._obs_keys = [k for k in keys if k == "obs" or k.startswith("obs:")]
    self._tracker = EpisodeTracker(self.num_envs)
    self._started = False

  def spec(self) -> EnvSpec:
    # The raw specs: EnvPool's dm_env observation_spec() fails for Atari under numpy 1.x.
    states = self._env.spec.state_array_spec
    observation = self._assemble({
        k: _array_spec(states[k], "obs" if k == "obs" else k[4:].split(".")[-1])
        for k in self._obs_keys})
    return EnvSpec(observation=float32_observation_spec(observation, repr(self)),
                   action=_action_spec(self._env.spec))

  def reset(self) -> Tuple[TimeStep, EpisodeStats]:
    self._env.async_reset()
    timestep, _, _ = self._convert(self._env._recv())  # pylint: disable=protected-access
    self._started = True
    return timestep, self._tracker.reset()

  def step(self, action: np.ndarray) -> Tuple[TimeStep, EpisodeStats]:
    self.send(action)
    return self.recv()

  def send(self, action: np.ndarray) -> None:
    if not self._started:
      raise RuntimeError("Call reset() before the first step() of an EnvPool environment.")
    self._env.send(self._check_action(action))  # Returns once EnvPool's threads have it.

  def recv(self) -> Tuple[TimeStep, EpisodeStats]:
    timestep, true_reward, done = self._convert(
        self._env._recv())  # pylint: disable=protected-access
    return timestep, self._tracker.update(timestep.step_type, true_reward, done)

  def _convert(self, values) -> Tuple[TimeStep, np.ndarray, np.ndarray]:
    """EnvPool's raw state -> (our TimeStep, unclipped reward, true episode end)."""
    get = lambda key: values[self._index[key]]
    step_type = np.asarray(get("step_type"), np.int32)
    last = step_type == StepType.LAST
    reward = np.asarray(get("reward"), np.float32)
    game_over = None
    if "info:terminated" in self._index:
      game_over = np.asarray(get("info:terminated")).astype(bool)
    time_up = last & np.asarray(get("trunc"), bool)
    truncated = time_up if game_over is None else time_up & ~game_over
    discount = np.where(truncated, 1.0, get("discount"))
    true_reward = get("info:reward") if "info:reward" in self._index else reward
    done = last
    if self._episodic_life and game_over is not None:
      done = last & (game_over | time_up)
    observation = self._assemble({k: get(k) for k in self._obs_keys})
    return (host_timestep(step_type, reward, discount, observation),
            np.asarray(true_reward, np.float32), done)

  def _assemble(self, by_key: Dict[str, Any]) -> PyTree:
    if list(by_key) == ["obs"]:
      return by_key["obs"]
    tree: Dict[str, Any] = {}
    for key, value in by_key.items():
      *parents, leaf = key[4:].split(".")
      node = tree
      for p in parents:
        node = node.setdefault(p, {})
      node[leaf] = value
    return tree

  def render(self) -> np.ndarray:
    """Environment 0's screen, uint8 [H, W, 3], where EnvPool was made with
    `render_mode="rgb_array"` (what a video makes it with: podracer/lifecycle/video.py)."""
    frame = self._env.render(env_ids=[0])
    if frame is None:
      raise RuntimeError(f"{self!r} was not made to render: render_mode='rgb_array'.")
    return np.asarray(frame)[0]

  def close(self) -> None:
    env, self._env = getattr(self, "_env", None), None
    if env is not None:
      env.close()

  def __repr__(self) -> str:
    return f"EnvPool({self.task_id!r}, num_envs={self.num_envs})"


def _array_spec(raw, name: str) -> ArraySpec:
  # Action shapes lead with -1, the batch.
  return ArraySpec(tuple(int(d) for d in raw.shape if d != -1), np.dtype(raw.dtype), name)


def _action_spec(env_spec) -> Any:
  actions = {k: v for k, v in env_spec.action_array_spec.items()
             if k not in ("env_id", "players.env_id")}
  if len(actions) != 1:
    raise NotImplementedError(f"EnvPool actions {sorted(actions)} are not a single array; "
                              "podracer agents take one discrete or continuous action.")
  raw = next(iter(actions.values()))
  spec = _array_spec(raw, "action")
  if (np.issubdtype(spec.dtype, np.integer) and not spec.shape
      and np.ndim(raw.minimum) == 0 and int(raw.minimum) == 0):
    return DiscreteSpec(int(raw.maximum) + 1)
  # Continuous actions (Pendulum, MuJoCo): agents squash their actions into these bounds.
  minimum, maximum = bounds(raw.minimum, raw.maximum)
  return dataclasses.replace(spec, minimum=minimum, maximum=maximum)
