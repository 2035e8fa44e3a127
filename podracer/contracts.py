"""Contract checks run when a program is built, before anything trains or compiles.

An environment's `reset`, `step` and `spec()` must agree, and an agent's network must
return what the agent reads (PPO's and IMPALA's logits [B, num_actions] and value [B],
R2D2's Q-values [B, num_actions]). Otherwise the mistake surfaces late and deep (a chex
rank error inside rlax, a vmap error inside `VectorEnv`) or not at all (3 logits for 2
actions samples invalid actions). Each check traces with `jax.eval_shape`, so nothing is
computed, and raises `ConfigError` with one paragraph naming the component, the field,
and the expected and actual shape and dtype; the launcher prints it and exits 2.

`check_environment(env)` is exported as `podracer.check_environment` for a user's tests.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Dict, Optional, Tuple

import jax
import numpy as np

from podracer.errors import ConfigError, deepest_frame
from podracer.types import ArraySpec, DiscreteSpec, PyTree, TimeStep

# Observations the network check feeds: a batch size no spec is likely to share, so that
# a message's shapes show which axis is the batch.
CHECK_BATCH = 5


def check_environment(env: Any, component: Optional[str] = None) -> None:
  """Checks a JAX environment: `reset`, one `step` and `spec()` agree in structure,
  shapes and dtypes. Raises ConfigError naming the field that differs."""
  name = component or f"environment {type(env).__name__}"
  spec = env.spec()
  check_bounds(spec, name)
  state, first = _trace(name, env, "reset", jax.random.PRNGKey(0))
  action = jax.ShapeDtypeStruct(tuple(spec.action.shape), spec.action.dtype)
  _, stepped = _trace(name, env, "step", state, action)
  _compare(name, "reset", first, "the timestep convention", _timestep_spec(spec, ()))
  _compare(name, "step", stepped, "reset", first)


# What JAX raises when traced code asks for a concrete value (a Python `if` on an array).
_CONCRETE_VALUE_ERRORS = tuple(
    getattr(jax.errors, name) for name in ("ConcretizationTypeError",
                                           "TracerArrayConversionError",
                                           "TracerIntegerConversionError")
    if hasattr(jax.errors, name))


def _trace(component: str, env: Any, method: str, *args: Any) -> Any:
  """`jax.eval_shape(env.<method>, *args)`; an error raised in the environment's own code
  becomes one paragraph naming the component, the method and the line."""
  try:
    return jax.eval_shape(getattr(env, method), *args)
  except ConfigError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    at = _user_line(e, type(env))
    said = " ".join(str(e).split("\n")[0].split()) or "(no message)"
    if isinstance(e, _CONCRETE_VALUE_ERRORS):
      why = ("it uses a traced array's value in Python (an `if`, `while`, `bool()`, "
             "`int()` or `.item()` on it), which a compiled program cannot do: use "
             "jnp.where, jax.lax.select or jax.lax.cond on arrays instead")
    else:
      why = f"it raised {type(e).__name__} while JAX traced it"
    raise ConfigError(f"{component}: {type(env).__name__}.{method} cannot be compiled"
                      f"{at}: {why}. JAX said: {said}") from e


def _user_line(error: BaseException, cls: type) -> str:
  """' at FILE:LINE (`source`)', the deepest frame of `error` in `cls`'s own file, if any."""
  try:
    own = {inspect.getfile(k) for k in cls.__mro__ if k.__module__ != "builtins"}
  except TypeError:
    return ""
  frame = deepest_frame(error, lambda filename: filename in own)
  if frame is None:
    return ""
  source = f" (`{frame.line.strip()}`)" if frame.line else ""
  return f" at {frame.filename}:{frame.lineno}{source}"


def check_host_timestep(env: Any, timestep: TimeStep, component: Optional[str] = None) -> None:
  """Checks a host environment's first timestep ([num_envs, ...]) against its `spec()`."""
  name = component or f"environment {type(env).__name__}"
  check_bounds(env.spec(), name)
  _compare(name, "reset", timestep, "the timestep convention",
           _timestep_spec(env.spec(), (env.num_envs,)))


def check_bounds(spec: Any, component: str) -> None:
  """A continuous action spec's bounds: of its shape, no NaN, each minimum below its
  maximum (an infinite bound is unbounded on that side). ConfigError naming the
  component and the bound otherwise."""
  action = spec.action
  if not isinstance(action, ArraySpec) or (action.minimum is None and action.maximum is None):
    return
  fix = ("give float bounds with minimum < maximum per dimension (ArraySpec(..., "
         "minimum=..., maximum=...)), or minimum=None, maximum=None for unbounded actions (which "
         "only PPO, recurrent PPO and IMPALA take, with `distribution.name=normal`; "
         "docs/agents.md's bounds table)")
  found = {}
  for side in ("minimum", "maximum"):
    value = getattr(action, side)
    if value is None:
      continue
    try:
      found[side] = np.broadcast_to(np.asarray(value, np.float32), action.shape)
    except ValueError:
      raise ConfigError(f"{component}: its action spec's {side} {value!r} does not fit the "
                        f"action's shape {list(action.shape)}; {fix}.") from None
    if np.isnan(found[side]).any():
      raise ConfigError(f"{component}: its action spec's {side} has a NaN ({value!r}): a "
                        f"NaN bound bounds nothing; {fix}.")
  if len(found) == 2 and not np.all(found["minimum"] < found["maximum"]):
    raise ConfigError(f"{component}: its action spec's minimum {action.minimum!r} is not "
                      f"below its maximum {action.maximum!r} everywhere; {fix}.")


