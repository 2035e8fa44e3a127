"""The mesh's third axis, `model` (issue 78): a replica spanning K devices. The program
stays manual over runs and data and leaves `model` to the compiler, so podracer's own
gradient step (its `replica_mean` over `data`) runs unchanged on a wide MLP: at data 2 x
model 4 its update equals the replicated one's at data 2, while each device holds a
quarter of what is split (8 virtual CPU devices, tests/conftest.py)."""

import jax
import numpy as np
import pytest

from benchmarks import model_parallel
from podracer import mesh, registry
from podracer.builder import register_builtin_components
from podracer.components import shardings
from podracer.components.topologies import Replicate
from podracer.errors import ConfigError
from podracer.learning import gradient_step, init_opt_state
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec

register_builtin_components()
DATA, WIDTH = 2, 256


def test_the_mesh_shape_leaves_a_replicas_devices_out():
  assert mesh.mesh_shape(8, model=4) == (1, 2)
  assert mesh.mesh_shape(8, 2, runs=2, model=2) == (2, 2)
  assert mesh.mesh_shape(8) == (1, 8)  # K = 1: as before.
  with pytest.raises(ConfigError, match=r"`topology.model` is 3.*8 device\(s\)"):
    mesh.mesh_shape(8, model=3)
  # A config that needs more devices than a laptop has (PPO's wide_anakin on one CPU).
  with pytest.raises(ConfigError, match=r"1 device\(s\).*run on a multiple of 4 devices\. "
                     r"On a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=4"):
    mesh.mesh_shape(1, model=4)


def test_the_topology_gives_a_three_axis_mesh_only_when_k_is_above_one():
  four = Replicate(model=4, sharding="tensor")
  assert four.mesh.axis_names == ("runs", "data", "model")
  assert four.mesh.devices.shape == (1, 2, 4) and four.num_replicas == 2
  assert [d.id for d in four.mesh.devices[0, 1]] == [4, 5, 6, 7]
  assert "model=4" in repr(four)
  one = Replicate()
  assert one.mesh.axis_names == ("runs", "data") and one.mesh.devices.shape == (1, 8)
  with pytest.raises(ConfigError, match="Unknown sharding 'megatron'"):
    Replicate(model=2, sharding="megatron")
  with pytest.raises(ConfigError, match="topology.model"):
    Replicate(model=3).arrange(1)


def _network():
  spec = EnvSpec(observation=ArraySpec((4,), np.float32),
                 action=DiscreteSpec(2))
  return registry.networks.get("mlp_actor_critic")(spec, hidden_sizes=(WIDTH, WIDTH))


def _rows(tree):
  return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (DATA, *np.shape(x))), tree)


def _step(sharding, model):
  """One gradient step on the same data rows, over data 2 x model K; the updated nets
  (host arrays) and the bytes of nets + optimizer state on one device."""
  network = _network()
  obs = np.random.default_rng(0).normal(size=(DATA, 32, 4)).astype(np.float32)
  batch = dict(obs=obs, action=(obs[..., 0] > 0).astype(np.int32),
               ret=obs.sum(-1).astype(np.float32))
  nets = {"policy": network.init(jax.random.PRNGKey(0), obs[0])}
  objectives = model_parallel.objectives(network)
  opt = init_opt_state(objectives, nets)
  devices = jax.local_devices()[:DATA * model]
  grid = mesh.device_mesh(devices, 1, model) if model > 1 else None
  if grid is None:
    fn = mesh.spmd(lambda n, o, b: gradient_step(objectives, n, o, b, None),
                   mesh.device_mesh(devices))
    new_nets, new_opt, _ = fn(_rows(nets), _rows(opt), batch)
    return jax.device_get(new_nets), shardings.bytes_per_device((new_nets, new_opt)), 0
  rule = shardings.build(sharding, model)
  net_specs = shardings.param_specs(rule, nets, model)
  opt_specs = shardings.state_specs(nets, net_specs, opt)
  fn = shardings.spmd(lambda n, o, b: gradient_step(objectives, n, o, b, None), grid,
                      in_specs=(net_specs, opt_specs, jax.sharding.PartitionSpec()),
                      out_specs=(net_specs, opt_specs, jax.sharding.PartitionSpec()))
  placed = shardings.place(grid, (_rows(nets), _rows(opt)), (net_specs, opt_specs))
  new_nets, new_opt, metrics = fn(*placed, batch)
  assert np.isfinite(jax.device_get(metrics["loss"])).all()
  assert new_nets["policy"]["actor_torso/linear_1"]["w"].sharding.spec == (
      jax.sharding.PartitionSpec(("runs", "data"), *net_specs["policy"]
                                 ["actor_torso/linear_1"]["w"]))
  specs = jax.tree.leaves((net_specs, opt_specs), is_leaf=lambda x: isinstance(
      x, jax.sharding.PartitionSpec))
  split = sum(x.nbytes for x, s in zip(jax.tree.leaves((nets, opt)), specs) if len(s))
  return jax.device_get(new_nets), shardings.bytes_per_device((new_nets, new_opt)), split


