"""A component tested alone with podracer.testing (docs/components.md: Testing a component alone)."""

import numpy as np

from podracer import testing


def test_mlp_actor_critic_alone(registered):  # the fixture registers every component
  spec = testing.fake_spec(observation_shape=(4,), num_actions=3)
  network = registered.networks.get("mlp_actor_critic")(spec=spec, hidden_sizes=(16,))
  testing.check_network(network, spec, logits=(3,), value=())
  timesteps, stats = testing.rollout(testing.FakeEnvironment(spec, episode_length=3), 2, 7)
  params = network.init(np.zeros(2, np.uint32), timesteps.observation[0])
  outputs = network.apply(params, timesteps.observation[-1])
  assert outputs.logits.shape == (2, 3) and stats.done.sum() == 4
