"""Tests for the network torsos, heads, cores and registered factories."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import registry
from podracer.components import networks
from podracer.errors import ConfigError
from podracer.types import ArraySpec, DiscreteSpec, EnvSpec

KEY = jax.random.PRNGKey(0)


def _spec(obs_shape, num_actions, dtype=np.float32):
  return EnvSpec(observation=ArraySpec(obs_shape, dtype), action=DiscreteSpec(num_actions))


def _flat(params):
  """Params keyed without Haiku's '~' scopes, which differ with where a module is built."""
  return {k.replace("/~/", "/"): v for k, v in params.items()}


def _count(params):
  return sum(x.size for x in jax.tree.leaves(params))


def _jit(net):
  # One compilation per function is far cheaper than op-by-op dispatch on 2 CPU cores.
  return hk.Transformed(init=jax.jit(net.init), apply=jax.jit(net.apply))


def _transform(fn):
  return _jit(hk.without_apply_rng(hk.transform(fn)))


def _images(shape, seed=0):
  return jax.random.randint(jax.random.PRNGKey(seed), shape, 0, 256).astype(jnp.uint8)


def test_q_network_w_init_lecun_normal_has_variance_one_over_fan_in_in_every_layer():
  """flax's Dense default (PureJaxRL's DQN): every layer, the output one included; the
  default stays orthogonal at sqrt 2 in the torso and Haiku's default at the output."""
  spec = _spec((4,), 2)
  lecun = networks.q_network(spec, hidden_sizes=(512, 512), w_init="lecun_normal")
  flat = _flat(lecun.init(KEY, jnp.zeros((1, 4))))
  for name, fan_in in (("torso/linear_0", 4), ("torso/linear_1", 512), ("head", 512)):
    assert np.var(flat[name]["w"]) == pytest.approx(1.0 / fan_in, rel=0.1), name
    assert not np.any(flat[name]["b"])
  default = _flat(networks.q_network(spec, hidden_sizes=(512, 512)).init(
      KEY, jnp.zeros((1, 4))))
  w = default["torso/linear_0"]["w"]
  np.testing.assert_allclose(w @ w.T, 2.0 * np.eye(4), atol=1e-4)
  assert np.var(default["torso/linear_0"]["w"]) == pytest.approx(2.0 / 512, rel=0.1)
  dueling = _flat(networks.q_network(spec, hidden_sizes=(512,), dueling=True,
                                     head_hidden_sizes=(512,), w_init="lecun_normal").init(
      KEY, jnp.zeros((1, 4))))
  for name in ("head/value_stream/linear_1", "head/advantage_stream/linear_1"):
    assert np.var(dueling[name]["w"]) == pytest.approx(1.0 / 512, rel=0.1), name
  recurrent = networks.recurrent_q(spec, hidden_sizes=(512,), w_init="lecun_normal")
  flat = _flat(recurrent.init(KEY, jnp.zeros((1, 4))))
  assert np.var(flat["torso/linear_0"]["w"]) == pytest.approx(1.0 / 4, rel=0.1)
  with pytest.raises(ValueError, match=r"Unknown w_init 'xavier' for network 'recurrent_q'"):
    networks.recurrent_q(spec, w_init="xavier")
  with pytest.raises(ValueError, match=r"Unknown w_init 'xavier'.*orthogonal, lecun_normal"):
    networks.q_network(spec, w_init="xavier")
  with pytest.raises(ConfigError, match=r"w_init.*orthogonal, lecun_normal"):
    registry.build(registry.networks, {"name": "q_network", "w_init": "xavier"},
                   key="network", spec=spec)


@pytest.mark.parametrize("name", ["mlp_actor_critic", "mlp_shared_actor_critic"])
def test_mlp_factories_output_shapes_and_dtypes(name):
  net = _jit(registry.networks.get(name)(spec=_spec((4,), 3)))
  obs = jax.random.normal(KEY, (5, 4))
  out = net.apply(net.init(KEY, obs), obs)
  assert isinstance(out, networks.PolicyValueOutput)
  assert out.logits.shape == (5, 3) and out.logits.dtype == jnp.float32
  assert out.value.shape == (5,) and out.value.dtype == jnp.float32


