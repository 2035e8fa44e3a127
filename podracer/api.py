"""podracer's public surface: the modules and names a user may import (docs/api.md), and
its snapshot, so that a change to it is seen (tests/test_api.py).

Everything listed in PUBLIC, the option keys of every registered runtime and the config
keys of every registered component are public; everything else is internal and may change
in any release. A change to the public surface goes with a minor version (0.x), a
CHANGELOG.md entry and, for a rename or a removal, a deprecation shim that keeps the old
name working for two minor versions and 90 days (podracer/deprecation.py); a module that
moved keeps its old path through `podracer.MOVED_MODULES` (recorded as `moved_modules`).

    python -m podracer.api            # what changed against tests/api_surface.json
    python -m podracer.api --write    # record the surface (after bumping __version__)
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import re
import sys
from typing import Any, Dict, List, Tuple

SNAPSHOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "tests", "api_surface.json")

PUBLIC: Dict[str, Tuple[str, ...]] = {
    "podracer": ("__version__", "check_environment"),
    "podracer.registry": ("Registry", "UnknownComponentError", "DuplicateComponentError",
                          "build", "check_kwargs", "parameters", "ALL", "environments", "networks",
                          "losses", "optimizers", "replay", "topologies", "agents",
                          "runtimes", "loggers", "distributions", "normalizers"),
    "podracer.registry.ranges": ("Range", "Probability", "Fraction", "Positive",
                                 "NonNegative", "Finite"),
    "podracer.builder": ("build", "build_agent", "Experiment", "EnvironmentFactory",
                         "register_builtin_components"),
    "podracer.experiment": ("Experiment", "log_options"),
    "podracer.launch": ("launch", "run", "register_components_and_agents"),
    "podracer.config.files": ("load", "UnknownConfigName"),
    "podracer.registry.imports": ("import_all", "imported"),
    "podracer.config.presets": ("experiment", "section", "anakin", "sebulba", "seed", "envpool",
                         "envpool_atari", "atari_sebulba", "pixel_catch", "impala_resnet",
                         "replay", "getter"),
    "podracer.runtime": ("Plan", "plan_rounds", "Runtime", "NotSupported", "RuntimeOptions"),
    "podracer.agent": ("Agent", "greedy", "legal", "random_legal", "dummy_observation",
                       "item_spec"),
    "podracer.learning": ("step", "Objective", "init_opt_state", "gradient_step",
                          "minibatch_epochs", "periodic_update", "TargetState",
                          "with_target", "update_target"),
    "podracer.experience": ("Sample", "Replay", "HostReplay", "host_replay",
                            "importance_weights"),
    "podracer.kits": ("ActorCriticAgent", "MetaGradientAgent", "QLearningAgent"),
    "podracer.trajectories": ("first_entries", "extend", "last_entries", "assemble",
                              "trajectory_spec", "stack"),
    "podracer.types": ("StepType", "TimeStep", "EpisodeStats", "ArraySpec", "DiscreteSpec",
                       "EnvSpec", "ActorOutput", "Trajectory", "AgentState", "bounds",
                       "replica_mean", "replica_sum", "ACTION_MASK", "ILLEGAL", "action_mask",
                       "has_action_mask", "observation_features", "SIMULATOR_STATE",
                       "simulator_state"),
    "podracer.mesh": ("RUNS", "DATA", "mesh_shape", "device_mesh", "spmd", "put", "local",
                      "gather"),
    "podracer.config.population": ("Population", "Schedule", "from_config", "load_schedule",
                                   "ManyRuns", "many_runs"),
    "podracer.runtimes.population": ("Population", "PopulationState", "Schedule",
                                     "from_config", "fitness", "parents", "explore",
                                     "exploit_explore", "load_schedule"),
    "podracer.errors": ("ConfigError", "MissingPackage", "require", "RecompilationError",
                        "ThreadFailure", "NonFiniteError", "EnvironmentWorkerError",
                        "ReplayTimeout", "ReplayUnavailableError", "DiskError"),
    "podracer.logs.metrics": ("METRICS_FILE", "windowed_returns", "tail_mean", "episode_sums",
                         "DEFAULT_LOGGERS"),
    "podracer.logs": ("Logger", "JsonlLogger", "TensorBoardLogger", "CsvLogger",
                      "read_csv", "default_loggers"),
    "podracer.logs.wandb": ("WandbLogger", "offline_runs", "read_offline_run"),
    "podracer.report": ("report", "read_runs", "group_runs", "final_score", "best_member",
                        "interval_estimates", "main"),
    "podracer.meta": ("MetaConfig", "inner_config", "member_program", "generation_program",
                      "evaluation_program", "search_std", "Strategy", "train", "main"),
    "podracer.play": ("play", "load_config", "main"),
    "podracer.lifecycle.video": ("renders", "check_renders", "record", "record_host",
                                 "record_run", "write", "encode", "has_ffmpeg", "FPS"),
    "podracer.deprecation": ("warn_once", "renamed_attribute", "renamed_module_names",
                             "renamed_message"),
    "podracer.testing": ("fake_spec", "fake_observations", "FakeEnvironment",
                         "FakeHostEnvironment", "rollout", "fake_trajectory",
                         "check_network", "one_update", "traced_update", "fake_records",
                      "log_records", "check_dm_env"),
    "podracer.testing_fixtures": ("force_host_devices", "registered", "devices",
                                  "fake_spec", "fake_env"),
    "podracer.contracts": ("actor_critic_outputs", "check_environment", "check_network",
                           "check_objectives", "check_policy_lag"),
    # The agents that ship with podracer, as classes a user's agent subclasses.
    "agents.ppo.agent": ("PPO",),
    "agents.ppo.recurrent": ("RecurrentPPO",),
    "agents.impala.agent": ("IMPALA",),
    "agents.dqn.agent": ("DQN",),
    "agents.r2d2.agent": ("R2D2",),
    "agents.pqn.agent": ("PQN",),
    "agents.sac.agent": ("SAC",),
    "agents.td3.agent": ("TD3",),
    "agents.muzero.agent": ("MuZero",),
    "podracer.components.environments": (),  # its __all__
    "podracer.components.networks": (),
    "podracer.components.losses": (),
    "podracer.components.distributions": (),
    "podracer.components.normalizers": (),
    "podracer.components.replay": (),
    "podracer.components.optimizers": ("adam", "rmsprop"),
    "podracer.components.shardings": ("MODEL", "Rule", "replicated", "fsdp", "tensor", "build",
                                      "param_specs", "state_specs", "check_spec",
                                      "path_name", "bytes_per_device", "row_shardings",
                                      "spmd", "place"),
    "podracer.components.topologies": ("Replicate", "ActorLearner"),
    "podracer.components.loggers": (),
}


def public_names(module_name: str) -> Tuple[str, ...]:
  """The names PUBLIC gives `module_name` (its `__all__` where PUBLIC lists none)."""
  names = PUBLIC[module_name]
  return names or tuple(importlib.import_module(module_name).__all__)


def _ours(component: Any) -> bool:
  """Whether podracer or its agents define `component` (not a user's module or an
  example a test imported, which register into the same registries)."""
  module = getattr(component, "__module__", None) or ""
  return module.split(".")[0] in ("podracer", "agents")


def surface() -> Dict[str, Any]:
  """The public surface as plain data: each name's kind and signature (a class's with its
  public members), every runtime's option keys and every component's config keys."""
  from podracer.launch import register_components_and_agents  # pylint: disable=import-outside-toplevel
  from podracer import registry  # pylint: disable=import-outside-toplevel
  register_components_and_agents()
  names = {}
  for module_name in PUBLIC:
    module = importlib.import_module(module_name)
    for name in public_names(module_name):
      names[f"{module_name}.{name}"] = describe(getattr(module, name))
  runtimes = {name: _options(registry.runtimes.get(name).Options)
              for name in registry.runtimes.names() if not name.startswith("test_")}
  components = {kind: {name: _keys(reg.get(name)) for name in reg.names()
                       if not name.startswith("test_") and _ours(reg.get(name))}
                for kind, reg in registry.ALL.items() if kind != "runtimes"}
  import podracer  # pylint: disable=import-outside-toplevel
  moved = {old: new for old, (new, _) in sorted(podracer.MOVED_MODULES.items())}
  return dict(version=_version(), names=names, runtime_options=runtimes,
              component_keys=components, moved_modules=moved)


def describe(obj: Any) -> Any:
  """A name's kind and signature; a class also lists its public members."""
  if inspect.isclass(obj):
    return dict(kind="class", signature=_signature(obj), members=_members(obj))
  if callable(obj) and not _is_registry(obj):
    return dict(kind="function", signature=_signature(obj))
  return dict(kind=type(obj).__name__)


