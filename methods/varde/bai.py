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


def neyman_shares(weights: jax.Array, stds: jax.Array) -> jax.Array:
  """``[K]`` limit allocation shares ``|w_i| sigma_i / sum_j |w_j| sigma_j``."""
  s = jnp.abs(weights) * stds
  return s / jnp.sum(s)


class VarDEState(NamedTuple):
  stats: core.ArmStats
  warm: jax.Array  # [K * warm_start] warm-start order
  known_var: jax.Array  # [K] true variances (used by variance="known" only)


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
  if num_arms * warm_start > budget:
    raise ValueError(
        f"warm_start={warm_start} needs {num_arms * warm_start} pulls > budget={budget}"
    )

  def init(key, oracle):
    return VarDEState(
        core.stats_init(num_arms),
        core.warm_start_order(key, num_arms, warm_start),
        oracle.stds.astype(jnp.float32) ** 2,
    )

  def select(state, key, t):
    del key
    stats = state.stats
    if weighting == "lse":
      w = lse_weights(stats.mean, tau)
    else:
      w = jnp.full((num_arms,), 1.0 / num_arms)
    if variance == "empirical":
      var = core.sample_variance(stats, var_floor)
    else:
      var = jnp.where(stats.count >= 1, state.known_var, jnp.inf)
    arm = jnp.argmax(varde_scores(w, var, stats.count))
    return core.with_warm_start(t, state.warm, arm)

  def update(state, t, arm, reward):
    del t
    return state._replace(stats=core.stats_update(state.stats, arm, reward))

  return core.BAIAlgorithm(init, select, update, core.argmax_mean)
