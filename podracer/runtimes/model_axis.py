"""Anakin over a mesh with a `model` axis (issue 78): a replica spanning K devices.

The program stays one replica's, manual over the mesh's `runs` and `data` axes; its
state's arrays are laid over the replica's K devices by the topology's sharding policy
(podracer/components/shardings: parameters by the rule, the optimizer's state and target
networks as their parameters, everything else whole on each of the K devices), and the
compiler partitions the rest. Agents, losses and networks are unchanged: no collective
over `model` appears in them.

  Layout.of(runtime)    None at K = 1 (the mesh of runs x data, as before), else the layout.
  layout.compile(init, step, donate)   the two programs, compiled over the mesh.
  layout.put(rows, specs)   this process's rows -> global arrays laid as `specs` say.
  describe(mesh, nets_opt)  the mesh's shape and `param_bytes_per_device`, for the run's
                            `layout:` line and its `result:` line.
  check_partitionable(model, program, ways_out)   refuses K > 1 where this JAX cannot
                            partition a partial-auto program (the Reverb lane's 0.4.34).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from podracer import mesh as mesh_lib
from podracer.components import shardings
from podracer.errors import ConfigError

try:  # jax >= 0.6: partial-auto shard_map partitions Anakin's program over `model`.
  from jax import shard_map as _shard_map  # pylint: disable=g-import-not-at-top
  del _shard_map
  PARTIAL_AUTO = True
except ImportError:  # jax 0.4.34 (the Reverb lane): XLA aborts compiling it.
  PARTIAL_AUTO = False

WHOLE = PartitionSpec()  # A subtree whose rows are whole on each of a replica's devices.


def model_size(mesh: Mesh) -> int:
  """K: the devices one replica spans (1 on a mesh of runs x data)."""
  return dict(mesh.shape).get(mesh_lib.MODEL, 1)


class Layout:
  """Where one replica's state lies on its devices, and the programs compiled so: over
  K devices of the `model` axis (the sharding policy's specs), and with `fixed_batch`
  one replica of a run over all of the `data` axis too, its environments split over it
  (TF-Replicator's strong scaling: the program is the one-device program, whatever the
  devices, so its updates are the same to float rounding)."""

  def __init__(self, mesh: Mesh, rule: shardings.Rule, state: Any,
               fixed_batch: bool = False, on_policy: bool = True):
    self.mesh, self.model, self.fixed_batch = mesh, model_size(mesh), fixed_batch
    self.specs = state_specs(rule, self.model, state)
    if fixed_batch:
      self.specs = batch_split(self.specs, state, on_policy, mesh.shape[mesh_lib.DATA])
    # A row of the state: one a replica (manual over runs x data), or one a run.
    self.lead = mesh_lib.RUNS if fixed_batch else mesh_lib.AXES

  @classmethod
  def of(cls, runtime: Any) -> Optional["Layout"]:
    """The layout of an Anakin runtime's state (its mesh, its topology's rule, its
    `fixed_batch`), or None for a replica a device (the mesh of runs x data)."""
    if model_size(runtime.mesh) == 1 and not runtime.fixed_batch:
      return None
    _check(runtime)
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(runtime._init_replica, key, key)  # pylint: disable=protected-access
    return cls(runtime.mesh, runtime.topology.rule, state, runtime.fixed_batch,
               runtime.agent.replay is None)

  @property
  def rows_here(self) -> int:
    """This process's rows of the state."""
    if self.fixed_batch:
      return 1
    return len(mesh_lib.local_devices_of(self.mesh)) // self.model

  def compile(self, init: Callable[..., Any], step: Callable[..., Any],
              donate: bool) -> Tuple[Callable[..., Any], Callable[..., Any]]:
    """(init(nets_keys, keys) -> state, step(state) -> (state, records)) over the mesh."""
    if not self.fixed_batch:
      return (shardings.spmd(init, self.mesh, (WHOLE, WHOLE), self.specs),
              shardings.spmd(step, self.mesh, (self.specs,), (self.specs, WHOLE),
                             donate=donate))
    # One row a run, its replica axis of one (`replica_mean` is the identity): the
    # compiler splits the batch over `data` and joins the gradients itself.
    per_run = lambda fn: jax.vmap(fn, axis_name=mesh_lib.DATA)
    return (jax.jit(per_run(init), in_shardings=(self.shardings(WHOLE),) * 2,
                    out_shardings=self.shardings(self.specs)),
            jax.jit(per_run(step), in_shardings=(self.shardings(self.specs),),
                    out_shardings=(self.shardings(self.specs), self.shardings(WHOLE)),
                    donate_argnums=(0,) if donate else ()))

  def shardings(self, specs: Any) -> Any:
    """Model specs of one row (a PartitionSpec() for a whole subtree) -> the rows'
    NamedShardings: the leading axis over `lead`, the rest as each spec says."""
    return jax.tree.map(lambda s: NamedSharding(self.mesh, PartitionSpec(self.lead, *s)),
                        specs, is_leaf=lambda x: isinstance(x, PartitionSpec))

  def put(self, rows: Any, specs: Any = WHOLE) -> Any:
    """This process's rows ([its runs x data rows, ...], host or device arrays) ->
    global arrays of the mesh, each row over its replica's devices as `specs` say."""
    first = self.rows_here * jax.process_index()
    shardings_of = self.shardings(specs)

    def one(x, where):
      if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(where, x.ndim):
        return x  # Laid out so already (a checkpoint's arrays read into their shards).
      x = np.asarray(x)
      shape = (x.shape[0] * jax.process_count(), *x.shape[1:])
      return jax.make_array_from_callback(
          shape, where, lambda index: x[_local(index, first)])

    return jax.tree.map(one, rows, _broadcast(shardings_of, rows))