def _is_registry(obj: Any) -> bool:
  return type(obj).__name__ == "Registry"


def _members(cls: type) -> Dict[str, str]:
  """Public attributes defined by the class or its podracer bases."""
  members = {}
  for klass in reversed(cls.__mro__):
    if not (klass.__module__ or "").startswith(("podracer", "agents")):
      continue
    for name, value in vars(klass).items():
      if name.startswith("_") or name in members:
        continue
      if isinstance(value, property):
        members[name] = "property"
      elif isinstance(value, (staticmethod, classmethod)):
        members[name] = f"{type(value).__name__}{_signature(value.__func__)}"
      elif inspect.isfunction(value):
        members[name] = f"method{_signature(value)}"
      elif type(value).__name__ == "renamed_attribute":
        members[name] = f"deprecated alias of {value.new}"
      elif type(value).__name__ == "_tuplegetter":
        members[name] = "field"
      else:
        members[name] = "attribute"
  if hasattr(cls, "_fields"):  # NamedTuple: its fields in order.
    members["_fields"] = ", ".join(cls._fields)
  if dataclasses.is_dataclass(cls):
    members["_fields"] = ", ".join(f.name for f in dataclasses.fields(cls))
  return dict(sorted(members.items()))


def _signature(obj: Any) -> str:
  try:
    sig = inspect.signature(obj)
  except (TypeError, ValueError):
    return "(...)"
  params = [p.replace(default=_Plain(p.default) if p.default is not p.empty else p.empty,
                      annotation=_annotation(p.annotation))
            for p in sig.parameters.values()]
  return str(sig.replace(parameters=params,
                         return_annotation=_annotation(sig.return_annotation)))


