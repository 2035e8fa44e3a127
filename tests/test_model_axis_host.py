"""Sebulba's and SEED's learners over a `model` axis (issue 78): the learner devices as a
mesh of data replicas, each spanning `topology.model` = K devices
(podracer/runtimes/host/learners.py). Acting and learning in turns
(`max_policy_lag=0`) makes a Sebulba run fixed by its seed, so a learner replica over two
devices must write the one-device learner's records, while each device holds its share
of what the sharding policy splits."""

import io
import json
import shutil

import pytest

from agents.ppo import config as ppo_config
from podracer import builder, launch
from podracer.errors import ConfigError
from podracer.lifecycle import checkpoint
from tests.learning import best_by_run, launch_runs

pytestmark = pytest.mark.usefixtures("registered")

STEPS = 12_288  # 16 learner batches of 12 environments x 64 steps


@pytest.fixture(scope="module")
def registered():
  launch.register_components_and_agents()


def _sebulba(model, sharding="tensor", steps=STEPS):
  """PPO cartpole_sebulba in turns, a record an update: actor device 0, learners 1..K."""
  c = ppo_config.cartpole_sebulba()
  c.topology.actor_devices, c.topology.learner_devices = (0,), tuple(range(1, model + 1))
  c.topology.model, c.topology.sharding = model, sharding
  c.runtime.max_policy_lag, c.runtime.log_interval = 0, 0.0
  c.total_env_steps = steps
  return c


def _run(config, workdir):
  """The run's records and its `result:` line."""
  stream = io.StringIO()
  launch.launch(config, str(workdir), stream=stream)
  with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  return records, json.loads(stream.getvalue().split("result: ")[1].splitlines()[0])


def _assert_same_records(got, want):
  """Equal to float32 rounding: the split layers sum in another order (seen: 1.8e-7
  relative over 27 updates)."""
  assert len(got) == len(want) >= 5
  for a, b in zip(got, want):
    assert a["env_steps"] == b["env_steps"]
    for k in ("loss", "value_loss", "policy_loss", "entropy", "episode_return"):
      if b.get(k) is not None:
        assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (k, a, b)


@pytest.fixture(scope="module")
def one_device_learner(tmp_path_factory):
  return _run(_sebulba(1), tmp_path_factory.mktemp("k1"))


def test_sebulba_over_data_1_x_model_2_writes_the_one_device_learners_records(
    one_device_learner, tmp_path):
  want, whole = one_device_learner
  got, result = _run(_sebulba(2), tmp_path)
  _assert_same_records(got, want)
  assert result["mesh"] == {"runs": 1, "data": 1, "model": 2}, result
  assert whole["mesh"] == {"runs": 1, "data": 1, "model": 1}, whole
  # The torso's 64 x 64 layer and its Adam moments split in two (measured from shards).
  assert result["param_bytes_per_device"] < 0.6 * whole["param_bytes_per_device"], (
      result, whole)