def check_network(agent: Any, component: str = "network") -> None:
  """Applies the agent's network to a dummy batch and checks its outputs against the
  agent's `expected_outputs` (nothing is checked when the agent expects nothing)."""
  # Agents that do not derive from `podracer.agent.Agent` declare nothing to check.
  declared = getattr(agent, "expected_outputs", None)
  expected = declared(CHECK_BATCH) if declared else None
  if expected is None:
    return
  observation = jax.tree.map(
      lambda s: jax.ShapeDtypeStruct((CHECK_BATCH, *s.shape), s.dtype), agent.spec.observation)
  actual = jax.eval_shape(lambda k, o: agent.network_outputs(agent.init_nets(k), o),
                          jax.random.PRNGKey(0), observation)
  agent_name = type(agent).__name__
  for field, (shape, dtype) in expected.items():
    value = _field(actual, field)
    if value is None:
      raise ConfigError(f"{component} returns {_describe_tree(actual)}, which has no "
                        f"`{field}`; agent {agent_name} reads `{field}` of shape "
                        f"{list(shape)} and dtype {_dtype_name(dtype)} for a batch of "
                        f"{CHECK_BATCH} observations." + (
                            " A tuple is read as PureJaxRL's (pi, value), pi a distrax "
                            "Categorical or MultivariateNormalDiag; or return the fields "
                            "by name (podracer.components.networks.PolicyValueOutput)."
                            if type(actual) is tuple  # pylint: disable=unidiomatic-typecheck
                            else ""))
    if tuple(value.shape) != tuple(shape) or not np.issubdtype(value.dtype, dtype):
      raise ConfigError(f"{component} returns `{field}` of shape {list(value.shape)} and "
                        f"dtype {np.dtype(value.dtype).name} for a batch of {CHECK_BATCH} "
                        f"observations, but agent {agent_name} needs shape {list(shape)} "
                        f"and dtype {_dtype_name(dtype)} (the environment has "
                        f"{_describe_actions(agent.spec)}).")


def check_objectives(agent: Any) -> None:
  """The agent's objectives own keys its nets have (`Objective.owns`, top-level keys of
  `init_nets`' tree, traced, nothing computed), and none owns every key (owns=None) beside
  another: both optimizers would step the keys they share. ConfigError naming the
  agent, the objective and the keys there are."""
  # As check_network: an agent that does not derive from `Agent` declares none to check.
  objectives = tuple(getattr(agent, "objectives", ()) or ())
  if not objectives:
    return
  agent_name = type(agent).__name__
  every = [o.name for o in objectives if o.owns is None]
  if every and len(objectives) > 1:
    others = {o.name: list(o.owns) for o in objectives if o.owns is not None}
    raise ConfigError(
        f"Agent {agent_name}'s objective(s) {every} own every key of its nets (owns=None) "
        f"beside {others or 'each other'}: the keys they share would be stepped by both "
        "objectives' optimizers. Give each objective the top-level nets keys it owns, "
        "Objective(..., owns=(\"key\", ...)) (a key no objective owns stays fixed).")
  if not any(o.owns for o in objectives):
    return
  nets = jax.eval_shape(agent.init_nets, jax.random.PRNGKey(0))
  keys = sorted(nets) if isinstance(nets, dict) else []
  for objective in objectives:
    missing = [k for k in objective.owns or () if k not in keys]
    if missing:
      close = {k: difflib.get_close_matches(k, keys, n=1) for k in missing}
      hint = "; ".join(f"did you mean '{c[0]}' for '{k}'" for k, c in close.items() if c)
      raise ConfigError(
          f"Agent {agent_name}'s objective '{objective.name}' owns {missing}, which its "
          f"nets do not have: `init_nets` gives " + (
              f"the top-level keys {keys}" if keys else "no dict of top-level keys") +
          (f" ({hint})" if hint else "") + ". `Objective.owns` names top-level keys of "
          "the nets (podracer/learning.py).")


