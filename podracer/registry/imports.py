"""A user's own modules, imported before a config is built, so the components they
register can be named in it:

  python -m podracer.launch --import=myrl --config=agents/ppo/config.py:cartpole_anakin \
      --config.env=chain

Each import is a dotted module on the path (`myrl`, `myrl.envs`), a `.py` file, or a
package directory; a file's or a directory's folder goes on `sys.path` first, as Python
does for a script. A config file can list them too (`c.imports = ("myrl",)`). Every
process of the run imports the same ones: `launch_local` and `mpirun` ranks (the same
command line), SEED's workers (sent in the handshake), and the builder itself.

Everything that can go wrong is one paragraph naming the import (a ConfigError: the
launcher exits 2). No JAX here: the launcher calls it while parsing flags.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Iterable, List, Tuple

from podracer.errors import ConfigError, deepest_frame

FLAG = "--import"
CONFIG_KEY = "imports"

# Packages a user's module may import that come with one of podracer's extras (setup.py).
EXTRAS = {"flax": "flax", "equinox": "equinox", "gymnax": "jax-envs", "brax": "jax-envs",
          "mujoco_playground": "jax-envs", "dm_control": "dm-control", "evosax": "meta",
          "gymnasium": "gymnasium", "wandb": "wandb"}

_imported: List[str] = []  # What was imported, as given (for the registry's messages).
_modules: List[str] = []   # ... and the modules' dotted names.


def imported() -> Tuple[str, ...]:
  """The imports made so far in this process, in order: dotted modules as given, paths
  made absolute (what SEED's workers are sent)."""
  return tuple(_imported)


def imported_modules() -> Tuple[str, ...]:
  """The dotted names of the modules imported so far (`imported`'s), in order."""
  return tuple(_modules)


def is_path(spec: str) -> bool:
  """Whether `spec` names a file or directory rather than a dotted module: a path has a
  separator or ends in `.py` (`./myrl` is the directory, `myrl` the module)."""
  return spec.endswith(".py") or os.sep in spec or (os.altsep or os.sep) in spec


def resolve(spec: str) -> str:
  """`spec` as it is recorded (config.json, SEED's handshake): a path made absolute, a
  dotted module as it is."""
  return os.path.abspath(spec) if is_path(spec) else spec


def import_all(specs: Iterable[str]) -> List[str]:
  """Imports each of `specs`; returns the module names. ConfigError for a bad one."""
  if isinstance(specs, str):
    specs = (specs,)
  return [import_one(spec) for spec in specs]


def import_one(spec: str) -> str:
  """Imports one dotted module, `.py` file or package directory; returns its module name."""
  if not isinstance(spec, str) or not spec.strip():
    raise ConfigError(f"{FLAG}={spec!r} names nothing to import; pass a module on the "
                      "path (--import=myrl), a .py file or a package directory.")
  name = _module_name(spec) if is_path(spec) else spec
  try:
    importlib.import_module(name)
  except ConfigError as e:  # A component it registers clashes with another.
    raise ConfigError(f"{FLAG}={spec}: {e}") from None
  except ModuleNotFoundError as e:
    if e.name is not None and name != e.name and not name.startswith(e.name + "."):
      extra = EXTRAS.get(e.name.split(".")[0])
      how = f": pip install 'podracer[{extra}]'" if extra else ""
      raise ConfigError(f"{FLAG}={spec}: module '{name}' could not import module "
                        f"'{e.name}' ({_where(e, name)}); install it in this Python "
                        f"({sys.executable}){how}.") from e
    raise ConfigError(
        f"{FLAG}={spec}: no module named '{name}' on the path (the current directory is "
        f"{os.getcwd()}). Pass a .py file or a package directory by its path "
        f"(--import=path/to/{name.replace('.', '/')}), install the package "
        "(pip install -e DIR), or put its folder on PYTHONPATH.") from e
  except SyntaxError as e:
    line = f":{e.lineno}" if e.lineno else ""
    raise ConfigError(f"{FLAG}={spec}: not valid Python at {e.filename or name}{line}: "
                      f"{e.msg}.") from e
  except Exception as e:  # pylint: disable=broad-except
    raise ConfigError(f"{FLAG}={spec}: importing module '{name}' raised "
                      f"{type(e).__name__} ({_where(e, name)}): "
                      f"{' '.join(str(e).split()) or '(no message)'}.") from e
  recorded = resolve(spec)
  if recorded not in _imported:
    _imported.append(recorded)
  if name not in _modules:
    _modules.append(name)
  return name


def _package_root(folder: str, name: str) -> Tuple[str, str]:
  """(the folder to put on sys.path, the dotted name) of module `name` in `folder`: as
  Python and pytest do, up through every folder that is a package (has __init__.py), so
  `DIR/myrl/envs` is `myrl.envs` from DIR and its absolute imports of `myrl` work."""
  while os.path.isfile(os.path.join(folder, "__init__.py")):
    folder, package = os.path.split(folder)
    if not package.isidentifier():
      break
    name = f"{package}.{name}"
  return folder, name


def _module_name(spec: str) -> str:
  """Puts the folder of a file or package directory (of its outermost package, where it
  is inside one) on sys.path; returns its dotted module name."""
  path = os.path.abspath(spec.rstrip("/\\") or spec)
  if not os.path.exists(path):
    raise ConfigError(f"{FLAG}={spec}: {path} does not exist (looked in {os.getcwd()}); "
                      "pass a .py file, a package directory or a dotted module name.")
  if os.path.isfile(path) and not path.endswith(".py"):
    raise ConfigError(f"{FLAG}={spec}: {path} is a file but not a .py module; pass a .py "
                      "file, a package directory or a dotted module name.")
  folder, base = os.path.split(path)
  name = base[:-3] if base.endswith(".py") else base
  if not name.isidentifier():
    raise ConfigError(f"{FLAG}={spec}: '{name}' is not a name Python can import (a module "
                      "or package name is letters, digits and underscores); rename it.")
  folder, name = _package_root(folder, name)
  if folder not in sys.path:
    sys.path.insert(0, folder)
  loaded = sys.modules.get(name)
  if loaded is not None and not _loaded_from(loaded, path):
    raise ConfigError(f"{FLAG}={spec}: a module named '{name}' is already imported from "
                      f"{getattr(loaded, '__file__', None) or 'elsewhere'}; rename {path} "
                      "so that its name is its own.")
  return name


def _loaded_from(module, path: str) -> bool:
  """Whether an imported module is the file or package directory at `path`."""
  origin = getattr(module, "__file__", None)
  if origin:
    return os.path.abspath(origin) in (path, os.path.join(path, "__init__.py"))
  return any(os.path.abspath(p) == path for p in getattr(module, "__path__", ()))


def _where(error: BaseException, name: str) -> str:
  """'file:line', the deepest frame of the error outside the import machinery."""
  frame = deepest_frame(error, lambda f: "importlib" not in f and f != __file__)
  return f"{frame.filename}:{frame.lineno}" if frame else f"while importing {name}"