def test_mlp_flattens_observations():
  net = networks.mlp_shared_actor_critic(spec=_spec((2, 3), 2), hidden_sizes=(8,))
  obs = jax.random.normal(KEY, (4, 2, 3))
  params = net.init(KEY, obs)
  assert _flat(params)["torso/linear_0"]["w"].shape == (6, 8)
  np.testing.assert_allclose(net.apply(params, obs).logits,
                             net.apply(params, obs.reshape(4, 6)).logits)


@pytest.mark.reverb_lane
@pytest.mark.parametrize("torso", ["nature", "impala"])
def test_atari_factory_output_shapes_and_dtypes(torso):
  net = _jit(registry.networks.get("atari_actor_critic")(
      spec=_spec((4, 42, 42), 6, np.uint8), torso=torso))
  obs = _images((2, 4, 42, 42))
  out = net.apply(net.init(KEY, obs), obs)
  assert out.logits.shape == (2, 6) and out.logits.dtype == jnp.float32
  assert out.value.shape == (2,) and out.value.dtype == jnp.float32
  assert np.all(np.isfinite(out.logits)) and np.all(np.isfinite(out.value))


@pytest.mark.parametrize("torso,flat", [("nature", 7 * 7 * 64), ("impala", 11 * 11 * 32)])
def test_atari_conv_shapes_for_84x84(torso, flat):
  # Shapes only (no compilation or compute), so the full Atari size stays cheap.
  net = networks.atari_actor_critic(spec=_spec((4, 84, 84), 18, np.uint8), torso=torso)
  obs = jax.ShapeDtypeStruct((3, 4, 84, 84), jnp.uint8)
  params = jax.eval_shape(net.init, KEY, obs)
  assert _flat(params)["torso/linear"]["w"].shape[0] == flat
  out = jax.eval_shape(net.apply, params, obs)
  assert out.logits.shape == (3, 18) and out.value.shape == (3,)


def test_mlp_actor_critic_param_count_matches_hand_count():
  net = networks.mlp_actor_critic(spec=_spec((4,), 2), hidden_sizes=(64, 64))
  params = net.init(KEY, jnp.zeros((1, 4)))
  actor = 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2
  critic = 4 * 64 + 64 + 64 * 64 + 64 + 64 * 1 + 1
  assert _count(params) == actor + critic
  actor_params = {k: v for k, v in _flat(params).items()
                  if k.startswith("actor_torso/") or k == "head/policy"}
  assert _count(actor_params) == actor


def test_mlp_init_is_orthogonal_with_zero_bias():
  net = networks.mlp_actor_critic(spec=_spec((64,), 2), hidden_sizes=(64,))
  params = net.init(KEY, jnp.zeros((1, 64)))
  layer = _flat(params)["actor_torso/linear_0"]
  np.testing.assert_allclose(layer["w"].T @ layer["w"], 2.0 * np.eye(64), atol=1e-4)
  assert not np.any(layer["b"])


@pytest.mark.parametrize("name", ["mlp_actor_critic", "mlp_shared_actor_critic"])
def test_policy_head_init_is_near_uniform(name):
  net = _jit(registry.networks.get(name)(spec=_spec((4,), 5)))
  obs = 3.0 * jax.random.normal(KEY, (64, 4))
  logits = net.apply(net.init(KEY, obs), obs).logits
  assert np.max(np.abs(logits)) < 0.1
  np.testing.assert_allclose(jax.nn.softmax(logits), 0.2, atol=0.02)


def test_policy_value_head_uses_separate_value_features():
  head = _transform(lambda p, v: networks.PolicyValueHead(3)(p, v))
  p, v = jnp.ones((2, 4)), jnp.zeros((2, 4))
  out = head.apply(head.init(KEY, p, v), p, v)
  # Zero features and zero bias: the value can only be zero if it reads `v`.
  np.testing.assert_array_equal(out.value, 0.0)
  assert np.any(out.logits != 0.0)


