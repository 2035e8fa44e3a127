"""The README stays true: its example is the tested file, its component list is complete."""

import pathlib
import re

from podracer import registry
from podracer.launch import register_components_and_agents

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_example_is_the_tested_file():
  example = (ROOT / "examples" / "custom_components.py").read_text()
  assert example.strip() in README


def test_readme_lists_every_registered_component():
  register_components_and_agents()
  section = README.split("## Registered components", 1)[1].split("\n## ", 1)[0]
  listed = set(re.findall(r"`([a-z0-9_]+)`", section))
  for kind, reg in registry.ALL.items():
    for name in reg.names():
      if name.startswith("test_"):
        continue
      assert name in listed, f"README does not list the {reg.kind} '{name}'"


def test_readme_commands_exist():
  for script in ("scripts/train.sh", "scripts/test.sh", "scripts/setup_env.sh",
                 "benchmarks/anakin.py", "benchmarks/sebulba.py"):
    assert script in README and (ROOT / script).exists(), script


def test_writing_components_excerpts_are_the_tested_file():
  example = (ROOT / "examples" / "writing_components.py").read_text()
  section = README.split("## Writing components", 1)[1].split("\n## ", 1)[0]
  blocks = re.findall(r"```python\n(.*?)```", section, re.S)
  assert len(blocks) == 7  # Six kinds and the config.
  for block in blocks:
    assert block.strip() in example, block[:80]


def test_architecture_names_every_module_of_podracer():
  """ARCHITECTURE.md's layers stay in step with the tree: each module of podracer/ (and
  each runtime's) is named there."""
  text = (ROOT / "ARCHITECTURE.md").read_text()
  missing = [str(p.relative_to(ROOT)) for p in (ROOT / "podracer").glob("*.py")
             if p.name != "__init__.py" and p.name not in text]
  listed = text.split("sebulba/ (", 1)[1].split(")", 1)[0]  # the Sebulba modules' list
  missing += [str(p.relative_to(ROOT)) for p in (ROOT / "podracer/runtimes/sebulba").glob("*.py")
              if p.name != "__init__.py" and p.stem not in listed]
  missing += [str(p.relative_to(ROOT)) for p in (ROOT / "podracer/runtimes").glob("*.py")
              if p.name != "__init__.py" and p.name not in text]
  assert not missing, f"ARCHITECTURE.md does not name {', '.join(missing)}"
