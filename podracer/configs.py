"""Config sections shared by agents' config files, with every key a user may override.

A key must exist in the ConfigDict for `--config.KEY=VALUE` to set it, so optional
arguments appear here as typed placeholders (None until set).
"""

from ml_collections import config_dict


def replicate_topology() -> config_dict.ConfigDict:
  """Anakin: every device (or the first `num_devices`) acts and learns."""
  return config_dict.ConfigDict(dict(
      name="replicate", num_devices=config_dict.placeholder(int)))


def actor_learner_topology() -> config_dict.ConfigDict:
  """Sebulba: device indices or counts for actors and learners; defaults by device count."""
  return config_dict.ConfigDict(dict(
      name="actor_learner", actor_devices=config_dict.placeholder(tuple),
      learner_devices=config_dict.placeholder(tuple),
      num_actors=config_dict.placeholder(int), num_learners=config_dict.placeholder(int)))


def sebulba_runtime(num_envs_per_actor: int, rollout_length: int,
                    log_interval: float = 1.0) -> config_dict.ConfigDict:
  """Two actor threads per actor device, one update per trajectory, two in flight."""
  return config_dict.ConfigDict(dict(
      name="sebulba", num_envs_per_actor=num_envs_per_actor, actor_threads_per_device=2,
      rollout_length=rollout_length, updates_per_batch=1, queue_size=2,
      log_interval=log_interval, inject_failure=""))
