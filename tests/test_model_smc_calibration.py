"""ModelSMC parameter intervals: Laplace and MALA, their calibration on simulated data."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from launch.configs.model_smc_calibration import RunConfig
from launch.experiments.model_smc import calibration as cal
from methods.model_smc import fit as fit_lib
from methods.model_smc import posterior as post

NUM_DATASETS = 48


@pytest.fixture(scope="module")
def study():
  """The damped oscillator's true structure fitted to 48 simulated datasets; both methods' intervals."""
  rc = RunConfig(systems=("damped_oscillator",), num_datasets=NUM_DATASETS, model_preset="smoke")
  hp = post.PosteriorConfig(num_chains=2, num_warmup=150, num_samples=300)
  su = cal.setup_system("damped_oscillator", rc, seed=0)
  fn = post.make_batch_intervals(su.model, su.fit_config, hp, rc.levels)
  fits = jax.tree.map(np.asarray, fit_lib.make_batch_fit(su.model, su.fit_config)(su.signs, su.fit_keys, su.data))
  out = jax.tree.map(np.asarray, fn(su.mala_keys, su.signs, su.data, fits))
  return rc, hp, su, fn, fits, out


def test_mala_reproduces_a_gaussian_interval():
  """On a correlated Gaussian with a mis-scaled preconditioner, MALA's 90% interval holds 90% of the mass."""
  d = 3
  a = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.1, -0.5, 0.4]])
  cov = jnp.asarray(a @ a.T, jnp.float32)
  prec = jnp.linalg.inv(cov)
  mu = jnp.asarray([0.5, -1.0, 2.0], jnp.float32)
  hp = post.PosteriorConfig(num_chains=4, num_warmup=300, num_samples=2000)

  def logdensity(x):
    r = x - mu
    return -0.5 * r @ prec @ r

  # Start away from the mode with a preconditioner twice too narrow: MALA must correct both.
  chains = post.mala_sample(logdensity, hp, jax.random.key(0), mu + 0.3, 4.0 * prec, jnp.ones((d,)))
  chex.assert_shape(chains.phi, (4, 2000, d))
  chex.assert_shape(chains.accept, (4,))
  draws = np.asarray(chains.phi).reshape(-1, d)
  sd = np.sqrt(np.diag(np.asarray(cov)))
  z90 = 1.6448536269514722
  lo, hi = np.asarray(mu) - z90 * sd, np.asarray(mu) + z90 * sd
  inside = ((draws >= lo) & (draws <= hi)).mean(axis=0)
  ess = draws.shape[0] / 10  # conservative: MALA draws are autocorrelated
  assert np.all(np.abs(inside - 0.9) < 4 * math.sqrt(0.9 * 0.1 / ess)), inside
  assert 0.3 < float(np.median(chains.accept)) < 0.9
  assert float(chains.rhat) < 1.05
  # The sample quantile interval's ends match the exact ones (a 4-SE band of a 5% quantile: ~0.25 sd).
  q_lo, q_hi = np.quantile(draws, [0.05, 0.95], axis=0)
  assert np.all(np.abs(q_lo - lo) < 0.25 * sd) and np.all(np.abs(q_hi - hi) < 0.25 * sd)


def test_recommended_method_is_calibrated_at_90(study):
  """MALA's 90% intervals of the rates cover the truth within 4 SE (SE over datasets)."""
  rc, _, su, _, fits, out = study
  row = cal.summarize(su, fits, out, rc)
  for level in ("0.5", "0.9"):
    stats = row["methods"]["mala"]["rates"][level]
    assert stats["num_datasets"] == NUM_DATASETS
    assert stats["calibrated"], (level, stats)
  assert row["fits"]["failed"] == 0
  assert np.mean(out.rhat < 1.1) > 0.75  # most chains mixed (R-hat per dataset)
  # The summary and the README table render.
  results = {"levels": list(rc.levels), "num_se": rc.num_se, "model_preset": rc.model_preset,
             "posterior": {"num_chains": 2, "num_samples": 300, "num_warmup": 150}, "systems": [row]}
  assert "damped_oscillator" in cal.format_table(results)
  assert "| damped_oscillator | mala | rates" in cal.markdown_table(results)


