"""Config presets agents' config files share, so each file says only what is its own.

A key must exist in the ConfigDict for `--config.KEY=VALUE` to set it, so optional
arguments appear here as typed placeholders (None until set).

  experiment(total_env_steps)          seed, total_env_steps, stop_at_return
  anakin(c, ...) / sebulba(c, env, ...) a runtime section and its topology
  seed(c, ...)                         a Sebulba config's twin under SEED's workers
  envpool(task_id) / envpool_atari(...) EnvPool environment sections
  atari_sebulba(c, task_id, ...)       Sebulba on EnvPool Atari
  pixel_catch() / impala_resnet()      pixel Catch, the IMPALA ResNet actor-critic
  replay(name, ...)                    the keys both replays (device, reverb) take
  getter(what, configs, default)       a config file's `get_config(name)`
"""

import importlib.util
import os
from typing import Callable, Dict, Optional

from ml_collections import config_dict

from podracer.config.files import UnknownConfigName
from podracer.logs.metrics import DEFAULT_LOGGERS, PROGRESS_METRICS


def experiment(total_env_steps: int, seed: int = 0) -> config_dict.ConfigDict:
  """The header every config has: seed, step budget, optional target return, what a
  non-finite loss does (podracer/lifecycle/guards.py), checkpoints (podracer/lifecycle/checkpoint.py) and
  evaluation (podracer/lifecycle/evaluation.py)."""
  c = config_dict.ConfigDict()
  c.seed = seed
  c.stop_at_return = config_dict.placeholder(float)  # Ends the run early once reached.
  c.total_env_steps = total_env_steps
  c.nan_policy = "stop"  # Or "skip_update".
  c.checkpoint_interval = 600.0  # Seconds between checkpoints (also at the end).
  c.checkpoints_to_keep = 3
  # Which learner metrics the progress line shows (any a loss returns; metrics.jsonl has
  # all), and where records go (podracer/components/loggers): `log.loggers` names them,
  # `log.<name>` gives a logger its options (W&B's project, entity, group and tags).
  c.log = config_dict.ConfigDict(dict(
      progress_metrics=PROGRESS_METRICS, loggers=DEFAULT_LOGGERS,
      wandb=dict(project=config_dict.placeholder(str), entity=config_dict.placeholder(str),
                 group=config_dict.placeholder(str), tags=())))
  c.eval_interval = 0  # Env steps between evaluations of the greedy policy (0: none).
  c.eval_episodes = 10  # Episodes per evaluation (podracer/lifecycle/evaluation.py).
  # Episodes of the evaluation policy recorded as a video into WORKDIR/videos/ at the end
  # of a run (0: none; podracer/lifecycle/video.py).
  c.eval_video = 0
  # Many runs in one program (Anakin; podracer/config/runs.py): seeds, and swept values of
  # numeric keys, e.g. --config.sweep.optimizer.learning_rate=1e-4,1e-3.
  c.num_runs = 1
  c.sweep = config_dict.ConfigDict()
  # Population-based training over those runs (Anakin; podracer/runtimes/population.py):
  # every `interval` updates the bottom `truncation` by `fitness` copy the top and
  # `explore` the values.
  c.population = config_dict.ConfigDict(dict(
      kind="none", interval=config_dict.placeholder(int), truncation=0.25,
      fitness="episode_return",
      explore="perturb", perturb_factors=(0.8, 1.25), bounds=config_dict.ConfigDict()))
  # A PBT member's schedule of those values replayed as plain runs: RUN_DIR[:MEMBER].
  c.schedule_from = config_dict.placeholder(str)
  # JAX's compilation cache folder (podracer/lifecycle/compile_cache.py): None, the
  # per-user one (~/.cache/podracer/xla); a path; "" turns it off.
  c.compile_cache = config_dict.placeholder(str)
  return c


def section(name: str, **kwargs) -> config_dict.ConfigDict:
  """One component's section: its registered `name` and keyword arguments."""
  return config_dict.ConfigDict(dict(name=name, **kwargs))


def replicate_topology() -> config_dict.ConfigDict:
  """Anakin: every device (or the first `num_devices`) acts and learns."""
  return config_dict.ConfigDict(dict(
      name="replicate", num_devices=config_dict.placeholder(int),
      runs=config_dict.placeholder(int), data=config_dict.placeholder(int)))


