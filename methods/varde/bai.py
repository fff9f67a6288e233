"""VarDE for fixed-budget best-arm identification.

Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration", ICML 2026
(PMLR 306), Section 3 (best-arm identification). The final decision is a smooth function of the
arm means, here the log-sum-exp ``f(mu) = tau * log sum_i exp(mu_i / tau)``.
Its first-order (delta-method) variance under an allocation ``N`` is

    V(N) = sum_i w_i^2 sigma_i^2 / N_i,      w = grad f = softmax(mu / tau),

and VarDE pulls the arm whose next sample decreases ``V`` the most:

    argmax_i  w_i^2 sigma_i^2 / (N_i (N_i + 1))  =  V(N) - V(N + e_i).

With ``w`` and ``sigma`` fixed this greedy rule converges to the Neyman
allocation ``N_i`` proportional to ``|w_i| sigma_i``. ``w`` and ``sigma`` are
plug-in estimates; every arm is first pulled ``warm_start`` times in shuffled
order (counted in the budget), variances are floored at ``var_floor`` and are
``+inf`` until an arm has two pulls.

The run picks the same arm from a per-arm form of the score
(:func:`log_scores`). ``w_i = exp(mu_i / tau) / Z`` with ``Z`` common to all
arms and ``log`` is increasing, so the argmax of ``w_i^2 sigma_i^2 / (N_i
(N_i + 1))`` is the argmax of ``2 mu_i / tau + log(sigma_i^2 / (N_i (N_i +
1)))``: each arm's score depends on its own statistics only (and cannot
underflow, as ``w_i^2`` does for arms far below the leader). A pull changes
one arm's statistics, so the state keeps every arm's score and an update
recomputes only the pulled arm's: one ``log`` per pull instead of a softmax
and ``K`` scores, then an argmax.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from methods.varde import core

WEIGHTINGS = ("lse", "uniform")
VARIANCES = ("empirical", "known")


def lse_weights(means: jax.Array, tau: float) -> jax.Array:
  """``[K]`` gradient of ``tau * logsumexp(means / tau)``: ``softmax(means / tau)``."""
  return jax.nn.softmax(means / tau)


def first_order_variance(weights: jax.Array, variances: jax.Array, counts: jax.Array) -> jax.Array:
  """Delta-method variance of the decision, ``sum_i w_i^2 sigma_i^2 / N_i``."""
  return jnp.sum(weights**2 * variances / counts)


def varde_scores(weights: jax.Array, variances: jax.Array, counts: jax.Array) -> jax.Array:
  """``[K]`` exact one-step decrease of :func:`first_order_variance`.

  ``w_i^2 sigma_i^2 / (N_i (N_i + 1))``; arms with fewer than two pulls or an
  infinite variance score ``+inf`` so that they are pulled first.
  """
  counts_f = counts.astype(jnp.float32)
  score = weights**2 * variances / (counts_f * (counts_f + 1.0))
  return jnp.where((counts < 2) | jnp.isinf(variances), jnp.inf, score)


def log_scores(means: jax.Array, variances: jax.Array, counts: jax.Array, tau: float | None) -> jax.Array:
  """``log`` of :func:`varde_scores` up to a term common to all arms (entries of any shape).

  ``2 mu_i / tau + log(sigma_i^2 / (N_i (N_i + 1)))`` for the LSE weights
  (``tau=None``: uniform weights, no mean term), ``+inf`` where
  :func:`varde_scores` is ``+inf``. The arms' order, and so the argmax, is
  that of :func:`varde_scores` (up to float rounding at near-ties).
  """
  counts_f = counts.astype(jnp.float32)
  score = jnp.log(variances / (counts_f * (counts_f + 1.0)))
  if tau is not None:
    score = score + (2.0 / tau) * means
  return jnp.where((counts < 2) | jnp.isinf(variances), jnp.inf, score)


def neyman_shares(weights: jax.Array, stds: jax.Array) -> jax.Array:
  """``[K]`` limit allocation shares ``|w_i| sigma_i / sum_j |w_j| sigma_j``."""
  s = jnp.abs(weights) * stds
  return s / jnp.sum(s)


class VarDEState(NamedTuple):
  stats: core.ArmStats
  warm: jax.Array  # [K * warm_start] warm-start order
  known_var: jax.Array  # [K] true variances (used by variance="known" only)
  score: jax.Array  # [K] every arm's log_scores at the current statistics


def varde(
    *,
    num_arms: int,
    budget: int,
    tau: float = 0.1,
    warm_start: int = 2,
    var_floor: float = 0.01,
    weighting: str = "lse",
    variance: str = "empirical",
) -> core.BAIAlgorithm:
  """VarDE with the LSE decision and its ablations.

  Args:
    num_arms: ``K``.
    budget: ``T``; the warm start (``K * warm_start`` pulls) counts against it.
    tau: LSE temperature; ``tau -> inf`` gives uniform weights (``N ~ sigma``),
      ``tau -> 0`` concentrates the weight on the empirical leader.
    warm_start: pulls of every arm before the greedy rule starts.
    var_floor: lower bound on the empirical variances.
    weighting: ``"lse"`` (``w = softmax(mu / tau)``) or ``"uniform"``
      (``w_i = 1 / K``: the no-influence-weighting ablation).
    variance: ``"empirical"`` or ``"known"`` (true variances from the oracle:
      the known-variance ablation).

  Returns:
    The algorithm.
  """
  if weighting not in WEIGHTINGS:
    raise ValueError(f"weighting={weighting!r}; allowed: {WEIGHTINGS}")
  if variance not in VARIANCES:
    raise ValueError(f"variance={variance!r}; allowed: {VARIANCES}")
  if not tau > 0:
    raise ValueError(f"tau={tau} must be > 0")
  core.check_warm_start(num_arms, warm_start, budget)

  log_tau = tau if weighting == "lse" else None

  def arm_variance(stats, known_var, arm):
    """``arm``'s variance estimate (after at least one pull of it)."""
    if variance == "empirical":
      return core.variance_of(stats.m2[arm], stats.count[arm], var_floor)
    return known_var[arm]

  def init(key, oracle):
    return VarDEState(
        core.stats_init(num_arms),
        core.warm_start_order(key, num_arms, warm_start),
        oracle.stds.astype(jnp.float32) ** 2,
        jnp.full((num_arms,), jnp.inf, jnp.float32),  # no arm has two pulls yet
    )

  def select(state, key, t):
    del key
    return core.with_warm_start(t, state.warm, jnp.argmax(state.score))

  def update(state, t, arm, reward):
    del t
    stats = core.stats_update(state.stats, arm, reward)
    score = log_scores(stats.mean[arm], arm_variance(stats, state.known_var, arm), stats.count[arm], log_tau)
    return state._replace(stats=stats, score=state.score.at[arm].set(score))

  return core.BAIAlgorithm(init, select, update, core.argmax_mean)
