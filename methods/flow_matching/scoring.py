"""Subset selection for data reduction (Briq et al., ICML 2026, Sec. 6), in NumPy.

Every selector returns exactly ``size`` distinct row indices (sorted) of the
``N`` training rows:

* ``random``: a uniform subset;
* ``cluster_proportional``: cosine k-means on features, the same fraction of
  each cluster (largest remainders), nearest-to-centroid first;
* ``cluster_balanced``: an equal quota per cluster, the shortfall of small
  clusters redistributed to the others (water-filling), nearest first;
* ``loss`` / ``gradient``: the top (or bottom) ``size`` per-sample scores
  (:func:`methods.flow_matching.core.loss_scores` / ``grad_scores``);
* ``kcenter``: greedy k-center coreset (Sener & Savarese, 2018);
* ``herding``: kernel herding with an RBF kernel (Chen, Welling & Smola, 2010).
"""

from __future__ import annotations

import numpy as np

CRITERIA = ("random", "cluster_proportional", "cluster_balanced", "loss", "gradient", "kcenter", "herding")


def subset_size(n: int, fraction: float) -> int:
  """``round(fraction * n)``, at least 1; ``fraction`` in (0, 1]."""
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"data fraction {fraction} is outside (0, 1]")
  return max(1, min(n, int(round(fraction * n))))


def _unit(x):
  x = np.asarray(x, np.float64)
  return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)


def cosine_kmeans(features, k: int, *, iters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Spherical k-means: ``(assignments [N], cosine distance to own centroid [N])``; k-means++ seeding."""
  x = _unit(features)
  rng = np.random.default_rng(seed)
  centers = [x[rng.integers(len(x))]]
  for _ in range(1, k):
    d = np.min(1 - x @ np.stack(centers).T, axis=1).clip(0)
    centers.append(x[rng.choice(len(x), p=d / d.sum())] if d.sum() > 0 else x[rng.integers(len(x))])
  c = np.stack(centers)
  for _ in range(iters):
    assign = np.argmax(x @ c.T, axis=1)
    for j in range(k):
      members = x[assign == j]
      if len(members):
        c[j] = members.sum(0) / (np.linalg.norm(members.sum(0)) + 1e-12)
  sims = x @ c.T
  assign = np.argmax(sims, axis=1)
  return assign, 1 - sims[np.arange(len(x)), assign]


def proportional_quotas(counts: np.ndarray, size: int) -> np.ndarray:
  """Per-cluster quotas proportional to ``counts`` summing to ``size`` (largest remainders)."""
  exact = counts * size / counts.sum()
  q = np.floor(exact).astype(int)
  order = np.argsort(-(exact - q), kind="stable")
  q[order[: size - q.sum()]] += 1
  return q


def balanced_quotas(counts: np.ndarray, size: int) -> np.ndarray:
  """Equal quotas capped by cluster sizes, shortfall redistributed; sums to ``size`` (<= counts.sum())."""
  q = np.zeros_like(counts)
  left = size
  while left > 0:
    open_ = np.nonzero(q < counts)[0]
    share = left // len(open_)
    if share == 0:  # fewer rows left than open clusters: one more each, largest clusters first
      for j in open_[np.argsort(-(counts[open_] - q[open_]), kind="stable")][:left]:
        q[j] += 1
      break
    for j in open_:
      add = min(share, counts[j] - q[j])
      q[j] += add
      left -= add
  return q


def _by_quota(assign, dist, quotas) -> np.ndarray:
  picked = []
  for j, qj in enumerate(quotas):
    members = np.nonzero(assign == j)[0]
    picked.append(members[np.argsort(dist[members], kind="stable")[:qj]])
  return np.sort(np.concatenate(picked))


def kcenter_greedy(features, size: int, *, seed: int) -> np.ndarray:
  """Greedy k-center: start at a random row, repeatedly add the row farthest from the selection."""
  x = np.asarray(features, np.float64)
  first = int(np.random.default_rng(seed).integers(len(x)))
  chosen = [first]
  d = np.sum(np.square(x - x[first]), axis=1)
  for _ in range(size - 1):
    i = int(np.argmax(d))
    chosen.append(i)
    d = np.minimum(d, np.sum(np.square(x - x[i]), axis=1))
  return np.sort(np.asarray(chosen))


def kernel_herding(features, size: int, *, bandwidth: float = 1.0) -> np.ndarray:
  """Kernel herding on the empirical distribution, RBF kernel, ``bandwidth`` x median distance, no repeats."""
  x = np.asarray(features, np.float64)
  sq = np.maximum(np.sum(x * x, 1)[:, None] + np.sum(x * x, 1)[None] - 2 * x @ x.T, 0)
  sigma2 = (bandwidth**2) * np.median(sq[np.triu_indices(len(x), 1)])
  k = np.exp(-sq / (2 * sigma2))
  mean_embed = k.mean(1)
  acc = np.zeros(len(x))
  chosen = np.zeros(len(x), bool)
  out = []
  for t in range(size):
    score = mean_embed - acc / (t + 1)
    score[chosen] = -np.inf
    i = int(np.argmax(score))
    out.append(i)
    chosen[i] = True
    acc += k[i]
  return np.sort(np.asarray(out))


def select(criterion: str, size: int, *, features=None, scores=None, seed: int = 0, num_clusters: int = 10,
           kmeans_iters: int = 30, keep: str = "high", herding_bandwidth: float = 1.0,
           num_rows: int | None = None) -> np.ndarray:
  """``size`` sorted row indices chosen by ``criterion`` (see the module docstring).

  Args:
    criterion: one of :data:`CRITERIA`.
    size: subset size (``1 <= size <= N``).
    features: ``[N, F]`` (clustering, k-center, herding).
    scores: ``[N]`` (``loss`` / ``gradient``).
    seed: randomness of ``random``, the k-means seeding and k-center's start.
    keep: ``"high"`` keeps the largest scores, ``"low"`` the smallest.
    num_rows: ``N`` for ``random`` when no features are given.
  """
  n = num_rows if num_rows is not None else len(features if features is not None else scores)
  if not 1 <= size <= n:
    raise ValueError(f"subset size {size} is outside [1, {n}]")
  if criterion == "random":
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
  if criterion in ("cluster_proportional", "cluster_balanced"):
    assign, dist = cosine_kmeans(features, num_clusters, iters=kmeans_iters, seed=seed)
    counts = np.bincount(assign, minlength=num_clusters)
    quotas = proportional_quotas(counts, size) if criterion == "cluster_proportional" else balanced_quotas(counts, size)
    return _by_quota(assign, dist, quotas)
  if criterion in ("loss", "gradient"):
    s = np.asarray(scores, np.float64)
    order = np.argsort(-s if keep == "high" else s, kind="stable")
    return np.sort(order[:size])
  if criterion == "kcenter":
    return kcenter_greedy(features, size, seed=seed)
  if criterion == "herding":
    return kernel_herding(features, size, bandwidth=herding_bandwidth)
  raise ValueError(f"unknown criterion {criterion!r}; allowed: {list(CRITERIA)}")
