"""What an agent whose discount and lambda a meta-gradient adapts online shares
(`MetaGradientAgent`): its `meta_loss` (the config's `meta_loss` section, e.g.
`meta_gradient`: podracer/components/losses/meta_gradient.py), the meta-parameters'
learner state, and the two hooks the component calls: `meta_values` (eta at its
configured values) and `learning_batch` (the loss's batch for given values). `update`
asks `adapted` for the values to learn with this update.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

from podracer.agent import Agent, Metrics
from podracer.learning import META, init_opt_state
from podracer.types import PyTree


class MetaGradientAgent(Agent):
  """An Agent with a `meta_loss` (None: its meta-parameters stay as configured)."""

  meta_loss: Any = None

  def init_opt(self, nets: PyTree) -> PyTree:
    """One optimizer state per objective, and the meta-parameters' state under `META`
    where there is a `meta_loss`."""
    opt = init_opt_state(self.objectives, nets)
    if self.meta_loss is not None:
      opt[META] = self.meta_loss.init(self.meta_values())
    return opt

  def meta_values(self) -> Dict[str, Any]:
    """The meta-parameters a `meta_loss` may adapt, at their configured values:
    {"discount": ..., "lambda": ...} for an agent whose `learning_batch` takes them."""
    return {}

  def learning_batch(self, trajectory: PyTree, values: Mapping[str, Any]) -> PyTree:
    """The batch the objectives' losses take, built from `trajectory` with the
    meta-parameters `values` (`meta_values`'s keys)."""
    raise NotImplementedError(f"{type(self).__name__} takes no `meta_loss`: it has no "
                              "learning_batch.")

  def adapted(self, nets: PyTree, opt: PyTree, trajectory: PyTree
              ) -> Tuple[Dict[str, Any], PyTree, Metrics]:
    """(the meta-parameters this update learns with, the learner state, metrics): the
    `meta_loss`'s step on `trajectory`, or `meta_values()` unchanged without one."""
    if self.meta_loss is None:
      return self.meta_values(), opt, {}
    return self.meta_loss.step(self, nets, opt, trajectory)