def test_preprocess_image_scales_uint8_and_moves_channels_last():
  pixels = _images((2, 4, 6, 5))
  x = networks.preprocess_image(pixels, channels_first=True)
  assert x.shape == (2, 6, 5, 4) and x.dtype == jnp.float32
  np.testing.assert_allclose(x, np.transpose(np.asarray(pixels), (0, 2, 3, 1)) / 255.0,
                             rtol=1e-6)
  # Float inputs are taken as already scaled.
  floats = jnp.full((1, 3, 3, 2), 7.0)
  np.testing.assert_array_equal(networks.preprocess_image(floats, channels_first=False), 7.0)


# The image handling is shared, so the cheaper torso covers both (Impala compiles slowly).
def test_image_torso_scales_uint8_by_255():
  torso = _transform(lambda x: networks.NatureCNN()(x))
  pixels = _images((2, 4, 36, 36))
  params = torso.init(KEY, pixels)
  np.testing.assert_allclose(torso.apply(params, pixels),
                             torso.apply(params, pixels.astype(jnp.float32) / 255.0),
                             rtol=1e-4, atol=1e-4)
  # Zero biases: a black frame gives exactly zero features.
  np.testing.assert_array_equal(torso.apply(params, jnp.zeros_like(pixels)), 0.0)


def test_image_torso_channels_first_matches_channels_last():
  first = _transform(lambda x: networks.NatureCNN(channels_first=True)(x))
  last = _transform(lambda x: networks.NatureCNN(channels_first=False)(x))
  pixels = _images((2, 4, 36, 36))
  params = first.init(KEY, pixels)
  np.testing.assert_allclose(first.apply(params, pixels),
                             last.apply(params, jnp.transpose(pixels, (0, 2, 3, 1))),
                             rtol=1e-4, atol=1e-4)


def test_dueling_head_mean_advantage_identity():
  def fn(x):
    head = networks.DuelingHead(4, hidden_sizes=(8,))
    return head(x), head.streams(x)
  net = _transform(fn)
  x = jax.random.normal(KEY, (3, 5))
  params = net.init(KEY, x)
  q, (value, advantages) = net.apply(params, x)
  assert q.shape == (3, 4) and value.shape == (3,)
  np.testing.assert_allclose(q.mean(axis=-1), value, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
      q, value[:, None] + advantages - advantages.mean(-1, keepdims=True), atol=1e-5)
  assert len(params) == 4  # Two layers per stream; `streams` shares them with `__call__`.


def _unroll(inputs, reset):
  core = networks.LSTMCore(8)
  return core.unroll(inputs, core.initial_state(inputs.shape[1]), reset)


def _step_loop(inputs, reset):
  core = networks.LSTMCore(8)
  state = core.initial_state(inputs.shape[1])
  outputs = []
  for t in range(inputs.shape[0]):
    out, state = core(inputs[t], state, reset[t])
    outputs.append(out)
  return jnp.stack(outputs), state


@pytest.mark.reverb_lane
def test_lstm_unroll_equals_loop_of_steps():
  t, b = 5, 3
  inputs = jax.random.normal(KEY, (t, b, 4))
  reset = jnp.zeros((t, b), bool).at[2, 0].set(True).at[4, 1].set(True)
  unroll, loop = _transform(_unroll), _transform(_step_loop)
  params = unroll.init(KEY, inputs, reset)
  assert jax.tree.structure(params) == jax.tree.structure(loop.init(KEY, inputs, reset))
  (out_u, state_u), (out_l, state_l) = (unroll.apply(params, inputs, reset),
                                        loop.apply(params, inputs, reset))
  assert out_u.shape == (t, b, 8)
  np.testing.assert_allclose(out_u, out_l, rtol=1e-5, atol=1e-5)
  for u, l in zip(jax.tree.leaves(state_u), jax.tree.leaves(state_l)):
    np.testing.assert_allclose(u, l, rtol=1e-5, atol=1e-5)


