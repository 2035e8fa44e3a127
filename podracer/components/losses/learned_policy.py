"""A learned policy objective: PPO's surrogate with a drift a small network adds.

Lu et al. 2022 ("Discovered Policy Optimisation", NeurIPS) write PPO's clipped objective
as  rho A - f(rho, A)  with PPO's drift  f_PPO = relu((rho - clip(rho, 1-eps, 1+eps)) A),
and meta-learn f. This loss's policy term is

    rho A - f_PPO,eps'(rho, A) - f_theta(rho, A),
    f_theta(rho, A) = relu(g_theta(phi(rho, A)) - g_theta(phi(1, A)))^2,
    eps' = clip_epsilon * exp(c),

(`drift_form="squared"`, the form of 0.11.0-0.18.0), or, from 0.19.0 by default
(`drift_form="first_order"`, LPO's way of starting from PPO):

    rho A - relu(f_PPO,eps'(rho, A) + d_theta(rho, A)),
    d_theta(rho, A) = g_theta(phi(rho, A)) - g_theta(phi(1, A)) - (rho - 1) g'_theta(1, A),

g' the derivative of g_theta(phi(rho, A)) in rho. The squared drift is fourth order in a
search's step from theta = 0 (its gradient was 0.1 % of PPO's at sigma 0.1, docs/meta.md);
d_theta is linear in the output layer, so the search sees it at first order; it may take
PPO's drift away as well as add to it, and stays zero and flat at rho = 1 (d_theta is
second order in rho - 1 there), so the objective's gradient at the policy that acted is
still the policy gradient.

g_theta a one-hidden-layer tanh network of the features phi = (rho - 1, (rho - 1)^2,
(rho - 1) A, log rho, A log rho, A). f_theta is a drift: never negative, zero at rho = 1
and flat there (its gradient in rho vanishes at 1), so the objective's gradient at the
policy that acted is the policy gradient whatever theta is. PPO's own drift is kept, its
clip range scaled by exp(c), c learned too (from 0.14.0): f_theta can only add caution,
and c lets the search take some away (a wider clip learned CartPole faster at a short
budget). From 0.20.0 theta has a second scale, c_v (`log_value_clip`): the clipped
value loss lets V move clip_epsilon * exp(c_v) from the behaviour's value, where PPO's
ties that range to the policy's (the gain a wider clip_epsilon gives CartPole comes
from its value clip: docs/meta.md). theta = 0 (c = c_v = 0) is PPO exactly. Its entropy
term is PPO's.

theta comes from `path` (an .npz with arrays w0 [6, H], b0 [H], w1 [H, 1], b1 [1] and
log_clip [1], c, and log_value_clip [1], c_v; what `python -m podracer.meta` writes as
learned_objective.npz; a file without log_clip, from before 0.14.0, has c = 0, one
without log_value_clip, from before 0.20.0, c_v = 0), or is zero (PPO) without it.
The meta-learner gives each member its own theta (`with_drift`, traced arrays) to train
many objectives in one program.

Lifetime conditioning (0.21.0, `lifetime=True`; TA-LPO, Jackson et al. 2024): g_theta
also sees the fraction of the training done, t = n / N (n the gradient steps taken,
`podracer.learning.step()`, N the run's, `total_steps`, which the builder gives), as a
seventh feature: phi(rho, A, t), w0 [7, H]. The drift stays zero and flat at rho = 1 at
every t, so theta = 0 is still PPO; a file of such a theta names the form
`LIFETIME_SUFFIX`, which a podracer before 0.21.0 refuses by name.
"""

from __future__ import annotations

import copy
import json
import os
import zipfile
from typing import Annotated, Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer import registry
from podracer.components.losses.actor_critic import PPOLoss, clipped_surrogate
from podracer.components.losses.dpo import DPO_FORM
from podracer.errors import ConfigError
from podracer.learning import step
from podracer.registry.ranges import NonNegative, Positive

