"""Instantiates a registered component from its config section, checking the keys first."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Iterable, Mapping

from podracer.errors import ConfigError, MissingPackage
from podracer.registry.ranges import out_of_range


# Arguments the builder or runtime passes a component (the environment's spec, the
# optimizer's step count, a host environment's batch size and seed): never config keys,
# so never listed among the keys a section accepts.
BUILDER_ARGS = ("spec", "total_steps", "num_envs", "seed")


def parameters(factory: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
  """The parameters `factory` takes, by name. A class whose constructor takes `*args` or
  `**kwargs` (a subclass of PPO passing them on to its base's) also takes the parameters
  of its bases' constructors that it does not name itself, so the config sections the
  base takes (`network`, `loss`, ...) are the subclass's; its `**kwargs` stays, and with
  it any key is accepted, as before."""
  params = dict(inspect.signature(factory).parameters)
  passes_on = lambda ps: any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in ps.values())
  if not inspect.isclass(factory) or not passes_on(params):
    return params
  for base in factory.__mro__[1:]:
    init = base.__dict__.get("__init__")
    if base is object:
      break
    if init is None:
      continue
    inherited = list(inspect.signature(init).parameters.items())[1:]  # not self
    params.update({k: v for k, v in inherited if k not in params
                   and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)})
    if not passes_on(dict(inherited)):
      break
  return params


def _as_dict(section: Any, key: str) -> dict:
  if section is None:
    raise ConfigError(f"Config key `{key}` is missing; it needs at least `{key}.name`.")
  if hasattr(section, "to_dict"):
    section = section.to_dict()
  if not isinstance(section, Mapping):
    raise ConfigError(f"Config key `{key}` must be a section with a `name` "
                      f"(e.g. `{key}.name`), got {section!r}.")
  return dict(section)


def check_kwargs(factory: Callable[..., Any], kwargs: Mapping[str, Any], *, what: str,
                 key: str, injected: Iterable[str] = ()) -> None:
  """Raises ConfigError naming `key.<arg>` if `factory` does not accept `kwargs`.

  `injected` are the arguments the builder set, left out of the accepted keys listed.
  """
  try:
    params = parameters(factory)
  except (TypeError, ValueError):
    return
  accepted = [n for n, p in params.items()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
  unknown = sorted(set(kwargs) - set(accepted))
  if unknown and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
    configurable = [n for n in accepted if n not in set(injected) | set(BUILDER_ARGS)]
    close = [f"`{key}.{u}` -> `{key}.{m[0]}`" for u in unknown
             for m in [difflib.get_close_matches(u, configurable, n=1, cutoff=0.6)] if m]
    raise ConfigError(
        f"Config key(s) {', '.join(f'`{key}.{u}`' for u in unknown)} are not parameters of "
        f"{what}; " + (f"did you mean {', '.join(close)}? It" if close else "it") +
        f" accepts: {', '.join(configurable) or 'nothing'}.")
  missing = [n for n, p in params.items()
             if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and (n not in kwargs or kwargs[n] is None and n not in injected)]
  # (A None the config gives is a placeholder left unset, e.g. after a section swap.)
  if missing:
    hint = (" (`networks.module` fills a module's number of actions from the "
            "environment when it names it `action_dim`, `num_actions` or `action_size`.)"
            if any("action" in m for m in missing) else "")
    raise ConfigError(
        f"{what} needs {', '.join(f'`{key}.{m}`' for m in missing)} in the config.{hint}")
  bad = out_of_range(factory, kwargs)
  if bad:
    raise ConfigError(f"Config key `{key}.{bad[0]}` of {what} {bad[1]}; set it with "
                      f"--config.{key}.{bad[0]}=VALUE.")


def build(registry, section: Any, *, key: str, factory: Any = None,
          **injected: Any) -> Any:
  """`registry[section.name](**section_without_name, **injected)`, with clear errors.

  `injected` are arguments the builder supplies (the action spec, a total step count) and
  which a config must not set. `factory` builds the section instead of the registered
  component itself (a runtime's section builds its `Options`).
  """
  kwargs = _as_dict(section, key)
  name = kwargs.pop("name", None)
  if name is None:
    raise ConfigError(f"Config key `{key}.name` is missing: say which {registry.kind} to "
                      f"use, one of: {', '.join(registry.names())}.")
  registered = registry.get(name, key=f"{key}.name")
  factory = registered if factory is None else factory
  clash = sorted(set(kwargs) & set(injected))
  if clash:
    raise ConfigError(f"Config key(s) {', '.join(f'`{key}.{c}`' for c in clash)} are set "
                      f"by the builder and cannot be configured.")
  kwargs.update(injected)
  check_kwargs(factory, kwargs, what=f"{registry.kind} '{name}'", key=key,
               injected=injected)
  try:
    return factory(**kwargs)
  except (TypeError, ValueError, MissingPackage) as e:
    raise ConfigError(f"Could not build {registry.kind} '{name}' from config key `{key}`: "
                      f"{e}") from e
