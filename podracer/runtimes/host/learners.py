"""Sebulba's and SEED's learner devices as one run's mesh (issue 78): `data` replicas, each
spanning `model` = K devices (`topology.model`, the actor_learner topology's).

At K = 1 this is the mesh of one run over the learner devices, a replica on each
(podracer/mesh.py), as it always was. At K > 1 the mesh is (runs 1, data L/K, model K):
the learner's step stays manual over runs and data, the `model` axis is the compiler's,
and the learner state's arrays lie over a replica's devices as the topology's sharding
policy says (podracer/components/shardings). The actors get replica 0's parameters
gathered onto their own device (params.ParamsStore), so acting is unchanged.

  LearnerMesh(devices, model, rule)   the mesh, and `replicas` (this process's).
  .lay_out(init)      the learner state's model specs, from its shapes (at K > 1).
  .spmd(fn, in_specs, out_specs, donate)   one replica's function over the mesh.
  .put(rows, specs)   [replicas, ...] rows -> the mesh's arrays (a row per replica).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import jax

from podracer import distributed, mesh as mesh_lib
from podracer.components import shardings
from podracer.errors import ConfigError
from podracer.runtimes import model_axis

WHOLE = model_axis.WHOLE  # A subtree whole on each of a replica's devices.


class LearnerMesh:
  """The learner devices of this process (and the same positions on every other), as
  `replicas` data-parallel replicas of `model` devices each."""

  def __init__(self, devices: List[jax.Device], model: int = 1,
               rule: Optional[shardings.Rule] = None):
    if model < 1 or len(devices) % model:  # The topology says so at build.
      raise ValueError(f"{len(devices)} learner devices in replicas of {model}")
    model_axis.check_partitionable(model, "the learner's step",
                                   "use JAX >= 0.6 (the default install lane)")
    if model > 1 and distributed.process_count() > 1:
      raise ConfigError(
          f"Config key `topology.model` is {model}: a learner replica over several "
          "devices trains on one process's devices for now. Set --config.topology.model=1 "
          "for a run over several processes.")
    self.devices, self.model = list(devices), model
    self.replicas = len(self.devices) // model  # this process's
    self.rule = rule or shardings.replicated(model)
    self.mesh = mesh_lib.learner_mesh(self.devices, model)
    # The learner state's (nets, opt, experience) model specs, once laid out.
    self.specs: Tuple[Any, ...] = (WHOLE, WHOLE, WHOLE)

  def lay_out(self, init: Callable[[jax.Array], Any]) -> Tuple[Any, ...]:
    """The model specs of the learner state `init(key)` makes (its shapes traced at
    K > 1 only), kept as `specs`: the nets by the rule, the optimizer's state and target
    networks as the nets, the rest whole on each of a replica's devices."""
    if self.model > 1:
      state = jax.eval_shape(init, jax.random.PRNGKey(0))
      nets = state[0]
      self.specs = tuple(shardings.state_specs(
          nets, shardings.param_specs(self.rule, nets, self.model), state))
    return self.specs

  def spmd(self, fn: Callable[..., Any], in_specs: Tuple[Any, ...], out_specs: Any,
           donate: bool = False) -> Callable[..., Any]:
    """`fn` of one replica's rows, compiled over the mesh (`mesh.spmd` at K = 1); the
    specs (one tree of model specs an argument, and the outputs') matter at K > 1."""
    if self.model == 1:
      return mesh_lib.spmd(fn, self.mesh, donate=donate)
    return shardings.spmd(fn, self.mesh, in_specs, out_specs, donate=donate)

  def put(self, rows: Any, specs: Any = WHOLE) -> Any:
    """[replicas, ...] rows (anywhere) -> the mesh's arrays, row i on replica i's
    devices, split over them as `specs` say."""
    if self.model == 1:
      return mesh_lib.put(self.mesh, rows)
    return shardings.place(self.mesh, rows, specs)

  def __repr__(self) -> str:
    return f"LearnerMesh(data={self.replicas}, model={self.model})"