NUM_FEATURES = 6  # phi(rho, A); a lifetime-conditioned drift has one more, t.
DRIFT_KEYS = ("w0", "b0", "w1", "b1")
CLIP_KEY = "log_clip"  # c: PPO's clip range scaled by exp(c); 0 where a file lacks it.
VALUE_CLIP_KEY = "log_value_clip"  # c_v: the value loss's clip range's scale; the same.
# The objective's form, written in learned_objective.json beside the .npz; a file of
# another form is refused. One without a form (0.11.0-0.13.0) is FORM with c = 0.
FORM = "ppo_clip_scale_and_drift"  # The squared drift.
FIRST_ORDER_FORM = "ppo_clip_scale_and_first_order_drift"
DRIFT_FORMS = {"first_order": FIRST_ORDER_FORM, "squared": FORM}  # drift_form -> form
# The forms of a theta with c_v (0.20.0): a podracer before it, which would drop c_v,
# refuses them by name.
VALUE_CLIP_FORMS = {"first_order": "ppo_value_and_policy_clip_scales_and_first_order_drift",
                    "squared": "ppo_value_and_policy_clip_scales_and_drift"}


# The suffix of the form of a lifetime-conditioned theta (0.21.0).
LIFETIME_SUFFIX = "_lifetime_conditioned"


def objective_form(drift_form: str, value_clip: bool, lifetime: bool = False) -> str:
  """The form learned_objective.json names for a theta of this drift, with c_v or not,
  conditioned on the lifetime or not."""
  form = (VALUE_CLIP_FORMS if value_clip else DRIFT_FORMS)[drift_form]
  return form + LIFETIME_SUFFIX if lifetime else form


def drift_features(ratio: jax.Array, advantage: jax.Array,
                   progress: Optional[jax.Array] = None) -> jax.Array:
  """phi(rho, A) [..., 6] (rho and A broadcast together), or with the fraction of the
  training done, `progress` (a scalar), phi(rho, A, t) [..., 7]."""
  ratio, advantage = jnp.broadcast_arrays(ratio, advantage)
  d, log_ratio = ratio - 1.0, jnp.log(ratio)
  features = [d, d * d, d * advantage, log_ratio, log_ratio * advantage, advantage]
  if progress is not None:
    features.append(jnp.broadcast_to(jnp.asarray(progress, ratio.dtype), ratio.shape))
  return jnp.stack(features, axis=-1)


def zero_drift(hidden: int = 16, value_clip: bool = True,
               lifetime: bool = False) -> Dict[str, jax.Array]:
  """theta = 0: the learned drift adds nothing, both clip ranges PPO's (PPO); without
  `value_clip`, a theta of before 0.20.0 (no c_v); with `lifetime`, a drift that sees
  the training's progress (w0 [7, H])."""
  theta = dict(w0=jnp.zeros((NUM_FEATURES + lifetime, hidden)), b0=jnp.zeros((hidden,)),
               w1=jnp.zeros((hidden, 1)), b1=jnp.zeros((1,)), log_clip=jnp.zeros((1,)))
  return dict(theta, log_value_clip=jnp.zeros((1,))) if value_clip else theta


def learned_drift(theta: Dict[str, jax.Array], ratio: jax.Array, advantage: jax.Array,
                  progress: Optional[jax.Array] = None) -> jax.Array:
  """f_theta(rho, A[, t]) >= 0, zero and flat at rho = 1."""
  ratio, advantage = jnp.broadcast_arrays(ratio, advantage)
  at_one = _g(theta, jnp.ones_like(ratio), advantage, progress)
  return jnp.square(jax.nn.relu(_g(theta, ratio, advantage, progress) - at_one))


def _g(theta: Dict[str, jax.Array], ratio: jax.Array, advantage: jax.Array,
       progress: Optional[jax.Array]) -> jax.Array:
  features = drift_features(ratio, advantage, progress)
  hidden = jnp.tanh(features @ theta["w0"] + theta["b0"])
  return (hidden @ theta["w1"])[..., 0] + theta["b1"][0]


def first_order_drift(theta: Dict[str, jax.Array], ratio: jax.Array, advantage: jax.Array,
                      progress: Optional[jax.Array] = None) -> jax.Array:
  """d_theta(rho, A[, t]): g_theta's difference from its tangent at rho = 1 (module
  docstring); zero with a zero derivative at rho = 1, linear in theta's output layer."""
  ratio, advantage = jnp.broadcast_arrays(ratio, advantage)
  ones = jnp.ones_like(ratio)
  at_one, slope = jax.jvp(lambda r: _g(theta, r, advantage, progress), (ones,), (ones,))
  return _g(theta, ratio, advantage, progress) - at_one - (ratio - 1.0) * slope


