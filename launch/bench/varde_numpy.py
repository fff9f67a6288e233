"""NumPy peers of VarDE BAI: a per-pull loop per seed, and a loop over pulls vectorised over seeds.

:func:`varde_run` is how such experiments are usually run (one seed at a
time, one pull at a time, NumPy on small vectors). :func:`varde_vectorised`
is what a skilled NumPy user writes instead: all seeds advance one pull at a
time as ``[seeds, K]`` arrays (one Python iteration per pull, not per seed
and pull). Both implement the same algorithm as ``methods.varde.varde`` (LSE
weights, exact greedy score, shuffled warm start counted in the budget,
variance floor, argmax-mean recommendation) on the same problem (the stds a
random permutation of the means in every run) and are used only by
``launch.bench``. Their random numbers differ from the JAX version's, so
error rates agree statistically, not bit for bit.
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


def draw_problem(rng: np.random.Generator, means: np.ndarray, num_seeds: int, *, warm_start: int = 2,
                 dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
  """Per seed ``(stds [seeds, K], warm-start order [seeds, K * warm_start])``, as :func:`varde_run` draws one seed's.

  The arms' standard deviations are a random permutation of the means (the
  paper's E1-E4 instances); the warm start pulls every arm ``warm_start``
  times in a random order.
  """
  k = len(means)
  stds = np.asarray(means, dtype)[rng.permuted(np.broadcast_to(np.arange(k), (num_seeds, k)), axis=1)]
  warm = rng.permuted(np.broadcast_to(np.repeat(np.arange(k), warm_start), (num_seeds, k * warm_start)), axis=1)
  return stds, warm


def varde_vectorised(rng: np.random.Generator, means: np.ndarray, budget: int, num_seeds: int, *, tau: float = 0.1,
                     warm_start: int = 2, var_floor: float = 0.01, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
  """``num_seeds`` runs at once; returns (recommended arms ``[seeds]``, pulls ``[seeds, K]``).

  One Python iteration per pull; every operation acts on ``[seeds, K]``
  arrays; per-seed updates are scattered through flat indices.
  """
  k = len(means)
  means = np.asarray(means, dtype)
  stds, warm = draw_problem(rng, means, num_seeds, warm_start=warm_start, dtype=dtype)
  count = np.zeros((num_seeds, k), dtype)
  total = np.zeros((num_seeds, k), dtype)
  total_sq = np.zeros((num_seeds, k), dtype)
  base = np.arange(num_seeds) * k
  flat = (count.reshape(-1), total.reshape(-1), total_sq.reshape(-1))
  for t in range(budget):
    if t < warm.shape[1]:
      arm = warm[:, t]
    else:
      mean = total / count
      var = np.maximum((total_sq - count * mean * mean) / (count - 1), var_floor)
      z = mean / tau
      w = np.exp(z - z.max(axis=1, keepdims=True))
      w /= w.sum(axis=1, keepdims=True)
      arm = np.argmax(w * w * var / (count * (count + 1)), axis=1)
    idx = base + arm
    reward = means[arm] + stds.reshape(-1)[idx] * rng.standard_normal(num_seeds, dtype=dtype)
    flat[0][idx] += 1
    flat[1][idx] += reward
    flat[2][idx] += reward * reward
  return np.argmax(total / count, axis=1), count


def error_rate_vectorised(means: np.ndarray, budget: int, num_seeds: int, seed: int = 0, **kw) -> float:
  rec, _ = varde_vectorised(np.random.default_rng(seed), means, budget, num_seeds, **kw)
  return float(np.mean(rec != int(np.argmax(means))))
