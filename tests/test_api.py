"""The public surface is said (docs/api.md), recorded (tests/api_surface.json) and kept:
a change fails here until the record and CHANGELOG.md are updated together."""

import pathlib
import re
import sys
import warnings
from typing import NamedTuple

import pytest

import podracer
from podracer import api, deprecation
from podracer.runtime import Plan, plan_rounds

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.reverb_lane
def test_the_public_surface_is_the_recorded_one():
  recorded, now = api.read_snapshot(), api.surface()
  changed = api.differences(recorded, now)
  assert not changed, (
      "The public surface changed (docs/api.md):\n  " + "\n  ".join(changed[:40]) +
      "\nIf that is meant: say so in CHANGELOG.md (a minor version; a renamed or removed "
      "name keeps a podracer.deprecation shim), then `python -m podracer.api --write`.")


def test_the_record_the_changelog_and_the_version_agree():
  recorded = api.read_snapshot()
  assert recorded["version"] == podracer.__version__
  changelog = (ROOT / "CHANGELOG.md").read_text()
  versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)
  assert versions and versions[0] == podracer.__version__, versions[:3]
  assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))),
                            reverse=True)


def test_docs_api_names_every_public_module_and_name():
  text = (ROOT / "docs" / "api.md").read_text()
  for module in api.PUBLIC:
    row = re.search(rf"^\| `{re.escape(module)}` \|(.*)$", text, re.M)
    assert row, f"docs/api.md has no row for {module}"
    for name in api.public_names(module):
      assert f"`{name}`" in row.group(1), f"docs/api.md's row for {module} lacks {name}"


def test_a_changed_surface_is_not_recorded_without_its_changelog_line():
  # As recorded with the CHANGELOG as it is now: a change must come with a new line.
  old = dict(api.read_snapshot(),
             changelog_sha=api._sha(api.changelog_section(podracer.__version__)))
  new = dict(old, names=dict(old["names"], **{"podracer.new_name": dict(kind="function",
                                                                       signature="()")}))
  why = api.refuse_to_write(old, new)
  assert "CHANGELOG.md's section" in why and "did not" in why
  assert api.refuse_to_write(old, dict(old)) == ""  # Nothing changed: may be rewritten.
  assert "no section '## [9.9.0]'" in api.refuse_to_write(old, dict(new, version="9.9.0"))
  assert api.differences(old, new) == ["added    names: podracer.new_name = function()"]


class _Probe(NamedTuple):
  rounds: int
  turns = deprecation.renamed_attribute("turns", "rounds", "0.6.0", removed_in="0.9.0")


def test_a_renamed_attribute_warns_once_with_the_new_name_and_gives_its_value():
  probe = _Probe(rounds=8)
  deprecation._warned.discard("_Probe.turns")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert probe.turns == 8 == probe.rounds
    assert probe.turns == 8  # A second read: no second warning.
  assert len(caught) == 1 and caught[0].category is DeprecationWarning
  message = str(caught[0].message)
  assert "`_Probe.rounds`" in message and "0.9.0" in message and "90 days" in message
  assert caught[0].filename == __file__  # It points at the caller's line.
  assert "turns" not in _Probe._fields


def test_a_shim_cannot_promise_a_removal_sooner_than_two_minor_versions():
  # 0.6.0 deprecated `Plan.updates_per_call` and 0.7.0 removed it the same day.
  with pytest.raises(ValueError, match="cannot be removed in 0.7.0.*2 minor versions"):
    deprecation.renamed_attribute("updates_per_call", "updates_per_round", "0.6.0",
                                  removed_in="0.7.0")
  assert deprecation.removal("0.9.0") == "0.11.0"
  assert deprecation.removal("0.9.0", "1.0.0") == "1.0.0"


def test_plan_updates_per_call_is_gone_in_0_7_0_as_its_shim_said():
  plan = plan_rounds(env_steps_per_round=512, updates_per_round=8, total_env_steps=2048)
  assert isinstance(plan, Plan) and plan.updates_per_round == 8
  with pytest.raises(AttributeError, match="updates_per_call"):
    plan.updates_per_call  # pylint: disable=pointless-statement


