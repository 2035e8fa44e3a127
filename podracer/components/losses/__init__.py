"""Loss components: pure functions of network outputs and a batch (see `registry.losses`)."""

from podracer.components.losses.actor_critic import (PolicyGradientBatch, PolicyLoss,
                                                     PPOLoss, as_policy, learned_action,
                                                     categorical_entropy, clipped_surrogate,
                                                     categorical_log_prob,
                                                     generalized_advantages, normalize,
                                                     policy_gradient_batch, transition_mask)
from podracer.components.losses.categorical import (CategoricalQLearningLoss,
                                                    CategoricalTDLoss,
                                                    categorical_projection,
                                                    categorical_support, cross_entropy,
                                                    mean_value,
                                                    n_step_categorical_targets)
from podracer.components.losses.dpo import DPOLoss, dpo_drift
from podracer.components.losses.learned_policy import (DRIFT_FORMS, LearnedPolicyLoss,
                                                       first_order_drift, learned_drift,
                                                       load_drift, zero_drift)
from podracer.components.losses.meta_gradient import (MetaGradient, MetaState,
                                                      halves_in_time)
from podracer.components.losses.q_learning import (QLambdaLoss, QLearningLoss,
                                                   n_step_double_q_targets,
                                                   n_step_double_q_td, n_step_returns,
                                                   q_lambda_targets, value_rescaling)
from podracer.components.losses.sac import (soft_policy_loss, soft_q_target,
                                            temperature_loss, twin_q_loss)
from podracer.components.losses.vtrace import VTraceBatch, VTraceLoss, vtrace_batch

__all__ = ["PolicyGradientBatch", "PolicyLoss", "PPOLoss", "as_policy", "learned_action", "categorical_entropy", "categorical_log_prob",
           "clipped_surrogate", "CategoricalQLearningLoss", "CategoricalTDLoss",
           "categorical_projection", "categorical_support", "cross_entropy", "mean_value",
           "n_step_categorical_targets", "DPOLoss", "dpo_drift",
           "generalized_advantages", "normalize", "policy_gradient_batch", "transition_mask",
           "DRIFT_FORMS", "LearnedPolicyLoss", "first_order_drift", "learned_drift",
           "load_drift", "zero_drift",
           "MetaGradient", "MetaState", "halves_in_time",
           "QLearningLoss", "n_step_double_q_targets", "n_step_double_q_td",
           "QLambdaLoss", "q_lambda_targets",
           "n_step_returns", "value_rescaling",
           "VTraceBatch",
           "VTraceLoss", "vtrace_batch", "soft_policy_loss", "soft_q_target",
           "temperature_loss", "twin_q_loss"]