def model_parallel(c: config_dict.ConfigDict, model: int,
                   sharding: str) -> config_dict.ConfigDict:
  """`c` with each replica over `model` devices, its parameters laid out by the
  registered `sharding` policy (docs/runs.md, "Larger networks than one device")."""
  c.topology.model, c.topology.sharding = model, sharding
  return c


def actor_learner_topology() -> config_dict.ConfigDict:
  """Sebulba: device indices or counts for actors and learners; defaults by device count."""
  return config_dict.ConfigDict(dict(
      name="actor_learner", actor_devices=config_dict.placeholder(tuple),
      learner_devices=config_dict.placeholder(tuple),
      num_actors=config_dict.placeholder(int), num_learners=config_dict.placeholder(int)))


def sebulba_runtime(num_envs_per_actor: int, rollout_length: int,
                    log_interval: float = 1.0,
                    max_policy_lag: Optional[int] = None) -> config_dict.ConfigDict:
  """Two actor threads per actor device, one update per trajectory, two in flight;
  `max_policy_lag` None (unbounded) unless the agent asks for a bound."""
  return config_dict.ConfigDict(dict(
      name="sebulba", num_envs_per_actor=num_envs_per_actor, actor_threads_per_device=2,
      rollout_length=rollout_length, updates_per_batch=1, queue_size=2,
      log_interval=log_interval, env_mode="sync", inject_failure="",
      # A typed placeholder when unbounded, so --config.runtime.max_policy_lag=N sets it.
      max_policy_lag=(config_dict.placeholder(int) if max_policy_lag is None
                      else max_policy_lag)))


def anakin(c: config_dict.ConfigDict, num_envs_per_device: int, rollout_length: int,
           updates_per_call: int) -> config_dict.ConfigDict:
  """Runs `c` under Anakin, replicated over the devices; returns `c`."""
  c.runtime = section("anakin", num_envs_per_device=num_envs_per_device,
                      rollout_length=rollout_length, updates_per_call=updates_per_call)
  c.topology = replicate_topology()
  return c


def sebulba(c: config_dict.ConfigDict, env: config_dict.ConfigDict, num_envs_per_actor: int,
            rollout_length: int, log_interval: float = 1.0,
            max_policy_lag: Optional[int] = None) -> config_dict.ConfigDict:
  """Runs `c` under Sebulba on the host environment `env`; returns `c`.

  By default a single device acts and learns; with 8 devices 2 act and 6 learn.
  """
  c.env = env
  c.runtime = sebulba_runtime(num_envs_per_actor, rollout_length, log_interval,
                              max_policy_lag)
  c.topology = actor_learner_topology()
  return c


def seed(c: config_dict.ConfigDict, num_local_workers: int = 4, envs_per_worker: int = 16,
         envs_per_batch: Optional[int] = None) -> config_dict.ConfigDict:
  """`c` (a Sebulba config) run under SEED instead: `num_local_workers` worker processes
  of `envs_per_worker` environments; a learner batch of `envs_per_batch` environments
  (default: one worker's); rollout length, updates per batch, queue, policy lag and log
  interval kept from Sebulba's section. Only `runtime` changes; returns `c`."""
  was = c.runtime
  c.runtime = config_dict.ConfigDict(dict(
      name="seed", num_local_workers=num_local_workers,
      num_workers=config_dict.placeholder(int), envs_per_worker=envs_per_worker,
      envs_per_batch=envs_per_batch or envs_per_worker, rollout_length=was.rollout_length,
      updates_per_batch=was.updates_per_batch, queue_size=was.queue_size,
      max_policy_lag=config_dict.placeholder(int), log_interval=was.log_interval,
      address="localhost:0", transport="auto",
      inference_batch_size=config_dict.placeholder(int),
      inference_timeout_ms=config_dict.placeholder(float), inference_threads_per_device=2,
      worker_timeout=30.0, max_worker_restarts=3,
      secret_file=config_dict.placeholder(str), allow_unauthenticated=False,
      tls_cert=config_dict.placeholder(str), tls_key=config_dict.placeholder(str),
      tls_client_ca=config_dict.placeholder(str), inject_failure=""))
  c.runtime.max_policy_lag = was.max_policy_lag
  return c


def envpool(task_id: str, **kwargs) -> config_dict.ConfigDict:
  """An EnvPool environment (stepped in C++ threads, for Sebulba)."""
  return section("envpool", task_id=task_id, **kwargs)