def test_renamed_module_names_serve_the_new_name_warning_once():
  import types
  module = types.ModuleType("podracer_probe")
  module.new_name = object()
  module.__getattr__ = deprecation.renamed_module_names(
      "podracer_probe", {"old_name": ("new_name", "0.6.0")})
  import sys
  sys.modules["podracer_probe"] = module
  try:
    with pytest.warns(DeprecationWarning, match="`podracer_probe.new_name`"):
      assert module.old_name is module.new_name
    with pytest.raises(AttributeError, match="no attribute 'other'"):
      module.other  # pylint: disable=pointless-statement
  finally:
    del sys.modules["podracer_probe"]


def test_every_moved_module_keeps_its_old_path_and_public_names_warning_once():
  import importlib
  import sys
  import podracer
  assert len(podracer.MOVED_MODULES) == 19
  for old, (new, since) in podracer.MOVED_MODULES.items():
    deprecation._warned.discard(old)
    sys.modules.pop(old, None)
    until = re.escape(deprecation.removal(since))
    with pytest.warns(DeprecationWarning, match=rf"`{old}` was renamed `{new}` in podracer "
                      rf"{since}; it keeps working until {until} and for at least 90 days"):
      module = importlib.import_module(old)
    assert module is importlib.import_module(new), old
    for name in api.PUBLIC.get(new, ()):
      assert getattr(module, name) is getattr(importlib.import_module(new), name), name
  # The public names docs/api.md listed at 0.8.0's paths, read through the old paths.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from podracer.configs import experiment  # pylint: disable=g-import-not-at-top
    from podracer.metrics import DEFAULT_LOGGERS, METRICS_FILE, windowed_returns
    from podracer.wandb_log import WandbLogger
  assert experiment is podracer.config.presets.experiment
  assert DEFAULT_LOGGERS == ("jsonl", "tensorboard") and METRICS_FILE == "metrics.jsonl"
  assert callable(windowed_returns) and WandbLogger is podracer.logs.wandb.WandbLogger


def test_python_m_of_a_moved_module_runs_it():
  import subprocess
  import sys
  result = subprocess.run([sys.executable, "-W", "always::DeprecationWarning", "-m",
                           "podracer.launch_local", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  assert "--num_processes" in result.stdout
  assert "`podracer.launch_local` was renamed `podracer.distributed.launch_local`" in \
      result.stderr


def test_the_0_17_renames_keep_the_old_names_working_warning_once(monkeypatch):
  """launch.run -> launch.launch, Experiment.run -> Experiment.train, Runtime.run ->
  Runtime.train (tests/test_runtime_interface.py runs a runtime that defines `run`)."""
  from podracer import experiment, launch  # pylint: disable=import-outside-toplevel
  from podracer.runtime import Runtime  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(launch, "launch", lambda *args: ("launched", args))
  monkeypatch.setattr(experiment.Experiment, "train", lambda self, **kw: ("trained", kw))

  class Trains(Runtime):
    Options = None
    environment_kind = "jax"

    def __init__(self):  # pylint: disable=super-init-not-called
      pass

    def train(self, logger, checkpointer=None, evaluation=None):
      return ("runtime trained", logger, checkpointer)

  cases = [("podracer.launch.run", lambda: launch.run("config", "dir"),
            ("launched", ("config", "dir", sys.stdout, False))),
           ("Experiment.run", lambda: experiment.Experiment(None, None, None, None).run(
               workdir="w"), ("trained", dict(workdir="w"))),
           ("Runtime.run", lambda: Trains().run("logger", checkpointer="c"),
            ("runtime trained", "logger", "c"))]
  for key, call, expected in cases:
    deprecation._warned.discard(key)
    with pytest.warns(DeprecationWarning, match=r"was renamed .* in podracer 0\.17\.0; it "
                      r"keeps working until 0\.19\.0"):
      assert call() == expected


def test_a_users_registered_component_is_not_part_of_the_surface():
  """A component registered by a module outside podracer and agents/ (the point-mass
  example, which test_continuous_user imports) leaves the recorded surface as it is,
  whatever order the tests run in."""
  sys.path.insert(0, str(ROOT / "examples" / "point_mass"))
  try:
    import point_mass  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  finally:
    sys.path.remove(str(ROOT / "examples" / "point_mass"))
  from podracer import registry  # pylint: disable=import-outside-toplevel
  assert "point_mass" in registry.environments.names()
  assert "point_mass" not in api.surface()["component_keys"]["environments"]