def load_drift(path: str) -> Dict[str, jax.Array]:
  """theta from an .npz (w0, b0, w1, b1[, log_clip]); a ConfigError naming `loss.path`
  otherwise, or where its .json says a form this podracer does not read."""
  return load_objective(path)[1]


def load_objective(path: str) -> Tuple[str, Dict[str, jax.Array]]:
  """(its drift form, theta) of the objective at `path`: `check_form`'s and
  `load_drift`'s, its description read once."""
  if not os.path.isfile(path):
    raise ConfigError(f"Config key `loss.path` is {path!r}, which is not a file: give the "
                      "learned_objective.npz a `python -m podracer.meta` run wrote.")
  form, lifetime = _read_form(path)
  try:
    with np.load(path) as arrays:
      theta = {k: jnp.asarray(arrays[k], jnp.float32) for k in DRIFT_KEYS}
      for key in (CLIP_KEY, VALUE_CLIP_KEY):  # 0 where a file is older than the key.
        theta[key] = jnp.asarray(arrays[key] if key in arrays.files else np.zeros((1,)),
                                 jnp.float32)
  except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
    raise ConfigError(f"Config key `loss.path`: {path} is not a learned objective "
                      f"(an .npz of {', '.join(DRIFT_KEYS)}): {e}.") from None
  check_drift(theta, f"loss.path ({path})", lifetime)
  return form, theta


def check_form(path: str) -> str:
  """The drift form (`DRIFT_FORMS`' key) of the objective at `path`, from the
  learned_objective.json beside it ("squared" without one: 0.11.0-0.13.0); refuses a
  form this podracer does not read."""
  return _read_form(path)[0]


def _read_form(path: str) -> Tuple[str, bool]:
  """(`check_form`'s drift form, whether the theta is lifetime-conditioned)."""
  about = os.path.splitext(path)[0] + ".json"
  if not os.path.isfile(about):
    return "squared", False
  try:
    with open(about, encoding="utf-8") as f:
      written = json.load(f)
    form, version = written.get("form"), written.get("version")
  except (OSError, ValueError, AttributeError) as e:
    raise ConfigError(f"Config key `loss.path`: {about}, beside it, is not a learned "
                      f"objective's description: {e}.") from None
  if form == DPO_FORM:  # podracer.meta's DPO search: its constants, not a path.
    raise ConfigError(f"Config key `loss.path`: {path} holds the alpha and beta a DPO "
                      "search found, not a drift network: train with --config.loss=dpo "
                      f"--config.loss.alpha={written.get('alpha')} "
                      f"--config.loss.beta={written.get('beta')}.")
  base = (*DRIFT_FORMS.values(), *VALUE_CLIP_FORMS.values())
  read = (*base, *(f + LIFETIME_SUFFIX for f in base))
  if form not in (None, *read):
    raise ConfigError(f"Config key `loss.path`: {path} is a learned objective of form "
                      f"{form!r} (written by podracer {version or '?'}); this podracer "
                      f"reads the forms {', '.join(map(repr, read))}. Use the podracer "
                      "that wrote it, or meta-train again.")
  lifetime = bool(form) and form.endswith(LIFETIME_SUFFIX)
  form = form[:-len(LIFETIME_SUFFIX)] if lifetime else form
  drift_form = ("first_order" if form in (FIRST_ORDER_FORM, VALUE_CLIP_FORMS["first_order"])
                else "squared")
  return drift_form, lifetime


def lifetime_conditioned(theta: Dict[str, Any]) -> bool:
  """Whether theta's drift sees the training's progress: w0 has the seventh feature's
  row (a theta `check_drift` passed)."""
  return np.shape(theta["w0"])[0] == NUM_FEATURES + 1


