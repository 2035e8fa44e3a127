"""Action distributions (see `registry.distributions`): what the network's policy output
means. `categorical` (discrete, logits), `tanh_normal` (Brax's squashed normal) and
`normal` (CleanRL's, clipped to the bounds). base.py is the interface and the `Policy`
an actor-critic loss takes."""

from podracer.components.distributions.base import (ActionDistribution, Policy,
                                                    check_distribution)
from podracer.components.distributions.categorical import (CATEGORICAL, Categorical,
                                                           categorical_entropy,
                                                           categorical_log_prob)
from podracer.components.distributions.normal import (ClippedNormal, TanhNormal,
                                                      continuous_bounds, normal_log_prob,
                                                      tanh_log_det_jacobian)

__all__ = ["ActionDistribution", "CATEGORICAL", "Categorical", "ClippedNormal", "Policy",
           "TanhNormal", "categorical_entropy", "categorical_log_prob",
           "check_distribution", "continuous_bounds", "normal_log_prob",
           "tanh_log_det_jacobian"]
