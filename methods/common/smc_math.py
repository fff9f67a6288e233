"""Weights, effective sample size, resampling and adaptive tempering for SMC.

Pure ``jnp`` functions (jittable, vmappable) that follow the conventions of
blackjax's ``smc`` package: log-weights are unnormalised; a log-weight of
``-inf`` is a particle with zero weight. References: Chopin and Papaspiliopoulos
(2020), *An Introduction to Sequential Monte Carlo*, ch. 9 (resampling) and
17 (tempering); Naesseth, Lindsten and Schon (2019), *Elements of Sequential
Monte Carlo*, sec. 2.2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from methods.common import bisection


def normalize(log_weights: jax.Array) -> jax.Array:
  """``[N]`` normalised weights ``W_i = w_i / sum_j w_j`` from ``[N]`` log-weights.

  Invariant to adding a constant to every log-weight. If every log-weight is
  ``-inf`` (all particles failed) the weights are uniform, as in the
  reference implementation of ModelSMC.
  """
  finite = jnp.isfinite(log_weights)
  any_finite = jnp.any(finite)
  lw = jnp.where(finite, log_weights, -jnp.inf)
  shift = jnp.where(any_finite, jnp.max(jnp.where(finite, lw, -jnp.inf)), 0.0)
  w = jnp.where(finite, jnp.exp(lw - shift), 0.0)
  n = log_weights.shape[0]
  return jnp.where(any_finite, w / jnp.sum(w), jnp.full((n,), 1.0 / n, log_weights.dtype))


def ess(log_weights: jax.Array) -> jax.Array:
  """Effective sample size ``1 / sum_i W_i^2`` of ``[N]`` log-weights.

  Equals ``N`` for equal weights and 1 when one particle holds all the weight.
  """
  w = normalize(log_weights)
  return 1.0 / jnp.sum(w * w)


def log_mean_weight(log_weights: jax.Array, log_increments: jax.Array) -> jax.Array:
  """``log sum_i W_i exp(l_i)``: the SMC estimate of one ratio of normalisers.

  Args:
    log_weights: ``[N]`` current (unnormalised) log-weights ``log w_i``.
    log_increments: ``[N]`` incremental log-weights ``l_i``
      (``-inf`` allowed).

  Returns:
    Scalar ``log Z_t / Z_{t-1}`` estimate (Del Moral, Doucet and Jasra 2006,
    eq. 14); summing it over iterations gives the log normaliser estimate.
  """
  w = normalize(log_weights)
  safe = jnp.where(w > 0, jnp.log(jnp.where(w > 0, w, 1.0)), -jnp.inf)
  return logsumexp(safe + log_increments)


def systematic_resample(key: jax.Array, weights: jax.Array, num_samples: int) -> jax.Array:
  """Ancestor indices by systematic resampling.

  One uniform ``u ~ U[0, 1)`` (drawn with ``key``) places the points
  ``(j + u) / M``, ``j = 0..M-1``; ancestor ``j`` is the first index whose
  cumulative weight exceeds point ``j``. Each index ``i`` is drawn
  ``floor(M W_i)`` or ``ceil(M W_i)`` times, and ``E[count_i] = M W_i``
  (unbiased). Matches ``blackjax.smc.resampling.systematic``.

  Args:
    key: PRNG key for the single uniform.
    weights: ``[N]`` normalised weights.
    num_samples: ``M``, the number of indices (static).

  Returns:
    ``[M]`` int32 ancestor indices, sorted.
  """
  n = weights.shape[0]
  u = jax.random.uniform(key, (), dtype=weights.dtype)
  cumsum = jnp.cumsum(weights)
  points = (jnp.arange(num_samples, dtype=weights.dtype) + u) / num_samples
  idx = jnp.searchsorted(cumsum, points)
  return jnp.clip(idx, 0, n - 1).astype(jnp.int32)


def tempered_increments(log_likelihood: jax.Array, delta: jax.Array) -> jax.Array:
  """``[N]`` incremental log-weights ``delta * log L_i`` of a tempering step.

  ``delta = beta_t - beta_{t-1} >= 0``. A particle with ``log L = -inf`` keeps
  log-increment 0 at ``delta = 0`` (no ``0 * inf``) and ``-inf`` for
  ``delta > 0``.
  """
  finite = jnp.isfinite(log_likelihood)
  return jnp.where(finite, delta * jnp.where(finite, log_likelihood, 0.0),
                   jnp.where(delta > 0, -jnp.inf, 0.0))


def next_temperature(
    log_weights: jax.Array,
    log_likelihood: jax.Array,
    beta: jax.Array,
    *,
    target_ess_fraction: float = 0.5,
    max_iterations: int = 60,
) -> jax.Array:
  """Next inverse temperature by bisection on the effective sample size.

  Finds ``beta' in (beta, 1]`` with ``ESS(w * L^(beta' - beta)) = rho N``
  (Jasra et al. 2011; blackjax's ``ess_solver``): if the ESS at ``beta' = 1``
  is at least ``rho N`` the step goes to 1. Otherwise the returned value is
  the upper end of the final bracket, where the ESS is at most ``rho N``
  (so the step is followed by resampling when the threshold is ``rho``).

  Args:
    log_weights: ``[N]`` current log-weights.
    log_likelihood: ``[N]`` log-likelihoods (here: log evidences of the
      particles' model structures); ``-inf`` allowed.
    beta: current inverse temperature in ``[0, 1)``.
    target_ess_fraction: ``rho``.
    max_iterations: bisection steps (static); the bracket shrinks to
      ``(1 - beta) 2^-max_iterations``.

  Returns:
    Scalar ``beta'``.
  """
  n = log_weights.shape[0]
  target = target_ess_fraction * n
  beta = jnp.asarray(beta, log_weights.dtype)

  def ess_at(b):
    return ess(log_weights + tempered_increments(log_likelihood, b - beta))

  one = jnp.ones((), log_weights.dtype)
  _, hi = bisection.bisect(lambda mid: ess_at(mid) >= target, beta, one, max_iterations)
  return jnp.where(ess_at(one) >= target, one, hi)
