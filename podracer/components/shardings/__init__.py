"""Sharding policies: how one replica's parameters lie over the mesh's `model` axis.

A replica may span K devices (`topology.model=K`, TF-Replicator's "model-parallel
replica", section 3.3): the mesh is (runs, data, model), the per-device program stays
manual over `runs` and `data`, and the `model` axis is the compiler's, told by the
shardings of the arrays going in and out (podracer/mesh.py). A policy decides those
shardings. It is registered in `registry.shardings` and picked by
`--config.topology.sharding=NAME`; the registered factory takes K (the topology's
`model`) as its first, positional argument and its own options as keywords, and
returns a *rule*:

    rule(path: str, shape: Tuple[int, ...]) -> PartitionSpec (or None: replicated)

`path` is the parameter's path in its tree ("actor_torso/linear_0/w"). A spec names only
`MODEL` (the manual axes are the runtime's) on at most as many dimensions as the array
has. Built-in: `replicated` (every parameter whole on every device: today's), `fsdp`
(each parameter of at least `min_size` elements split over `model` on its largest
dimension K divides) and `tensor` (an MLP torso's consecutive dense layers `linear_0`,
`linear_1`, ... split column-then-row, as Megatron does: the hidden activations stay
split and one reduction joins them).

  param_specs(rule, params, model)   the rule over a tree, each spec checked.
  state_specs(params, specs, state)  any state (optax's, a target network) as its
                                     parameters are; everything else replicated.
  bytes_per_device(tree)             bytes of one device's shards of global arrays.
  spmd(fn, mesh, in_specs, out_specs)   `mesh.spmd` over a mesh with a `model` axis:
                                     manual over runs and data, `model` the compiler's.
  place(mesh, rows, specs)           rows ([runs x data, ...]) -> global arrays, each
                                     row split over `model` as `specs` say.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any, Callable, Mapping, Optional, Tuple, Union

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from podracer import registry
from podracer import mesh as mesh_lib
from podracer.errors import ConfigError

MODEL = mesh_lib.MODEL

try:  # jax >= 0.6: manual over the axes named, the rest the compiler's.
  from jax import shard_map as _shard_map  # pylint: disable=g-import-not-at-top

  def _manual_rows(fn: Callable[..., Any], mesh: Mesh) -> Callable[..., Any]:
    rows = PartitionSpec(mesh_lib.AXES)
    return _shard_map(fn, mesh=mesh, in_specs=rows, out_specs=rows,
                      axis_names=set(mesh_lib.AXES), check_vma=False)
except ImportError:  # jax 0.4.34 (the Reverb lane): the compiler's axes named `auto`.
  from jax.experimental.shard_map import shard_map as _shard_map  # type: ignore

  def _manual_rows(fn: Callable[..., Any], mesh: Mesh) -> Callable[..., Any]:
    rows = PartitionSpec(mesh_lib.AXES)
    return _shard_map(fn, mesh=mesh, in_specs=rows, out_specs=rows,
                      auto=frozenset({MODEL}), check_rep=False)

Rule = Callable[[str, Tuple[int, ...]], Optional[PartitionSpec]]


@registry.shardings.register("replicated")
def replicated(model: int, /) -> Rule:
  """Every parameter whole on every device of the replica (the default)."""
  del model
  return lambda path, shape: PartitionSpec()


@registry.shardings.register("fsdp")
def fsdp(model: int, /, min_size: int = 1024) -> Rule:
  """Each parameter of at least `min_size` elements split over `model` on the largest of
  its dimensions that K divides (the compiler gathers it where it is used, ZeRO-3 /
  FSDP); one that no dimension of which divides stays replicated, said in one line."""

  def rule(path: str, shape: Tuple[int, ...]) -> PartitionSpec:
    if model == 1 or int(np.prod(shape, dtype=np.int64)) < min_size:
      return PartitionSpec()
    fits = [d for d in range(len(shape)) if shape[d] % model == 0]
    if not fits:
      sys.stderr.write(f"Sharding fsdp: parameter {path} {tuple(shape)} has no dimension "
                       f"that topology.model={model} divides; it stays replicated.\n")
      return PartitionSpec()
    d = max(fits, key=lambda i: (shape[i], -i))
    return PartitionSpec(*[MODEL if i == d else None for i in range(len(shape))])

  return rule


_DENSE = re.compile(r"(?:^|/)linear_(\d+)/(w|b)$")


@registry.shardings.register("tensor")
def tensor(model: int, /) -> Rule:
  """Megatron's MLP split: in a torso's dense layers `linear_0, linear_1, ...`, an even
  layer's weight [in, out] is split by columns (and its bias with them), the next, odd,
  layer's by rows (its bias whole), so the activation between them stays split and one
  reduction joins the odd layer's output. Every other parameter (heads, convolutions,
  a layer K does not divide) is replicated."""

  def rule(path: str, shape: Tuple[int, ...]) -> PartitionSpec:
    found = _DENSE.search(path)
    if model == 1 or not found:
      return PartitionSpec()
    column, kind = int(found.group(1)) % 2 == 0, found.group(2)
    if kind == "b":
      return PartitionSpec(MODEL) if column and shape[-1] % model == 0 else PartitionSpec()
    dim = 1 if column else 0
    if len(shape) != 2 or shape[dim] % model:
      return PartitionSpec()
    return PartitionSpec(None, MODEL) if column else PartitionSpec(MODEL, None)

  return rule


def build(sharding: Union[str, Mapping[str, Any], None], model: int,
          key: str = "topology.sharding") -> Rule:
  """The rule a config names: a registered policy's name, or a section with `name` and
  its options; `model` is the topology's K."""
  section = {"name": sharding or "replicated"} if not isinstance(sharding, Mapping) and (
      sharding is None or isinstance(sharding, str)) else sharding
  if not isinstance(section, Mapping) and not hasattr(section, "to_dict"):
    raise ConfigError(f"Config key `{key}` must name a sharding policy (one of "
                      f"{', '.join(registry.shardings.names())}), got {sharding!r}.")
  options = dict(section.to_dict() if hasattr(section, "to_dict") else section)
  name = options.pop("name", None) or "replicated"
  factory = registry.shardings.get(name, key=f"{key}.name")
  factory = functools.partial(factory, model)
  registry.check_kwargs(factory, options, what=f"sharding '{name}'", key=key)
  return factory(**options)


