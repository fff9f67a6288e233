"""A plain NumPy per-pull loop of VarDE BAI: the peer of the JAX sweep.

This is how such experiments are usually run (one seed at a time, one pull at
a time, NumPy on small vectors); it implements the same algorithm as
``methods.varde.varde`` (LSE weights, exact greedy score, shuffled warm start
counted in the budget, variance floor, argmax-mean recommendation) and is
used only by ``launch.bench``. Its random numbers differ from the JAX
version's, so error rates agree statistically, not bit for bit.
"""

from __future__ import annotations

import numpy as np


def varde_run(rng: np.random.Generator, means: np.ndarray, budget: int, *, tau: float = 0.1,
              warm_start: int = 2, var_floor: float = 0.01) -> tuple[int, np.ndarray]:
  """One run; returns (recommended arm, pulls per arm)."""
  k = len(means)
  stds = rng.permutation(means)
  count = np.zeros(k)
  total = np.zeros(k)
  total_sq = np.zeros(k)
  warm = rng.permutation(np.repeat(np.arange(k), warm_start))
  for t in range(budget):
    if t < len(warm):
      arm = warm[t]
    else:
      mean = total / count
      var = np.maximum((total_sq - count * mean**2) / (count - 1), var_floor)
      z = mean / tau
      w = np.exp(z - z.max())
      w /= w.sum()
      arm = int(np.argmax(w**2 * var / (count * (count + 1))))
    reward = means[arm] + stds[arm] * rng.standard_normal()
    count[arm] += 1
    total[arm] += reward
    total_sq[arm] += reward * reward
  return int(np.argmax(total / count)), count


def error_rate(means: np.ndarray, budget: int, num_seeds: int, seed: int = 0, **kw) -> float:
  rng = np.random.default_rng(seed)
  best = int(np.argmax(means))
  errors = sum(varde_run(rng, means, budget, **kw)[0] != best for _ in range(num_seeds))
  return errors / num_seeds
