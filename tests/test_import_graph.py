"""The layering holds: the library never imports the agents that ship with it, and
runtimes talk to replays only through the experience interface (podracer.experience)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The application entry point registers the built-in agents; it is not the library.
ENTRY_POINTS = {"podracer/launch.py"}


def imports_of(path: pathlib.Path, root: pathlib.Path = ROOT):
  """Every module `path` imports, at any depth (function-level imports included)."""
  package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: resolve against this file's package
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
      yield base
      yield from (f"{base}.{alias.name}" for alias in node.names)


def importers(folder: str, forbidden: str, exempt=frozenset(), root=ROOT):
  found = []
  for path in sorted((root / folder).rglob("*.py")):
    rel = str(path.relative_to(root))
    if rel in exempt:
      continue
    bad = sorted({m for m in imports_of(path, root)
                  if m == forbidden or m.startswith(forbidden + ".")})
    if bad:
      found.append(f"{rel}: {', '.join(bad)}")
  return found


def test_the_library_imports_nothing_from_agents():
  assert importers("podracer", "agents", ENTRY_POINTS) == []
  assert any(m == "agents" for m in imports_of(ROOT / "podracer/launch.py"))


def test_runtimes_import_nothing_from_replay_components():
  assert importers("podracer/runtimes", "podracer.components.replay") == []


def test_the_checks_see_imports_inside_functions_and_relative_ones(tmp_path):
  probe = tmp_path / "podracer" / "runtimes" / "probe.py"
  probe.parent.mkdir(parents=True)
  probe.write_text("def f():\n  from podracer.components.replay import device\n"
                   "from ..components import replay\n")
  found = importers("podracer/runtimes", "podracer.components.replay", root=tmp_path)
  assert found == ["podracer/runtimes/probe.py: podracer.components.replay, "
                   "podracer.components.replay.device"]