@pytest.mark.reverb_lane
@pytest.mark.parametrize("sharding", ["tensor", "fsdp"])
def test_a_gradient_step_over_the_model_axis_equals_the_replicated_one(sharding):
  expected, whole, _ = _step("replicated", 1)
  got, held, split = _step(sharding, 4)
  for path, x in jax.tree_util.tree_leaves_with_path(expected):
    np.testing.assert_allclose(_at(got, path), x, rtol=0, atol=1e-6,
                               err_msg=shardings.path_name(path))
  # One device holds a quarter of what is split and all of the rest (the torsos' 256 x
  # 256 layers and their Adam moments dominate: under half of the replicated bytes).
  assert held == whole - split + split // 4 and held < whole / 2, (held, whole, split)


def _at(tree, path):
  for k in path:
    tree = tree[getattr(k, "key", getattr(k, "idx", None))]
  return tree


def test_the_launcher_refuses_a_k_the_devices_do_not_divide(tmp_path):
  from tests.test_launch import launch  # pylint: disable=import-outside-toplevel
  result = launch("--config=agents/ppo/config.py:cartpole_anakin",  # One CPU device.
                  "--config.topology.model=2", f"--workdir={tmp_path}")
  message = " ".join(result.stderr.split())
  assert result.returncode == 2 and "`topology.model` is 2" in message, result.stderr
  assert "divisor of 1" in message and "Traceback" not in result.stderr


def _anakin_records(sharding="replicated", model=1, devices=2):
  """PPO CartPole under Anakin over data 2 x model K: each call's records, the state's
  nets and the bytes of nets + optimizer state on one device."""
  from tests.test_mesh import _ppo  # pylint: disable=import-outside-toplevel
  config = _ppo(2, num_devices=devices)
  config.total_env_steps = 2 * 256 * 2  # Two calls of 2 replicas' 4 envs x 32 steps x 2.
  config.topology.model, config.topology.sharding = model, sharding
  out, state = _train(config)
  return out, state.agent.nets, shardings.bytes_per_device((state.agent.nets,
                                                            state.agent.opt))


def _train(config):
  """Each call's (metrics, episodes) of a built run, and its last state."""
  from podracer import builder  # pylint: disable=import-outside-toplevel
  runtime = builder.build(config).runtime
  state, out = runtime.init(), []
  for _ in range(runtime.num_calls):
    state, metrics, episodes = runtime.step(state)
    out.append((metrics, episodes))
  return out, state


@pytest.fixture(scope="module")
def replicated_anakin():
  return _anakin_records()


