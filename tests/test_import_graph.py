"""The layering holds: the library never imports the agents that ship with it, and
runtimes talk to replays only through the experience interface (podracer.experience)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The application entry point registers the built-in agents; it is not the library.
ENTRY_POINTS = {"podracer/launch.py"}


def _type_checking_only(tree: ast.AST):
  """The nodes under `if TYPE_CHECKING:` (imports for annotations, never executed)."""
  skipped = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
      skipped.update(id(n) for child in node.body for n in ast.walk(child))
  return skipped


def import_statements(path: pathlib.Path, root: pathlib.Path = ROOT):
  """(the module named, the names imported from it or None) of every import in `path`, at
  any depth (function-level imports included; those only a type checker sees under
  `if TYPE_CHECKING:` are not imports), relative ones resolved against its package."""
  package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
  tree = ast.parse(path.read_text(), str(path))
  skipped = _type_checking_only(tree)
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.Import):
      yield from ((alias.name, None) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: resolve against this file's package
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
      yield base, [alias.name for alias in node.names]


def imports_of(path: pathlib.Path, root: pathlib.Path = ROOT):
  """Every module `path` imports (`import_statements`), and for `from P import name`
  both P and P.name."""
  for base, names in import_statements(path, root):
    yield base
    yield from (f"{base}.{name}" for name in names or ())


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


# Above the components, nothing names a replay implementation: runtimes, kits, the
# builder, the entry points and the agents reach replays through podracer.experience.
ABOVE_COMPONENTS = ("podracer/kits", "podracer/runtimes", "podracer/meta", "agents")
ABOVE_COMPONENTS_FILES = ("podracer/builder.py", "podracer/experiment.py", "podracer/launch.py",
                          "podracer/api.py", "podracer/report.py", "podracer/testing.py",
                          "podracer/testing_fixtures.py", "podracer/worker.py",
                          "podracer/play.py")


def test_nothing_above_the_components_imports_a_replay_implementation():
  found = [f for folder in ABOVE_COMPONENTS
           for f in importers(folder, "podracer.components.replay")]
  for rel in ABOVE_COMPONENTS_FILES:
    bad = sorted({m for m in imports_of(ROOT / rel)
                  if m.startswith("podracer.components.replay")})
    found += [f"{rel}: {', '.join(bad)}"] if bad else []
  assert found == []


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
    ("reporting", ("podracer/reporting/",)),
    ("lifecycle", ("podracer/lifecycle/",)),
    ("config", ("podracer/config/",)),
    ("components", ("podracer/components/",)),
    ("kits", ("podracer/kits/",)),
    ("runtimes", ("podracer/runtimes/",)),
    ("builder", ("podracer/builder.py", "podracer/experiment.py")),
    ("entry points", ("podracer/launch.py", "podracer/api.py", "podracer/report.py",
                      "podracer/testing.py", "podracer/testing_fixtures.py",
                      "podracer/worker.py", "podracer/meta/", "podracer/play.py")),
)
# agents/ (like a user's agents): plug-ins built on the interfaces, kits, components and
# config; never a runtime, the builder or an entry point, and no other agent's package.
AGENT_LAYERS = ("base", "interfaces", "config", "components", "kits")
# What stays free of JAX at import: the SEED worker starts fast with JAX_PLATFORMS=cpu set
# before JAX loads, and the launcher's --help, the report and the config tools need none.
JAX_FREE = ("podracer", "podracer.errors", "podracer.deprecation", "podracer.distributed",
            "podracer.distributed.transport", "podracer.distributed.launch_local",
            "podracer.registry", "podracer.registry.imports", "podracer.config.files",
            "podracer.config.presets", "podracer.config.compose", "podracer.logs",
            "podracer.logs.metrics", "podracer.logs.meters", "podracer.logs.plots",
            "podracer.reporting.statistics", "podracer.report", "podracer.worker")


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


def imported_files(path: pathlib.Path, root: pathlib.Path = ROOT):
  """The podracer files `path` imports (`import_statements`): for `from P import name`,
  the submodule P.name where there is one, else P."""
  for base, names in import_statements(path, root):
    if not base.startswith("podracer"):
      continue
    for name in names or [None]:
      sub = module_file(f"{base}.{name}", root) if name else None
      yield sub if sub and sub != module_file(base, root) else module_file(base, root)


def import_cycle(root: pathlib.Path = ROOT):
  """One cycle of imports among podracer's modules, as a list of files, or None."""
  graph = {}
  for path in sorted((root / "podracer").rglob("*.py")):
    rel = str(path.relative_to(root))
    graph[rel] = set(imported_files(path, root)) - {None, rel, "podracer/__init__.py"}
  state = {}

  def visit(node, trail):
    if state.get(node) == "done":
      return None
    if state.get(node) == "open":
      return trail[trail.index(node):] + [node]
    state[node] = "open"
    for child in sorted(graph.get(node, ())):
      found = visit(child, trail + [node])
      if found:
        return found
    state[node] = "done"
    return None

  for node in sorted(graph):
    found = visit(node, [])
    if found:
      return found
  return None