def test_lstm_reset_cuts_dependency_on_earlier_inputs():
  t, b, r = 5, 2, 3
  inputs = jax.random.normal(KEY, (t, b, 4))
  reset = jnp.zeros((t, b), bool).at[r, 0].set(True)  # Only env 0 starts an episode.
  net = _transform(_unroll)
  params = net.init(KEY, inputs, reset)
  # d(sum of env e's output at step r) / d(inputs): [B, T, B, F].
  jac = jax.jit(jax.jacrev(lambda x: net.apply(params, x, reset)[0][r].sum(-1)))(inputs)
  g0, g1 = jac[0], jac[1]
  np.testing.assert_array_equal(g0[:r], 0.0)        # Before the reset: no influence.
  assert np.all(np.abs(g0[r, 0]) > 0)               # The reset step's own input counts.
  assert np.all(np.abs(g1[:r, 1]).sum(-1) > 0)      # Env 1 was not reset.
  # The state at the reset step equals a fresh start from the reset step's input.
  fresh = net.apply(params, inputs[r:], reset[r:])[0]
  np.testing.assert_allclose(net.apply(params, inputs, reset)[0][r:, 0], fresh[:, 0],
                             rtol=1e-5, atol=1e-5)


def test_lstm_initial_state_shape():
  net = _transform(lambda: networks.LSTMCore(8).initial_state(3))
  state = net.apply(net.init(KEY))
  assert state.hidden.shape == (3, 8) and state.cell.shape == (3, 8)


def test_registry_lookup_by_name():
  for name in ["mlp_actor_critic", "mlp_shared_actor_critic", "atari_actor_critic"]:
    assert name in registry.networks
  assert registry.networks.get("MLP_Actor_Critic") is networks.mlp_actor_critic
  net = registry.build(registry.networks, {"name": "mlp_actor_critic", "hidden_sizes": (16,)},
                       key="network", spec=_spec((4,), 2))
  assert isinstance(net, hk.Transformed)


def test_unknown_torso_error_names_options():
  with pytest.raises(ValueError, match=r"Unknown torso .resnet.*impala, minatar, nature"):
    networks.atari_actor_critic(spec=_spec((4, 84, 84), 6, np.uint8), torso="resnet")
  with pytest.raises(ConfigError, match=r"impala, minatar, nature"):
    registry.build(registry.networks, {"name": "atari_actor_critic", "torso": "resnet"},
                   key="network", spec=_spec((4, 84, 84), 6, np.uint8))


def test_unknown_activation_error_names_options():
  with pytest.raises(ValueError, match=r"'sigmoid'.*relu, swish, tanh"):
    networks.mlp_actor_critic(spec=_spec((4,), 2), activation="sigmoid")


@pytest.mark.parametrize("name", ["mlp_actor_critic", "mlp_shared_actor_critic",
                                  "atari_actor_critic"])
def test_continuous_action_spec_is_rejected(name):
  spec = EnvSpec(observation=ArraySpec((4, 84, 84), np.uint8),
                 action=ArraySpec((2,), np.float32))
  with pytest.raises(ValueError, match="discrete action spec"):
    registry.networks.get(name)(spec=spec)


def test_atari_rejects_flat_observations():
  with pytest.raises(ValueError, match="rank 3"):
    networks.atari_actor_critic(spec=_spec((4,), 2))


@pytest.mark.parametrize("shape", [(2, 84, 84, 3), (2, 83, 81, 5), (1, 11, 11, 4), (2, 1, 1, 2),
                                   (2, 6, 7, 1)])
def test_max_pool_same_matches_haiku_max_pool_and_its_gradient(shape):
  from podracer.components.networks.torsos import max_pool_same
  x = jax.random.normal(jax.random.PRNGKey(0), shape)
  ours = lambda x: max_pool_same(x, window=3, stride=2)
  theirs = lambda x: hk.max_pool(x, window_shape=(1, 3, 3, 1), strides=(1, 2, 2, 1),
                                 padding="SAME")
  np.testing.assert_array_equal(ours(x), theirs(x))
  grad = lambda f: jax.grad(lambda x: jnp.sum(f(x) ** 2))(x)
  np.testing.assert_allclose(grad(ours), grad(theirs), rtol=1e-6)


# Continuous actions: the squashed Gaussian policy and the twin Q critic.


def _continuous_spec(low=-2.0, high=2.0, shape=(1,)):
  return EnvSpec(observation=ArraySpec((3,), np.float32),
                 action=ArraySpec(shape, np.float32, "action", low, high))