@pytest.mark.parametrize("sharding", ["fsdp", "tensor"])
def test_anakin_over_data_2_x_model_4_writes_the_replicated_runs_records(
    replicated_anakin, sharding):
  expected, _, whole = replicated_anakin
  got, nets, held = _anakin_records(sharding, model=4, devices=8)
  # float32 rounding: the split layers sum in another order (seen: 4e-6 on a value loss
  # of ~10, 0 on the episodes).
  for (metrics, episodes), (want, want_episodes) in zip(got, expected):
    np.testing.assert_array_equal(episodes, want_episodes)
    for k, v in want.items():
      np.testing.assert_allclose(metrics[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
  w = nets["actor_torso/linear_1"]["w"]
  assert w.sharding.spec[1:] == ("model", None) if sharding == "tensor" else (
      "model" in w.sharding.spec[1:]), w.sharding.spec
  assert held < whole / 2, (held, whole)  # The 64 x 64 layers and their Adam moments.


def test_anakin_refuses_a_replica_over_several_devices_for_many_runs():
  from agents.ppo.config import cartpole_anakin  # pylint: disable=import-outside-toplevel
  from podracer import builder  # pylint: disable=import-outside-toplevel
  from podracer.launch import register_components_and_agents  # pylint: disable=import-outside-toplevel
  register_components_and_agents()
  config = cartpole_anakin()
  config.topology.model, config.topology.sharding, config.num_runs = 2, "tensor", 2
  with pytest.raises(ConfigError, match="`topology.model` asks for one replica over several "
                     "devices, with many runs in one program"):
    builder.build(config)


def test_the_run_says_its_mesh_and_the_bytes_a_device_holds(tmp_path):
  """The `layout:` line before the first record and the `result:` line: the mesh's shape
  and `param_bytes_per_device`, measured from the state's shards, equal to what the
  tensor policy's specs give from the shapes alone (a quarter of each split array)."""
  import io, json  # pylint: disable=import-outside-toplevel,multiple-imports
  from tests.test_mesh import _ppo  # pylint: disable=import-outside-toplevel
  from podracer import builder, launch  # pylint: disable=import-outside-toplevel
  config = _ppo(1, num_devices=8)
  config.topology.model, config.topology.sharding = 4, "tensor"
  runtime = builder.build(config).runtime
  nets_opt = (runtime.layout.specs.agent.nets, runtime.layout.specs.agent.opt)
  key = jax.random.PRNGKey(0)
  shapes = jax.eval_shape(runtime._init_replica, key, key)  # pylint: disable=protected-access
  specs = jax.tree.leaves(nets_opt, is_leaf=lambda x: isinstance(
      x, jax.sharding.PartitionSpec))
  expected = sum(x.size * x.dtype.itemsize // (4 if any(spec) else 1) for x, spec in zip(
      jax.tree.leaves((shapes.agent.nets, shapes.agent.opt)), specs))
  stream = io.StringIO()
  launch.launch(config, str(tmp_path), stream=stream)
  out = stream.getvalue()
  assert f"layout: mesh runs=1 x data=2 x model=4, param_bytes_per_device {expected:,}\n" \
      in out, out
  result = json.loads(out.split("result: ")[1].splitlines()[0])
  assert result["mesh"] == {"runs": 1, "data": 2, "model": 4}, result
  assert result["param_bytes_per_device"] == expected, (result, expected)


def _fixed_batch_records(devices, model=1, sharding="replicated", envs=8):
  """PPO CartPole with `runtime.fixed_batch`: `envs` environments in all over `devices`
  devices (data = devices / K), two calls of 2 updates of 16 steps."""
  from tests.test_mesh import _ppo  # pylint: disable=import-outside-toplevel
  config = _ppo(2, num_devices=devices)
  config.runtime.update(dict(num_envs_per_device=envs, rollout_length=16,
                             updates_per_call=2, fixed_batch=True))
  config.total_env_steps = 2 * envs * 16 * 2  # The same on every device count.
  config.topology.model, config.topology.sharding = model, sharding
  return _train(config)


@pytest.fixture(scope="module")
def one_device_fixed_batch():
  return _fixed_batch_records(1)[0]


@pytest.mark.slow
@pytest.mark.parametrize("devices,model,sharding", [
    (2, 1, "replicated"), (4, 1, "replicated"), (8, 1, "replicated"), (8, 4, "fsdp")])
def test_a_fixed_batch_gives_the_same_updates_on_1_2_4_and_8_devices(
    one_device_fixed_batch, devices, model, sharding):
  """TF-Replicator's strong scaling: the run's 8 environments split over the data
  devices (8 / K of them), the same updates as on one device to float32 rounding (seen:
  2e-6 on a value loss of ~20, 7e-8 on a policy loss of ~1e-3; episodes equal)."""
  got, state = _fixed_batch_records(devices, model, sharding)
  for (metrics, episodes), (want, want_episodes) in zip(got, one_device_fixed_batch):
    np.testing.assert_array_equal(episodes, want_episodes)
    for k, v in want.items():
      np.testing.assert_allclose(metrics[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
  data = devices // model
  x = state.env.env_state.x  # [1 run, 8 environments]: a device holds 8 / data of them.
  assert tuple(x.sharding.spec) == ("runs", "data") and x.addressable_shards[0].data.shape == (
      1, 8 // data), (x.sharding, x.addressable_shards[0].data.shape)


def test_a_fixed_batch_that_does_not_split_over_data_names_the_key():
  from tests.test_mesh import _ppo  # pylint: disable=import-outside-toplevel
  from podracer import builder  # pylint: disable=import-outside-toplevel
  config = _ppo(1, num_devices=4)
  config.runtime.update(dict(num_envs_per_device=6, fixed_batch=True))
  with pytest.raises(ConfigError, match=r"`runtime.fixed_batch` splits the run's 6 env"
                     r".*4 data devices.*multiple of 4"):
    builder.build(config)


@pytest.mark.reverb_lane
def test_a_replica_over_several_devices_builds_where_jax_partitions_it():
  """JAX >= 0.6 compiles Anakin's partial-auto program; on the Reverb lane's 0.4.34 XLA
  aborts compiling it, so the build refuses it naming the key and two ways out (a fixed
  batch there compiles and gives the one-device updates: the program is a plain jit)."""
  from tests.test_mesh import _ppo  # pylint: disable=import-outside-toplevel
  from podracer import builder  # pylint: disable=import-outside-toplevel
  from podracer.runtimes import model_axis  # pylint: disable=import-outside-toplevel
  config = _ppo(1, num_devices=8)
  config.topology.model, config.topology.sharding = 4, "tensor"
  if model_axis.PARTIAL_AUTO:
    assert builder.build(config).runtime.layout.model == 4
    assert jax.__version_info__ >= (0, 6)
  else:
    with pytest.raises(ConfigError, match=r"`topology.model` is 4, but this JAX \(0\.4"
                       r".*--config.topology.model=1.*runtime.fixed_batch=true"):
      builder.build(config)
  config.runtime.fixed_batch = True
  assert builder.build(config).runtime.layout.fixed_batch


@pytest.mark.slow
def test_a_checkpoint_at_model_4_resumes_at_model_2_and_1_to_the_same_records(tmp_path):
  """Saved after the first of two calls at data 2 x model 4 (tensor), resumed at data 2 x
  model 2 (4 devices) under a user's own registered rule and at data 2 x model 1 (2
  devices): the second call's records are the uninterrupted run's, to float32 rounding
  (as between K = 4 and K = 1 above)."""
  from tests.test_mesh import _ppo  # pylint: disable=import-outside-toplevel
  from podracer import builder  # pylint: disable=import-outside-toplevel
  from podracer.lifecycle import checkpoint  # pylint: disable=import-outside-toplevel

  @registry.shardings.register("test_critic_rows")
  def critic_rows(model):  # A user's rule: the critic torso's weights split by rows.
    del model
    return lambda path, shape: (jax.sharding.PartitionSpec("model") if
                                path.startswith("critic_torso/") and path.endswith("/w")
                                and shape[0] % 2 == 0 else None)

  def runtime(model):
    config = _ppo(2, num_devices=2 * model)
    config.total_env_steps = 2 * 256 * 2
    config.topology.model = model
    config.topology.sharding = "test_critic_rows" if model == 2 else "tensor"
    return builder.build(config).runtime

  saver = checkpoint.Checkpointer(str(tmp_path))
  four = runtime(4)
  state, _, _ = four.step(four.init())
  saver.save(1, state, 1, **four._counters(1))  # pylint: disable=protected-access
  saver.close()
  # The arrays split over `model` were written by orbax shard by shard, with their layout.
  reader = checkpoint.Checkpointer(str(tmp_path))
  sharded = reader.meta()["sharded"]
  saved = reader._manager.item_metadata(1)["state"]  # pylint: disable=protected-access
  saved = getattr(saved, "tree", saved)
  assert len(sharded) >= 4 and all(
      "model" in saved[k].sharding.axis_names for k in sharded), sharded
  reader.close()
  _, expected, expected_episodes = four.step(state)
  try:
    others = {2: runtime(2)}
  finally:
    registry.shardings.unregister("test_critic_rows")
  others[1] = runtime(1)
  for model, other in others.items():
    restored, first_call = other._resume(other.init(), checkpoint.Checkpointer(  # pylint: disable=protected-access
        str(tmp_path)))
    assert first_call == 1
    if model == 2:  # The user's rule laid the restored state.
      nets = restored.agent.nets
      assert tuple(nets["critic_torso/linear_1"]["w"].sharding.spec) == (("runs", "data"),
                                                                         "model")
      assert tuple(nets["actor_torso/linear_1"]["w"].sharding.spec) == (("runs", "data"),)
    _, metrics, episodes = other.step(restored)
    np.testing.assert_array_equal(episodes, expected_episodes)
    for k, v in expected.items():
      np.testing.assert_allclose(metrics[k], v, rtol=1e-5, atol=1e-6, err_msg=(model, k))
  # Model 2 on all 8 devices: data 4, not the checkpoint's 2 rows. The fix it names is
  # the one that works (num_devices, a key a resume may change).
  config = _ppo(2, num_devices=8)
  config.topology.model, config.topology.sharding = 2, "fsdp"
  wider = builder.build(config).runtime
  with pytest.raises(ConfigError, match=r"data=2 devices; this run's is runs=1 x data=4.*"
                     r"--config.topology.num_devices=4 \(at topology.model=2\)"):
    wider._resume(wider.init(), checkpoint.Checkpointer(str(tmp_path)))  # pylint: disable=protected-access


BUDGET = 16 * 2**20  # What PPO's and DQN's `wide_anakin` name as one device's budget.


@pytest.mark.parametrize("agent", ["ppo", "dqn"])
def test_the_wide_configs_exceed_their_device_budget_whole_and_fit_it_split(agent):
  """Parameters plus optimizer state (DQN's target copy in it), from the shapes: over the
  budget the config names on one device, under it a device at its K = 4 (its policy)."""
  import importlib  # pylint: disable=import-outside-toplevel
  from podracer import builder  # pylint: disable=import-outside-toplevel
  from podracer.launch import register_components_and_agents  # pylint: disable=import-outside-toplevel
  register_components_and_agents()
  config = importlib.import_module(f"agents.{agent}.config").wide_anakin()
  assert "16 MiB a device" in config_doc(agent)
  runtime = builder.build(config).runtime
  key = jax.random.PRNGKey(0)
  state = jax.eval_shape(runtime._init_replica, key, key)  # pylint: disable=protected-access
  held = (state.agent.nets, state.agent.opt)
  specs = (runtime.layout.specs.agent.nets, runtime.layout.specs.agent.opt)
  whole = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(held))
  split = sum(x.size * x.dtype.itemsize // (4 if any(s) else 1) for x, s in zip(
      jax.tree.leaves(held), jax.tree.leaves(specs, is_leaf=lambda s: isinstance(
          s, jax.sharding.PartitionSpec))))
  assert runtime.layout.model == 4
  assert whole > BUDGET > split, (whole, split)


def config_doc(agent):
  import importlib  # pylint: disable=import-outside-toplevel
  return importlib.import_module(f"agents.{agent}.config").wide_anakin.__doc__


def test_a_replica_over_several_devices_that_keeps_its_network_whole_says_so(capsys):
  """`topology.model` > 1 under the default `replicated` policy saves no memory: said in
  one line, once, naming the two policies that split; a splitting policy says nothing."""
  from podracer.components.topologies import ActorLearner  # pylint: disable=import-outside-toplevel
  whole = Replicate(model=2)
  assert whole.shape == (1, 4) and whole.arrange(1) == (1, 4)
  ActorLearner(actor_devices=(0,), learner_devices=(1, 2), model=2)
  said = capsys.readouterr().err
  assert said.count("topology.model=2 with topology.sharding=replicated keeps the whole "
                    "network") == 2 and "sharding=fsdp or tensor" in said, said
  Replicate(model=2, sharding="fsdp").arrange(1)
  ActorLearner(actor_devices=(0,), learner_devices=(1, 2), model=2, sharding="tensor")
  assert capsys.readouterr().err == ""
