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


def envpool_atari(task_id: str, **overrides) -> config_dict.ConfigDict:
  """EnvPool Atari with the usual preprocessing: 84x84 greyscale, 4-frame stacks
  [4, 84, 84] uint8, up to 30 no-ops, no sticky actions, clipped rewards, a lost life
  ends the learning episode (`episodic_life`) while returns are reported per game."""
  section = dict(name="envpool", task_id=task_id, episodic_life=True, reward_clip=True,
                 stack_num=4, img_height=84, img_width=84, noop_max=30,
                 repeat_action_probability=0.0)
  section.update(overrides)
  return config_dict.ConfigDict(section)


def impala_resnet() -> config_dict.ConfigDict:
  """The IMPALA paper's deep ResNet torso (widths 16, 32, 32; dense 256) with a policy and
  a value layer, on EnvPool's channels-first frame stacks."""
  return config_dict.ConfigDict(dict(
      name="atari_actor_critic", torso="impala", channels_first=True, channels=(16, 32, 32),
      hidden_size=256))
