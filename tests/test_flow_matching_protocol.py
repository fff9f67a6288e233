"""Evaluation protocol of latent flow matching: FID / KID estimators, intervals, t_split choice, costs, splits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import linalg

from datasets.images import splits
from methods import flow_matching as fm
from methods.flow_matching import autoencoder, costs, evaluation, feature_net, metrics


def _random_cov(rng, d):
  a = rng.standard_normal((d, d))
  return a @ a.T / d + 0.2 * np.eye(d)


def test_frechet_closed_form():
  rng = np.random.default_rng(0)
  mu_a, mu_b = rng.standard_normal(4), rng.standard_normal(4)
  va, vb = rng.uniform(0.5, 2.0, 4), rng.uniform(0.5, 2.0, 4)
  # Commuting (diagonal) covariances: sum (sqrt(a) - sqrt(b))^2 + ||mu_a - mu_b||^2.
  want = np.sum((mu_a - mu_b) ** 2) + np.sum((np.sqrt(va) - np.sqrt(vb)) ** 2)
  assert evaluation.frechet_gaussians(mu_a, np.diag(va), mu_b, np.diag(vb)) == pytest.approx(want, rel=1e-10)
  # General covariances against SciPy's matrix square root.
  sa, sb = _random_cov(rng, 4), _random_cov(rng, 4)
  cross = np.real(linalg.sqrtm(linalg.sqrtm(sa) @ sb @ linalg.sqrtm(sa)))
  want = np.sum((mu_a - mu_b) ** 2) + np.trace(sa + sb - 2 * cross)
  assert evaluation.frechet_gaussians(mu_a, sa, mu_b, sb) == pytest.approx(want, rel=1e-8)
  assert evaluation.frechet_gaussians(mu_a, sa, mu_a, sa) == pytest.approx(0.0, abs=1e-9)


def test_fid_of_gaussian_samples_matches_the_closed_form():
  """Mean over 20 seeds of FID(n = 4000 per set) within 4 SE of the population value plus its O(1/n) bias."""
  rng = np.random.default_rng(1)
  d, n, seeds = 3, 4000, 20
  mu_a, mu_b = np.zeros(d), np.array([0.6, -0.3, 0.2])
  sa, sb = _random_cov(rng, d), _random_cov(rng, d)
  la, lb = np.linalg.cholesky(sa), np.linalg.cholesky(sb)
  population = evaluation.frechet_gaussians(mu_a, sa, mu_b, sb)
  est = np.array([evaluation.fid(mu_a + rng.standard_normal((n, d)) @ la.T, mu_b + rng.standard_normal((n, d)) @ lb.T)
                  for _ in range(seeds)])
  se = est.std(ddof=1) / np.sqrt(seeds)
  # E||mean_a - mean_b||^2 exceeds ||mu_a - mu_b||^2 by (tr S_a + tr S_b) / n; the covariance term's bias is of
  # the same order: allow d times that.
  bias = d * (np.trace(sa) + np.trace(sb)) / n
  assert abs(est.mean() - population) < 4 * se + bias, (est.mean(), population, se, bias)
  # The estimator can fail this check: a FID without the cross term misses by far.
  assert abs(est.mean() - population) + 1.0 < abs(np.sum(mu_b ** 2) + np.trace(sa + sb) - population)


def _mmd2_population(a_support, b_support):
  """MMD^2 of the uniform distributions on two finite supports (draws with replacement), cubic kernel."""
  d = a_support.shape[1]
  k = lambda x, y: (x @ y.T / d + 1.0) ** 3  # noqa: E731
  return k(a_support, a_support).mean() + k(b_support, b_support).mean() - 2 * k(a_support, b_support).mean()


def test_kid_is_unbiased():
  """Mean of 400 unbiased MMD^2 estimates (10 + 10 draws each) within 4 SE of the population MMD^2."""
  rng = np.random.default_rng(2)
  a_support = rng.standard_normal((6, 2))
  b_support = rng.standard_normal((6, 2)) * 1.3 + 0.4
  population = _mmd2_population(a_support, b_support)
  draws, m = 400, 10
  est, biased = [], []
  for _ in range(draws):
    a = a_support[rng.integers(0, 6, m)]
    b = b_support[rng.integers(0, 6, m)]
    est.append(evaluation.kid(a, b, subset=m, subsets=1, seed=0))
    biased.append(_mmd2_population(a, b))  # the plug-in (V-statistic) estimate
  est, biased = np.asarray(est), np.asarray(biased)
  se = est.std(ddof=1) / np.sqrt(draws)
  assert abs(est.mean() - population) < 4 * se, (est.mean(), population, se)
  # The plug-in estimate is biased upwards by far more than the test's tolerance at this sample size.
  assert biased.mean() - population > 4 * biased.std(ddof=1) / np.sqrt(draws)
  # Subsets: each is unbiased, and the mean of subsets of the full sets equals the full estimate at subset = N.
  a, b = rng.standard_normal((50, 3)), rng.standard_normal((40, 3))
  assert evaluation.kid(a, b, subset=100, subsets=3) == pytest.approx(metrics.kid(a, b), rel=1e-12)
  with pytest.raises(ValueError, match="same F|one F"):
    evaluation.kid(a, b[:, :2])


def test_paired_difference_intervals_cover_at_their_level():
  """95% t-intervals over 3 paired seeds cover the true difference in 95% of 4000 synthetic studies (+-3 SE)."""
  rng = np.random.default_rng(3)
  reps, seeds, true_diff = 4000, 3, 0.5
  covered, unpaired_width, paired_width = 0, [], []
  for _ in range(reps):
    shared = rng.standard_normal(seeds) * 5.0  # what seed s shares between the models (autoencoder, noises)
    a = 10.0 + true_diff + shared + rng.standard_normal(seeds) * 0.3
    b = 10.0 + shared + rng.standard_normal(seeds) * 0.3
    iv = evaluation.paired_difference(a, b, level=0.95)
    covered += iv.lo <= true_diff <= iv.hi
    paired_width.append(iv.hi - iv.lo)
    unpaired_width.append(evaluation.mean_interval(a).hi - evaluation.mean_interval(a).lo)
  coverage = covered / reps
  assert abs(coverage - 0.95) < 3 * np.sqrt(0.95 * 0.05 / reps), coverage
  # Pairing removes the shared seed effect: the difference's interval is much narrower than one model's.
  assert np.median(paired_width) < 0.2 * np.median(unpaired_width)
  one = evaluation.mean_interval([2.5])
  assert one.mean == 2.5 and one.n == 1 and np.isinf(one.hi) and np.isnan(one.se)
  with pytest.raises(ValueError, match="paired seeds differ"):
    evaluation.paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])
  with pytest.raises(ValueError, match="non-finite entries at seeds \\[1\\]"):
    evaluation.mean_interval([1.0, np.nan])


def test_t_split_is_the_largest_passing_prefix():
  ts = [0.0, 0.2, 0.4, 0.6, 0.8]
  fid_ref, kid_ref = np.array([10.0, 12.0, 11.0]), np.array([0.010, 0.012, 0.011])
  ratio_f = np.array([1.0, 1.02, 1.08, 1.3, 1.05])  # 0.8 passes again, after 0.6 failed
  ratio_k = np.array([1.0, 1.05, 1.09, 1.2, 1.0])
  fid_val = fid_ref[:, None] * ratio_f[None]
  kid_val = kid_ref[:, None] * ratio_k[None]
  choice = evaluation.choose_t_split(ts, fid_val, kid_val, fid_ref, kid_ref, fid_margin=0.1, kid_margin=0.1)
  assert choice.t_split == 0.4 and choice.index == 2
  np.testing.assert_array_equal(choice.passes, [True, True, True, False, True])
  np.testing.assert_allclose(choice.fid_ratio, ratio_f)
  tight = evaluation.choose_t_split(ts, fid_val, kid_val, fid_ref, kid_ref, fid_margin=0.05, kid_margin=0.1)
  assert tight.t_split == 0.2  # 0.4's FID is 8% above the reference's
  with pytest.raises(ValueError, match="strictly increasing"):
    evaluation.choose_t_split([0.0, 0.5, 0.5], fid_val[:, :3], kid_val[:, :3], fid_ref, kid_ref, fid_margin=0.1,
                              kid_margin=0.1)
  with pytest.raises(ValueError, match="3 seeds"):
    evaluation.choose_t_split(ts, fid_val, kid_val, fid_ref[:2], kid_ref, fid_margin=0.1, kid_margin=0.1)


def test_steps_to_quality_and_conditional_accuracy():
  steps = [100, 200, 300, 400, 500]
  assert evaluation.steps_to_quality(steps, [50.0, 12.0, 10.5, 10.8, 10.0], margin=0.1) == 300
  assert evaluation.steps_to_quality(steps, [50.0, 10.9, 12.0, 10.5, 10.0], margin=0.1) == 400
  assert evaluation.steps_to_quality(steps, [[50.0, 10.0, 10.0, 10.0, 10.0]] * 2, margin=0.0) == 200
  logits = np.eye(4)[[0, 1, 2, 2]]
  assert evaluation.conditional_accuracy(logits, [0, 1, 2, 3]) == 0.75
  np.testing.assert_array_equal(np.bincount(evaluation.balanced_labels(25, 10)), [3] * 5 + [2] * 5)


def test_noise_sets_are_paired_and_separate():
  a = evaluation.noise_sets(jax.random.key(0), (7, 7, 4), 8)
  b = evaluation.noise_sets(jax.random.key(0), (7, 7, 4), 8)
  assert a.val.shape == a.test.shape == (8, 7, 7, 4)
  np.testing.assert_array_equal(a.val, b.val)
  assert not np.allclose(a.val, a.test)


def test_sample_quality_decodes_embeds_and_scores():
  ae_hp, f_hp = fm.LatentAEConfig(channels=4, latent_channels=4), fm.FeatureNetConfig(channels=4, features=8)
  ae = autoencoder.init(jax.random.key(0), (28, 28, 1), hp=ae_hp)
  feat = feature_net.init(jax.random.key(1), (28, 28, 1), hp=f_hp)
  latents = jax.random.normal(jax.random.key(2), (30, 7, 7, 4))
  real = np.random.default_rng(0).standard_normal((40, 8))
  q = evaluation.sample_quality(latents, real, scale=2.0, ae_params=ae.params, ae_hp=ae_hp, feat_params=feat.params,
                                feat_hp=f_hp, protocol=fm.ProtocolConfig(kid_subset=20, kid_subsets=2))
  assert q.features.shape == (30, 8) and q.logits.shape == (30, 10)
  images = autoencoder.decode(ae.params, latents / 2.0, hp=ae_hp, image_channels=1)
  np.testing.assert_allclose(q.features, feature_net.embed(feat.params, images, hp=f_hp)[1], rtol=1e-5, atol=1e-6)
  assert q.fid == pytest.approx(evaluation.fid(real, q.features))
  unit = 1 / np.sqrt(np.mean(real**2))
  assert q.kid == pytest.approx(evaluation.kid(real, q.features, subset=20, subsets=2, feature_scale=unit))


def test_kid_of_all_zero_real_features_is_an_error_not_a_division_by_zero():
  ae_hp, f_hp = fm.LatentAEConfig(channels=4, latent_channels=4), fm.FeatureNetConfig(channels=4, features=8)
  ae = autoencoder.init(jax.random.key(0), (28, 28, 1), hp=ae_hp)
  feat = feature_net.init(jax.random.key(1), (28, 28, 1), hp=f_hp)
  latents = jax.random.normal(jax.random.key(2), (30, 7, 7, 4))
  with pytest.raises(ValueError, match=r"KID has no feature unit: all 320 entries of the real features are 0"):
    evaluation.sample_quality(latents, np.zeros((40, 8)), scale=2.0, ae_params=ae.params, ae_hp=ae_hp,
                              feat_params=feat.params, feat_hp=f_hp, protocol=fm.ProtocolConfig(kid_subset=20))
  real = np.random.default_rng(0).standard_normal((40, 8))
  assert evaluation.kid_unit(real) == 1.0 / evaluation.feature_rms(real)  # the same float as before


def test_flop_counts_agree_with_xla():
  """Analytic counts (matrix products only) are within 20% below XLA's, which adds elementwise work."""
  net = fm.NetConfig(width=32, depth=2, heads=4, patch=1)
  flow = fm.FlowConfig()
  lat = (7, 7, 4)
  state = fm.core.init(jax.random.key(0), lat, net=net, flow=flow)
  _, apply = fm.core.make_velocity(net, flow)
  x = jnp.zeros((8,) + lat)
  xla = costs.xla_flops(lambda p, x: apply(p, x, jnp.zeros(8)), state.params, x) / 8
  ours = costs.dit_flops(net, lat)
  assert 0.8 * xla <= ours <= 1.02 * xla, (ours, xla)
  ae_hp = fm.LatentAEConfig(channels=8, latent_channels=4)
  ae = autoencoder.init(jax.random.key(0), (28, 28, 1), hp=ae_hp)
  enc, dec = costs.autoencoder_flops(ae_hp, (28, 28, 1))
  img = jnp.zeros((8, 28, 28, 1))
  xla_enc = costs.xla_flops(lambda p, x: autoencoder.encode(p, x, hp=ae_hp), ae.params, img) / 8
  xla_dec = costs.xla_flops(lambda p, z: autoencoder.decode(p, z, hp=ae_hp, image_channels=1), ae.params,
                            jnp.zeros((8,) + lat)) / 8
  assert 0.8 * xla_enc <= enc <= 1.02 * xla_enc, (enc, xla_enc)
  assert 0.8 * xla_dec <= dec <= 1.02 * xla_dec, (dec, xla_dec)
  fhp = fm.FeatureNetConfig(channels=8, features=32)
  fstate = feature_net.init(jax.random.key(0), (28, 28, 1), hp=fhp)
  xla_f = costs.xla_flops(lambda p, x: feature_net.embed(p, x, hp=fhp), fstate.params, img) / 8
  assert 0.8 * xla_f <= costs.feature_net_flops(fhp, (28, 28, 1)) <= 1.02 * xla_f
  assert costs.param_count(state.params) == sum(np.size(v) for v in jax.tree.leaves(state.params))


