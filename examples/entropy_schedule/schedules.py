"""A loss component with a schedule: PPO's loss whose entropy coefficient decays linearly
over training. The framework's gradient step says how far training is
(`podracer.learning.step()`), and the builder gives the loss the run's gradient steps
(`total_steps`, because it declares it), so no agent code changes."""

import optax

from podracer import learning, registry
from podracer.components.losses import PPOLoss


@registry.losses.register("ppo_entropy_schedule")
def ppo_entropy_schedule(total_steps: int, entropy_start: float = 0.01,
                         entropy_end: float = 0.0, clip_epsilon: float = 0.2,
                         value_coef: float = 0.5):
  """PPO's clipped loss with c_H going from `entropy_start` to `entropy_end`."""
  ppo = PPOLoss(clip_epsilon=clip_epsilon, value_coef=value_coef, entropy_coef=0.0)
  entropy_coef = optax.linear_schedule(entropy_start, entropy_end, total_steps)

  def loss(logits, value, batch):
    coef = entropy_coef(learning.step())
    total, metrics = ppo(logits, value, batch)
    return total - coef * metrics["entropy"], dict(metrics, entropy_coef=coef)

  return loss