def check_policy_lag(agent: Any, max_policy_lag: Optional[int], runtime: str) -> None:
  """Refuses a `runtime.max_policy_lag` larger than the policy lag the agent's learning
  corrects for (`Agent.policy_lag_corrected`; None: any). `max_policy_lag` None is
  unbounded (as stale as the runtime's queue allows)."""
  declared = getattr(agent, "policy_lag_corrected", None)
  corrected = declared() if callable(declared) else None
  if corrected is None or (max_policy_lag is not None and max_policy_lag <= corrected):
    return
  name = type(getattr(agent, "wrapped", agent)).__name__
  lag = ("None (unbounded: as old as the learner's queue allows)" if max_policy_lag is None
         else f"{max_policy_lag}")
  what = ("corrects for no policy lag (a plain on-policy gradient: its "
          "policy_lag_corrected() is 0, the default of an agent without a replay)"
          if corrected == 0 else f"corrects for a policy lag of at most {corrected} updates")
  raise ConfigError(
      f"Agent {name} {what}, but runtime '{runtime}' acts with parameters up to "
      f"`runtime.max_policy_lag` = {lag} updates older than the ones it learns with, "
      f"which biases its gradient. Set --config.runtime.max_policy_lag={corrected} "
      f"({'acting and learning take turns' if corrected == 0 else 'a bound it corrects'}), "
      "or, if its loss does correct for stale data (importance weights, clipping, "
      f"V-trace), declare it in {name}: `def policy_lag_corrected(self): return None` "
      "(any lag) or the largest lag it corrects.")


def actor_critic_outputs(spec: Any, batch_size: int, num_params: Optional[int] = None
                         ) -> Dict[str, Tuple[Tuple[int, ...], Any]]:
  """What an actor-critic agent reads: the policy's parameters [B, num_params] (logits
  [B, num_actions] by default) and value [B], floats."""
  width = _num_actions(spec) if num_params is None else num_params
  return dict(logits=((batch_size, width), np.floating),
              value=((batch_size,), np.floating))


def _timestep_spec(spec: Any, batch: Tuple[int, ...]) -> TimeStep:
  """The (shape, dtype) of each field of a timestep of environments of `spec`."""
  scalar = lambda dtype: jax.ShapeDtypeStruct(batch, dtype)
  return TimeStep(step_type=scalar(np.int32), reward=scalar(np.float32),
                  discount=scalar(np.float32),
                  observation=jax.tree.map(
                      lambda s: jax.ShapeDtypeStruct((*batch, *s.shape), s.dtype),
                      spec.observation))


def _compare(component: str, what: str, actual: PyTree, reference: str,
             expected: PyTree) -> None:
  """Raises ConfigError at the first field where `actual` and `expected` differ."""
  found, wanted = _leaves(actual), _leaves(expected)
  if list(found) != list(wanted):
    raise ConfigError(f"{component}: {what} returns a timestep with fields "
                      f"{', '.join(found)} where {reference} has {', '.join(wanted)}.")
  for path, (shape, dtype) in wanted.items():
    got_shape, got_dtype = found[path]
    if (got_shape, got_dtype) != (shape, dtype):
      # spec() describes observations: name it when that is what disagrees.
      source = "spec()" if reference != "reset" and path.startswith("observation") else reference
      raise ConfigError(f"{component}: {what} returns `{path}` of shape {list(got_shape)} "
                        f"and dtype {got_dtype.name}, but {source} gives shape "
                        f"{list(shape)} and dtype {dtype.name}.{_x64_hint(got_dtype, dtype)}")


def _x64_hint(got: np.dtype, declared: np.dtype) -> str:
  """Why a 64-bit dtype came back as 32 bits: JAX converts them while x64 is off."""
  if (declared.itemsize == 8 and got.itemsize == 4 and got.kind == declared.kind
      and not jax.config.jax_enable_x64):
    return (f" JAX turned the {declared.name} into {got.name}: its 64-bit mode is off "
            f"(jax_enable_x64). Declare {got.name} in spec(), or enable 64-bit mode "
            "(JAX_ENABLE_X64=1 in the environment) if the run needs it.")
  return ""


def _leaves(tree: PyTree) -> Dict[str, Tuple[Tuple[int, ...], np.dtype]]:
  """{field path: (shape, dtype)}, e.g. 'observation' or "observation['pixels']"."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {_path(p): (tuple(x.shape), np.dtype(x.dtype)) for p, x in leaves}


def _path(path: Tuple[Any, ...]) -> str:
  return jax.tree_util.keystr(path).lstrip(".") or "the value"


def _field(outputs: PyTree, field: str) -> Any:
  if isinstance(outputs, dict):
    return outputs.get(field)
  return getattr(outputs, field, None)


def _describe_tree(tree: PyTree) -> str:
  return type(tree).__name__ if hasattr(tree, "shape") else \
      f"{type(tree).__name__} with fields {', '.join(_leaves(tree)) or 'none'}"


def _dtype_name(dtype: Any) -> str:
  return "float" if dtype is np.floating else np.dtype(dtype).name


def _num_actions(spec: Any) -> Any:
  return getattr(spec.action, "num_values", spec.action.shape)


def _describe_actions(spec: Any) -> str:
  """"3 actions" for discrete actions, "continuous actions of shape [1]" otherwise."""
  if isinstance(spec.action, DiscreteSpec):
    return f"{spec.action.num_values} actions"
  return f"continuous actions of shape {list(spec.action.shape)}"