def describe(mesh: Mesh, nets_and_opt: Any) -> Dict[str, Any]:
  """What a run says of its layout: the mesh's shape ({axis: devices}, `model` included;
  Sebulba's and SEED's: their learners') and `param_bytes_per_device`, the parameters
  plus optimizer state one device holds, measured from the arrays' shards."""
  shape = {mesh_lib.RUNS: 1, mesh_lib.DATA: 1, mesh_lib.MODEL: 1}
  shape.update(zip(mesh.axis_names, (int(n) for n in mesh.devices.shape)))
  return dict(mesh=shape, param_bytes_per_device=shardings.bytes_per_device(nets_and_opt))


def _check(runtime: Any) -> None:
  """What a layout over several devices a replica does not do (yet): many runs; a fixed
  batch that does not split evenly over `data`, or over several processes."""
  key = "topology.model" if model_size(runtime.mesh) > 1 else "runtime.fixed_batch"
  if runtime.runs is not None or runtime.num_runs > 1:
    raise ConfigError(
        f"Config key `{key}` asks for one replica over several devices, with many runs in "
        "one program (`num_runs`, `sweep` or `population`): such a replica trains one run. "
        f"Unset `{key}`, or train the runs one by one.")
  model = model_size(runtime.mesh)
  if model > 1 and not runtime.fixed_batch:
    check_partitionable(model, "Anakin's program", "add --config.runtime.fixed_batch=true "
                        "(the whole program partitioned by the compiler; num_envs_per_device "
                        "then counts the run's environments), or use JAX >= 0.6")
  data = runtime.mesh.shape[mesh_lib.DATA]
  if runtime.fixed_batch and runtime.num_envs_per_device % data:
    raise ConfigError(
        f"Config key `runtime.fixed_batch` splits the run's {runtime.num_envs_per_device} "
        f"environments (`runtime.num_envs_per_device`) over the mesh's {data} data "
        f"devices, which do not divide them. Set --config.runtime.num_envs_per_device to a "
        f"multiple of {data}, or --config.topology.num_devices to a divisor of "
        f"{runtime.num_envs_per_device}.")
  if runtime.fixed_batch and jax.process_count() > 1:
    raise ConfigError("Config key `runtime.fixed_batch` trains on one process's devices "
                      "for now: unset it for a run over several processes.")


def check_partitionable(model: int, program: str, ways_out: str) -> None:
  """A ConfigError naming `topology.model` where this JAX cannot partition `program`'s
  partial-auto shard_map over a replica's K > 1 devices; `ways_out` after model=1."""
  if model > 1 and not PARTIAL_AUTO:
    raise ConfigError(
        f"Config key `topology.model` is {model}, but this JAX ({jax.__version__}) cannot "
        f"partition {program} over a replica's devices (XLA aborts compiling its "
        f"partial-auto shard_map). Set --config.topology.model=1, or {ways_out}.")


def batch_split(specs: Any, state: Any, on_policy: bool, data: int) -> Any:
  """`specs` with the environments' axis split over `data`: axis 0 of the environments'
  and the actor's state, axis 1 of the pending entries and (with no replay) of the
  latest trajectory; a leaf whose axis is not the batch's, or is split already, stays."""
  split = lambda axis: lambda spec, x: _split(spec, x, axis, data)
  agent = specs.agent._replace(
      actor=_map(split(0), specs.agent.actor, state.agent.actor),
      experience=(_map(split(1), specs.agent.experience, state.agent.experience)
                  if on_policy else specs.agent.experience))
  return specs._replace(agent=agent, env=_map(split(0), specs.env, state.env),
                        pending=_map(split(1), specs.pending, state.pending))


def _map(fn: Callable[[PartitionSpec, Any], PartitionSpec], specs: Any, state: Any) -> Any:
  """`fn(spec, leaf)` over a state subtree whose specs may be one PartitionSpec."""
  if isinstance(specs, PartitionSpec):
    return jax.tree.map(lambda x: fn(specs, x), state)
  return jax.tree.map(fn, specs, state, is_leaf=lambda x: isinstance(x, PartitionSpec))


def _split(spec: PartitionSpec, x: Any, axis: int, data: int) -> PartitionSpec:
  if len(x.shape) <= axis or any(spec) or x.shape[axis] % data:
    return spec
  return PartitionSpec(*[mesh_lib.DATA if i == axis else None for i in range(axis + 1)])


def state_specs(rule: shardings.Rule, model: int, state: Any) -> Any:
  """One replica's state (arrays or shapes) -> a tree of model specs: its nets by the
  rule (checked), optimizer state and target networks as their nets, the rest whole."""
  nets = state.agent.nets
  return shardings.state_specs(nets, shardings.param_specs(rule, nets, model), state)


def _local(index: Tuple[slice, ...], first: int) -> Tuple[slice, ...]:
  """A global index's rows as this process's (its rows start at global row `first`)."""
  rows = index[0]
  start = (rows.start or 0) - first
  stop = None if rows.stop is None else rows.stop - first
  return (slice(start, stop), *index[1:])


def _broadcast(prefix: Any, tree: Any) -> Any:
  """A tree prefix of shardings (one for a whole subtree) -> one per leaf of `tree`."""
  return jax.tree.map(lambda s, sub: jax.tree.map(lambda _: s, sub), prefix, tree,
                      is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
