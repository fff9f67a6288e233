"""The fixed-budget best-arm identification (BAI) interface and its run loop.

Every BAI algorithm in this package -- VarDE and all its baselines -- is a
:class:`BAIAlgorithm`: four pure functions built for a static number of arms
``K`` and budget ``T`` (phase-based algorithms compile their schedules from
them). :func:`run_bai` runs one algorithm on one bandit instance for exactly
``T`` pulls inside a single ``lax.scan`` against any reward function (the
environment enters as an argument, mctx-style, so this package does not depend
on ``envs``); vmap it over seeds (see :mod:`methods.varde.evaluate`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

# (arm, index) -> reward of the index-th pull (0-based) of arm.
PullFn = Callable[[jax.Array, jax.Array], jax.Array]


class ArmStats(NamedTuple):
  """Running per-arm statistics (Welford's algorithm).

  Attributes:
    count: ``[K]`` int32 pulls per arm.
    mean: ``[K]`` float32 empirical means (0 for unpulled arms).
    m2: ``[K]`` float32 sums of squared deviations from the mean.
  """

  count: jax.Array  # [K]
  mean: jax.Array  # [K]
  m2: jax.Array  # [K]


def stats_init(num_arms: int) -> ArmStats:
  """Empty statistics for ``num_arms`` arms."""
  zeros = jnp.zeros((num_arms,), jnp.float32)
  return ArmStats(jnp.zeros((num_arms,), jnp.int32), zeros, zeros)


def stats_update(stats: ArmStats, arm: jax.Array, reward: jax.Array) -> ArmStats:
  """Adds one observation ``reward`` of ``arm`` (Welford update)."""
  n = stats.count[arm] + 1
  delta = reward - stats.mean[arm]
  mean = stats.mean[arm] + delta / n
  m2 = stats.m2[arm] + delta * (reward - mean)
  return ArmStats(
      stats.count.at[arm].set(n), stats.mean.at[arm].set(mean), stats.m2.at[arm].set(m2)
  )


def sample_variance(stats: ArmStats, floor: float = 0.0) -> jax.Array:
  """``[K]`` unbiased sample variances, floored; ``+inf`` below two pulls."""
  return variance_of(stats.m2, stats.count, floor)


def variance_of(m2: jax.Array, count: jax.Array, floor: float = 0.0) -> jax.Array:
  """:func:`sample_variance` of entries of any shape (e.g. one arm's ``m2[arm]``, ``count[arm]``)."""
  var = m2 / jnp.maximum(count - 1, 1).astype(jnp.float32)
  return jnp.where(count >= 2, jnp.maximum(var, floor), jnp.inf)


def gap_floor(gaps: jax.Array) -> jax.Array:
  """``gaps`` floored at ``1e-6`` of the largest: a floor in the rewards' unit, so that rates set from the
  gaps do not depend on the scale of the rewards."""
  return jnp.maximum(gaps, 1e-6 * jnp.max(gaps))


class Oracle(NamedTuple):
  """Problem knowledge that some baselines are defined to use.

  Only oracle-parametrised algorithms read it: the known-variance ablation of
  VarDE and SHVar read ``stds``; UCB-E, UGapE and GapE-V set their exploration
  rate from the hardness computed from ``gaps`` (as in their papers). VarDE
  itself and every other algorithm ignore it.

  Attributes:
    stds: ``[K]`` true reward standard deviations.
    gaps: ``[K]`` true gaps (the best arm's gap is to the runner-up).
  """

  stds: jax.Array  # [K]
  gaps: jax.Array  # [K]

  @classmethod
  def from_means(cls, means: jax.Array, stds: jax.Array) -> "Oracle":
    """Oracle of arms with ``[K]`` ``means`` and ``stds``."""
    return cls(stds=stds, gaps=jnp.abs(max_of_others(means) - means))

  @property
  def hardness(self) -> jax.Array:
    """H1 = sum_k 1 / gap_k^2 (Audibert, Bubeck and Munos, 2010); gaps floored at ``1e-6`` of the largest."""
    return jnp.sum(1.0 / gap_floor(self.gaps) ** 2)


class BAIAlgorithm(NamedTuple):
  """A fixed-budget best-arm identification algorithm as pure functions.

  Attributes:
    init: ``(key, oracle) -> state``; ``key`` randomises the algorithm's own
      choices (e.g. the warm-start order). Every state has a ``stats:
      ArmStats`` field.
    select: ``(state, key, t) -> arm``, the arm to pull at step ``t``
      (0-based); ``key`` is a fresh per-step key for randomised rules.
    update: ``(state, t, arm, reward) -> state`` after observing ``reward``.
    recommend: ``state -> arm``, the final recommendation.
  """

  init: Callable[[jax.Array, Oracle], Any]
  select: Callable[[Any, jax.Array, jax.Array], jax.Array]
  update: Callable[[Any, jax.Array, jax.Array, jax.Array], Any]
  recommend: Callable[[Any], jax.Array]


class Outcome(NamedTuple):
  """Result of one BAI run.

  Attributes:
    recommendation: scalar int32, the recommended arm.
    counts: ``[K]`` int32 pulls per arm (sums to the budget).
  """

  recommendation: jax.Array  # []
  counts: jax.Array  # [K]


def run_bai(
    algorithm: BAIAlgorithm,
    pull: PullFn,
    oracle: Oracle,
    key: jax.Array,
    *,
    budget: int,
) -> Outcome:
  """Runs ``algorithm`` for exactly ``budget`` pulls.

  Args:
    algorithm: the algorithm, built for ``K`` arms and this ``budget``.
    pull: ``(arm, index) -> reward`` of the ``index``-th pull of ``arm``. With
      a reward that is a pure function of ``(arm, index)`` (e.g.
      ``envs.bandits.pull`` with a fixed key), algorithms compared on the same
      ``pull`` see common random numbers.
    oracle: problem knowledge for oracle-parametrised baselines.
    key: the algorithm's own randomness (warm-start order, sampling).
    budget: static number of pulls ``T``.

  Returns:
    The recommendation and the allocation.
  """
  chex.assert_shape(key, ())
  chex.assert_rank([oracle.stds, oracle.gaps], 1)
  chex.assert_equal_shape([oracle.stds, oracle.gaps])
  init_key, step_key = jax.random.split(key)
  state = algorithm.init(init_key, oracle)

  def step(state, t):
    arm = algorithm.select(state, jax.random.fold_in(step_key, t), t)
    reward = pull(arm, state.stats.count[arm])
    return algorithm.update(state, t, arm, reward), None

  state, _ = jax.lax.scan(step, state, jnp.arange(budget, dtype=jnp.int32))
  return Outcome(algorithm.recommend(state).astype(jnp.int32), state.stats.count)


def check_warm_start(num_arms: int, pulls_per_arm: int, budget: int, what: str = "") -> None:
  """Raises ``ValueError`` when a warm start of ``pulls_per_arm`` pulls of every arm does not fit ``budget``."""
  if num_arms * pulls_per_arm > budget:
    raise ValueError(f"{what or f'warm_start={pulls_per_arm}'} needs {num_arms * pulls_per_arm} pulls > budget={budget}")


def warm_start_order(key: jax.Array, num_arms: int, pulls_per_arm: int) -> jax.Array:
  """``[K * pulls_per_arm]`` shuffled pulls, each arm ``pulls_per_arm`` times.

  The order is a random permutation of the multiset, drawn with ``key``.
  """
  return jax.random.permutation(key, jnp.repeat(jnp.arange(num_arms), pulls_per_arm))


def with_warm_start(t: jax.Array, order: jax.Array, arm: jax.Array) -> jax.Array:
  """The warm-start arm while ``t < len(order)``, else ``arm``."""
  n = order.shape[0]
  if n == 0:
    return arm
  return jnp.where(t < n, order[jnp.minimum(t, n - 1)], arm)


def warm_start_then(t: jax.Array, order: jax.Array, rule: Callable[[], jax.Array]) -> jax.Array:
  """The warm-start arm while ``t < len(order)``, else ``rule()``.

  The same arm as ``with_warm_start(t, order, rule())``, but ``rule`` is only
  evaluated after the warm start: the step ``t`` of :func:`run_bai`'s scan is
  the same for every seed, so under ``vmap`` this stays a ``lax.cond`` (not a
  select computing both branches).
  """
  n = order.shape[0]
  if n == 0:
    return rule().astype(jnp.int32)
  return jax.lax.cond(
      t < n,
      lambda: order[jnp.minimum(t, n - 1)].astype(jnp.int32),
      lambda: rule().astype(jnp.int32),
  )


def max_of_others(x: jax.Array) -> jax.Array:
  """``[K]`` with entry ``k`` equal to ``max_{j != k} x_j``.

  Written with two reductions: ``lax.top_k`` is much slower inside a vmapped
  scan on CPU.
  """
  i = jnp.arange(x.shape[0])
  first = jnp.argmax(x)
  second = jnp.max(jnp.where(i == first, -jnp.inf, x))
  return jnp.where(i == first, second, x[first])


def argmax_mean(state: Any) -> jax.Array:
  """Recommendation rule shared by most algorithms: the best empirical mean."""
  counts, mean = state.stats.count, state.stats.mean
  return jnp.argmax(jnp.where(counts > 0, mean, -jnp.inf))
