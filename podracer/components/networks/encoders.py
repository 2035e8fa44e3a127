"""Pixel encoders: frames [B, H, W, C] -> an embedding [B, E] that an agent's networks
share (D4PG's actor and critic take it as their observation: agents/d4pg/agent.py).

`replicator_resnet` is TF-Replicator's D4PG encoder (Buchlovsky et al. 2019, section
7.2: "the length-64 embedding produced by a shared 9-layer ResNet over the frame-stacked
pixel observations"): IMPALA's ResNet (torsos.py's `ImpalaResNet`) with one residual
block a section, so 3 sections of a conv and a block of two convs, nine conv layers;
then relu, a dense layer of `embedding_size` (64), LayerNorm and tanh. The paper names
the depth and the width only; the LayerNorm and tanh that bound the embedding are Acme's
pixel encoders' (its D4PG and DrQ-v2 networks), a choice of ours.

Which loss trains it: the critic's alone. An encoder shared by actor and critic is in
the critic's objective (`owns=("critic", "encoder")`); the actor's loss reads the
embedding through `stop_gradient`, so the deterministic policy gradient moves the policy
and never the encoder. That is TF-Replicator's D4PG and Acme's (its learner updates the
observation network with the critic's variables, and its policy loss takes the
embedding without a gradient): the critic's distributional TD error is a dense,
supervised-like signal, while the policy gradient -dQ/da, pushed into the encoder,
would move the features the critic is fitting to whatever raises its own estimate.
"""

from __future__ import annotations

from typing import Optional, Sequence

import haiku as hk
import jax
import jax.numpy as jnp

from podracer import registry
from podracer.components.networks.torsos import ImpalaResNet, check_image_torso
from podracer.types import EnvSpec


class ReplicatorResNet(hk.Module):
  """frames [B, H, W, C] (uint8 scaled to [0, 1]) -> tanh(LayerNorm(dense(relu(ResNet))))
  [B, embedding_size]; the ResNet is `ImpalaResNet`'s with `blocks` (1) a section."""

  def __init__(self, channels: Sequence[int] = (16, 32, 32), embedding_size: int = 64,
               blocks: int = 1, channels_first: bool = False, name: Optional[str] = None):
    super().__init__(name=name)
    self._resnet = ImpalaResNet(channels, channels_first=channels_first, blocks=blocks,
                                name="resnet")
    self._embedding_size = embedding_size

  def __call__(self, frames: jax.Array) -> jax.Array:
    x = jax.nn.relu(self._resnet.features(frames))
    x = hk.Linear(self._embedding_size, name="embedding")(jnp.reshape(x, (x.shape[0], -1)))
    x = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name="layer_norm")(x)
    return jnp.tanh(x)


@registry.networks.register("replicator_resnet")
def replicator_resnet(spec: EnvSpec, channels: Sequence[int] = (16, 32, 32),
                      embedding_size: int = 64, blocks: int = 1,
                      channels_first: bool = False) -> hk.Transformed:
  """TF-Replicator's shared pixel encoder (module docstring): init(key, frames),
  apply(params, frames [B, H, W, C]) -> [B, embedding_size]. An agent names it in its
  `encoder_network` section (D4PG's `control_pixels_seed`)."""
  check_image_torso(spec, "impala", "replicator_resnet")
  if int(embedding_size) < 1 or int(blocks) < 1 or not channels:
    raise ValueError(f"Network 'replicator_resnet' needs embedding_size >= 1, blocks >= 1 "
                     f"and some channels, got {embedding_size}, {blocks}, {channels}.")

  def forward(frames):
    return ReplicatorResNet(channels, int(embedding_size), int(blocks), channels_first,
                            name="encoder")(frames)

  return hk.without_apply_rng(hk.transform(forward))
