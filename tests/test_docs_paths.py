"""Every repository path the docs name exists: in the docstrings and comments of podracer/
and agents/ (modules, classes and functions), in ARCHITECTURE.md and in every page of docs/ (results
included), so a moved or deleted file cannot stay named.

The rule for what is a repository path (a token that is not itself the tail of a longer
path: no `/`, `.` or word character before it):

- A full path: a token that begins with one of the repository's top-level folders
  (`TOP`: podracer/, agents/, docs/, benchmarks/, tests/, examples/, scripts/,
  requirements/) or is one of its top-level files (`FILES`: README.md, ARCHITECTURE.md,
  CHANGELOG.md, setup.py, pytest.ini). It must exist from the repository's root.
- A short path: `folder/.../name.ext` (a file with an extension, at least one folder)
  beginning elsewhere, as docstrings name their neighbours (`sebulba/actor.py`,
  `host/runtime.py`, `losses/ppo.py`). It must exist from its own file's folder or one
  above it, or from `SHORT_BASES` (podracer/, podracer/runtimes/,
  podracer/components/, examples/first_agent/) -- unless its first folder is a
  placeholder or a workdir, not the repository's: upper case (`DIR/`, `WORKDIR/`,
  `OUT/`, `PODRACER/`), `runs/` or `path/` (`path/to/config.py`).
- A bare module name, `name.py`, in the docstrings and comments of podracer/ and agents/
  (`learner.py`, `actor.py`): a neighbour, in the module's folder or a folder above it,
  or in a package just inside one of those (`sebulba/runtime.py` may name `threads.py`
  of `runtimes/host/`, not `host.py`, which is two folders down in `components/`),
  unless it is another project's, said so (`PureJaxRL's dqn.py`), or quoted as an
  example of a value (`"path.py:NAME"`).

So `runs/cartpole_anakin/metrics.jsonl` and `DIR/learned_objective.npz` are not checked;
`podracer/meta/cli.py`, `sebulba/actor.py` and `tests/test_meta.py::test_x` (as
`tests/test_meta.py`) are. A token stops at the first character that cannot be in a
path here (`:`, `*`, `<`, `{`, a space, a backtick ...), so a placeholder such as
`agents/<name>/agent.py` or a glob `docs/*.md` is checked up to its fixed part
(`agents/`, `docs/`).
"""

import ast
import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOP = ("podracer", "agents", "docs", "benchmarks", "tests", "examples", "scripts",
       "requirements")
FILES = ("README.md", "ARCHITECTURE.md", "CHANGELOG.md", "setup.py", "pytest.ini")
SHORT_BASES = ("podracer", "podracer/runtimes", "podracer/components", "examples/first_agent")
NOT_THE_REPOSITORY = re.compile(r"^(?:[A-Z][A-Z_]*|runs|path)/")
SHORT = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[\w-]+\.[a-z]{2,4})(?![\w/-])")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/(?:[\w./-]*[\w/])?|"
                  + "|".join(re.escape(f) for f in FILES) + r")(?![\w-])")


def named_paths(text: str):
  """The repository paths `text` names (the module docstring's rule)."""
  return set(PATH.findall(text))


BARE = re.compile(r"(?<![\w./-])([A-Za-z_]\w*\.py)(?![\w/])")


def bare_modules(text: str):
  """The bare module names `text` names (the module docstring's rule)."""
  return {m.group(1) for m in BARE.finditer(text)
          if not re.search(r"(\w's |[\"'])$", text[max(0, m.start() - 4):m.start()])}


def neighbour_exists(name: str, where: pathlib.Path) -> bool:
  here = (ROOT / where).parent
  folders = [here, *(p for p in here.parents if ROOT in (p, *p.parents))]
  return any((f / name).exists() or any(f.glob(f"*/{name}")) for f in folders)


def short_paths(text: str):
  """The short paths `text` names (the module docstring's rule): not a full path, not a
  placeholder's or a workdir's."""
  return {p for p in SHORT.findall(text)
          if p.split("/")[0] not in TOP and not NOT_THE_REPOSITORY.match(p)}


