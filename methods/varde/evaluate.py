"""Many BAI algorithms over many seeds, reduced to sufficient statistics.

The probability of error of each algorithm and all paired comparisons between
algorithms (the runs share common random numbers) follow from three integer
tallies over seeds: errors per algorithm, pairwise discordances
``#{runs: error_a != error_b}`` and summed allocations. Integer sums do not
depend on the order of reduction, so the tallies are bit-identical on one
device or many, in one chunk of seeds or several (the launcher checkpoints them
between chunks).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from methods.varde import bai, core

# (instance key, reward key) -> (means [K], stds [K], pull), one run's instance.
InstanceFn = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array, core.PullFn]]


class SweepStats(NamedTuple):
  """Tallies over runs (all summed over seeds).

  Attributes:
    runs: ``[]`` int32 number of runs.
    errors: ``[A]`` int32 runs whose recommendation was not the best arm.
    discord: ``[A, A]`` int32 runs where exactly one of two algorithms erred.
    counts: ``[A, K]`` int32 pulls per arm.
    neyman: ``[V, K]`` float32 Neyman limit shares ``|w| sigma / sum`` of each
      requested decision weighting at the true means and stds.
  """

  runs: jax.Array
  errors: jax.Array
  discord: jax.Array
  counts: jax.Array
  neyman: jax.Array

  @classmethod
  def zeros(cls, num_algorithms: int, num_arms: int, num_neyman: int) -> "SweepStats":
    return cls(
        np.zeros((), np.int32),
        np.zeros((num_algorithms,), np.int32),
        np.zeros((num_algorithms, num_algorithms), np.int32),
        np.zeros((num_algorithms, num_arms), np.int32),
        np.zeros((num_neyman, num_arms), np.float32),
    )

  def __add__(self, other: "SweepStats") -> "SweepStats":  # type: ignore[override]
    return SweepStats(*(a + b for a, b in zip(self, other)))


def run_keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Per-run keys for (instance, rewards, algorithms), shared by all algorithms."""
  return tuple(jax.random.fold_in(key, i) for i in range(3))  # type: ignore[return-value]


def sweep(
    algorithms: Sequence[core.BAIAlgorithm],
    instance: InstanceFn,
    keys: jax.Array,
    valid: jax.Array,
    *,
    budget: int,
    neyman_taus: Sequence[Optional[float]] = (),
) -> SweepStats:
  """Runs every algorithm on every seed and tallies the outcomes.

  Args:
    algorithms: ``A`` algorithms built for ``K`` arms and ``budget``.
    instance: builds a run's instance from its instance and reward keys;
      every algorithm of a run sees the same instance and reward table.
    keys: ``[S]`` per-run keys.
    valid: ``[S]`` bool; padded runs (False) are excluded from the tallies.
    budget: static budget ``T``.
    neyman_taus: LSE temperatures whose Neyman limit shares are tallied
      (``None``: uniform weights).

  Returns:
    Tallies over the valid runs.
  """

  chex.assert_rank(keys, 1)
  chex.assert_shape(valid, keys.shape)

  def one_run(key):
    k_inst, k_reward, k_alg = run_keys(key)
    means, stds, pull = instance(k_inst, k_reward)
    oracle = core.Oracle.from_means(means, stds)
    outcomes = [core.run_bai(alg, pull, oracle, k_alg, budget=budget) for alg in algorithms]
    recs = jnp.stack([o.recommendation for o in outcomes])
    counts = jnp.stack([o.counts for o in outcomes])
    errors = recs != jnp.argmax(means)
    shares = [
        bai.neyman_shares(
            jnp.full_like(means, 1.0 / means.shape[0]) if tau is None else bai.lse_weights(means, tau),
            stds,
        )
        for tau in neyman_taus
    ]
    neyman = jnp.stack(shares) if shares else jnp.zeros((0, means.shape[0]), jnp.float32)
    return errors, counts, neyman

  errors, counts, neyman = jax.vmap(one_run)(keys)  # [S, A], [S, A, K], [S, V, K]
  v = valid.astype(jnp.int32)
  e = errors.astype(jnp.int32) * v[:, None]
  discord = jnp.einsum("sa,sb->ab", e, 1 - errors.astype(jnp.int32))
  discord = discord + discord.T
  return SweepStats(
      runs=jnp.sum(v),
      errors=jnp.sum(e, axis=0),
      discord=discord,
      counts=jnp.sum(counts * v[:, None, None], axis=0),
      neyman=jnp.sum(neyman * valid[:, None, None], axis=0),
  )