def envpool_atari(task_id: str, **overrides) -> config_dict.ConfigDict:
  """EnvPool Atari with the usual preprocessing: 84x84 greyscale, 4-frame stacks
  [4, 84, 84] uint8, up to 30 no-ops, no sticky actions, clipped rewards, a lost life
  ends the learning episode (`episodic_life`) while returns are reported per game."""
  kwargs = dict(episodic_life=True, reward_clip=True, stack_num=4, img_height=84,
                img_width=84, noop_max=30, repeat_action_probability=0.0)
  kwargs.update(overrides)
  return envpool(task_id, **kwargs)


def atari_sebulba(c: config_dict.ConfigDict, task_id: str, num_envs_per_actor: int,
                  rollout_length: int, **env_overrides) -> config_dict.ConfigDict:
  """Runs `c` under Sebulba on EnvPool Atari (`envpool_atari`), a record every 10 s."""
  return sebulba(c, envpool_atari(task_id, **env_overrides),
                 num_envs_per_actor=num_envs_per_actor, rollout_length=rollout_length,
                 log_interval=10.0)


def pixel_catch() -> config_dict.ConfigDict:
  """Catch rendered as uint8 frame stacks [4, 20, 10]: Atari-shaped input on a CPU."""
  return section("pixel_catch", rows=10, columns=5, scale=2, stack=4)


def pixel_catch_anakin(c: config_dict.ConfigDict, calls: int) -> config_dict.ConfigDict:
  """An on-policy agent's Atari setup `c` on `pixel_catch()` under Anakin: 32 environments
  x 20 steps per update, 8 updates per call, `calls` calls."""
  c.env = pixel_catch()
  c.total_env_steps = 20 * 32 * 8 * calls
  return anakin(c, num_envs_per_device=32, rollout_length=20, updates_per_call=8)


def impala_resnet() -> config_dict.ConfigDict:
  """The IMPALA paper's deep ResNet torso (widths 16, 32, 32; dense 256) with a policy and
  a value layer, on EnvPool's channels-first frame stacks."""
  return section("atari_actor_critic", torso="impala", channels_first=True,
                 channels=(16, 32, 32), hidden_size=256)


def lane_replay() -> str:
  """`reverb` in the Reverb install lane, else `host` (the default lane has no Reverb).

  The lane is $PODRACER_LANE where set, else whether Reverb is installed (found, not
  imported: importing it loads TensorFlow).
  """
  lane = os.environ.get("PODRACER_LANE", "").strip()
  if not lane:
    lane = "reverb" if importlib.util.find_spec("reverb") is not None else "default"
  return "reverb" if lane == "reverb" else "host"


def replay(name: str, batch_size: int, max_size: int, min_size: int,
           samples_per_insert: Optional[float]) -> config_dict.ConfigDict:
  """Keys every replay takes (`device`, `host`, `reverb`), so `replay.name` switches
  between them; `address` (reverb) joins an existing Reverb server; `checkpoint=True`
  (reverb) puts the table in the run's checkpoints (a device replay always is; a host
  replay's contents are not yet)."""
  return section(name, batch_size=batch_size, max_size=max_size, min_size=min_size,
                 samples_per_insert=samples_per_insert,
                 error_buffer=config_dict.placeholder(float), priority_exponent=0.9,
                 initial_priority=1.0, address=config_dict.placeholder(str),
                 checkpoint=config_dict.placeholder(bool))


def transition_replay(max_size: int, min_size: int,
                      batch_size: int = 256) -> config_dict.ConfigDict:
  """SAC's and TD3's replay: uniform (priority exponent 0) transitions on the device,
  no samples-per-insert limit (the runtime sets the pace: updates per env step)."""
  c = replay("device", batch_size=batch_size, max_size=max_size, min_size=min_size,
             samples_per_insert=None)
  c.priority_exponent = 0.0
  return c


def plain_adam(learning_rate: float) -> config_dict.ConfigDict:
  """Adam at a constant rate, eps 1e-8, no gradient clipping: SAC's and TD3's."""
  return section("adam", learning_rate=learning_rate, eps=1e-8,
                 max_grad_norm=config_dict.placeholder(float), anneal=False)


def getter(what: str, named: Dict[str, Callable[[], config_dict.ConfigDict]],
           default: str) -> Callable[..., config_dict.ConfigDict]:
  """A config file's `get_config`: `--config=FILE:NAME` calls it with NAME."""
  def get_config(name: str = default) -> config_dict.ConfigDict:
    if name not in named:
      raise UnknownConfigName(f"Unknown {what} config '{name}'; choose one of "
                       f"{', '.join(named)}.")
    return named[name]()
  return get_config