def test_a_sebulba_checkpoint_at_model_2_resumes_at_model_1_and_2_alike(tmp_path):
  """Saved over a two-device replica, restored onto one device and onto two (there with
  its actors over two devices too): the resumed runs (their producers start new
  episodes, the same in both) write the same records."""
  first = tmp_path / "first"
  before, _ = _run(_sebulba(2, "fsdp", steps=STEPS // 2), first)
  # The split arrays (the 64 x 64 layer, its moments) written by orbax shard by shard.
  saver = checkpoint.Checkpointer(str(first), stream=None)
  assert len(saver.meta().get("sharded", ())) >= 3, saver.meta()
  saver.close()
  resumed = {}
  for model in (1, 2):
    workdir = tmp_path / f"at{model}"
    shutil.copytree(first, workdir)
    config = _sebulba(model, "fsdp")
    if model == 2:  # ... and its actors over two devices: `actor_model` changes too.
      config.topology.actor_devices, config.topology.actor_model = (0, 3), 2
    records, _ = _run(config, workdir)
    assert records[:len(before)] == before  # the first launch's, kept
    resumed[model] = records[len(before):]
    assert resumed[model][0]["env_steps"] > before[-1]["env_steps"]
  assert resumed[1][-1]["env_steps"] == resumed[2][-1]["env_steps"] >= STEPS
  _assert_same_records(resumed[1], resumed[2])


def test_sebulba_refuses_a_model_the_learner_devices_do_not_divide():
  config = _sebulba(2)
  config.topology.learner_devices = (1, 2, 3)
  with pytest.raises(ConfigError, match=r"`topology.model` is 2.*3 learner device\(s\).*"
                     r"give --config.topology.learner_devices a number of devices it divides"):
    builder.build(config)


@pytest.mark.learning
def test_sebulba_with_a_data_1_x_model_2_learner_mesh_learns_cartpole(tmp_path):
  """PPO's cartpole_sebulba as a user types it, on 3 CPU devices: actor device 0, one
  learner replica over devices 1 and 2 (fsdp), in turns; the bar and budget of the
  one-device learner's test (tests/test_sebulba.py: a record's mean return reaches 450
  within 2M env steps)."""
  records = launch_runs("agents/ppo/config.py:cartpole_sebulba", tmp_path,
                        "--config.topology.actor_devices=(0,)",
                        "--config.topology.learner_devices=(1,2)",
                        "--config.topology.model=2", "--config.topology.sharding=fsdp",
                        "--config.runtime.max_policy_lag=0", "--config.stop_at_return=450",
                        host_devices=3)
  assert records[-1]["env_steps"] <= 2_000_000
  best = max(best_by_run(records))
  assert best >= 450, f"best mean episode return {best:.1f} < 450"


def test_seed_learns_over_a_learner_replica_of_two_devices(tmp_path):
  """SEED's learner is the same LearnerMesh: its batches go to one replica over devices 1
  and 2 (its parameters split by fsdp); its inference server acts over devices 0 and 3
  (`topology.actor_model=2`), the parameters split over them by the same policy; the run
  ends and says both layouts."""
  c = ppo_config.cartpole_seed()
  c.topology.actor_devices, c.topology.learner_devices = (0, 3), (1, 2)
  c.topology.model, c.topology.actor_model, c.topology.sharding = 2, 2, "fsdp"
  c.total_env_steps = 8_192
  records, result = _run(c, tmp_path)
  assert result["mesh"] == {"runs": 1, "data": 1, "model": 2}, result
  assert result["actor_model"] == 2 and 0 < result["actor_param_bytes_per_device"], result
  assert records[-1]["env_steps"] >= 8_192 and records[-1]["updates"] >= 4, records[-1]


def test_sebulba_actors_over_two_devices_write_the_one_device_actors_records(
    one_device_learner, tmp_path):
  """`topology.actor_model=2`: each actor place is two devices (2 and 3) over which the
  parameters lie as fsdp says (the 64 x 64 layer split), the policy's call partitioned
  by the compiler; in turns its records are the one-device actors' to float32 rounding
  (the split layer sums in another order; a sampled action could flip only within that
  rounding), and it holds about half the network a device."""
  want, whole = one_device_learner
  c = _sebulba(1, "fsdp")
  c.topology.actor_devices, c.topology.actor_model = (2, 3), 2
  got, result = _run(c, tmp_path)
  _assert_same_records(got, want)
  # The network's bytes: a third of the learner's (parameters, Adam's two moments).
  network = whole["param_bytes_per_device"] / 3
  assert result["actor_model"] == 2, result
  assert result["actor_param_bytes_per_device"] < 0.6 * network, (result, network)


def test_sebulba_refuses_an_actor_model_the_actor_devices_do_not_divide():
  config = _sebulba(1)
  config.topology.actor_devices, config.topology.actor_model = (2, 3, 4), 2
  with pytest.raises(ConfigError, match=r"`topology.actor_model` is 2.*3 actor device\(s\).*"
                     r"give --config.topology.actor_devices a number of devices it divides"):
    builder.build(config)


@pytest.mark.reverb_lane
def test_a_learner_replica_over_two_devices_builds_where_jax_partitions_it():
  """JAX >= 0.6 compiles the learner's partial-auto step; the Reverb lane's 0.4.34
  cannot, and the build says so naming the key."""
  from podracer.runtimes import model_axis  # pylint: disable=import-outside-toplevel
  config = _sebulba(2)
  if model_axis.PARTIAL_AUTO:
    assert builder.build(config).runtime.learners.model == 2
  else:
    with pytest.raises(ConfigError, match=r"`topology.model` is 2, but this JAX \(0\.4"
                       r".*--config.topology.model=1"):
      builder.build(config)