def path_name(path: Tuple[Any, ...]) -> str:
  """A tree path as the rules see it: "actor_torso/linear_0/w"."""
  def part(k):
    for attr in ("key", "name", "idx"):
      if hasattr(k, attr):
        return str(getattr(k, attr))
    return str(k)
  return "/".join(part(k) for k in path)


def check_spec(spec: Any, path: str, shape: Tuple[int, ...], model: int) -> PartitionSpec:
  """`spec` as a rule returned it, refused (ConfigError naming the parameter) unless it
  is a PartitionSpec naming only `model`, no longer than the array's rank, on
  dimensions K divides."""
  spec = PartitionSpec() if spec is None else spec
  if not isinstance(spec, PartitionSpec):
    raise ConfigError(f"The sharding rule of `topology.sharding` returned {spec!r} for "
                      f"parameter {path}; a rule returns a jax.sharding.PartitionSpec "
                      "(or None for replicated).")
  if len(spec) > len(shape):
    raise ConfigError(
        f"The sharding rule of `topology.sharding` returned {spec} for parameter {path} of "
        f"shape {tuple(shape)}: {len(spec)} entries for an array of rank {len(shape)}. "
        f"Return at most {len(shape)} entries (None for a dimension left whole).")
  for dim, axes in enumerate(spec):
    names = axes if isinstance(axes, tuple) else (axes,)
    if any(a not in (None, MODEL) for a in names):
      raise ConfigError(
          f"The sharding rule of `topology.sharding` splits parameter {path} over {axes!r}; "
          f"a rule may name only '{MODEL}' (the runs and data axes are the runtime's).")
    if MODEL in names and shape[dim] % model:
      raise ConfigError(
          f"The sharding rule of `topology.sharding` splits dimension {dim} of parameter "
          f"{path} {tuple(shape)} over topology.model={model}, which does not divide "
          f"{shape[dim]}: split a dimension K divides, or return PartitionSpec().")
  return spec


