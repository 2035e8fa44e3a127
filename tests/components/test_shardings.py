"""Sharding policies (podracer/components/shardings): which parameter splits over the
mesh's `model` axis, checked rules, optimizer state as its parameters, and the bytes one
device holds, measured from the arrays' shards on 8 virtual CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from podracer import registry
from podracer.builder import register_builtin_components
from podracer.components import shardings
from podracer.errors import ConfigError

register_builtin_components()

# A Haiku MLP torso's names (podracer's mlp_actor_critic): 4 -> 256 -> 256, a 2-way head.
PARAMS = {
    "actor_torso/linear_0": {"w": np.zeros((4, 256), np.float32),
                             "b": np.zeros((256,), np.float32)},
    "actor_torso/linear_1": {"w": np.zeros((256, 256), np.float32),
                             "b": np.zeros((256,), np.float32)},
    "head/policy": {"w": np.zeros((256, 3), np.float32), "b": np.zeros((3,), np.float32)},
}


def _specs(name, model=4, **options):
  rule = shardings.build(dict(name=name, **options), model)
  return shardings.param_specs(rule, PARAMS, model)


def test_the_policies_are_registered_components():
  assert {"replicated", "fsdp", "tensor"} <= set(registry.shardings.names())
  with pytest.raises(ConfigError, match="Unknown sharding 'fdsp'.*fsdp"):
    shardings.build("fdsp", 4)


def test_replicated_keeps_every_parameter_whole():
  specs = _specs("replicated")
  assert all(s == P() for s in jax.tree.leaves(specs))


def test_fsdp_splits_large_parameters_on_a_dimension_k_divides(capsys):
  specs = _specs("fsdp", min_size=512)
  assert specs["actor_torso/linear_0"]["w"] == P(None, "model")  # 256 over 4, not 4.
  assert specs["actor_torso/linear_1"]["w"] == P("model", None)  # the first of a tie.
  assert specs["actor_torso/linear_1"]["b"] == P()  # 256 elements: under min_size.
  # 768 elements, but neither 256 ... 3 is split over 3: 256 is, so it splits.
  assert specs["head/policy"]["w"] == P("model", None)
  assert capsys.readouterr().err == ""
  specs = shardings.param_specs(shardings.build(dict(name="fsdp", min_size=2), 5),
                                PARAMS, 5)
  assert specs["head/policy"]["w"] == P()
  err = capsys.readouterr().err
  assert "head/policy/w (256, 3)" in err and "topology.model=5" in err
  assert "stays replicated" in err and len(err.strip().splitlines()) == 6


def test_tensor_splits_an_mlp_column_then_row():
  specs = _specs("tensor")
  assert specs["actor_torso/linear_0"] == {"w": P(None, "model"), "b": P("model")}
  assert specs["actor_torso/linear_1"] == {"w": P("model", None), "b": P()}
  assert specs["head/policy"] == {"w": P(), "b": P()}


def test_a_users_own_rule_is_registered_and_used():
  @registry.shardings.register("test_first_dim")
  def first_dim(model):
    return lambda path, shape: P("model") if path.endswith("/w") and shape[0] % model == 0 \
        else None

  try:
    specs = _specs("test_first_dim", model=2)
  finally:
    registry.shardings.unregister("test_first_dim")
  assert specs["actor_torso/linear_0"] == {"w": P("model"), "b": P()}
  assert specs["head/policy"]["w"] == P("model")


@pytest.mark.parametrize("spec,match", [
    (P(None, "model", None), r"3 entries for an array of rank 2"),
    (P("data"), r"may name only 'model'"),
    (("model",), r"returns a jax.sharding.PartitionSpec"),
])
def test_a_bad_rule_is_refused_naming_the_parameter(spec, match):
  with pytest.raises(ConfigError, match=match) as error:
    shardings.param_specs(lambda path, shape: spec if path.endswith("linear_1/w") else None,
                          PARAMS, 4)
  assert "actor_torso/linear_1/w" in str(error.value)
  assert "topology.sharding" in str(error.value)


def test_a_split_k_does_not_divide_is_refused():
  with pytest.raises(ConfigError, match=r"does not divide 3"):
    shardings.param_specs(lambda path, shape: P(None, "model") if "policy/w" in path
                          else None, PARAMS, 4)


def test_optimizer_state_and_a_target_network_shard_as_their_parameters():
  specs = _specs("tensor")
  nets = {"policy": PARAMS}
  net_specs = {"policy": specs}
  state = {"opt": optax.adam(1e-3).init(PARAMS), "target": PARAMS, "steps": np.zeros(())}
  got = shardings.state_specs(nets, net_specs, state)
  adam = got["opt"][0]
  assert adam.mu == specs and adam.nu == specs and adam.count == P()
  assert got["target"] == specs and got["steps"] == P()
  assert jax.tree.structure(got["opt"][1]) == jax.tree.structure(optax.EmptyState())


def test_param_bytes_per_device_are_measured_from_the_shards():
  mesh = Mesh(np.asarray(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
  specs = _specs("fsdp", min_size=512)
  opt = optax.adam(1e-3)
  tree = {"params": PARAMS, "opt": opt.init(PARAMS)}
  tree_specs = shardings.state_specs(PARAMS, specs, tree)
  placed = jax.device_put(tree, jax.tree.map(lambda s: NamedSharding(mesh, s), tree_specs,
                                             is_leaf=lambda x: isinstance(x, P)))
  whole = sum(x.nbytes for x in jax.tree.leaves(tree))
  split = sum(np.asarray(x).nbytes for path, x in jax.tree_util.tree_leaves_with_path(tree)
              if "w" in shardings.path_name(path).rsplit("/", 1)[-1])
  assert shardings.bytes_per_device(placed) == whole - split + split // 4
  replicated = jax.device_put(tree, NamedSharding(mesh, P()))
  assert shardings.bytes_per_device(replicated) == whole
  assert shardings.bytes_per_device(jnp.zeros(3)) == 12


def test_a_policys_options_are_checked_and_listed_without_k():
  with pytest.raises(ConfigError, match=r"`topology.sharding.min_sise`.*min_size"):
    shardings.build(dict(name="fsdp", min_sise=4), 2)
  from podracer.config.compose import section_defaults  # pylint: disable=import-outside-toplevel
  assert dict(section_defaults(registry.shardings, "fsdp", "topology.sharding")) == dict(
      name="fsdp", min_size=1024)