@pytest.mark.reverb_lane
def test_squashed_gaussian_actions_stay_within_bounds_with_the_change_of_variables_density():
  policy = networks.gaussian_policy(_continuous_spec(-2.0, 2.0), hidden_sizes=(16,))
  obs = jax.random.normal(KEY, (4096, 3)) * 3
  params = policy.init(KEY, obs[:1])
  action, log_prob = jax.jit(policy.sample)(params, obs, jax.random.PRNGKey(1))
  assert action.shape == (4096, 1) and log_prob.shape == (4096,)
  # float32 tanh reaches 1 for |u| > 9: the bounds themselves, with a finite log-prob.
  assert np.all(np.abs(action) <= 2.0) and np.abs(action).max() > 1.0
  assert np.all(np.isfinite(log_prob))
  # By hand: u = atanh(a / 2) ~ N(mean, std), and da = 2 (1 - tanh(u)^2) du.
  def density(a, mean, std):
    u = np.arctanh(a / 2)
    return np.exp(-0.5 * ((u - mean) / std) ** 2) / (
        std * np.sqrt(2 * np.pi) * 2 * (1 - np.tanh(u) ** 2))

  out = policy.apply(params, obs)
  mean, std = np.asarray(out.mean[:, 0], np.float64), np.exp(np.asarray(out.log_std[:, 0],
                                                                         np.float64))
  a = np.asarray(action[:, 0], np.float64)
  ok = np.abs(a) < 1.99  # float32 tanh saturates near the bounds; atanh cannot undo it
  np.testing.assert_allclose(log_prob[ok], np.log(density(a[ok], mean[ok], std[ok])),
                             rtol=1e-3, atol=1e-3)
  # That density integrates to one over the action range (trapezoid on a fine grid).
  grid = np.linspace(-2, 2, 200_001)[1:-1]
  values = density(grid, 0.3, 0.6)
  integral = np.sum((values[1:] + values[:-1]) / 2 * np.diff(grid))
  assert integral == pytest.approx(1.0, abs=1e-4)
  # The mode is the squashed mean; log_std stays within its configured range.
  np.testing.assert_allclose(policy.mode(params, obs)[:, 0], 2 * np.tanh(mean), rtol=1e-5)
  assert np.all(out.log_std >= -5.0) and np.all(out.log_std <= 2.0)


def test_squashed_gaussian_maps_to_asymmetric_bounds_and_is_reparameterised():
  low, high = (0.0, -1.0), (1.0, 3.0)
  policy = networks.gaussian_policy(_continuous_spec(low, high, (2,)), hidden_sizes=(8,))
  obs = jax.random.normal(KEY, (2048, 3))
  params = policy.init(KEY, obs[:1])
  action, log_prob = policy.sample(params, obs, jax.random.PRNGKey(2))
  assert np.all(action >= np.array(low)) and np.all(action <= np.array(high))
  # The same noise through the same network: gradients reach the mean's weights.
  grads = jax.grad(lambda p: jnp.sum(policy.sample(p, obs, jax.random.PRNGKey(2))[0]))(params)
  assert np.abs(grads["head/mean"]["w"]).sum() > 0
  assert np.abs(grads["head/log_std"]["w"]).sum() > 0
  # log-probabilities sum over both dimensions, each shifted by log(half width).
  out = policy.apply(params, obs)
  squashed = (np.asarray(action, np.float64) - np.array([0.5, 1.0])) / np.array([0.5, 2.0])
  ok = np.all(np.abs(squashed) < 0.995, axis=1)  # away from float32 tanh's saturation
  u, mean = np.arctanh(squashed[ok]), np.asarray(out.mean, np.float64)[ok]
  std = np.exp(np.asarray(out.log_std, np.float64))[ok]
  per_dim = (-0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
             - np.log(np.array([0.5, 2.0]) * (1 - np.tanh(u) ** 2)))
  np.testing.assert_allclose(log_prob[ok], per_dim.sum(1), rtol=1e-3, atol=1e-3)