def param_specs(rule: Rule, params: Any, model: int) -> Any:
  """The rule over a tree of arrays (or shapes): a tree of checked PartitionSpecs."""
  def one(path, x):
    name = path_name(path)
    return check_spec(rule(name, tuple(x.shape)), name, tuple(x.shape), model)
  return jax.tree_util.tree_map_with_path(one, params)


def state_specs(params: Any, specs: Any, state: Any) -> Any:
  """Specs for `state` (optax's state, a learner state holding a target network, a whole
  runtime state): each subtree with the structure and shapes of `params`, or of one of
  its top-level entries (the nets one objective owns), takes their specs; every other
  leaf is replicated."""
  candidates = [(params, specs)]
  if isinstance(params, Mapping):
    candidates += [(params[k], specs[k]) for k in params]
  keyed = [(jax.tree.structure(p), [tuple(x.shape) for x in jax.tree.leaves(p)], s)
           for p, s in candidates if jax.tree.leaves(p)]

  def match(node) -> Optional[Any]:
    if node is None:
      return None
    try:
      structure = jax.tree.structure(node)
    except (TypeError, ValueError):
      return None
    for tree, shapes, s in keyed:
      if structure == tree and [tuple(np.shape(x)) for x in jax.tree.leaves(node)] == shapes:
        return s
    return None

  def walk(node):
    found = match(node)
    if found is not None:
      return found
    structure = jax.tree.structure(node)
    if structure.num_leaves == 0:
      return node
    if structure.num_nodes == 1:
      return PartitionSpec()
    children, rebuild = jax.tree_util.tree_flatten(node, is_leaf=lambda n: n is not node)
    return jax.tree_util.tree_unflatten(rebuild, [walk(c) for c in children])

  return walk(state)


def bytes_per_device(tree: Any) -> int:
  """Bytes of one device's shards of `tree`'s global arrays (the most any device holds),
  measured from the arrays' addressable shards."""
  held = {}
  for x in jax.tree.leaves(tree):
    for shard in x.addressable_shards:
      held[shard.device] = held.get(shard.device, 0) + shard.data.nbytes
  return max(held.values(), default=0)


def _is_spec(x: Any) -> bool:
  return isinstance(x, PartitionSpec)


def row_shardings(mesh: Mesh, specs: Any) -> Any:
  """Model specs (of one row's arrays; a PartitionSpec() stands for a whole subtree) ->
  the NamedShardings of the rows: the leading axis over runs and data, the rest as
  each spec says over `model`."""
  return jax.tree.map(lambda s: NamedSharding(mesh, PartitionSpec(mesh_lib.AXES, *s)),
                      specs, is_leaf=_is_spec)


def spmd(fn: Callable[..., Any], mesh: Mesh, in_specs: Tuple[Any, ...], out_specs: Any,
         donate: bool = False) -> Callable[..., Any]:
  """As `podracer.mesh.spmd` (`fn` of one device's rows, every argument and output with
  a leading axis of runs x data rows), over a mesh whose `model` axis the compiler
  partitions: `in_specs` (one tree of model specs an argument) and `out_specs` (the
  outputs') place each row's arrays over the replica's devices, so `fn` is written as
  for one device (no collective over `model` in it) and its collectives name `DATA` or
  `RUNS` as before."""
  def per_device(*args):
    out = fn(*jax.tree.map(lambda x: x[0], args))
    return jax.tree.map(lambda x: jax.numpy.expand_dims(x, 0), out)

  return jax.jit(_manual_rows(per_device, mesh),
                 in_shardings=tuple(row_shardings(mesh, s) for s in in_specs),
                 out_shardings=row_shardings(mesh, out_specs),
                 donate_argnums=(0,) if donate else ())


def place(mesh: Mesh, rows: Any, specs: Any) -> Any:
  """Rows (host or device arrays, [runs x data, ...]) -> global arrays of `mesh`, each
  row over its replica's devices as `specs` say (one process)."""
  return jax.device_put(rows, row_shardings(mesh, specs))
