"""NumPy peers of VarDE BAI: a per-pull loop per seed, and a loop over pulls vectorised over seeds.

:func:`varde_run` is how such experiments are usually run (one seed at a
time, one pull at a time, NumPy on small vectors). :func:`varde_vectorised`
is what a skilled NumPy user writes instead: all seeds advance one pull at a
time as ``[K, seeds]`` arrays (one Python iteration per pull, not per seed
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


def check_warm_start(warm_start: int) -> None:
  """Both vectorised kernels estimate variances from the warm start, so every arm needs two pulls."""
  if warm_start < 2:
    raise ValueError(f"warm_start={warm_start}: the variances need two pulls of every arm")


def varde_vectorised(rng: np.random.Generator, means: np.ndarray, budget: int, num_seeds: int, *, tau: float = 0.1,
                     warm_start: int = 2, var_floor: float = 0.01, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
  """``num_seeds`` runs at once; returns (recommended arms ``[seeds]``, pulls ``[seeds, K]``).

  One Python iteration per pull; the state is ``[K, seeds]`` arrays (seeds
  contiguous, so the argmax over arms runs along rows of whole vectors), and
  each pull reads and writes one entry per column through flat indices
  (``take`` and ``put``: several times faster than ``a[arm, cols]``). The
  greedy rule is the same argmax in the log domain, kept per arm as
  ``methods.varde.bai`` keeps it: ``softmax(mu / tau)``'s normaliser is
  common to all arms and ``log`` is increasing, so ``argmax_i w_i^2 var_i /
  (N_i (N_i + 1))`` is ``argmax_i 2 mu_i / tau + log(var_i / (N_i (N_i +
  1)))``, each arm's score depends on its own statistics only, and a pull
  rescores only the pulled arm (one ``log`` per seed instead of ``K``). With
  the same generator it recommends what the ``[seeds, K]`` softmax form
  recommends.
  """
  check_warm_start(warm_start)
  k = len(means)
  means = np.asarray(means, dtype)
  stds, warm = draw_problem(rng, means, num_seeds, warm_start=warm_start, dtype=dtype)
  stds, warm = np.ascontiguousarray(stds.T), np.ascontiguousarray(warm.T)
  count, total, total_sq = (np.zeros((k, num_seeds), dtype) for _ in range(3))
  flat = [a.reshape(-1) for a in (stds, count, total, total_sq)]
  cols = np.arange(num_seeds)
  n_warm = warm.shape[0]

  def scores(n, s1, s2):
    mean = s1 / n
    var = np.maximum((s2 - n * mean * mean) / (n - 1), var_floor)
    return (2.0 / tau) * mean + np.log(var / (n * (n + 1)))

  score = None
  for t in range(budget):
    arm = warm[t] if t < n_warm else np.argmax(score, axis=0)
    idx = arm * num_seeds + cols
    sd, n, s1, s2 = (a.take(idx) for a in flat)
    reward = means[arm] + sd * rng.standard_normal(num_seeds, dtype=dtype)
    n, s1, s2 = n + 1, s1 + reward, s2 + reward * reward
    for a, v in zip(flat[1:], (n, s1, s2)):
      a.put(idx, v)
    if t == n_warm - 1:  # every arm has its warm-start pulls: score all of them once
      score = scores(count, total, total_sq)
    elif t >= n_warm:
      score.reshape(-1).put(idx, scores(n, s1, s2))
  return np.argmax(total / count, axis=0), count.T


def error_rate_vectorised(means: np.ndarray, budget: int, num_seeds: int, seed: int = 0, **kw) -> float:
  rec, _ = varde_vectorised(np.random.default_rng(seed), means, budget, num_seeds, **kw)
  return float(np.mean(rec != int(np.argmax(means))))
