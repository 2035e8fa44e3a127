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


# -- ARCHITECTURE.md's layers ---------------------------------------------------------

# Bottom first: a module imports only modules of its own layer and of those below
# (imports inside functions included). `podracer/__init__.py` is the package itself.
LAYERS = (
    ("base", ("podracer/errors.py", "podracer/deprecation.py", "podracer/types.py")),
    ("processes", ("podracer/distributed/", "podracer/mesh.py")),
    ("interfaces", ("podracer/agent.py", "podracer/experience.py", "podracer/learning.py",
                    "podracer/trajectories.py", "podracer/runtime.py",
                    "podracer/contracts.py", "podracer/registry/")),
    ("logs", ("podracer/logs/",)),
    ("lifecycle", ("podracer/lifecycle/",)),
    ("config", ("podracer/config/",)),
    ("components", ("podracer/components/",)),
    ("runtimes", ("podracer/runtimes/", "podracer/off_policy.py")),
    ("builder", ("podracer/builder.py",)),
    ("entry points", ("podracer/launch.py", "podracer/api.py", "podracer/report.py",
                      "podracer/testing.py", "podracer/testing_fixtures.py",
                      "podracer/worker.py", "podracer/meta.py", "podracer/play.py")),
)
# What stays free of JAX at import: the SEED worker starts fast with JAX_PLATFORMS=cpu set
# before JAX loads, and the launcher's --help, the report and the config tools need none.
JAX_FREE = ("podracer", "podracer.errors", "podracer.deprecation", "podracer.distributed",
            "podracer.distributed.transport", "podracer.distributed.launch_local",
            "podracer.registry", "podracer.registry.imports", "podracer.config.files",
            "podracer.config.presets", "podracer.config.compose", "podracer.logs",
            "podracer.logs.metrics", "podracer.report", "podracer.worker")


def layer_of(rel: str) -> int:
  for index, (_, members) in enumerate(LAYERS):
    if any(rel == m or (m.endswith("/") and rel.startswith(m)) for m in members):
      return index
  raise AssertionError(f"{rel} is in no layer of LAYERS (and ARCHITECTURE.md)")


def module_file(module: str, root: pathlib.Path = ROOT):
  """The file of `module` or of the longest podracer module it names a member of."""
  parts = module.split(".")
  while parts:
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
      if candidate.is_file():
        return str(candidate.relative_to(root))
    parts.pop()
  return None


def test_every_module_imports_only_its_layer_and_those_below():
  found = []
  for path in sorted((ROOT / "podracer").rglob("*.py")):
    rel = str(path.relative_to(ROOT))
    if rel == "podracer/__init__.py":
      continue
    mine = layer_of(rel)
    for module in sorted(set(imports_of(path))):
      target = module_file(module) if module.startswith("podracer.") else None
      if target and target != "podracer/__init__.py" and layer_of(target) > mine:
        found.append(f"{rel} ({LAYERS[mine][0]}) imports {module} "
                     f"({LAYERS[layer_of(target)][0]})")
  assert found == []


def top_level_imports(path: pathlib.Path):
  """The podracer files `path` imports when it loads (module scope): for `from P import
  name`, the submodule P.name where there is one, else P."""
  for node in ast.parse(path.read_text(), str(path)).body:
    if isinstance(node, ast.Import):
      yield from (module_file(a.name) for a in node.names if a.name.startswith("podracer."))
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
        node.module.startswith("podracer"):
      for alias in node.names:
        sub = module_file(f"{node.module}.{alias.name}")
        yield sub if sub and sub != module_file(node.module) else module_file(node.module)


def test_modules_import_each_other_without_cycles():
  graph = {}
  for path in sorted((ROOT / "podracer").rglob("*.py")):
    rel = str(path.relative_to(ROOT))
    graph[rel] = set(top_level_imports(path)) - {None, rel, "podracer/__init__.py"}
  state = {}

  def visit(node, trail):
    if state.get(node) == "done":
      return
    assert state.get(node) != "open", " -> ".join(trail[trail.index(node):] + [node])
    state[node] = "open"
    for child in sorted(graph.get(node, ())):
      visit(child, trail + [node])
    state[node] = "done"

  for node in sorted(graph):
    visit(node, [])


def test_the_jax_free_modules_import_without_jax():
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  code = (f"import sys; import {', '.join(JAX_FREE)}; "
          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')))")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=True)
  assert out.stdout.strip() == "[]", out.stdout


def test_at_most_twenty_modules_stay_at_the_top_of_the_package():
  top = sorted(p.name for p in (ROOT / "podracer").glob("*.py") if p.name != "__init__.py")
  assert len(top) <= 20, top


def test_architecture_md_names_every_layer():
  text = (ROOT / "ARCHITECTURE.md").read_text()
  for name, members in LAYERS:
    assert name in text, name
    for member in members:
      assert member.replace("podracer/", "", 1).rstrip("/") in text, member
