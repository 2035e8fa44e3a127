"""Agent kits: the parts several agents are made of, above the Agent interface and the
components, below the agents (agents/ and yours) that subclass them.

  actor_critic.py    ActorCriticAgent: acting through an action distribution (categorical
                     or Gaussian), its mode for evaluation, on-policy observe,
                     observation statistics, reward normalisation (PPO,
                     recurrent PPO, IMPALA)
  meta_gradient.py   MetaGradientAgent: a `meta_loss` that adapts discount and lambda
  q_learning.py      QLearningAgent: epsilon-greedy acting, prioritized-replay Q updates
                     (DQN, R2D2; PQN's epsilon-greedy)
  transition_replay.py  TransitionReplayAgent: uniform transition replay and its learning
                     step (SAC, TD3)
"""

from podracer.kits.actor_critic import REWARD_STATISTICS, ActorCriticAgent, TrackedReturn
from podracer.kits.meta_gradient import MetaGradientAgent
from podracer.kits.q_learning import QLearningAgent
from podracer.kits.transition_replay import TransitionReplayAgent

__all__ = ["ActorCriticAgent", "MetaGradientAgent", "QLearningAgent", "REWARD_STATISTICS",
           "TrackedReturn", "TransitionReplayAgent"]
