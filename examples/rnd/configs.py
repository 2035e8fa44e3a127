"""DeepSea configs: plain PPO and PPO + RND (examples/rnd/rnd.py), the same otherwise.

  python -m podracer.launch --config=examples/rnd/configs.py:deep_sea_rnd --workdir=runs/rnd
  python -m podracer.launch --config=examples/rnd/configs.py:deep_sea_ppo --workdir=runs/ppo
"""

import os

from agents.ppo.config import catch_anakin
from podracer.config import presets

RND = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rnd.py")


def deep_sea_ppo():
  """PPO's Catch settings on DeepSea(10): 16 environments x 32 steps, 100K env steps."""
  c = catch_anakin()
  c.imports = (RND,)  # Registers deep_sea, rnd_actor_critic and ppo_rnd, here and in workers.
  c.env = presets.section("deep_sea", size=10, seed=0)
  c.total_env_steps = 100_000
  c.topology.num_devices = 1
  return c


def deep_sea_rnd():
  """The same, as PPO + RND: a second objective (the predictor's, `rnd_optimizer`) and
  the novelty added to the reward."""
  c = deep_sea_ppo()
  ppo = {k: v for k, v in c.agent.to_dict().items() if k != "name"}
  c.agent = presets.section("ppo_rnd", intrinsic_coef=1.0, **ppo)
  c.network = presets.section("rnd_actor_critic", hidden_sizes=(64, 64), activation="tanh",
                              embedding_size=64)
  c.rnd_optimizer = presets.section("adam", learning_rate=1e-3)
  return c


get_config = presets.getter("DeepSea", {"deep_sea_ppo": deep_sea_ppo,
                                        "deep_sea_rnd": deep_sea_rnd}, default="deep_sea_rnd")
