"""Networks written with Flax linen, Flax NNX, Equinox or Haiku, wrapped once to
podracer's network contract: `init(key, observation [B, ...]) -> params` and
`apply(params, observation [B, ...]) -> outputs`, the parameters a plain pytree (nested
dicts of arrays), so checkpoints, many runs, the mesh, Sebulba's and SEED's parameter
shipping and `podracer.play` see what they see of a Haiku network.

    registry.networks.register("my_actor_critic", networks.module(ActorCritic))

`module(cls)` is a registered network factory: the config section's keys are the
module's own constructor arguments (a linen or Equinox dataclass's fields, an NNX or
Haiku module's `__init__` parameters), and the arguments the environment decides are
filled from its spec when the module declares them: `action_dim` / `num_actions` /
`action_size` (the number of discrete actions, or the size of a continuous action) and
`obs_dim` / `in_features` / `in_size` (the size of a flat observation). The rest:

- **linen** (`flax.linen.Module`): `module.init(key, observation)`'s `params`;
  `module.apply`. Other collections (`batch_stats`) are refused by name at build.
- **NNX** (`flax.nnx.Module`): built with `rngs=nnx.Rngs(key)` at `init`; its `nnx.Param`
  variables are the parameters. Other variables (`BatchStat`, a kept `Rngs`) are refused
  by name at build.
- **Equinox** (`equinox.Module`): built with `key=key` at `init`; its arrays are the
  parameters. Called on one observation, as Equinox's layers are, and vmapped over the
  batch. State (`eqx.nn.State`: a BatchNorm's `StateIndex`) is refused by name at build.
- **Haiku** (`hk.Module`, or a function of the observation): transformed, as podracer's
  own networks are.

A module may return what the agent reads (`PolicyValueOutput` for the actor-critics, an
array of Q-values), or PureJaxRL's `(pi, value)` with `pi` a distrax `Categorical`
(`logits`) or `MultivariateNormalDiag` (mean and log scale: the `normal` distribution's
parameters): the actor-critics' output. What does not fit the agent is named by the
build's output check (podracer/contracts.py).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.components.networks.heads import PolicyValueOutput
from podracer.errors import ConfigError, require
from podracer.types import ArraySpec, EnvSpec

ACTION_ARGS = ("action_dim", "num_actions", "action_size")
OBSERVATION_ARGS = ("obs_dim", "in_features", "in_size")
# What each library's adapter supplies itself: never a config key.
SUPPLIED = {"linen": ("parent", "name"), "nnx": ("rngs",), "equinox": ("key",),
            "haiku": ("name",)}
INSTALL = {"linen": "pip install 'podracer[flax]'", "nnx": "pip install 'podracer[flax]'",
           "equinox": "pip install 'podracer[equinox]'", "haiku": "pip install dm-haiku"}


class Network(NamedTuple):
  """A network as podracer's agents use it (the shape of Haiku's `without_apply_rng`)."""
  init: Callable[[jax.Array, Any], Any]
  apply: Callable[[Any, Any], Any]


def library(cls: Any) -> Optional[str]:
  """Which library `cls` is a module of ('linen', 'nnx', 'equinox', 'haiku'), or None.
  A library is looked at only if it is already imported (the module's file imported it)."""
  bases = (("linen", "flax.linen", "Module"), ("nnx", "flax.nnx", "Module"),
           ("equinox", "equinox", "Module"), ("haiku", "haiku", "Module"))
  for name, module_name, attribute in bases:
    loaded = sys.modules.get(module_name)
    if loaded is not None and inspect.isclass(cls) and issubclass(cls, getattr(loaded, attribute)):
      return name
  if inspect.isfunction(cls) and "haiku" in sys.modules:
    return "haiku"
  return None


def spec_args(spec: EnvSpec) -> Dict[str, int]:
  """The values of ACTION_ARGS and OBSERVATION_ARGS for an environment."""
  action = spec.action
  actions = int(np.prod(action.shape)) if isinstance(action, ArraySpec) else action.num_values
  observation = int(np.prod(spec.observation.shape))
  return {**{a: actions for a in ACTION_ARGS}, **{a: observation for a in OBSERVATION_ARGS}}


def _constructor(cls: Any, kind: str) -> Dict[str, inspect.Parameter]:
  if inspect.isfunction(cls):  # A Haiku function of the observation alone.
    return {}
  params = dict(list(inspect.signature(cls.__init__).parameters.items())[1:])  # not self
  return {n: p for n, p in params.items() if n not in SUPPLIED[kind]
          and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def module(cls: Any, name: Optional[str] = None) -> Callable[..., Network]:
  """The network factory of a linen, NNX, Equinox or Haiku module class (or a Haiku
  function of the observation): register it with `registry.networks.register`."""
  kind = library(cls)
  label = name or getattr(cls, "__name__", repr(cls))
  if kind is None:
    raise ConfigError(
        f"Network {label} is not a module of a library podracer wraps: pass a class "
        "deriving from flax.linen.Module, flax.nnx.Module, equinox.Module or hk.Module, "
        "or a Haiku function of the observation, to podracer.components.networks.module.")
  params = _constructor(cls, kind)
  own = [p for n, p in params.items() if n not in ACTION_ARGS + OBSERVATION_ARGS]

  def factory(spec: EnvSpec, **config: Any) -> Network:
    derived = {k: v for k, v in spec_args(spec).items() if k in params}
    return ADAPTERS[kind](cls, label, spec, {**derived, **config})

  factory.__signature__ = inspect.Signature(
      [inspect.Parameter("spec", inspect.Parameter.KEYWORD_ONLY)]
      + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own])
  factory.__name__ = getattr(cls, "__name__", "network")
  factory.__qualname__ = getattr(cls, "__qualname__", factory.__name__)
  factory.__module__ = getattr(cls, "__module__", __name__)
  factory.__doc__ = f"{cls.__doc__ or label} ({kind}, wrapped by podracer)"
  return factory


# -- outputs ----------------------------------------------------------------------------

def outputs(out: Any) -> Any:
  """PureJaxRL's `(pi, value)` as a PolicyValueOutput; anything else as it is."""
  if type(out) is not tuple or len(out) != 2:  # pylint: disable=unidiomatic-typecheck
    return out  # (A NamedTuple, PolicyValueOutput among them, is what the agent reads.)
  distrax = sys.modules.get("distrax")
  pi, value = out
  if distrax is None or not isinstance(pi, distrax.Distribution):
    return out
  if isinstance(pi, distrax.Categorical):
    return PolicyValueOutput(logits=pi.logits, value=value)
  if isinstance(pi, distrax.MultivariateNormalDiag):
    params = jnp.concatenate([pi.loc, jnp.log(pi.scale_diag)], axis=-1)
    return PolicyValueOutput(logits=params, value=value)
  raise ConfigError(
      f"The network returns a {type(pi).__name__} policy; podracer reads a distrax "
      "Categorical (its logits) or MultivariateNormalDiag (mean and scale), or a "
      "PolicyValueOutput of the distribution's parameters.")


# -- parameters as nested dicts ---------------------------------------------------------

def _key_name(entry: Any) -> str:
  for attribute in ("key", "name", "idx"):
    value = getattr(entry, attribute, None)
    if value is not None:
      return str(value)
  return str(entry)


def _paths(tree: Any) -> Tuple[List[Tuple[str, ...]], Any]:
  """Each leaf's path as names, and the tree's structure."""
  with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
  return [tuple(_key_name(e) for e in path) for path, _ in with_paths], treedef


def nest(paths: List[Tuple[str, ...]], leaves: List[Any]) -> Dict[str, Any]:
  """Nested dicts of `leaves` by their `paths`."""
  out: Dict[str, Any] = {}
  for path, leaf in zip(paths, leaves):
    node = out
    for part in path[:-1]:
      node = node.setdefault(part, {})
    node[path[-1]] = leaf
  return out


def unnest(params: Dict[str, Any], paths: List[Tuple[str, ...]]) -> List[Any]:
  """The leaves of `nest`'s dicts, in `paths`' order."""
  leaves = []
  for path in paths:
    node = params
    for part in path:
      node = node[part]
    leaves.append(node)
  return leaves


def _refuse_state(label: str, kind: str, what: List[str]) -> None:
  if what:
    raise ConfigError(
        f"Network {label} ({kind}) keeps state beside its parameters ({', '.join(what)}), "
        "which podracer does not train or carry between steps: use a layer without "
        "running statistics (LayerNorm instead of BatchNorm), keep no Rngs (NNX) and no "
        "eqx.nn.State (Equinox).")


# -- the adapters -------------------------------------------------------------------------

def _keyless(label: str, call: Callable[..., Any]) -> Callable[..., Any]:
  """`call`, with a linen module that asks for a random key when applied (Dropout not
  deterministic) refused by name: podracer applies a network to parameters and an
  observation, no key."""
  from flax import errors as flax_errors  # pylint: disable=import-outside-toplevel

  def keyless(*args):
    try:
      return call(*args)
    except flax_errors.InvalidRngError as e:
      raise ConfigError(
          f"Network {label} (flax linen) draws random numbers when it is applied ("
          f"{str(e).splitlines()[0]}), but podracer applies a network to its parameters "
          "and an observation only, with no random key: make such layers deterministic "
          "(nn.Dropout(rate, deterministic=True)) or leave them out.") from None
  return keyless


def _linen(cls: Any, label: str, spec: EnvSpec, config: Dict[str, Any]) -> Network:
  del spec
  net = cls(**config)

  def init(key, observation):
    variables = net.init(key, observation)
    _refuse_state(label, "flax linen", sorted(k for k in variables if k != "params"))
    return {"params": variables["params"]}

  return Network(_keyless(label, init), _keyless(
      label, lambda params, observation: outputs(net.apply(params, observation))))


def _nnx(cls: Any, label: str, spec: EnvSpec, config: Dict[str, Any]) -> Network:
  del spec
  nnx = require("flax.nnx", f"network {label}", INSTALL["nnx"])
  make = lambda key: cls(**config, rngs=nnx.Rngs(key))
  graphdef, template, rest = nnx.split(nnx.eval_shape(lambda: make(0)), nnx.Param, ...)
  variables = jax.tree.leaves(rest, is_leaf=lambda v: isinstance(v, nnx.Variable))
  _refuse_state(label, "flax nnx", sorted({type(v).__name__ for v in variables}))
  paths, treedef = _paths(template)

  def init(key, observation):
    del observation
    _, state = nnx.split(make(key), nnx.Param)
    return nest(paths, jax.tree.leaves(state))

  def apply(params, observation):
    state = jax.tree.unflatten(treedef, unnest(params, paths))
    return outputs(nnx.merge(graphdef, state)(observation))

  return Network(init, apply)


def _equinox_state(eqx: Any, template: Any) -> List[str]:
  """Where an Equinox module keeps an `eqx.nn.State` entry (BatchNorm's, SpectralNorm's
  StateIndex), as `StateIndex at .path`."""
  is_state = lambda x: isinstance(x, eqx.nn.StateIndex)
  leaves = jax.tree_util.tree_flatten_with_path(template, is_leaf=is_state)[0]
  return [f"StateIndex at {jax.tree_util.keystr(path)}" for path, x in leaves
          if is_state(x)]


def _equinox(cls: Any, label: str, spec: EnvSpec, config: Dict[str, Any]) -> Network:
  del spec
  eqx = require("equinox", f"network {label}", INSTALL["equinox"])
  make = lambda key: cls(**config, key=key)
  template = eqx.filter_eval_shape(make, jax.random.PRNGKey(0))
  _refuse_state(label, "equinox", _equinox_state(eqx, template))
  is_array = lambda x: isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray))
  arrays, static = eqx.partition(template, is_array)
  paths, treedef = _paths(arrays)

  def init(key, observation):
    del observation
    return nest(paths, jax.tree.leaves(eqx.partition(make(key), is_array)[0]))

  def apply(params, observation):
    net = eqx.combine(jax.tree.unflatten(treedef, unnest(params, paths)), static)
    return outputs(jax.vmap(net)(observation))

  return Network(init, apply)


def _haiku(cls: Any, label: str, spec: EnvSpec, config: Dict[str, Any]) -> Network:
  del spec
  hk = require("haiku", f"network {label}", INSTALL["haiku"])
  forward = cls if inspect.isfunction(cls) else (lambda o: cls(**config)(o))
  net = hk.without_apply_rng(hk.transform(lambda o: outputs(forward(o))))
  return Network(net.init, net.apply)


ADAPTERS = {"linen": _linen, "nnx": _nnx, "equinox": _equinox, "haiku": _haiku}
