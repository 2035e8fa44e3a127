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
  describe(mesh, state)     the mesh's shape and `param_bytes_per_device`, for the run's
                            `layout:` line and its `result:` line.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from podracer import mesh as mesh_lib
from podracer.components import shardings
from podracer.errors import ConfigError

WHOLE = PartitionSpec()  # A subtree whose rows are whole on each of a replica's devices.


def model_size(mesh: Mesh) -> int:
  """K: the devices one replica spans (1 on a mesh of runs x data)."""
  return dict(mesh.shape).get(mesh_lib.MODEL, 1)


class Layout:
  """Where one replica's state lies on its K devices, and the programs compiled so."""

  def __init__(self, mesh: Mesh, rule: shardings.Rule, state: Any):
    self.mesh, self.model = mesh, model_size(mesh)
    self.specs = state_specs(rule, self.model, state)

  @classmethod
  def of(cls, runtime: Any) -> Optional["Layout"]:
    """The layout of an Anakin runtime's state (its mesh, its topology's rule), or None
    when the mesh has no `model` axis."""
    if model_size(runtime.mesh) == 1:
      return None
    if runtime.num_runs > 1 or runtime._vmapped:  # pylint: disable=protected-access
      raise ConfigError(
          "Config key `topology.model` is above 1 with many runs in one program "
          "(`num_runs`, `sweep` or `population`): a replica over several devices trains "
          "one run. Set --config.topology.model=1, or train the runs one by one.")
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(runtime._init_replica, key, key)  # pylint: disable=protected-access
    return cls(runtime.mesh, runtime.topology.rule, state)

  def compile(self, init: Callable[..., Any], step: Callable[..., Any],
              donate: bool) -> Tuple[Callable[..., Any], Callable[..., Any]]:
    """(init(nets_keys, keys) -> state, step(state) -> (state, records)) over the mesh."""
    return (shardings.spmd(init, self.mesh, (WHOLE, WHOLE), self.specs),
            shardings.spmd(step, self.mesh, (self.specs,), (self.specs, WHOLE),
                           donate=donate))

  def put(self, rows: Any, specs: Any = WHOLE) -> Any:
    """This process's rows ([its runs x data rows, ...], host or device arrays) ->
    global arrays of the mesh, each row over its replica's devices as `specs` say."""
    first = len(mesh_lib.local_devices_of(self.mesh)) // self.model * jax.process_index()
    rows = jax.tree.map(np.asarray, rows)
    shardings_of = shardings.row_shardings(self.mesh, specs)

    def one(x, where):
      shape = (x.shape[0] * jax.process_count(), *x.shape[1:])
      return jax.make_array_from_callback(
          shape, where, lambda index: x[_local(index, first)])

    return jax.tree.map(one, rows, _broadcast(shardings_of, rows))


def describe(mesh: Mesh, state: Any) -> Dict[str, Any]:
  """What a run says of its layout: the mesh's shape ({axis: devices}, `model` included)
  and `param_bytes_per_device`, the parameters plus optimizer state one device holds,
  measured from the state's shards."""
  shape = {mesh_lib.RUNS: 1, mesh_lib.DATA: 1, mesh_lib.MODEL: 1}
  shape.update(zip(mesh.axis_names, (int(n) for n in mesh.devices.shape)))
  return dict(mesh=shape, param_bytes_per_device=shardings.bytes_per_device(
      (state.agent.nets, state.agent.opt)))


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