def test_modules_import_each_other_without_cycles_even_inside_functions():
  assert import_cycle() is None, " -> ".join(import_cycle())


def test_the_cycle_check_sees_an_import_inside_a_function(tmp_path):
  (tmp_path / "podracer" / "a").mkdir(parents=True)
  (tmp_path / "podracer" / "a" / "__init__.py").write_text("from podracer.a import b\n")
  (tmp_path / "podracer" / "a" / "b.py").write_text(
      "def f():\n  from podracer.a import c\n")
  (tmp_path / "podracer" / "a" / "c.py").write_text(
      "import typing\nif typing.TYPE_CHECKING:\n  from podracer.a import b\n"
      "from podracer.a import d\n")
  (tmp_path / "podracer" / "a" / "d.py").write_text("from podracer.a.b import f\n")
  assert import_cycle(tmp_path) == ["podracer/a/b.py", "podracer/a/c.py", "podracer/a/d.py",
                                    "podracer/a/b.py"]


def test_agents_import_only_interfaces_kits_components_and_config():
  allowed = {name for name, _ in LAYERS if name in AGENT_LAYERS}
  assert allowed == set(AGENT_LAYERS)
  found = []
  for path in sorted((ROOT / "agents").rglob("*.py")):
    rel = str(path.relative_to(ROOT))
    own = "agents." + path.relative_to(ROOT / "agents").parts[0] if rel != "agents/__init__.py" else "agents"
    for module in sorted(set(imports_of(path))):
      if module.startswith("podracer."):
        target = module_file(module)
        if target and target != "podracer/__init__.py" and \
            LAYERS[layer_of(target)][0] not in AGENT_LAYERS:
          found.append(f"{rel} imports {module} ({LAYERS[layer_of(target)][0]})")
      elif module.startswith("agents.") and rel != "agents/__init__.py" and \
          not (module == own or module.startswith(own + ".")):
        found.append(f"{rel} imports another agent's {module}")
  assert found == []


# Where a MissingPackage may be raised by hand: `errors.require` (every optional import
# goes through it), the suites' API check (an installed suite whose API moved) and
# JAXtari's sprite pack (a data download, not a package).
MISSING_PACKAGE_RAISERS = ("podracer/errors.py", "podracer/components/environments/suites.py",
                           "podracer/components/environments/jaxtari_adapter.py")


def test_optional_packages_are_imported_through_one_require():
  found = []
  for path in sorted((ROOT / "podracer").rglob("*.py")):
    rel = str(path.relative_to(ROOT))
    for node in ast.walk(ast.parse(path.read_text(), rel)):
      if isinstance(node, ast.Raise) and node.exc is not None and \
          "MissingPackage(" in ast.unparse(node.exc) and rel not in MISSING_PACKAGE_RAISERS:
        found.append(f"{rel}:{node.lineno}")
  assert found == []


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


def test_no_function_is_over_fifty_lines():
  """The house rule (ARCHITECTURE.md's Layers): a function that does not fit a screen is
  several."""
  long = []
  for folder in ("podracer", "agents"):
    for path in sorted((ROOT / folder).rglob("*.py")):
      for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
            node.end_lineno - node.lineno + 1 > 50:
          long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
  assert long == []


def test_every_new_module_says_what_it_is_in_its_first_line():
  """Each module of podracer/ opens with a docstring (its first line says what it is)."""
  missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "podracer").rglob("*.py"))
             if p.stat().st_size and not ast.get_docstring(ast.parse(p.read_text()))]
  assert missing == []
