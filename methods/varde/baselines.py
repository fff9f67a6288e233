"""Index-based baselines for fixed-budget BAI, behind VarDE's interface.

* ``uniform``: round robin in a per-run random arm order.
* ``ucbe``: UCB-E (Audibert, Bubeck and Munos, COLT 2010),
  index ``mu_k + sqrt(a / N_k)``.
* ``ugape``: UGapE, fixed-budget version with ``m = 1`` (Gabillon, Ghavamzadeh
  and Lazaric, NeurIPS 2012); recommends the arm ``J(t)`` of the step with the
  smallest gap index ``B_{J(t)}(t)``.
* ``gapev``: GapE-V (Gabillon, Ghavamzadeh, Lazaric and Bubeck, NeurIPS 2011),
  index ``-gap_k + sqrt(2 a s_k^2 / N_k) + 7 a b / (3 (N_k - 1))``.
* ``ttts``: top-two Thompson sampling (Russo, COLT 2016), Gaussian posterior
  ``N(mu_k, s_k^2 / N_k)``, ``beta = 1/2``.
* ``ocba``: sequential OCBA (Chen, Lin, Yucesan and Chick, 2000), one pull at a
  time towards the OCBA ratios computed from the current estimates.

Exploration rates. UCB-E, UGapE and GapE-V have a rate ``a`` that their
theory sets from the problem's hardness. With ``scale="hardness"`` (default)
``a = c * (T - warm) / H`` where ``H = sum_k 1 / gap_k^2`` (GapE-V:
``H^sigma = sum_k (sigma_k + sqrt(sigma_k^2 + 16 b gap_k / 3))^2 / gap_k^2``)
is computed from the oracle, as in the papers' experiments; with
``scale="raw"`` ``a = c``. Reward range ``b = 1``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from methods.varde import core

SCALES = ("hardness", "raw")


class IndexState(NamedTuple):
  stats: core.ArmStats
  warm: jax.Array  # [K * warm] warm-start order (uniform: the round-robin order)
  rate: jax.Array  # [] exploration rate a (unused by some algorithms)
  best_gap: jax.Array  # [] UGapE: smallest B_J(t) seen
  best_arm: jax.Array  # [] UGapE: J(t) at that step


def _rate(c: float, scale: str, hardness: jax.Array, budget: int, warm: int) -> jax.Array:
  if scale not in SCALES:
    raise ValueError(f"scale={scale!r}; allowed: {SCALES}")
  if scale == "raw":
    return jnp.asarray(c, jnp.float32)
  return jnp.asarray(c * (budget - warm), jnp.float32) / hardness


def _index_algorithm(num_arms, budget, warm_start, select_rule, rate_fn=None, update_fn=None, recommend=None,
                     warm_what=""):
  """Wraps a per-step rule ``select_rule(state, key, t) -> arm`` with a warm start (which must fit ``budget``)."""
  core.check_warm_start(num_arms, warm_start, budget, warm_what)

  def init(key, oracle):
    rate = rate_fn(oracle) if rate_fn else jnp.zeros((), jnp.float32)
    return IndexState(
        core.stats_init(num_arms),
        core.warm_start_order(key, num_arms, warm_start),
        rate,
        jnp.asarray(jnp.inf, jnp.float32),
        jnp.zeros((), jnp.int32),
    )

  def select(state, key, t):
    return core.warm_start_then(t, state.warm, lambda: select_rule(state, key, t))

  def update(state, t, arm, reward):
    if update_fn is not None:
      state = update_fn(state, t)
    return state._replace(stats=core.stats_update(state.stats, arm, reward))

  return core.BAIAlgorithm(init, select, update, recommend or core.argmax_mean)


def uniform(*, num_arms: int, budget: int) -> core.BAIAlgorithm:
  """Round robin over a per-run random permutation of the arms."""
  del budget

  def init(key, oracle):
    del oracle
    return IndexState(
        core.stats_init(num_arms),
        jax.random.permutation(key, num_arms),
        jnp.zeros((), jnp.float32),
        jnp.zeros((), jnp.float32),
        jnp.zeros((), jnp.int32),
    )

  def select(state, key, t):
    del key
    return state.warm[t % num_arms]

  def update(state, t, arm, reward):
    del t
    return state._replace(stats=core.stats_update(state.stats, arm, reward))

  return core.BAIAlgorithm(init, select, update, core.argmax_mean)


def ucbe(*, num_arms: int, budget: int, c: float = 2.0, scale: str = "hardness") -> core.BAIAlgorithm:
  """UCB-E: pull ``argmax mu_k + sqrt(a / N_k)`` after one pull of each arm."""
  _rate(c, scale, jnp.ones(()), budget, num_arms)  # validates ``scale``

  def rule(state, key, t):
    del key, t
    n = jnp.maximum(state.stats.count, 1).astype(jnp.float32)
    return jnp.argmax(state.stats.mean + jnp.sqrt(state.rate / n))

  return _index_algorithm(
      num_arms, budget, 1, rule, rate_fn=lambda o: _rate(c, scale, o.hardness, budget, num_arms),
      warm_what="the warm start of 1 pull per arm"
  )


def _ugape_gap_index(stats: core.ArmStats, rate: jax.Array):
  """UGapE quantities: ``B [K]``, ``J``, the pull candidate, and ``beta [K]``."""
  n = jnp.maximum(stats.count, 1).astype(jnp.float32)
  beta = jnp.sqrt(rate / n)
  upper, lower = stats.mean + beta, stats.mean - beta
  gap_index = core.max_of_others(upper) - lower  # B_k
  j = jnp.argmin(gap_index)
  u = jnp.argmax(jnp.where(jnp.arange(upper.shape[0]) == j, -jnp.inf, upper))
  pull = jnp.where(beta[u] > beta[j], u, j)
  return gap_index, j, pull


def ugape(*, num_arms: int, budget: int, c: float = 1.0, scale: str = "hardness") -> core.BAIAlgorithm:
  """UGapE (fixed budget, m = 1), ``beta_k = sqrt(a / N_k)``."""
  _rate(c, scale, jnp.ones(()), budget, num_arms)

  def rule(state, key, t):
    del key, t
    return _ugape_gap_index(state.stats, state.rate)[2]

  def track(state, t):
    gap_index, j, _ = _ugape_gap_index(state.stats, state.rate)
    better = (t >= num_arms) & (gap_index[j] < state.best_gap)
    return state._replace(
        best_gap=jnp.where(better, gap_index[j], state.best_gap),
        best_arm=jnp.where(better, j.astype(jnp.int32), state.best_arm),
    )

  def recommend(state):
    state = track(state, jnp.asarray(num_arms))  # include the final estimates
    return state.best_arm

  return _index_algorithm(
      num_arms,
      budget,
      1,
      rule,
      rate_fn=lambda o: _rate(c, scale, o.hardness, budget, num_arms),
      warm_what="the warm start of 1 pull per arm",
      update_fn=track,
      recommend=recommend,
  )


def gapev(
    *,
    num_arms: int,
    budget: int,
    c: float = 1.0,
    scale: str = "hardness",
    var_floor: float = 0.01,
) -> core.BAIAlgorithm:
  """GapE-V with ``b = 1``; two warm-start pulls per arm."""
  b = 1.0
  _rate(c, scale, jnp.ones(()), budget, 2 * num_arms)

  def hardness_sigma(oracle):
    gap = core.gap_floor(oracle.gaps)
    s = oracle.stds
    return jnp.sum((s + jnp.sqrt(s**2 + 16.0 * b * gap / 3.0)) ** 2 / gap**2)

  def rule(state, key, t):
    del key, t
    stats = state.stats
    n = jnp.maximum(stats.count, 2).astype(jnp.float32)
    var = jnp.minimum(core.sample_variance(stats, var_floor), 1e30)
    index = (
        -jnp.abs(core.max_of_others(stats.mean) - stats.mean)
        + jnp.sqrt(2.0 * state.rate * var / n)
        + 7.0 * state.rate * b / (3.0 * (n - 1.0))
    )
    return jnp.argmax(index)

  return _index_algorithm(
      num_arms,
      budget,
      2,
      rule,
      rate_fn=lambda o: _rate(c, scale, hardness_sigma(o), budget, 2 * num_arms),
      warm_what="the warm start of 2 pulls per arm",
  )


def ttts_challenger(
    key: jax.Array, mean: jax.Array, sd: jax.Array, leader: jax.Array, *, max_resamples: int = 8
) -> jax.Array:
  """Top-two Thompson sampling's challenger for a Gaussian posterior ``N(mean, sd^2)``.

  Russo's rule (COLT 2016): resample ``theta ~ N(mean, sd^2)`` until its argmax
  differs from ``leader``, i.e. the argmax of a fresh posterior sample
  conditioned on not being the leader. Truncated at ``max_resamples``
  samples, drawn at once; if all of them have the leader as argmax, the
  runner-up of the last one is taken. Never returns ``leader``.

  Args:
    key: the draw's key.
    mean: ``[K]`` posterior means.
    sd: ``[K]`` posterior standard deviations.
    leader: scalar int, the arm the challenger must differ from.
    max_resamples: the truncation.

  Returns:
    Scalar int32, the challenger.
  """
  num_arms = mean.shape[0]
  # One flat draw, reshaped: the same numbers as a [max_resamples, K] draw
  # (threefry's counters are the row-major flat indices), but XLA:CPU
  # generates a 1-D draw several times faster.
  z = jax.random.normal(key, (max_resamples * num_arms,)).reshape(max_resamples, num_arms)
  thetas = mean[None] + sd[None] * z
  # A sample's argmax is not the leader iff some arm beats the leader's value
  # (ties go to the lower index, as in ``argmax``): no per-sample argmax.
  arms = jnp.arange(num_arms)
  lead_value = thetas[:, leader][:, None]
  beats = jnp.where((arms < leader)[None], thetas >= lead_value, thetas > lead_value)
  ok = jnp.any(beats, axis=-1)  # [max_resamples]
  # The first accepted sample's argmax, else the runner-up of the last sample
  # (masking the leader does not change the argmax of an accepted sample).
  row = jnp.where(jnp.any(ok), jnp.argmax(ok), max_resamples - 1)
  return jnp.argmax(jnp.where(arms == leader, -jnp.inf, thetas[row])).astype(jnp.int32)


def ttts(
    *,
    num_arms: int,
    budget: int,
    beta: float = 0.5,
    warm_start: int = 2,
    var_floor: float = 0.01,
    max_resamples: int = 8,
) -> core.BAIAlgorithm:
  """Top-two Thompson sampling with a Gaussian posterior ``N(mu_k, s_k^2 / N_k)``.

  With probability ``beta`` the leader (argmax of one posterior sample) is
  pulled, else the challenger of :func:`ttts_challenger` (Russo, COLT 2016).
  """
  if not 0 < beta < 1:
    raise ValueError(f"beta={beta} must be in (0, 1)")

  def rule(state, key, t):
    del t
    stats = state.stats
    sd = jnp.sqrt(core.sample_variance(stats, var_floor) / jnp.maximum(stats.count, 1))
    sd = jnp.minimum(sd, 1e6)
    k_lead, k_coin, k_chal = jax.random.split(key, 3)
    theta = stats.mean + sd * jax.random.normal(k_lead, (num_arms,))
    leader = jnp.argmax(theta).astype(jnp.int32)
    challenger = ttts_challenger(k_chal, stats.mean, sd, leader, max_resamples=max_resamples)
    return jnp.where(jax.random.uniform(k_coin) < beta, leader, challenger)

  return _index_algorithm(num_arms, budget, warm_start, rule)


def ocba_targets(means: jax.Array, variances: jax.Array) -> jax.Array:
  """``[K]`` OCBA allocation ratios (sum to 1).

  ``r_i = sigma_i^2 / gap_i^2`` for ``i != b`` and
  ``r_b = sigma_b sqrt(sum_{i != b} r_i^2 / sigma_i^2)``.
  """
  b = jnp.argmax(means)
  is_b = jnp.arange(means.shape[0]) == b
  gap = jnp.maximum(means[b] - means, 1e-6)
  r = jnp.where(is_b, 0.0, variances / gap**2)
  r_b = jnp.sqrt(variances[b] * jnp.sum(jnp.where(is_b, 0.0, r**2 / variances)))
  r = jnp.where(is_b, r_b, r)
  return r / jnp.sum(r)


def ocba(
    *, num_arms: int, budget: int, warm_start: int = 2, var_floor: float = 0.01
) -> core.BAIAlgorithm:
  """Sequential OCBA: pull the arm furthest below its target ``(t + 1) r_i``."""

  def rule(state, key, t):
    del key
    stats = state.stats
    var = jnp.minimum(core.sample_variance(stats, var_floor), 1e30)
    target = (t + 1).astype(jnp.float32) * ocba_targets(stats.mean, var)
    return jnp.argmax(target - stats.count)

  return _index_algorithm(num_arms, budget, warm_start, rule)