def _annotation(annotation: Any) -> Any:
  """An annotation as the text it was written as, module paths left out: the same under
  `from __future__ import annotations` or not, and across the lanes' library versions."""
  if annotation is inspect.Parameter.empty:
    return annotation
  if isinstance(annotation, str):
    text = annotation
  elif hasattr(annotation, "__forward_arg__"):
    text = annotation.__forward_arg__
  elif inspect.isclass(annotation):
    text = annotation.__qualname__
  else:
    text = str(annotation)
  return _Plain(re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*)", "",
                       text.replace("typing.", "")), literal=True)


class _Plain:
  """A default value as it reads in a snapshot: literals as themselves, a class, function
  or module by its qualified name, any other object by its type (its repr may carry
  addresses or state that differ between processes)."""

  def __init__(self, value: Any, literal: bool = False):
    self.value, self.literal = value, literal

  def __repr__(self) -> str:
    value = self.value
    if self.literal:
      return value
    if value is None or isinstance(value, (bool, int, float, str)):
      return repr(value)
    if isinstance(value, (tuple, list)):
      inner = ", ".join(repr(_Plain(v)) for v in value)
      return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) \
          else f"[{inner}]"
    if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value):
      return getattr(value, "__qualname__", value.__name__)
    if hasattr(value, "write") and hasattr(value, "flush"):  # sys.stdout, replaced by pytest
      return "<stream>"
    return f"<{type(value).__name__}>"


def _options(options_cls: type) -> Dict[str, str]:
  """A runtime's option keys with their defaults."""
  fields = dataclasses.fields(options_cls) if dataclasses.is_dataclass(options_cls) else ()
  return {f.name: (repr(f.default) if f.default is not dataclasses.MISSING else "required")
          for f in fields}


