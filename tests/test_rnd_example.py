"""docs/components.md's "Composing on an existing agent": PPO + RND (examples/rnd/) built
on PPO's public class and extension points, its parts tested alone, and the page's
commands run as a user runs them (plain PPO never finds DeepSea's treasure; RND does)."""

import json
import pathlib

import jax
import numpy as np
import pytest

from podracer import testing
from podracer.config import files as config_files
from podracer.types import REPLICA_AXIS
from tests.test_launch import launch

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = "examples/rnd/configs.py"


@pytest.fixture(autouse=True)
def _registries_as_found():
  """The example's components leave the registries, and its module sys.modules, after
  each test: other tests of this process see only podracer's own (tests/test_readme.py
  lists those)."""
  import sys  # pylint: disable=import-outside-toplevel
  from podracer import registry  # pylint: disable=import-outside-toplevel
  from podracer.registry import imports  # pylint: disable=import-outside-toplevel
  imported = (list(imports._imported), list(imports._modules))  # pylint: disable=protected-access
  yield
  imports._imported[:], imports._modules[:] = imported  # pylint: disable=protected-access
  registry.environments.unregister("deep_sea")
  registry.networks.unregister("rnd_actor_critic")
  registry.agents.unregister("ppo_rnd")
  sys.modules.pop("rnd", None)


def _config(name, **overrides):
  c = config_files.load(f"{CONFIGS}:{name}")
  with c.unlocked():
    c.update(overrides)
  return c


def test_the_page_shows_the_example_as_it_is():
  page = (ROOT / "docs/components.md").read_text().split(
      "## Composing on an existing agent", 1)[1].split("\n## ", 1)[0]
  source = (ROOT / "examples/rnd/rnd.py").read_text()
  agent = source[source.index('@registry.agents.register("ppo_rnd")'):].strip()
  assert agent in page, "docs/components.md's PPORND differs from examples/rnd/rnd.py"
  for command in ("configs.py:deep_sea_rnd", "configs.py:deep_sea_ppo"):
    assert command in page


def _rnd_module():
  """examples/rnd/rnd.py, imported as its configs import it (`imports`: by path)."""
  import sys  # pylint: disable=import-outside-toplevel
  from podracer.registry import imports  # pylint: disable=import-outside-toplevel
  imports.import_all([str(ROOT / "examples/rnd/rnd.py")])
  return sys.modules["rnd"]


def test_moments_merge_as_numpy_computes_them_over_every_batch():
  rnd = _rnd_module()
  batches = [np.random.default_rng(i).normal(i, 1 + i, 64).astype(np.float32)
             for i in range(3)]
  merge = jax.vmap(rnd.merged, in_axes=(None, 0), axis_name=REPLICA_AXIS)
  moments = rnd.Moments(*np.array([1e-4, 0.0, 1.0], np.float32))
  for batch in batches:
    moments = jax.tree.map(lambda x: x[0], merge(moments, batch[None]))
  every = np.concatenate(batches)
  np.testing.assert_allclose(float(moments.mean), every.mean(), rtol=1e-4)
  np.testing.assert_allclose(float(moments.var), every.var(), rtol=1e-3)


def test_an_update_steps_the_policy_and_predictor_and_never_the_target():
  config = _config("deep_sea_rnd", total_env_steps=1024)
  config.runtime.updates_per_call = 1
  before, after, metrics = testing.one_update(config)
  changed = {k: any(not np.array_equal(a, b) for a, b in
                    zip(jax.tree.leaves(before[k]), jax.tree.leaves(after[k])))
             for k in before}
  assert changed == dict(policy=True, predictor=True, target=False)
  assert {"ppo_loss", "rnd_loss", "rnd_novelty", "intrinsic_reward"} <= set(metrics)


def _held(workdir, runs):
  from podracer.logs.metrics import tail_mean  # pylint: disable=import-outside-toplevel
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  return [tail_mean([r["episode_return"] for r in records if r["run"] == run
                     and r.get("episode_return") is not None]) for run in range(runs)]


# Extended (CI time): in CI an RND update steps the policy and predictor and never the
# target, and the moments merge as numpy computes them (above).
@pytest.mark.extended
@pytest.mark.learning
def test_the_pages_commands_plain_ppo_never_finds_the_treasure_and_rnd_does(tmp_path):
  held = {}
  for name in ("deep_sea_ppo", "deep_sea_rnd"):
    result = launch(f"--config={CONFIGS}:{name}", "--config.num_runs=4",
                    f"--workdir={tmp_path / name}", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    held[name] = _held(tmp_path / name, 4)
  assert all(h < 0.1 for h in held["deep_sea_ppo"]), held  # Left at the first step.
  assert all(h >= 0.95 for h in held["deep_sea_rnd"]), held  # 0.99 is the optimum.