def check_drift(theta: Dict[str, Any], where: str, lifetime: Optional[bool] = None) -> None:
  """theta's arrays have a drift's shapes (with `lifetime` given, conditioned on the
  training's progress or not, as it says); a ConfigError naming `where` otherwise."""
  hidden = np.shape(theta["w0"])[-1]
  if lifetime is None:
    lifetime = lifetime_conditioned(theta)
  want = dict(w0=(NUM_FEATURES + lifetime, hidden), b0=(hidden,), w1=(hidden, 1), b1=(1,),
              log_clip=(1,))
  if VALUE_CLIP_KEY in theta:
    want[VALUE_CLIP_KEY] = (1,)
  shapes = {k: tuple(np.shape(theta[k])) if k in theta else None for k in want}
  if shapes != want:
    raise ConfigError(f"Config key `{where}`: the drift network's arrays have shapes "
                      f"{shapes}; a drift of {hidden} hidden units"
                      f"{' conditioned on the lifetime' if lifetime else ''} has {want}.")


@registry.losses.register("learned_policy")
class LearnedPolicyLoss(PPOLoss):
  """PPO's loss with a learned drift in its policy term (module docstring). Called as
  `loss(policy, value, batch)`, as PPO's is: any agent that takes PPO's loss takes it."""

  def __init__(self, path: Optional[str] = None, hidden: Annotated[int, Positive] = 16,
               clip_epsilon: Annotated[float, Positive] = 0.2,
               value_coef: Annotated[float, NonNegative] = 0.5,
               entropy_coef: Annotated[float, NonNegative] = 0.01, clip_value: bool = True,
               normalize_advantages: bool = True, drift_form: str = "first_order",
               lifetime: bool = False, total_steps: int = 0):
    super().__init__(clip_epsilon, value_coef, entropy_coef, clip_value,
                     normalize_advantages)
    if drift_form not in DRIFT_FORMS:
      raise ConfigError(f"Config key `loss.drift_form` is {drift_form!r}; it is one of "
                        f"{', '.join(DRIFT_FORMS)} (module docstring).")
    # A file's own form (its learned_objective.json) decides how its theta is read.
    self.drift_form, self.drift = (load_objective(path) if path
                                   else (drift_form, zero_drift(hidden, lifetime=lifetime)))
    self.total_steps = total_steps  # the run's gradient steps: the builder's
    self._check_lifetime()

  def with_drift(self, theta: Dict[str, jax.Array]) -> "LearnedPolicyLoss":
    """The same loss with another theta (traced arrays too: the meta-learner's members)."""
    check_drift(theta, "loss (a theta given to with_drift)")
    other = copy.copy(self)
    other.drift = theta
    other._check_lifetime()  # pylint: disable=protected-access
    return other

  @property
  def lifetime(self) -> bool:
    """Whether the drift sees the training's progress (its theta's form)."""
    return lifetime_conditioned(self.drift)

  def _check_lifetime(self) -> None:
    if self.lifetime and not self.total_steps > 0:
      raise ConfigError("The `loss` (learned_policy) is lifetime-conditioned: its drift "
                        "sees the fraction of the training done, steps / total_steps, and "
                        f"total_steps is {self.total_steps}. The builder gives it the run's "
                        "gradient steps (build with podracer.builder, or pass total_steps).")

  def progress(self) -> Optional[jax.Array]:
    """t = n / N, the fraction of the training's gradient steps taken (clipped to [0, 1]),
    for a lifetime-conditioned drift; None for another."""
    if not self.lifetime:
      return None
    return jnp.clip(step().astype(jnp.float32) / self.total_steps, 0.0, 1.0)

  def _scaled_clip(self, key: str) -> Any:
    """clip_epsilon * exp(theta[key]): PPO's clip_epsilon where theta lacks the key (a
    file from before it)."""
    log_scale = self.drift.get(key)
    return self.clip_epsilon * (1.0 if log_scale is None else jnp.exp(log_scale[0]))

  def value_clip_epsilon(self) -> Any:
    """clip_epsilon * exp(c_v)."""
    return self._scaled_clip(VALUE_CLIP_KEY)

  def surrogate(self, ratio: jax.Array, advantage: jax.Array) -> jax.Array:
    clipped = clipped_surrogate(ratio, advantage, self._scaled_clip(CLIP_KEY))
    progress = self.progress()
    if self.drift_form == "squared":
      return clipped - learned_drift(self.drift, ratio, advantage, progress)
    ppo_drift = ratio * advantage - clipped  # relu((rho - clip(rho)) A) >= 0
    return ratio * advantage - jax.nn.relu(
        ppo_drift + first_order_drift(self.drift, ratio, advantage, progress))