def test_twin_q_heads_are_independent_critics_of_observation_and_action():
  critic = networks.twin_q(_continuous_spec(), hidden_sizes=(32, 32))
  obs, action = jax.random.normal(KEY, (5, 3)), jnp.linspace(-2, 2, 5)[:, None]
  params = critic.init(KEY, obs, action)
  q1, q2 = critic.apply(params, obs, action)
  assert q1.shape == q2.shape == (5,)
  assert not np.allclose(q1, q2)  # separately initialised
  assert {k.split("/")[0] for k in params} == {"q1_torso", "q1_value", "q2_torso", "q2_value"}
  # Q1 depends on Q1's parameters only, and on the action.
  grads = jax.grad(lambda p: jnp.sum(critic.apply(p, obs, action)[0]))(params)
  assert all(not np.any(grads[k]["w"]) for k in grads if k.startswith("q2"))
  q1_other, _ = critic.apply(params, obs, -action)
  assert not np.allclose(q1, q1_other)


@pytest.mark.parametrize("name", ["gaussian_policy", "twin_q"])
def test_continuous_networks_reject_discrete_or_unbounded_actions(name):
  with pytest.raises(ValueError, match="bounded continuous action spec"):
    registry.networks.get(name)(spec=_spec((3,), 2))
  with pytest.raises(ValueError, match="bounded continuous action spec"):
    registry.networks.get(name)(spec=_continuous_spec(None, None))
  with pytest.raises(ValueError, match="hidden_sizes"):
    registry.networks.get(name)(spec=_continuous_spec(), hidden_sizes=(0,))
  with pytest.raises(ConfigError, match="action spec"):
    registry.build(registry.networks, dict(name=name), key="actor_network",
                   spec=_spec((3,), 2))


def test_orthogonal_is_haikus_bit_for_bit_batched_or_not():
  """podracer's Orthogonal draws haiku's matrices exactly, alone and under vmap (where
  its QR maps over the batch instead of asking LAPACK for a batched one)."""
  Orthogonal = networks.Orthogonal  # pylint: disable=invalid-name
  for shape, scale in (((4, 64), np.sqrt(2)), ((64, 3), 0.01), ((3, 3, 4, 16), 1.0)):
    ours = hk.transform(lambda s=shape, c=scale: Orthogonal(c)(s, jnp.float32))
    theirs = hk.transform(lambda s=shape, c=scale: hk.initializers.Orthogonal(c)(s, jnp.float32))
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    for init in (lambda f: f.init(keys[0]), lambda f: jax.vmap(f.init)(keys),
                 lambda f: jax.vmap(jax.vmap(f.init))(keys.reshape(5, 1, -1))):
      np.testing.assert_array_equal(jax.tree.leaves(init(ours)), jax.tree.leaves(init(theirs)))


HANG = """
import os
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])  # XLA sizes its pool by it
import jax, jax.numpy as jnp
from podracer.components.networks.initializers import unbatched_qr
def init(key):  # four QRs the thunk runtime may run at once, each batched by the vmap
  return [unbatched_qr(jax.random.normal(k, (64, 64)))[0].sum()
          for k in jax.random.split(key, 4)]
for i in range(3):
  jax.device_get(jax.jit(jax.vmap(init))(jax.random.split(jax.random.PRNGKey(i), 16)))
print("finished")
"""


def test_a_vmapped_init_of_several_qrs_finishes_on_two_cpus_and_one_device():
  """The hang `Orthogonal` avoids, where it happens: one CPU device (as a user runs, not
  the suite's 8 virtual ones) and two CPUs (the child pins itself to two). There, four
  batched `jnp.linalg.qr`s hang the first call with every thread idle (jax 0.10.2, 16
  keys, measured); unbatched_qr's finish in seconds."""
  import os, subprocess, sys  # pylint: disable=import-outside-toplevel,multiple-imports
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  try:
    out = subprocess.run([sys.executable, "-c", HANG], env=env, capture_output=True,
                         text=True, timeout=90)
  except subprocess.TimeoutExpired:
    pytest.fail("a vmapped init of unbatched QRs did not finish in 90 s: it hangs")
  assert out.returncode == 0 and "finished" in out.stdout, out.stderr[-2000:]