def test_coarse_to_fine_cost_model():
  at0 = costs.coarse_to_fine_cost(0.0, num_steps=60, solver="euler", small_flops=1.0, large_flops=8.0)
  assert at0.speedup == 1.0 and at0.small_forwards == 0 and at0.large_forwards == 60
  at1 = costs.coarse_to_fine_cost(1.0, num_steps=60, solver="euler", small_flops=1.0, large_flops=8.0)
  assert at1.speedup == pytest.approx(8.0)
  mid = costs.coarse_to_fine_cost(0.7, num_steps=60, solver="heun", small_flops=1.0, large_flops=8.0, guided=True)
  assert (mid.small_forwards, mid.large_forwards) == (42 * 4, 18 * 4)
  assert mid.speedup == pytest.approx(60 * 8 / (42 + 18 * 8))
  assert costs.training_flops(10.0, steps=100, batch_size=32) == 3 * 10.0 * 32 * 100


def test_stratified_protocol_split():
  labels = np.repeat(np.arange(10), 500)  # mnist5k: 500 per class
  parts = splits.stratified_split(labels)
  sizes = {k: v.size for k, v in parts.items()}
  assert sizes == {"generative": 3000, "feature": 1500, "feature_test": 500}
  everything = np.concatenate(list(parts.values()))
  np.testing.assert_array_equal(np.sort(everything), np.arange(5000))  # disjoint and covering
  for idx in parts.values():
    counts = np.bincount(labels[idx], minlength=10)
    assert counts.max() == counts.min()
  again = splits.stratified_split(labels)
  assert all(np.array_equal(parts[k], again[k]) for k in parts)
  with pytest.raises(ValueError, match="sum to 1"):
    splits.stratified_split(labels, (("a", 0.5), ("b", 0.4)))
