"""PPO on CartPole with its entropy bonus annealed by a loss component (schedules.py,
imported from this folder). The progress line shows the coefficient:

  python -m podracer.launch --config=examples/entropy_schedule/config.py --workdir=runs/ent
"""

import schedules  # noqa: F401  # Registers `ppo_entropy_schedule`.

from agents.ppo.config import cartpole_anakin


def get_config():
  config = cartpole_anakin()
  config.loss = dict(name="ppo_entropy_schedule", entropy_start=0.02, entropy_end=0.0,
                     clip_epsilon=0.2, value_coef=0.5)
  config.log = dict(progress_metrics=("loss", "entropy", "entropy_coef"))
  config.total_env_steps = 3 * 8192  # Three compiled calls of 16 updates.
  config.topology.num_devices = 1
  return config
