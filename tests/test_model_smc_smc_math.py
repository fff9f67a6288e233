"""Shared SMC maths: weights, ESS, systematic resampling, adaptive tempering."""

import math

from blackjax.smc import resampling as bj_resampling
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods.common import smc_math


def test_systematic_resampling_is_unbiased():
  """E[count_i] = M W_i: mean counts over many keys within 4 standard errors."""
  n, m, reps = 12, 12, 20_000
  w = jax.random.dirichlet(jax.random.key(0), jnp.ones(n) * 0.7)
  keys = jax.random.split(jax.random.key(1), reps)

  @jax.jit
  def counts(keys):
    idx = jax.vmap(lambda k: smc_math.systematic_resample(k, w, m))(keys)
    return jax.vmap(lambda i: jnp.bincount(i, length=n))(idx)

  c = np.asarray(counts(keys), np.float64)
  mean, se = c.mean(0), c.std(0, ddof=1) / math.sqrt(reps)
  expected = m * np.asarray(w, np.float64)
  assert np.all(np.abs(mean - expected) <= 4 * se + 1e-6), (mean, expected, se)
  # Systematic resampling draws floor(M W_i) or ceil(M W_i) copies, never more.
  assert np.all(c >= np.floor(expected)[None] - 1e-6) and np.all(c <= np.ceil(expected)[None] + 1e-6)


def test_systematic_resampling_matches_blackjax():
  # Two differently compiled programs: a position within rounding of a cumulative-sum
  # boundary may land in the adjacent bin on one side; nothing else may differ.
  w = jax.random.dirichlet(jax.random.key(3), jnp.ones(20))
  same = 0
  for i in range(10):
    k = jax.random.key(i)
    ours = np.asarray(smc_math.systematic_resample(k, w, 20))
    theirs = np.asarray(bj_resampling.systematic(k, w, 20))
    assert np.all(np.abs(ours - theirs) <= 1), (ours, theirs)
    same += int(np.sum(ours == theirs))
  assert same >= 198, same  # at most two boundary cases in 200 draws


def test_ess_uniform_and_degenerate():
  n = 37
  chex.assert_trees_all_close(smc_math.ess(jnp.zeros(n)), jnp.float32(n), rtol=1e-5)
  chex.assert_trees_all_close(smc_math.ess(jnp.full((n,), -3.7)), jnp.float32(n), rtol=1e-5)
  degenerate = jnp.full((n,), -jnp.inf).at[5].set(2.0)
  chex.assert_trees_all_close(smc_math.ess(degenerate), jnp.float32(1.0))
  chex.assert_trees_all_close(smc_math.ess(jnp.zeros(n).at[0].set(1e4)), jnp.float32(1.0))
  # All particles failed: uniform weights (as in the reference implementation).
  chex.assert_trees_all_close(smc_math.normalize(jnp.full((4,), -jnp.inf)), jnp.full((4,), 0.25))


def test_weights_are_invariant_to_a_constant_shift():
  lw = jax.random.normal(jax.random.key(0), (50,)) * 3
  lw = lw.at[3].set(-jnp.inf)
  incr = jax.random.normal(jax.random.key(1), (50,))
  for c in (-500.0, 0.0, 123.0):
    # float32: adding c rounds each log-weight by up to |c| * 6e-8.
    tol = 4 * max(abs(c), 10.0) * 6e-8
    chex.assert_trees_all_close(smc_math.normalize(lw + c), smc_math.normalize(lw), rtol=tol, atol=1e-7)
    chex.assert_trees_all_close(smc_math.ess(lw + c), smc_math.ess(lw), rtol=tol)
    chex.assert_trees_all_close(smc_math.log_mean_weight(lw + c, incr), smc_math.log_mean_weight(lw, incr), atol=tol)
  w = np.exp(np.asarray(lw, np.float64) - np.max(np.asarray(lw)))
  w /= w.sum()
  direct = math.log(np.sum(w * np.exp(np.asarray(incr, np.float64))))
  np.testing.assert_allclose(float(smc_math.log_mean_weight(lw, incr)), direct, atol=1e-5)


def test_next_temperature_hits_the_target_ess():
  n = 200
  log_lik = jax.random.normal(jax.random.key(2), (n,)) * 30
  log_lik = log_lik.at[:10].set(-jnp.inf)
  lw = jnp.zeros(n)
  beta = smc_math.next_temperature(lw, log_lik, 0.0, target_ess_fraction=0.5)
  assert 0 < float(beta) < 1
  ess = smc_math.ess(lw + smc_math.tempered_increments(log_lik, beta))
  assert 0.49 * n <= float(ess) <= 0.5 * n + 1e-3
  # A flat likelihood goes straight to beta = 1.
  assert float(smc_math.next_temperature(lw, jnp.full((n,), -5.0), 0.3)) == 1.0
  # Jittable without retracing.
  f = jax.jit(chex.assert_max_traces(lambda a, b, c: smc_math.next_temperature(a, b, c), n=1))
  f(lw, log_lik, 0.1)
  f(lw, log_lik * 2, 0.2)


def test_tempered_increments_handle_failed_particles():
  ll = jnp.array([-1.0, -jnp.inf, 3.0])
  chex.assert_trees_all_close(smc_math.tempered_increments(ll, 0.0), jnp.zeros(3))
  out = smc_math.tempered_increments(ll, 0.5)
  assert np.isneginf(float(out[1])) and float(out[2]) == pytest.approx(1.5)
