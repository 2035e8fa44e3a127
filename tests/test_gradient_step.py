"""The framework-owned gradient step: each optimizer updates only what it owns, in order,
with gradients averaged over replicas."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from podracer import mesh
from podracer.learning import STEP, Objective, gradient_step, init_opt_state
from podracer.types import REPLICA_AXIS, replica_mean

LR_A, LR_B = 0.1, 0.5


def first_loss(nets, batch, key):
  """Depends on every key of nets; only `a` is its to update."""
  del key
  loss = jnp.sum((nets["a"] * nets["b"] - batch) ** 2) + jnp.sum(nets["target"] * nets["a"])
  return loss, dict(mean_a=jnp.mean(nets["a"]))


def second_loss(nets, batch, key):
  del key
  loss = jnp.sum((nets["b"] - nets["a"] * batch) ** 2) + jnp.sum(nets["target"] * nets["b"])
  return loss, dict(mean_b=jnp.mean(nets["b"]))


OBJECTIVES = (Objective("first", first_loss, optax.sgd(LR_A), owns=("a",)),
              Objective("second", second_loss, optax.sgd(LR_B, momentum=0.9), owns=("b",)))
NETS = dict(a=jnp.array([1.0, -2.0]), b=jnp.array([0.5, 3.0]), target=jnp.array([2.0, 1.0]))
BATCHES = jnp.array([[1.0, 2.0], [-3.0, 0.5]])  # one per replica


def expected_step(nets, batches):
  """By hand: `a` moves along the mean gradient of the first loss; then `b` along the
  second loss's, taken at the NEW `a`; `target` stays put."""
  mean_grad = lambda loss, wrt, n: sum(
      jax.grad(lambda x: loss({**n, wrt: x}, b, None)[0])(n[wrt]) for b in batches) / len(
          batches)
  a = nets["a"] - LR_A * mean_grad(first_loss, "a", nets)
  after_first = {**nets, "a": a}
  # sgd with momentum starts from a zero trace, so its first step is plain sgd.
  b = nets["b"] - LR_B * mean_grad(second_loss, "b", after_first)
  return dict(a=a, b=b, target=nets["target"])


def test_each_optimizer_updates_only_what_it_owns_with_replica_mean_gradients():
  devices = jax.local_devices()[:2]
  assert len(devices) == 2, "tests/conftest.py sets 8 virtual CPU devices"
  opt_state = init_opt_state(OBJECTIVES, NETS)
  # Each optimizer's state covers only its own parameters (momentum trace of `b` only).
  assert set(opt_state) == {"first", "second", STEP}
  traces = lambda state: [x for x in jax.tree.leaves(state) if np.shape(x) == (2,)]
  assert len(traces(opt_state["second"])) == 1 and not traces(opt_state["first"])

  def step(nets, opt_state, batch):
    return gradient_step(OBJECTIVES, nets, opt_state, batch, jax.random.PRNGKey(0))

  replicate = lambda tree: jax.tree.map(lambda x: jnp.stack([x, x]), tree)
  nets, new_opt, metrics = mesh.spmd(step, mesh.device_mesh(devices))(
      replicate(NETS), replicate(opt_state), BATCHES)

  expected = expected_step(NETS, BATCHES)
  for replica in (0, 1):
    for k in ("a", "b", "target"):
      np.testing.assert_allclose(nets[k][replica], expected[k], rtol=1e-6, err_msg=k)
  np.testing.assert_array_equal(nets["target"][0], NETS["target"])
  # Without replica_mean, each replica would have applied its own gradient: differs.
  own = gradient_step_without_mean(BATCHES[0])
  assert not np.allclose(own["a"], expected["a"])
  assert set(metrics) == {"first_loss", "first_mean_a", "second_loss", "second_mean_b"}
  assert set(new_opt) == {"first", "second", STEP}


def test_replica_mean_is_one_all_reduce_per_dtype_and_equals_pmean_per_leaf():
  # Across processes each all-reduce of a leaf is a gloo round trip: a gradient must be
  # one (podracer/types.py, `packed`).
  devices = jax.local_devices()[:2]
  tree = dict(w=jnp.arange(12.0).reshape(2, 2, 3), b=jnp.array([[1.5], [-2.0]]),
              n=jnp.array([[3], [8]], jnp.int32), s=jnp.array([0.25, 4.0]))
  per_leaf = mesh.spmd(lambda t: jax.lax.pmean(t, REPLICA_AXIS), mesh.device_mesh(devices))
  packed = mesh.spmd(replica_mean, mesh.device_mesh(devices))
  expected = per_leaf(tree)
  for k, v in packed(tree).items():
    assert v.dtype == expected[k].dtype and v.shape == expected[k].shape, k
    np.testing.assert_array_equal(v, expected[k], err_msg=k)
  hlo = packed.lower(tree).compile().as_text()
  # The float32 leaves and the int32 one: two all-reduces of one operand each.
  reduced = re.findall(r"= (\w+)\[(\d+)\]\S* all-reduce\(", hlo)
  assert sorted(reduced) == [("f32", "8"), ("s32", "1")], hlo


def gradient_step_without_mean(batch):
  fn = lambda n: gradient_step(OBJECTIVES, n, init_opt_state(OBJECTIVES, n), batch, None)
  return jax.vmap(fn, axis_name=REPLICA_AXIS)(jax.tree.map(lambda x: x[None], NETS))[0]