def test_interval_sanity_and_shapes(study):
  rc, hp, su, _, fits, out = study
  b, d, levels = NUM_DATASETS, su.model.dim, len(rc.levels)
  for iv in (out.laplace, out.mala):
    chex.assert_shape([iv.lo, iv.hi], (b, levels, d))
    chex.assert_shape(iv.center, (b, d))
    chex.assert_shape(iv.ok, (b,))
    assert iv.ok.all()
  chex.assert_shape([out.accept, out.step_size], (b, hp.num_chains))
  chex.assert_shape(out.rhat, (b,))
  active = np.asarray(su.model.layout.active_mask(su.signs[0])) > 0
  mapped = np.asarray(post.natural_scale(su.model, jnp.asarray(fits.phi)))
  for iv in (out.laplace, out.mala):
    lo, hi = iv.lo[..., active], iv.hi[..., active]
    assert np.all(lo < hi)
    assert np.all(lo[:, 1] <= lo[:, 0]) and np.all(hi[:, 0] <= hi[:, 1])  # 50% inside 90%
  # The MAP lies inside Laplace's intervals (its centre) and inside MALA's 90% interval.
  m = mapped[:, active]
  assert np.all((out.laplace.lo[:, 0][:, active] < m) & (m < out.laplace.hi[:, 0][:, active]))
  inside90 = (out.mala.lo[:, 1][:, active] <= m) & (m <= out.mala.hi[:, 1][:, active])
  assert inside90.mean() > 0.95
  # One structure's Laplace intervals (the experiment's per-structure entry point) match the batch.
  one = post.make_intervals(su.model, su.fit_config, hp, rc.levels, "laplace")(
      su.mala_keys[0], su.signs[0], jax.tree.map(lambda x: x[0], su.data), jnp.asarray(fits.phi[0]),
      jnp.asarray(fits.neg_hessian[0]))
  np.testing.assert_allclose(np.asarray(one.hi), out.laplace.hi[0], rtol=1e-5)
  with pytest.raises(ValueError, match="levels"):
    post.laplace_intervals(su.model, jnp.asarray(fits.phi[0]), jnp.asarray(fits.neg_hessian[0]),
                           jnp.ones((d,)), (0.9, 1.0))


def test_intervals_are_deterministic(study):
  _, _, su, fn, fits, out = study
  again = jax.tree.map(np.asarray, fn(su.mala_keys, su.signs, su.data, fits))
  np.testing.assert_array_equal(again.mala.lo, out.mala.lo)
  np.testing.assert_array_equal(again.laplace.hi, out.laplace.hi)
  np.testing.assert_array_equal(again.rhat, out.rhat)


def test_laplace_interval_is_the_gaussian_one():
  """Laplace intervals: phi* +- z sd with sd^2 = diag H^-1, exp-mapped for log coordinates."""
  rc = RunConfig(systems=("damped_oscillator",), num_datasets=2, model_preset="smoke")
  su = cal.setup_system("damped_oscillator", rc, seed=1)
  d = su.model.dim
  phi = jnp.linspace(-1.0, 1.0, d).astype(jnp.float32)
  h = jnp.diag(jnp.linspace(1.0, 4.0, d)).astype(jnp.float32)
  iv = post.laplace_intervals(su.model, phi, h, jnp.ones((d,)), (0.9,))
  sd = 1.0 / np.sqrt(np.linspace(1.0, 4.0, d))
  is_log = np.ones(d, bool)
  is_log[su.model.layout.init_index] = su.model.spec.init_scale != "real"
  want = np.asarray(phi) + 1.6448536269514722 * sd
  np.testing.assert_allclose(iv.hi[0], np.where(is_log, np.exp(want), want), rtol=1e-5)
  bad = post.laplace_intervals(su.model, phi, h.at[0, 0].set(-1.0), jnp.ones((d,)), (0.9,))
  assert not bool(bad.ok) and np.all(np.isnan(bad.lo))


def test_batched_intervals_decompose_one_matrix_per_call():
  """The calibration study's batch (many datasets' Hessians under ``vmap``) calls LAPACK one matrix at a time.

  A batched ``eigh`` splits its batch over XLA's intra-op pool and waits for
  the chunks; with every pool thread inside one such wait the study stopped
  with idle cores (2 cores, toggle switch, 32 datasets per call). See
  ``methods.common.linalg``.
  """
  rc = RunConfig(systems=("damped_oscillator",), num_datasets=2, model_preset="smoke")
  su = cal.setup_system("damped_oscillator", rc, seed=1)
  d = su.model.dim
  phi = jnp.zeros((32, d), jnp.float32)
  h = jnp.broadcast_to(jnp.eye(d, dtype=jnp.float32), (32, d, d))
  mask = jnp.ones((32, d), jnp.float32)
  laplace = jax.vmap(lambda p, m, k: post.laplace_intervals(su.model, p, m, k, rc.levels))
  whitening = jax.vmap(lambda m, k: post._whitening(m, k, 1e-6))
  for hlo in (jax.jit(laplace).lower(phi, h, mask).as_text(), jax.jit(whitening).lower(h, mask).as_text()):
    calls = [line for line in hlo.splitlines() if "syevd" in line and "custom_call" in line]
    assert calls and all(f"tensor<{d}x{d}xf32>" in c and "tensor<32x" not in c for c in calls), calls