def _keys(factory: Any) -> List[str]:
  """A component's config keys: its keyword parameters, those the builder passes aside."""
  try:
    params = inspect.signature(factory).parameters.values()
  except (TypeError, ValueError):
    return []
  return [p.name for p in params
          if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


def _version() -> str:
  import podracer  # pylint: disable=import-outside-toplevel
  return podracer.__version__


def differences(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
  """Lines saying what was added, removed or changed between two surfaces."""
  lines = []
  for section in ("names", "runtime_options", "component_keys", "moved_modules"):
    before, after = _flat(old.get(section, {})), _flat(new.get(section, {}))
    for key in sorted(set(before) | set(after)):
      if key not in after:
        lines.append(f"removed  {section}: {key} (was {before[key]})")
      elif key not in before:
        lines.append(f"added    {section}: {key} = {after[key]}")
      elif before[key] != after[key]:
        lines.append(f"changed  {section}: {key}: {before[key]} -> {after[key]}")
  return lines


def _flat(tree: Any, prefix: str = "") -> Dict[str, str]:
  """One line per name (a class: one more per member), per runtime option, per component."""
  if isinstance(tree, dict) and "kind" in tree and set(tree) <= {"kind", "signature",
                                                                 "members"}:
    flat = {prefix: f"{tree['kind']}{tree.get('signature', '')}"}
    flat.update({f"{prefix}.{k}": v for k, v in tree.get("members", {}).items()})
    return flat
  if not isinstance(tree, dict):
    return {prefix: json.dumps(tree) if isinstance(tree, list) else str(tree)}
  flat = {}
  for key, value in tree.items():
    flat.update(_flat(value, f"{prefix}.{key}" if prefix else key))
  return flat


def read_snapshot(path: str = SNAPSHOT) -> Dict[str, Any]:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def refuse_to_write(old: Dict[str, Any], new: Dict[str, Any]) -> str:
  """Why `new` may not replace the snapshot `old` (empty if it may): a changed surface
  needs its CHANGELOG.md line in the current version's section, written since `old`."""
  section = changelog_section(new["version"])
  if section is None:
    return (f"CHANGELOG.md has no section '## [{new['version']}]' for podracer."
            "__version__; a public change goes in a new minor version (0.x), with its "
            "section.")
  if differences(old, new) and _sha(section) == old.get("changelog_sha"):
    return (f"the public surface changed but CHANGELOG.md's section {new['version']} did "
            "not: say what changed there (a renamed or removed name keeps a deprecation "
            "shim for two minor versions and 90 days: podracer/deprecation.py).")
  return ""


def changelog_section(version: str, path: str = "") -> Any:
  """The text of CHANGELOG.md's `## [version]` section, or None."""
  path = path or os.path.join(os.path.dirname(os.path.dirname(SNAPSHOT)), "CHANGELOG.md")
  with open(path, encoding="utf-8") as f:
    text = f.read()
  match = re.search(rf"^## \[{re.escape(version)}\].*?(?=^## \[|\Z)", text, re.M | re.S)
  return match.group(0) if match else None


def _sha(text: str) -> str:
  import hashlib  # pylint: disable=import-outside-toplevel
  return hashlib.sha256(text.encode()).hexdigest()


def main(argv: List[str]) -> int:
  new = surface()
  old = read_snapshot() if os.path.exists(SNAPSHOT) else {}
  lines = differences(old, new)
  print("\n".join(lines) if lines else "The public surface matches tests/api_surface.json.")
  if "--write" in argv:
    why = refuse_to_write(old, new)
    if why:
      print(f"Not written: {why}", file=sys.stderr)
      return 2
    new["changelog_sha"] = _sha(changelog_section(new["version"]))
    with open(SNAPSHOT, "w", encoding="utf-8") as f:
      json.dump(new, f, indent=1, sort_keys=True)
      f.write("\n")
    print(f"wrote {SNAPSHOT} (version {new['version']})")
  return 1 if lines and "--write" not in argv else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
