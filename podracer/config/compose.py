"""Which config keys a run uses, and swapping a whole component section.

A config's top-level keys are of two sorts, and every key must be used by someone:

- **Sections**, each naming a registered component (`name`) and its arguments: `env`,
  `agent`, `runtime` and `topology` in every run, plus the ones the agent's constructor
  names (`network`, `loss`, `optimizer`, `replay`, or roles such as `critic_optimizer`;
  see podracer/builder.py). A section the agent does not take is an error that lists
  the sections it does take.
- **Run keys**, read by the launcher, builder or runtime rather than a component. They
  are declared in `RUN_KEYS`, below, and nowhere else: a module that reads a new
  top-level key adds it there (with the module that reads it), or every config that
  sets it is refused.

`--config.SECTION=NAME` (e.g. `--config.optimizer=rmsprop`) replaces a whole section
with NAME's defaults: its registered `default_config()` if it has one, else the
defaults in its signature (a runtime's: its `Options`). Arguments the builder sets
(`BUILDER_ARGS`) are left out. Key overrides apply after the swap, whatever their order:
`--config.optimizer=rmsprop --config.optimizer.decay=0.9`.

Imports no JAX: the launcher uses it while parsing flags.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ml_collections import config_dict

from podracer import registry
from podracer.errors import ConfigError
from podracer.registry.build import BUILDER_ARGS, parameters

# Top-level keys that are not component sections: {key: the module that reads it}.
# Add a key here when you make a module read it (the lead merges new ones here).
RUN_KEYS = {
    "seed": "podracer/builder.py",
    "total_env_steps": "podracer/builder.py",
    "stop_at_return": "podracer/logs/metrics.py",
    "nan_policy": "podracer/lifecycle/guards.py",
    "checkpoint_interval": "podracer/lifecycle/checkpoint.py",
    "checkpoints_to_keep": "podracer/lifecycle/checkpoint.py",
    "log": "podracer/logs/metrics.py",  # log.progress_metrics
    "eval_interval": "podracer/lifecycle/evaluation.py",
    "eval_episodes": "podracer/lifecycle/evaluation.py",
    "eval_video": "podracer/lifecycle/video.py",
    "num_runs": "podracer/config/runs.py",
    "sweep": "podracer/config/runs.py",
    "population": "podracer/runtimes/population.py",
    "schedule_from": "podracer/runtimes/population.py",
    "imports": "podracer/registry/imports.py",
    "compile_cache": "podracer/lifecycle/compile_cache.py",
}

# Sections every run builds, and the registry each names a component of.
RUN_SECTIONS = {"env": "environments", "agent": "agents", "runtime": "runtimes",
                "topology": "topologies"}
# Sections an agent asks for by naming a constructor parameter: the kind itself
# (`optimizer`) or a role of the first three (`critic_optimizer`).
AGENT_SECTIONS = {"network": "networks", "loss": "losses", "optimizer": "optimizers",
                  "replay": "replay", "distribution": "distributions",
                  "normalizer": "normalizers"}
ROLE_KINDS = ("network", "loss", "optimizer", "normalizer")


def section_registry(key: str) -> Optional[registry.Registry]:
  """The registry a top-level section `key` names a component of; None for other keys."""
  kinds = {**RUN_SECTIONS, **AGENT_SECTIONS}
  if key in kinds:
    return registry.ALL[kinds[key]]
  kind = key.rsplit("_", 1)[-1]
  if kind in ROLE_KINDS and key != kind:
    return registry.ALL[AGENT_SECTIONS[kind]]
  return None


def section_choices(argv: Sequence[str]) -> Tuple[Dict[str, str], List[str]]:
  """Splits `--config.SECTION=NAME` (a section key, a bare component name) off argv:
  ({section: name}, the other arguments). ml_collections would parse NAME as a whole
  ConfigDict; the launcher (and `podracer.meta`'s tasks) apply the choices with
  `choose` instead, before any key override."""
  choices, rest = {}, []
  for arg in argv:
    match = re.fullmatch(r"--config\.(\w+)=(\w+)", arg)
    if match and section_registry(match.group(1)) is not None:
      choices[match.group(1)] = match.group(2)
    else:
      rest.append(arg)
  return choices, rest


def override_path(arg: str) -> str:
  """KEY.PATH of an override `--config.KEY.PATH=VALUE`."""
  return arg[len("--config."):].split("=", 1)[0]


def same_role(section: str, kind: str) -> str:
  """The section of `kind` for the role of `section`, by the naming rule above: `loss` ->
  `optimizer`, `critic_loss` -> `critic_optimizer` (its loss's schedule counts the
  steps of that optimizer)."""
  role, _, own_kind = section.rpartition("_")
  if own_kind not in ROLE_KINDS:
    raise ValueError(f"`{section}` is not a section of a role's {', '.join(ROLE_KINDS)}.")
  return f"{role}_{kind}" if role else kind


def agent_sections(params: Mapping[str, Any]) -> Dict[str, registry.Registry]:
  """{constructor parameter: registry} for the components an agent's signature names."""
  return {p: section_registry(p) for p in params
          if p not in RUN_SECTIONS and section_registry(p) is not None}


def used_sections(config: Any) -> List[str]:
  """The sections the config's agent and runtime use, in the order a reader expects."""
  agent = registry.agents.get(config.agent.name, key="agent.name")
  return [*RUN_SECTIONS, *agent_sections(parameters(agent))]


def sections_message(config: Any) -> str:
  try:
    used = used_sections(config)
  except (AttributeError, KeyError, ConfigError):  # No agent to ask.
    return f"the run keys are {', '.join(RUN_KEYS)}."
  return (f"agent '{config.agent.name}' uses the sections {', '.join(used)}; the other "
          f"top-level keys are {', '.join(RUN_KEYS)} (podracer/config/compose.py RUN_KEYS).")


def check_used(config: Any) -> None:
  """Raises ConfigError for a top-level key that neither the agent nor the run reads."""
  used = used_sections(config)
  for key in config.keys():
    if key in used or key in RUN_KEYS:
      continue
    if section_registry(key) is not None:
      raise ConfigError(f"Config section `{key}` is not used: agent "
                        f"'{config.agent.name}' takes no {key} component. Remove the "
                        f"section; {sections_message(config)}")
    raise ConfigError(f"Config key `{key}` is not read by anything;{_close_key(config, key)} "
                      f"{sections_message(config)} (A module of one's own that reads a new "
                      "top-level key declares it in podracer.config.compose.RUN_KEYS.)")


def component_target(reg: registry.Registry, name: str, key: str) -> Any:
  """What a section's keys are the arguments of: the component, or a runtime's Options."""
  component = reg.get(name, key=f"{key}.name")
  return component.Options if reg is registry.runtimes else component


def accepted_keys(reg: registry.Registry, name: str, key: str) -> List[str]:
  """The keys a section for component `name` may set (builder-set arguments left out)."""
  return [k for k in section_defaults(reg, name, key) if k != "name"]


def section_defaults(reg: registry.Registry, name: str, key: str) -> config_dict.ConfigDict:
  """`name` and the component's default arguments, as a config section."""
  component = reg.get(name, key=f"{key}.name")
  declared = getattr(component, "default_config", None)
  if callable(declared):
    return config_dict.ConfigDict(dict(name=name, **declared()))
  target = component_target(reg, name, key)
  try:
    params = parameters(target)
  except (TypeError, ValueError):
    params = {}
  skip = set(BUILDER_ARGS)
  if reg is registry.agents:
    skip |= set(agent_sections(params))
  section = config_dict.ConfigDict(dict(name=name))
  for param in params.values():
    if param.name in skip or param.kind not in (param.POSITIONAL_OR_KEYWORD,
                                                param.KEYWORD_ONLY):
      continue
    if param.default is param.empty or param.default is None:
      # A typed placeholder, so that --config.KEY.ARG=VALUE can set it.
      section[param.name] = config_dict.placeholder(_field_type(param.annotation))
    else:
      section[param.name] = param.default
  return section


def _field_type(annotation: Any) -> type:
  """The type to parse command-line values of a parameter with, from its annotation."""
  text = annotation if isinstance(annotation, str) else repr(annotation)
  for name, kind in (("Sequence", tuple), ("Tuple", tuple), ("tuple", tuple),
                     ("float", float), ("bool", bool), ("int", int), ("str", str)):
    if name in str(text):
      return kind
  return object


def choose(config: config_dict.ConfigDict, choices: Mapping[str, str]) -> None:
  """Replaces each section `key` in `choices` with its component's defaults (adds it, for
  a section the agent takes that the config leaves out)."""
  for key, name in choices.items():
    reg = section_registry(key)
    if key not in config and not _agent_uses(config, key):
      raise ConfigError(f"--config.{key}={name} replaces the section `{key}`, which this "
                        f"config does not have; {sections_message(config)}")
    config[key] = section_defaults(reg, name, key)


def _agent_uses(config: config_dict.ConfigDict, key: str) -> bool:
  """Whether the config's agent names the section `key` (one a config may leave out:
  `--config.meta_loss=meta_gradient` adds it)."""
  try:
    return key in used_sections(config)
  except (AttributeError, KeyError, ConfigError):
    return False


def add_accepted(config: config_dict.ConfigDict, paths: Sequence[str]) -> None:
  """For each override path SECTION.ARG whose section's component accepts ARG but the
  config's section does not list it (a config sets only the arguments it changes), adds
  ARG with the component's default, so that --config.SECTION.ARG=VALUE applies."""
  for path in paths:
    parts = path.split(".")
    if len(parts) != 2 or parts[0] not in config:
      continue
    head, arg = parts
    reg, section = section_registry(head), config[head]
    if (reg is None or not hasattr(section, "keys") or "name" not in section
        or arg in section or section.name not in reg.names()):
      continue
    defaults = section_defaults(reg, section.name, head)
    if arg in defaults:
      section[arg] = defaults[arg]


def unknown_key_message(config: Any, path: str) -> Optional[str]:
  """Why --config.PATH=... names no key of `config`; None if it does."""
  parts = path.split(".")
  node = config
  for depth, part in enumerate(parts):
    if not hasattr(node, "keys") or part not in node:
      break
    node = node[part]
  else:
    return None
  if depth == 0:
    return f"the config has no key `{parts[0]}`;{_close_key(config, parts[0])} " \
           f"{sections_message(config)}"
  head = parts[0]
  reg = section_registry(head)
  if depth == 1 and reg is not None and "name" in config[head]:
    name = config[head].name
    accepted = accepted_keys(reg, name, head)
    close = difflib.get_close_matches(parts[1], accepted, n=1)
    hint = f" Did you mean `{head}.{close[0]}`?" if close else ""
    return (f"{reg.kind} '{name}' (section `{head}`) has no argument `{parts[1]}`.{hint} "
            f"It accepts: {', '.join(accepted) or 'nothing'}. --config.{head}=NAME "
            f"swaps in another {reg.kind} with its own defaults.")
  return f"the config has no key `{'.'.join(parts[:depth + 1])}`."


def _close_key(config: Any, key: str) -> str:
  """' did you mean `observation_normalizer`?' for a misspelt top-level key (British
  spelling included); '' when no key is close."""
  try:
    known = list(dict.fromkeys([*config.keys(), *used_sections(config), *RUN_KEYS]))
  except (AttributeError, KeyError, ConfigError):
    known = list(dict.fromkeys([*config.keys(), *RUN_KEYS]))
  close = difflib.get_close_matches(key.replace("normalis", "normaliz"), known, n=1)
  return f" did you mean `{close[0]}`?" if close else ""


def catalogue() -> str:
  """Every registered component by kind, each with the keys its section accepts and their
  defaults, and for agents the sections they take (`python -m podracer.launch --list`)."""
  lines = []
  for kind, reg in registry.ALL.items():
    lines.append(f"{kind}:")
    for name in reg.names():
      section = section_defaults(reg, name, kind)
      keys = ", ".join(f"{k}={v!r}" for k, v in section.items() if k != "name")
      line = f"  {name}: {keys or '(no keys)'}"
      if reg is registry.agents:
        target = component_target(reg, name, kind)
        sections = agent_sections(parameters(target))
        line += (f"; sections: {', '.join(sections) or 'none'}; actions: "
                 f"{getattr(target, 'action_kind', None) or 'any'}")
      lines.append(line)
  return "\n".join(lines)
