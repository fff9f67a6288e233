"""methods.flow_matching: path and loss, solvers, coarse-to-fine endpoints, determinism, subsets, metrics."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods import flow_matching as fm
from methods.common import hparams
from methods.flow_matching import metrics, samplers, scoring

X0 = np.sin(np.arange(12, dtype=np.float32) * 1.3).reshape(4, 3)
X1 = np.cos(np.arange(12, dtype=np.float32) * 0.7).reshape(4, 3)
T = np.array([0.0, 0.25, 0.6, 1.0], np.float32)
# Produced by Meta's flow_matching 1.0.10 (CondOTProbPath().sample(x_0=X0, x_1=X1, t=T), and
# ODESolver(velocity_model=v).sample(x_init=X0, step_size=0.1, method=..., time_grid=[0, 1]) with
# v(x, t) = -x + t, torchdiffeq 0.2.5); regenerate with the same calls when the package is installed.
META_XT = np.array([[0., 0.96355814, 0.5155015], [-0.642036, -0.8981466, -0.07277417],
                    [0.1052607, 0.23954704, 0.13420904], [0.9998586, 0.75390226, 0.15337405]], np.float32)
META_DXT = np.array([[1., -0.19871593, -0.34553432], [0.18291998, -0.058767557, -1.1515766],
                     [-1.4888043, -0.13258642, 1.6033921], [1.7618423, 0.3337352, -0.833398]], np.float32)
META_EULER = np.array([[0.34867844, 0.6846504, 0.5284227], [0.108869255, 0.040636815, 0.42368615],
                       [0.6968489, 0.45994133, 0.060033254], [0.08299116, 0.49518162, 0.6927446]], np.float32)
META_MIDPOINT = np.array([[0.36854097, 0.7236516, 0.5585244], [0.11507103, 0.04295168, 0.4478215],
                          [0.736545, 0.48614198, 0.06345307], [0.08771878, 0.52338976, 0.73220694]], np.float32)


def linear_field(x, t):
  return -x + t[:, None]


def exact_linear(x0, t=1.0):  # x' = -x + t  =>  x(t) = t - 1 + (x0 + 1) e^{-t}
  return t - 1 + (x0 + 1) * np.exp(-t)


def test_loss_is_zero_for_the_true_velocity():
  key = jax.random.key(0)
  x0, x1 = jax.random.normal(key, (2, 16, 4, 4, 2))
  t = jax.random.uniform(jax.random.fold_in(key, 1), (16,))
  xt, u = fm.core.path_sample(x0, x1, t)
  assert float(fm.core.fm_loss(x1 - x0, u)) == 0.0
  assert np.all(np.asarray(fm.core.per_sample_loss(x1 - x0, u)) == 0)
  assert float(fm.core.fm_loss(jnp.zeros_like(u), u)) > 0.5
  np.testing.assert_allclose(xt[t.argmin()], (x0 + t.min() * (x1 - x0))[t.argmin()], atol=1e-6)


def test_path_and_solvers_agree_with_meta_flow_matching():
  xt, u = fm.core.path_sample(jnp.asarray(X0), jnp.asarray(X1), jnp.asarray(T))
  np.testing.assert_allclose(xt, META_XT, atol=1e-6)
  np.testing.assert_allclose(u, META_DXT, atol=1e-6)
  for solver, ref in (("euler", META_EULER), ("midpoint", META_MIDPOINT)):
    out = samplers.sample(linear_field, jnp.asarray(X0), num_steps=10, solver=solver)
    np.testing.assert_allclose(out, ref, atol=1e-5)
  try:  # the live package, when installed (it needs torch)
    import torch  # pylint: disable=g-import-not-at-top
    from flow_matching.path import CondOTProbPath  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  rng = np.random.default_rng(0)
  a, b, t = rng.standard_normal((8, 5)), rng.standard_normal((8, 5)), rng.uniform(size=8)
  s = CondOTProbPath().sample(x_0=torch.tensor(a), x_1=torch.tensor(b), t=torch.tensor(t))
  xt, u = fm.core.path_sample(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), jnp.asarray(t, jnp.float32))
  np.testing.assert_allclose(xt, s.x_t.numpy(), atol=1e-5)
  np.testing.assert_allclose(u, s.dx_t.numpy(), atol=1e-5)


@pytest.mark.parametrize("solver,order", [("euler", 1), ("midpoint", 2), ("heun", 2)])
def test_solvers_converge_at_their_order(solver, order):
  x0 = jnp.asarray(X0, jnp.float32)
  errs = []
  for n in (8, 16, 32, 64):
    out = np.asarray(samplers.sample(linear_field, x0, num_steps=n, solver=solver), np.float64)
    errs.append(np.max(np.abs(out - exact_linear(X0.astype(np.float64)))))
  slopes = np.log2(np.asarray(errs[:-1]) / np.asarray(errs[1:]))
  np.testing.assert_allclose(slopes, order, atol=0.15)


def test_adaptive_diffrax_solver_matches_a_fine_heun_solve():
  x0 = jnp.asarray(X0)
  heun, heun_nfe = samplers.solve(linear_field, x0, fm.SamplerConfig(solver="heun", steps=1000))
  x1, nfe = jax.jit(lambda x: samplers.solve(linear_field, x, fm.SamplerConfig(solver="dopri5", rtol=1e-6,
                                                                             atol=1e-6)))(x0)
  np.testing.assert_allclose(x1, heun, atol=1e-5)
  np.testing.assert_allclose(x1, exact_linear(X0), atol=1e-5)
  assert int(heun_nfe) == 2000 and 7 <= int(nfe) < 200 and (int(nfe) - 1) % 6 == 0  # 1 + 6 per attempted step
  loose, loose_nfe = samplers.solve(linear_field, x0, fm.SamplerConfig(solver="dopri5", rtol=1e-3, atol=1e-3))
  assert int(loose_nfe) < int(nfe) and np.max(np.abs(np.asarray(loose) - np.asarray(heun))) < 1e-2
  # Coarse-to-fine with the adaptive solver: exact endpoints, NFE per stage.
  other = lambda x, t: 0.5 * linear_field(x, t)  # noqa: E731
  cfg = fm.SamplerConfig(solver="dopri5")
  only_large, n = samplers.coarse_to_fine_solve(other, linear_field, x0, cfg, t_split=0.0, split_nfe=True)
  np.testing.assert_array_equal(only_large, samplers.solve(linear_field, x0, cfg)[0])
  assert int(n[0]) == 0 and int(n[1]) > 0
  only_small, n = samplers.coarse_to_fine_solve(other, linear_field, x0, cfg, t_split=1.0, split_nfe=True)
  np.testing.assert_array_equal(only_small, samplers.solve(other, x0, cfg)[0])
  assert int(n[1]) == 0
  with pytest.raises(hparams.HparamError, match="solver: 'rk4' is not allowed"):
    fm.SamplerConfig(solver="rk4")


def test_time_restricted_training_draws_t_below_t_max(monkeypatch):
  net, flow = fm.NetConfig(width=8, depth=1, heads=2, patch=2), fm.FlowConfig(t_max=0.25)
  seen = []

  def spy(n, f):  # records the times the loss evaluates the velocity at (no network needed)
    del n, f
    return None, lambda p, x, t, y=None: (seen.append(t), jnp.zeros_like(x))[1]

  monkeypatch.setattr(fm.core, "make_velocity", spy)
  fm.core.loss_fn(None, jnp.ones((256, 4, 4, 2)), None, jax.random.key(1), net=net, flow=flow)
  fm.core.loss_fn(None, jnp.ones((256, 4, 4, 2)), None, jax.random.key(1), net=net, flow=fm.FlowConfig())
  t, t_full = np.asarray(seen[0]), np.asarray(seen[1])
  assert 0.2 < t.max() < 0.25 and t.min() >= 0 and t_full.max() > 0.9
  np.testing.assert_allclose(t, 0.25 * t_full, rtol=1e-6)  # the same draws, scaled


def _perturbed(net, seed, shape=(4, 4, 2)):
  flow = fm.FlowConfig()
  state = fm.core.init(jax.random.key(seed), shape, net=net, flow=flow)
  leaves, tree = jax.tree.flatten(state.params)
  keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
  params = jax.tree.unflatten(tree, [x + 0.2 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
  _, apply = fm.core.make_velocity(net, flow)
  return params, apply


def test_coarse_to_fine_endpoints_are_exact_and_seeds_reproduce():
  small_net, large_net = fm.NetConfig(width=8, depth=1, heads=2, patch=2), fm.NetConfig(width=32, depth=1, patch=2)
  ps, small = _perturbed(small_net, 0)
  pl, large = _perturbed(large_net, 1)
  x0 = jax.random.normal(jax.random.key(7), (6, 4, 4, 2))

  @functools.partial(jax.jit, static_argnames=("t_split",))
  def c2f(ps, pl, x, t_split):
    return samplers.coarse_to_fine(lambda y, t: small(ps, y, t), lambda y, t: large(pl, y, t), x, t_split=t_split,
                                   num_steps=6, solver="heun")

  @jax.jit
  def alone(ps, pl, x):
    return (samplers.sample(lambda y, t: large(pl, y, t), x, num_steps=6, solver="heun"),
            samplers.sample(lambda y, t: small(ps, y, t), x, num_steps=6, solver="heun"))

  only_large, only_small = alone(ps, pl, x0)
  np.testing.assert_array_equal(c2f(ps, pl, x0, 0.0), only_large)
  np.testing.assert_array_equal(c2f(ps, pl, x0, 1.0), only_small)
  mid = c2f(ps, pl, x0, 0.5)
  assert not np.array_equal(mid, only_large) and not np.array_equal(mid, only_small)
  # The same seeds give bit-identical weights and samples.
  ps2, _ = _perturbed(small_net, 0)
  pl2, _ = _perturbed(large_net, 1)
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(pl), jax.tree.leaves(pl2)))
  np.testing.assert_array_equal(c2f(ps2, pl2, jax.random.normal(jax.random.key(7), (6, 4, 4, 2)), 0.5), mid)
  assert samplers.small_steps(0.7, 60) == 42 and samplers.small_steps(0.3, 10) == 3
  assert samplers.small_steps(0.0, 60) == 0 and samplers.small_steps(1.0, 60) == 60
  with pytest.raises(ValueError, match="t_split"):
    samplers.small_steps(1.5, 10)


def test_training_reduces_the_loss_and_scores_have_shapes():
  net, flow = fm.NetConfig(width=16, depth=1, heads=2, patch=2), fm.FlowConfig(batch_size=64, learning_rate=3e-3)
  rng = np.random.default_rng(0)
  data = jnp.asarray((rng.standard_normal((64, 1, 1, 1)) * 0.3 + np.array([2.0, -2.0])[rng.integers(2, size=64)][
      :, None, None, None]) * np.ones((1, 4, 4, 2)), jnp.float32)
  labels = jnp.zeros(64, jnp.int32)
  state = fm.core.init(jax.random.key(0), (4, 4, 2), net=net, flow=flow)
  fn = jax.jit(functools.partial(fm.core.train_chunk, num_steps=120, net=net, flow=flow))
  state, losses = fn(state, data, labels, jnp.int32(64), jax.random.key(1))
  assert int(state.step) == 120 and losses.shape == (120,)
  assert float(losses[-20:].mean()) < 0.6 * float(losses[:5].mean())
  ls = fm.core.loss_scores(state.ema, data[:10], labels[:10], jax.random.key(2), net=net, flow=flow, num_times=2,
                           num_draws=2)
  gs = fm.core.grad_scores(state.ema, data[:10], labels[:10], jax.random.key(3), net=net, flow=flow, num_draws=1)
  assert ls.shape == gs.shape == (10,) and np.all(np.isfinite(ls)) and np.all(np.asarray(gs) > 0)
  np.testing.assert_allclose(float(ls.mean()), 1.0, rtol=1e-5)  # normalised by the per-t mean


def test_class_conditional_velocity_depends_on_the_label():
  net, flow = fm.NetConfig(width=16, depth=1, heads=2, patch=2), fm.FlowConfig(class_conditional=True)
  state = fm.core.init(jax.random.key(0), (4, 4, 2), net=net, flow=flow)
  assert "Embed_0" in state.params
  params = jax.tree.map(lambda x: x + 0.1, state.params)  # non-zero output layer
  _, apply = fm.core.make_velocity(net, flow)
  x, t = jnp.ones((3, 4, 4, 2)), jnp.full((3,), 0.5)
  v = apply(params, x, t, jnp.array([0, 1, 10]))  # 10 = the null label of label dropout
  assert not np.allclose(v[0], v[1]) and not np.allclose(v[0], v[2])
  loss = fm.core.loss_fn(params, x, jnp.array([0, 1, 2]), jax.random.key(1), net=net, flow=flow)
  assert np.isfinite(float(loss))


def test_subset_sizes_are_exact_and_balanced_clusters_equal():
  rng = np.random.default_rng(0)
  centers = rng.standard_normal((5, 8)) * 4
  sizes = np.array([200, 120, 80, 60, 40])
  feats = np.concatenate([c + rng.standard_normal((s, 8)) for c, s in zip(centers, sizes)])
  scores = rng.uniform(size=len(feats))
  n = len(feats)
  for criterion in scoring.CRITERIA:
    for frac in (0.5, 0.25, 0.33):
      size = scoring.subset_size(n, frac)
      idx = scoring.select(criterion, size, features=feats, scores=scores, seed=1, num_clusters=5)
      assert len(idx) == size == len(np.unique(idx)) and idx.min() >= 0 and idx.max() < n, criterion
  assign, _ = scoring.cosine_kmeans(feats, 5, iters=30, seed=0)
  counts = np.bincount(assign, minlength=5)
  q = scoring.balanced_quotas(counts, 150)
  assert np.all(q == 30) and q.sum() == 150
  q = scoring.balanced_quotas(np.array([200, 120, 80, 60, 10]), 250)  # shortfall of the 10-row cluster
  assert q.sum() == 250 and q[4] == 10 and np.ptp(q[:4]) <= 1
  q = scoring.proportional_quotas(np.array([200, 120, 80, 60, 40]), 250)
  assert q.sum() == 250 and list(q) == [100, 60, 40, 30, 20]
  top = scoring.select("loss", 10, scores=scores, keep="high")
  assert set(top) == set(np.argsort(-scores)[:10])
  with pytest.raises(ValueError, match="fraction"):
    scoring.subset_size(100, 1.5)


def test_metrics_order_and_baselines():
  rng = np.random.default_rng(0)
  a = rng.standard_normal((300, 16))
  close = a + 0.1 * rng.standard_normal(a.shape)
  s = metrics.stability(a, close, a, close, np.clip(a[:, :4] * 0.1 + 0.5, 0, 1), np.clip(close[:, :4] * 0.1 + 0.5, 0, 1))
  assert s["cosine"] > 0.99 > 0.2 > abs(s["cosine_shuffled"])
  assert s["nn_match"] == 1.0 and s["nn_match_shuffled"] < 0.02
  assert s["latent_rel_l2"] < 0.2 < 1.0 < s["latent_rel_l2_shuffled"]
  assert s["psnr"] > s["psnr_shuffled"] + 10
  p = metrics.derangement(50, 3)
  assert not np.any(p == np.arange(50)) and sorted(p) == list(range(50))
  b = rng.standard_normal((300, 16))
  shifted = rng.standard_normal((300, 16)) + 1.0
  assert metrics.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
  assert metrics.frechet_distance(a, b) < metrics.frechet_distance(a, shifted)
  assert abs(metrics.kid(a, b)) < metrics.kid(a, shifted)