def short_path_exists(path: str, where: pathlib.Path) -> bool:
  here = (ROOT / where).parent
  bases = [here, *here.parents, *(ROOT / b for b in SHORT_BASES)]
  return any((base / path).exists() for base in bases if ROOT in (base, *base.parents))


def docstrings(path: pathlib.Path):
  """The docstrings of `path`'s module, classes and functions."""
  tree = ast.parse(path.read_text(), str(path))
  nodes = [tree] + [n for n in ast.walk(tree) if isinstance(
      n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
  return [d for d in (ast.get_docstring(n, clean=False) for n in nodes) if d]


def comments(path: pathlib.Path):
  """`path`'s comments, one a line."""
  tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
  return "\n".join(t.string for t in tokens if t.type == tokenize.COMMENT)


def code_sources():
  """(where, text) of every docstring and of the comments of podracer/ and agents/."""
  for folder in ("podracer", "agents"):
    for path in sorted((ROOT / folder).rglob("*.py")):
      for doc in [*docstrings(path), comments(path)]:
        yield str(path.relative_to(ROOT)), doc


def sources():
  """(where, text) of the docstrings and comments of podracer/ and agents/,
  ARCHITECTURE.md and the pages of docs/."""
  yield from code_sources()
  yield "ARCHITECTURE.md", (ROOT / "ARCHITECTURE.md").read_text()
  for page in sorted((ROOT / "docs").rglob("*.md")):
    yield str(page.relative_to(ROOT)), page.read_text()


def test_the_rule_tells_repository_paths_from_others():
  text = ("See podracer/meta/cli.py, `tests/test_meta.py::test_x` and docs/*.md; "
          "runs/cartpole_anakin, DIR/docs/x.md, myrl/tests/test_env.py and "
          "agents/<name>/agent.py; ARCHITECTURE.md. benchmarks/anakin.py.")
  assert named_paths(text) == {"podracer/meta/cli.py", "tests/test_meta.py", "docs/",
                               "agents/", "ARCHITECTURE.md", "benchmarks/anakin.py"}
  short = ("sebulba/paths.py, host/runtime.py; DIR/config.json, runs/x/videos/a.mp4, "
           "path/to/config.py and podracer/runtime.py")
  assert short_paths(short) == {"sebulba/paths.py", "host/runtime.py"}
  where = pathlib.Path("podracer/runtimes/seed/runtime.py")
  assert short_path_exists("host/runtime.py", where)
  assert not short_path_exists("sebulba/paths.py", where)  # 0.21.0's, gone
  assert bare_modules("host.py runs them; PureJaxRL's dqn.py; (\"path.py:NAME|...\")"
                      ) == {"host.py"}
  sebulba = pathlib.Path("podracer/runtimes/sebulba/runtime.py")
  assert neighbour_exists("threads.py", sebulba) and neighbour_exists("actor.py", sebulba)
  assert not neighbour_exists("host.py", sebulba)  # 0.21.0's sebulba/host.py, gone


def test_every_path_the_docs_name_exists():
  missing = set()
  for where, text in sources():
    missing |= {f"{where}: {p}" for p in named_paths(text) if not (ROOT / p).exists()}
    missing |= {f"{where}: {p}" for p in short_paths(text)
                if not short_path_exists(p, pathlib.Path(where))}
  for where, text in code_sources():
    missing |= {f"{where}: {m}" for m in bare_modules(text)
                if not neighbour_exists(m, pathlib.Path(where))}
  assert sorted(missing) == [], "\n".join(sorted(missing))


def test_every_relative_link_of_the_docs_resolves():
  """A Markdown link or image of README.md, ARCHITECTURE.md or docs/ (results included)
  that is not a web address points at a file, from its page's folder."""
  pages = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
  broken = [f"{page.relative_to(ROOT)}: {link}" for page in pages
            for link in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text())
            if not re.match(r"\w+:", link) and not (page.parent / link).exists()]
  assert broken == []
