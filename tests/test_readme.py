"""The README and the docs stay true: the tour's example is the tested file, the
component list is complete."""

import pytest
import pathlib
import re

from podracer import registry
from podracer.errors import ConfigError
from podracer.launch import register_components_and_agents
from tests.reverb_support import current_lane

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
COMPONENTS = (ROOT / "docs" / "components.md").read_text()
DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_tours_example_is_the_tested_file():
  example = (ROOT / "examples" / "custom_components.py").read_text()
  assert example.strip() in (ROOT / "docs" / "tour.md").read_text()


def test_readme_lists_every_registered_component():
  register_components_and_agents()
  section = COMPONENTS.split("## Registered components", 1)[1].split("\n## ", 1)[0]
  listed = set(re.findall(r"`([a-z0-9_]+)`", section))
  for kind, reg in registry.ALL.items():
    for name in reg.names():
      # A test's own components, and a user's or an example's a test imported (the
      # point-mass example's environment), are not podracer's to list.
      module = getattr(reg.get(name), "__module__", "") or ""
      if name.startswith("test_") or module.split(".")[0] not in ("podracer", "agents"):
        continue
      assert name in listed, f"README does not list the {reg.kind} '{name}'"


def test_readme_commands_exist():
  docs = "".join(p.read_text() for p in DOCS)
  for script in ("scripts/train.sh", "scripts/test.sh"):
    assert script in README and (ROOT / script).exists(), script
  for script in ("scripts/setup_env.sh", "benchmarks/anakin.py", "benchmarks/sebulba.py",
                 "benchmarks/muzero.py"):
    assert script in docs and (ROOT / script).exists(), script


def test_readme_is_a_front_door():
  """What podracer is, install, the first run and where to go next: at most two pages
  (110 lines); the reference lives in docs/, the results in docs/results/, and every
  page it links exists."""
  assert len(README.splitlines()) <= 110
  for link in re.findall(r"\]\(([\w/.]+\.md)\)", README):
    assert (ROOT / link).exists(), link


def test_every_config_a_doc_names_in_a_command_builds():
  """Each `--config=FILE:NAME` of README.md, ARCHITECTURE.md and docs/ names a config
  that builds (its overrides aside), so the docs cannot drift from the code."""
  register_components_and_agents()
  named = set()
  for doc in DOCS:
    named |= set(re.findall(r"--config=((?:agents|examples)/[\w/]+\.py)(?::(\w+))?",
                            doc.read_text()))
  assert len(named) >= 10, named
  before = {kind: set(reg.names()) for kind, reg in registry.ALL.items()}
  try:
    _build_each(sorted(named))
  finally:  # Example files register components: leave the registries as found.
    for kind, reg in registry.ALL.items():
      for name in set(reg.names()) - before[kind]:
        reg.unregister(name)


def _build_each(named):
  import importlib.util

  from podracer import builder
  for path, name in named:
    stem = path.rsplit("/", 1)[1][:-len(".py")]
    spec = importlib.util.spec_from_file_location(stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(name) if name else module.get_config()
    # One device, as on a user's laptop (this suite has 8 virtual ones); one replica's
    # K devices for a config whose replica spans several (`topology.model`).
    if config.runtime.name == "anakin":
      config.topology.num_devices = config.topology.get("model", 1)
    else:
      config.topology.actor_devices, config.topology.learner_devices = (0,), (0,)
    try:
      builder.build(config)
    except ConfigError as e:  # gymnax and Brax: the reverb lane refuses them, saying so.
      if not (current_lane() == "reverb" and "default install lane" in str(e)):
        raise


def test_writing_components_excerpts_are_the_tested_file():
  example = (ROOT / "examples" / "writing_components.py").read_text()
  section = COMPONENTS.split("## Writing components", 1)[1].split("\n## ", 1)[0]
  blocks = re.findall(r"```python\n(.*?)```", section, re.S)
  assert len(blocks) == 8  # Seven kinds and the config.
  for block in blocks:
    assert block.strip() in example, block[:80]


def _file_entries(text: str):
  """ARCHITECTURE.md's "## Files" block as {folder: the text of its entry}: a line whose
  first word ends in "/" opens its folder's entry (nested by indentation)."""
  block = text.split("## Files", 1)[1].split("```", 2)[1]
  entries, stack = {}, []
  for line in block.splitlines():
    word = line.strip().split(" ")[0] if line.strip() else ""
    depth = len(line) - len(line.lstrip())
    if word.endswith("/") and depth <= 4:
      stack = [(d, f) for d, f in stack if d < depth] + [(depth, word)]
      folder = "".join(f for _, f in stack)
      entries[folder] = line.strip()[len(word):]
    elif stack:
      entries["".join(f for _, f in stack)] += " " + line.strip()
  return entries


def test_architecture_names_every_module_of_podracer():
  """ARCHITECTURE.md's Files block stays in step with the tree: every module of every
  package of podracer/ is named in its folder's entry (the top level's anywhere in it)."""
  text = (ROOT / "ARCHITECTURE.md").read_text()
  entries = _file_entries(text)
  block = text.split("## Files", 1)[1]
  missing = []
  for path in sorted((ROOT / "podracer").rglob("*.py")):
    rel = path.relative_to(ROOT / "podracer")
    if path.name == "__init__.py" or "components" in rel.parts:
      continue  # (components/: one entry per registry kind, its modules the registry's)
    if len(rel.parts) == 1:
      found = path.name in block
    else:
      entry = entries.get("podracer/" + "".join(f"{p}/" for p in rel.parts[:-1]))
      found = entry is not None and path.stem in entry.replace(".py", " ").split() + [
          w.strip("(),;:") for w in entry.replace(".py", " ").split()]
    if not found:
      missing.append(str(path.relative_to(ROOT)))
  assert not missing, f"ARCHITECTURE.md's Files block does not name {', '.join(missing)}"


def test_where_things_live_names_files_that_exist():
  """docs/components.md's "Where things live": every path it names (a backticked name
  with a slash, under podracer/ unless it names agents/ or tests/) is in the tree."""
  import re  # pylint: disable=import-outside-toplevel
  page = (ROOT / "docs/components.md").read_text().split("## Where things live", 1)[1]
  page = page.split("\n## ", 1)[0]
  paths = [p for p in re.findall(r"`([\w./]+)`", page) if "/" in p]
  assert len(paths) > 30
  missing = [p for p in paths if not (ROOT / p).exists() and not (ROOT / "podracer" / p).exists()]
  assert missing == []