def test_order_matters_the_second_objective_sees_the_first_ones_update():
  """`b`'s step must be taken at the updated `a`, not at the `a` the step started from."""
  stale = {**NETS}
  grad_b = lambda n: jax.grad(lambda b: second_loss({**n, "b": b}, BATCHES[0], None)[0])(
      n["b"])
  one = lambda n: gradient_step(OBJECTIVES, n, init_opt_state(OBJECTIVES, n), BATCHES[0],
                                None)[0]
  got = jax.vmap(one, axis_name=REPLICA_AXIS)(jax.tree.map(lambda x: x[None], NETS))
  got = jax.tree.map(lambda x: x[0], got)
  assert not np.allclose(got["b"], stale["b"] - LR_B * grad_b(stale))
  np.testing.assert_allclose(got["b"], stale["b"] - LR_B * grad_b({**NETS, "a": got["a"]}),
                             rtol=1e-6)


def test_one_objective_owns_all_nets_and_reports_unprefixed_metrics():
  objective = Objective("main", lambda n, b, k: (jnp.sum((n["w"] - b) ** 2),
                                                 dict(err=jnp.mean(n["w"] - b))),
                        optax.sgd(0.25))
  nets = dict(w=jnp.array([1.0, 2.0]))
  fn = lambda n: gradient_step([objective], n, init_opt_state([objective], n),
                               jnp.zeros(2), None)
  new, opt, metrics = jax.vmap(fn, axis_name=REPLICA_AXIS)(
      jax.tree.map(lambda x: x[None], nets))
  np.testing.assert_allclose(new["w"][0], [0.5, 1.0])  # w - 0.25 * 2w
  assert set(metrics) == {"loss", "err"} and float(metrics["loss"][0]) == 5.0
  assert set(opt) == {"main", STEP}


def test_owning_a_missing_key_or_duplicate_names_are_errors():
  with pytest.raises(KeyError, match="'first' owns \\['a'\\]"):
    init_opt_state(OBJECTIVES[:1], dict(b=jnp.zeros(2)))
  with pytest.raises(ValueError, match="unique"):
    init_opt_state([OBJECTIVES[0], OBJECTIVES[0]], NETS)


def test_losses_see_the_gradient_steps_taken_so_far():
  """learning.step() inside a loss: 0, 1, 2, ... over successive gradient steps."""
  from podracer import learning

  def loss(nets, batch, key):
    del batch, key
    return jnp.sum(nets["a"]), dict(step=learning.step())

  objectives = [Objective("main", loss, optax.sgd(0.1))]
  nets = dict(a=jnp.ones(2))
  run = jax.jit(lambda n, o: gradient_step(objectives, n, o, None, None)[1:])
  opt, seen = init_opt_state(objectives, nets), []
  for _ in range(3):
    opt, metrics = jax.vmap(run, axis_name=REPLICA_AXIS)(
        *jax.tree.map(lambda x: x[None], (nets, opt)))
    opt = jax.tree.map(lambda x: x[0], opt)
    seen.append(int(metrics["step"][0]))
  assert seen == [0, 1, 2] and int(opt[STEP]) == 3
  with pytest.raises(RuntimeError, match="only defined while gradient_step"):
    learning.step()


VECTOR_LOSS_CONFIG = """
import jax.numpy as jnp
from agents.ppo import config as ppo_config
from podracer import registry

@registry.losses.register("vector_ppo")
class VectorPPO(registry.losses.get("ppo")):
  '''PPO's loss, returned per example: a mistake a new loss makes.'''
  def __call__(self, logits, value, batch):
    loss, metrics = super().__call__(logits, value, batch)
    return jnp.full(value.shape, loss), metrics

def get_config(name):
  c = getattr(ppo_config, name)()
  c.loss.name = "vector_ppo"
  return c
"""


@pytest.mark.parametrize("runtime", ["anakin", "sebulba"])
def test_a_loss_that_returns_a_vector_exits_2_naming_the_objective_and_shape(tmp_path, runtime):
  from tests.test_launch import launch
  config = tmp_path / "vector_loss.py"
  config.write_text(VECTOR_LOSS_CONFIG)
  result = launch(f"--config={config}:cartpole_{runtime}", f"--workdir={tmp_path / 'run'}",
                  timeout=240)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  assert result.stderr.startswith("Config error: ") and result.stderr.count("\n\n") == 0
  message = " ".join(result.stderr.split())
  assert "Objective 'ppo': its loss (PPO._loss) returns an array of shape [" in message
  assert "gradient_step differentiates a scalar" in message


def test_a_target_network_is_copied_every_period_or_averaged_every_update():
  from podracer.learning import TargetState, update_target, with_target
  online = {"w": jnp.full((2,), 4.0)}
  state = with_target({"opt": 0}, {"w": jnp.zeros((2,))})
  assert isinstance(state, TargetState) and int(state.updates) == 0
  seen = []
  for step in range(1, 7):  # A copy at updates 3 and 6 only.
    state = update_target(state, {"opt": step}, {"w": jnp.full((2,), float(step))}, period=3)
    seen.append(float(state.target["w"][0]))
  assert seen == [0.0, 0.0, 3.0, 3.0, 3.0, 6.0]
  assert int(state.updates) == 6 and state.optimizer == {"opt": 6}
  polyak = update_target(with_target({}, {"w": jnp.zeros((2,))}), {}, online, tau=0.25)
  np.testing.assert_allclose(polyak.target["w"], 1.0)  # 0.25 * 4 + 0.75 * 0
  with pytest.raises(ValueError, match="one of `period`"):
    update_target(state, {}, online)
  with pytest.raises(ValueError, match="one of `period`"):
    update_target(state, {}, online, period=2, tau=0.1)
