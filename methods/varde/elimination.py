"""Phase-based elimination baselines for fixed-budget BAI.

* Successive Rejects (Audibert, Bubeck and Munos, COLT 2010).
* Sequential Halving (Karnin, Koren and Somekh, ICML 2013).
* SHVar and SHAdaVar (Lalitha, Kalantari, Ma, Deoras and Kveton, 2023):
  Sequential Halving whose per-round budget is allocated greedily in
  proportion to the arm variances -- known (SHVar) or a high-probability
  upper bound from the round's samples (SHAdaVar).

The phase structure depends only on ``K`` and ``T``, so it is compiled into
static per-step arrays (phase, slot in the phase, arms to drop after the step)
and every algorithm runs in the same ``lax.scan`` as the others. Pulls that the
papers' integer rounding leaves unused go to the last phase, so the budget is
always spent exactly; they cannot change which arm survives the last
elimination less than any other last-phase pull.

Elimination compares empirical means from the current round only when
``reuse_samples=False`` (the papers' analysis); ``True`` uses all samples.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as scipy_stats

from methods.varde import core


class Schedule(NamedTuple):
  """Static per-step phase structure (NumPy, length ``T``)."""

  phase: np.ndarray  # [T] phase index of step t
  slot: np.ndarray  # [T] position of step t inside its phase
  drop: np.ndarray  # [T] arms eliminated right after step t
  active_at_start: np.ndarray  # [T] active arms during step t's phase


def build_schedule(
    num_arms: int, budget: int, lengths: list[int], drops: list[int], *, name: str = "this algorithm",
    min_budget: int | None = None,
) -> Schedule:
  """Compiles phases of the given ``lengths`` (pulls) and ``drops``.

  The unused remainder ``budget - sum(lengths)`` is added to the last phase.
  Phases of length zero eliminate together with the preceding phase. The
  first phase must pull every arm at least once; ``name`` and ``min_budget``
  (the smallest budget that does) only word the error.
  """
  lengths = list(lengths)
  lengths[-1] += budget - sum(lengths)
  if lengths[0] < num_arms:
    needs = f"; it needs budget >= {min_budget}" if min_budget is not None else ""
    raise ValueError(
        f"budget={budget} is too small for {name} with {num_arms} arms: its first phase has "
        f"{lengths[0]} pulls, fewer than one per arm{needs}"
    )
  phase, slot, drop, active = [], [], [], []
  n_active = num_arms
  for r, (length, d) in enumerate(zip(lengths, drops)):
    if length == 0:
      drop[-1] += d
    else:
      phase += [r] * length
      slot += list(range(length))
      active += [n_active] * length
      drop += [0] * (length - 1) + [d]
    n_active -= d
  return Schedule(*(np.asarray(a, np.int32) for a in (phase, slot, drop, active)))


def successive_rejects_lengths(num_arms: int, budget: int) -> tuple[list[int], list[int]]:
  """Phase lengths of Successive Rejects: ``n_k = ceil((T - K) / (logbar(K) (K + 1 - k)))``."""
  logbar = 0.5 + sum(1.0 / i for i in range(2, num_arms + 1))
  n = [0] + [
      math.ceil((budget - num_arms) / (logbar * (num_arms + 1 - k))) for k in range(1, num_arms)
  ]
  lengths = [(n[k] - n[k - 1]) * (num_arms + 1 - k) for k in range(1, num_arms)]
  return lengths, [1] * (num_arms - 1)


def successive_rejects_min_budget(num_arms: int) -> int:
  """The smallest budget whose first Successive Rejects phase pulls every arm: ``K + 1``."""
  return num_arms + 1


def halving_min_budget(num_arms: int) -> int:
  """The smallest budget whose first halving round pulls every arm once: ``K ceil(log2 K)``."""
  return num_arms * len(halving_rounds(num_arms))


def halving_rounds(num_arms: int) -> list[int]:
  """Active arms in each round of Sequential Halving (``ceil(log2 K)`` rounds)."""
  rounds, n = [], num_arms
  while n > 1:
    rounds.append(n)
    n = math.ceil(n / 2)
  return rounds


def sequential_halving_lengths(
    num_arms: int, budget: int, *, per_arm: bool
) -> tuple[list[int], list[int]]:
  """Round lengths: ``|S_r| floor(T / (|S_r| R))`` (per arm) or ``floor(T / R)``."""
  rounds = halving_rounds(num_arms)
  num_rounds = len(rounds)
  if per_arm:
    lengths = [n * (budget // (n * num_rounds)) for n in rounds]
  else:
    lengths = [budget // num_rounds] * num_rounds
  drops = [n - math.ceil(n / 2) for n in rounds]
  return lengths, drops


class EliminationState(NamedTuple):
  stats: core.ArmStats  # all samples
  round_stats: core.ArmStats  # samples of the current phase
  active: jax.Array  # [K] bool
  known_var: jax.Array  # [K] true variances (SHVar)


def _rank_desc(values: jax.Array) -> jax.Array:
  """``[K]`` rank of each value, largest first, ties broken by lower index.

  Pairwise comparisons: for small ``K`` this is much faster than a sort
  inside a vmapped scan.
  """
  i = jnp.arange(values.shape[0])
  beats = (values[None, :] > values[:, None]) | (
      (values[None, :] == values[:, None]) & (i[None, :] < i[:, None])
  )
  return jnp.sum(beats, axis=1)


def _eliminate(active: jax.Array, means: jax.Array, num_drop: jax.Array) -> jax.Array:
  """Deactivates the ``num_drop`` active arms with the lowest ``means``."""
  rank = _rank_desc(jnp.where(active, means, -jnp.inf))
  return active & (rank < jnp.sum(active) - num_drop)


def _elimination_algorithm(
    num_arms: int,
    schedule: Schedule,
    *,
    within_phase: str,
    reuse_samples: bool,
    delta: float = 0.05,
) -> core.BAIAlgorithm:
  """Shared machinery; ``within_phase`` in {round_robin, known_var, ada_var}."""
  slot_of = jnp.asarray(schedule.slot)
  drop_after = jnp.asarray(schedule.drop)
  if within_phase == "ada_var":
    # Upper (1 - delta) confidence bound on a variance from n samples:
    # (n - 1) s^2 / chi2_{delta}(n - 1), tabulated for n = 0..T.
    n = np.arange(len(schedule.phase) + 1)
    q = scipy_stats.chi2.ppf(delta, np.maximum(n - 1, 1))
    chi2_lower = jnp.asarray(np.where(n >= 2, q, np.nan), jnp.float32)

  def init(key, oracle):
    del key
    return EliminationState(
        core.stats_init(num_arms),
        core.stats_init(num_arms),
        jnp.ones((num_arms,), bool),
        oracle.stds.astype(jnp.float32) ** 2,
    )

  def select(state, key, t):
    del key
    if within_phase == "round_robin":
      # The (slot mod n_active)-th active arm in index order.
      position = jnp.cumsum(state.active) - 1
      target = slot_of[t] % jnp.sum(state.active)
      return jnp.argmax(state.active & (position == target))
    n_round = state.round_stats.count
    if within_phase == "known_var":
      var = state.known_var
      ratio = jnp.where(n_round > 0, var / jnp.maximum(n_round, 1), jnp.inf)
    else:
      # The variance bound needs two samples of the round: arms with fewer go
      # first, the unpulled before the once-pulled (ties to the lower index),
      # so a round too short for two pulls each still pulls every arm once.
      s2 = core.sample_variance(state.round_stats)
      upper = (n_round - 1) * s2 / chi2_lower[n_round]
      first = jnp.where(n_round == 0, jnp.inf, jnp.finfo(jnp.float32).max)
      ratio = jnp.where(n_round >= 2, upper / jnp.maximum(n_round, 1), first)
    return jnp.argmax(jnp.where(state.active, ratio, -jnp.inf))

  def update(state, t, arm, reward):
    stats = core.stats_update(state.stats, arm, reward)
    round_stats = core.stats_update(state.round_stats, arm, reward)

    def end_phase():
      means = stats.mean if reuse_samples else round_stats.mean
      active = _eliminate(state.active, means, drop_after[t])
      return active, jax.tree.map(jnp.zeros_like, round_stats)

    # The schedule is static and ``t`` is the same for every seed, so under
    # ``vmap`` this stays a ``lax.cond``: eliminations cost only at phase ends.
    active, round_stats = jax.lax.cond(
        drop_after[t] > 0, end_phase, lambda: (state.active, round_stats)
    )
    return EliminationState(stats, round_stats, active, state.known_var)

  def recommend(state):
    return jnp.argmax(jnp.where(state.active, state.stats.mean, -jnp.inf))

  return core.BAIAlgorithm(init, select, update, recommend)


def successive_rejects(*, num_arms: int, budget: int, reuse_samples: bool = True) -> core.BAIAlgorithm:
  """Successive Rejects; its analysis uses all samples (``reuse_samples=True``)."""
  lengths, drops = successive_rejects_lengths(num_arms, budget)
  schedule = build_schedule(num_arms, budget, lengths, drops, name="successive_rejects",
                            min_budget=successive_rejects_min_budget(num_arms))
  return _elimination_algorithm(
      num_arms, schedule, within_phase="round_robin", reuse_samples=reuse_samples
  )


def sequential_halving(
    *, num_arms: int, budget: int, reuse_samples: bool = False
) -> core.BAIAlgorithm:
  """Sequential Halving: equal pulls per active arm, keep the better half."""
  lengths, drops = sequential_halving_lengths(num_arms, budget, per_arm=True)
  schedule = build_schedule(num_arms, budget, lengths, drops, name="sequential_halving",
                            min_budget=halving_min_budget(num_arms))
  return _elimination_algorithm(
      num_arms, schedule, within_phase="round_robin", reuse_samples=reuse_samples
  )


def shvar(*, num_arms: int, budget: int, reuse_samples: bool = False) -> core.BAIAlgorithm:
  """SHVar: each round's budget allocated greedily by ``sigma_i^2 / n_i`` (known variances)."""
  lengths, drops = sequential_halving_lengths(num_arms, budget, per_arm=False)
  schedule = build_schedule(num_arms, budget, lengths, drops, name="shvar",
                            min_budget=halving_min_budget(num_arms))
  return _elimination_algorithm(
      num_arms, schedule, within_phase="known_var", reuse_samples=reuse_samples
  )


def shadavar(
    *, num_arms: int, budget: int, delta: float = 0.05, reuse_samples: bool = False
) -> core.BAIAlgorithm:
  """SHAdaVar: as SHVar with a ``1 - delta`` upper confidence bound on each variance."""
  if not 0 < delta < 1:
    raise ValueError(f"delta={delta} must be in (0, 1)")
  lengths, drops = sequential_halving_lengths(num_arms, budget, per_arm=False)
  schedule = build_schedule(num_arms, budget, lengths, drops, name="shadavar",
                            min_budget=halving_min_budget(num_arms))
  return _elimination_algorithm(
      num_arms, schedule, within_phase="ada_var", reuse_samples=reuse_samples, delta=delta
  )
