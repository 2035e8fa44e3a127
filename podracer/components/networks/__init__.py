"""Registered networks: `factory(spec=EnvSpec, **config) -> hk.Transformed` (or a
NamedTuple of pure functions, for networks with more than one entry point).

This package's face: each module is one family. actor_critic.py (PPO's and IMPALA's
policy-and-value networks, recurrent too; `gaussian_actor_critic`, continuous PPO's),
q_networks.py (`q_network` is DQN's, `recurrent_q` R2D2's), continuous.py
(`gaussian_policy` and `twin_q`, SAC's actor and critic; `deterministic_policy`, TD3's),
muzero.py (`muzero_mlp`, `muzero_resnet`: MuZero's model), distributional.py
(`categorical_q_network`, C51's; `categorical_critic`, D4PG's), encoders.py
(`replicator_resnet`, TF-Replicator's pixel encoder that D4PG's actor and critic
share); torsos.py, heads.py, cores.py
and conv.py are the parts they are made of; initializers.py has `Orthogonal`, haiku's,
safe to vmap on a CPU (a network of your own that vmaps its init over runs should use it).
adapters.py wraps a Flax linen, Flax NNX, Equinox or Haiku module of your own
(`module(cls)`, registered like any network).
"""

from podracer.components.networks.actor_critic import (RecurrentActorCritic,
                                                       atari_actor_critic,
                                                       gaussian_actor_critic,
                                                       mlp_actor_critic,
                                                       mlp_shared_actor_critic,
                                                       recurrent_actor_critic)
from podracer.components.networks.continuous import (DeterministicPolicyNetwork,
                                                     GaussianOutput, GaussianPolicyNetwork,
                                                     SquashedGaussianHead, gaussian_policy,
                                                     squashed_gaussian_mode,
                                                     deterministic_policy,
                                                     squashed_gaussian_sample, twin_q)
from podracer.components.networks.adapters import Network, module
from podracer.components.networks.cores import LSTMCore
from podracer.components.networks.distributional import (CategoricalHead,
                                                         categorical_critic,
                                                         categorical_q_network)
from podracer.components.networks.encoders import ReplicatorResNet, replicator_resnet
from podracer.components.networks.initializers import Orthogonal, unbatched_qr
from podracer.components.networks.heads import DuelingHead, PolicyValueHead, PolicyValueOutput
from podracer.components.networks.muzero import MuZeroNetwork, muzero_mlp, muzero_resnet
from podracer.components.networks.q_networks import RecurrentQNetwork, q_network, recurrent_q
from podracer.components.networks.torsos import (ACTIVATIONS, ATARI_TORSOS, MLP,
                                                 ImpalaResNet, NatureCNN, activation_fn,
                                                 num_discrete_actions, preprocess_image)

__all__ = [
    "CategoricalHead", "categorical_critic", "categorical_q_network",
    "ReplicatorResNet", "replicator_resnet",
    "Orthogonal", "unbatched_qr", "ACTIVATIONS", "ATARI_TORSOS", "DeterministicPolicyNetwork", "DuelingHead",
    "GaussianOutput", "GaussianPolicyNetwork", "deterministic_policy",
    "gaussian_actor_critic",
    "SquashedGaussianHead", "gaussian_policy", "squashed_gaussian_mode",
    "squashed_gaussian_sample", "twin_q", "ImpalaResNet", "LSTMCore", "MLP",
    "MuZeroNetwork", "NatureCNN", "PolicyValueHead", "PolicyValueOutput",
    "RecurrentActorCritic", "RecurrentQNetwork", "activation_fn", "recurrent_actor_critic",
    "atari_actor_critic", "mlp_actor_critic", "mlp_shared_actor_critic",
    "muzero_mlp", "muzero_resnet", "num_discrete_actions", "preprocess_image",
    "q_network", "recurrent_q", "Network", "module",
]
