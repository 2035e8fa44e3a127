"""examples/writing_components.py: one minimal component of each kind (docs/components.md "Writing
components"), each checked against its contract, then all of them trained together."""

import importlib.util
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import podracer
from podracer import registry
from podracer.experience import Sample
from tests.test_launch import ROOT, launch

NAMES = {"environments": "coin", "networks": "tiny_actor_critic",
         "losses": "reinforce_baseline", "optimizers": "sgd_to_zero", "replay": "recent",
         "agents": "actor_critic", "loggers": "lines"}


@pytest.fixture(scope="module")
def example():
  path = ROOT / "examples" / "writing_components.py"
  spec = importlib.util.spec_from_file_location("writing_components", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  yield module
  for kind, name in NAMES.items():  # Other tests list the registries: leave them as found.
    registry.ALL[kind].unregister(name)


@pytest.mark.reverb_lane
def test_each_kind_is_registered_and_meets_its_contract(example):
  for kind, name in NAMES.items():
    assert name in registry.ALL[kind], (kind, name)
  env = example.Coin(flips=4)
  podracer.check_environment(env)
  network = example.tiny_actor_critic(env.spec(), hidden_size=8)
  params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, 2)))
  out = network.apply(params, jnp.zeros((5, 2)))
  assert out.logits.shape == (5, 2) and out.value.shape == (5,)
  total, metrics = example.reinforce_baseline()(out.logits, out.value, _batch(5))
  assert total.shape == () and set(metrics) == {"policy_loss", "value_loss"}
  optimizer = example.sgd_to_zero(total_steps=10)
  optimizer.update(params, optimizer.init(params), params)  # An optax transformation.


def test_recent_replay_keeps_the_last_items_and_samples_only_those(example):
  replay = example.Recent(batch_size=4, max_size=3)
  state = replay.init(jax.ShapeDtypeStruct((), jnp.float32))
  assert not replay.can_sample(state)
  state = replay.add(state, jnp.arange(5, dtype=jnp.float32))  # 0..4: keeps 2, 3, 4.
  assert replay.can_sample(state)
  sample = replay.sample(state, jax.random.PRNGKey(0))
  assert isinstance(sample, Sample) and sample.items.shape == (4,)
  assert set(np.asarray(sample.items).tolist()) <= {2.0, 3.0, 4.0}
  np.testing.assert_allclose(sample.probabilities, 1 / 3)


def test_the_example_components_learn_together_through_the_launcher(tmp_path):
  result = launch(f"--config={ROOT / 'examples' / 'writing_components.py'}",
                  f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr
  records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  # Random guesses score 2 of 4 coins; the agent learns to read them.
  assert records[-1]["episode_return"] >= 3.5, records[-1]
  assert "policy_loss" in records[-1] and "policy_loss" in result.stdout


def _batch(n):
  from podracer.components.losses import PolicyGradientBatch
  zeros = jnp.zeros(n)
  return PolicyGradientBatch(observation=jnp.zeros((n, 2)), action=zeros.astype(jnp.int32),
                             behaviour_log_prob=zeros, behaviour_value=zeros,
                             advantage=jnp.ones(n), value_target=zeros, mask=jnp.ones(n))


def test_lines_logger_writes_each_record_and_none_for_nan(example, tmp_path):
  from podracer import testing  # pylint: disable=import-outside-toplevel
  logger = testing.log_records("lines", str(tmp_path), testing.fake_records(3),
                               keys=("env_steps", "loss"))
  assert logger.file.closed
  lines = (tmp_path / "records.txt").read_text().splitlines()
  assert len(lines) == 3 and lines[0].startswith("env_steps=1024 loss=")
  assert lines[1] == "env_steps=2048 loss=None"  # the run's NaN, as every logger gets it

