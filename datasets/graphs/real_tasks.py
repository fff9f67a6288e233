"""Real graphs as node tasks for an in-context model: features from structure, projected features.

A graph task here is the dict of ``methods/graphpfn/batching.py``
(``x, y, train_mask, eval_mask, senders, receivers, num_nodes, task,
num_classes``), so a real graph goes through the same padding as prior
samples.

* Zachary's karate club (:func:`karate_task`) has no node features; its
  features are computed from the structure alone (:func:`structural_features`):
  log-degree, local clustering coefficient, mean log-degree of the
  neighbours, log-PageRank, log of the two-hop neighbourhood size, and the
  first Laplacian eigenvectors, each column standardised. The GraphPFN prior
  feeds degree, PageRank and Laplacian eigenvectors to its SCMs as causes,
  so these are in-distribution kinds of features.
* Planetoid graphs (Cora, CiteSeer, PubMed, read by
  ``datasets/graphs/planetoid.py``) have 500-3703 bag-of-words features, more
  than the network's ``num_features``; :func:`project_features` reduces them
  by principal components (:func:`planetoid_task`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from datasets.graphs import karate


def _adjacency(senders, receivers, num_nodes: int) -> sp.csr_matrix:
  s, r = np.asarray(senders), np.asarray(receivers)
  a = sp.coo_matrix((np.ones(len(s)), (s, r)), shape=(num_nodes, num_nodes)).tocsr()
  a = ((a + a.T) > 0).astype(np.float64)
  a.setdiag(0)
  a.eliminate_zeros()
  return a


def standardise_columns(x: np.ndarray) -> np.ndarray:
  """Each column to mean 0 and standard deviation 1 (a constant column becomes 0)."""
  x = np.asarray(x, np.float64)
  sd = x.std(axis=0)
  return np.where(sd > 1e-12, (x - x.mean(axis=0)) / np.where(sd > 1e-12, sd, 1.0), 0.0).astype(np.float32)


def _pagerank(a: sp.csr_matrix, damping: float = 0.85, iterations: int = 100) -> np.ndarray:
  n = a.shape[0]
  deg = np.asarray(a.sum(1)).ravel()
  p = np.full(n, 1.0 / n)
  for _ in range(iterations):
    spread = a.T @ np.where(deg > 0, p / np.maximum(deg, 1), 0.0)
    p = (1 - damping) / n + damping * (spread + p[deg == 0].sum() / n)
  return p


def _laplacian_eigenvectors(a: sp.csr_matrix, k: int) -> np.ndarray:
  """Laplacian eigenmaps (Belkin & Niyogi, 2003): the ``k`` generalised eigenvectors after the first of ``L v = lambda D v``.

  Computed as ``D^-1/2 u`` for the eigenvectors ``u`` of ``I - D^-1/2 A D^-1/2``
  (ascending eigenvalues), each signed so its largest-magnitude entry is positive.
  """
  n = a.shape[0]
  k = min(k, n - 1)
  if k <= 0:
    return np.zeros((n, 0))
  deg = np.asarray(a.sum(1)).ravel()
  inv = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-12)), 0.0)
  lap = sp.eye(n) - sp.diags(inv) @ a @ sp.diags(inv)
  if n <= 2048:
    _, vecs = np.linalg.eigh(lap.toarray())
  else:
    from scipy.sparse.linalg import eigsh  # pylint: disable=g-import-not-at-top  (large graphs only)
    vals, vecs = eigsh(lap.tocsc(), k=k + 1, sigma=-1e-3, which="LM")
    vecs = vecs[:, np.argsort(vals)]
  vecs = vecs[:, 1:k + 1] * inv[:, None]
  top = vecs[np.argmax(np.abs(vecs), axis=0), np.arange(vecs.shape[1])]
  return vecs * np.where(top < 0, -1.0, 1.0)[None, :]


def structural_features(senders, receivers, num_nodes: int, *, num_eigvecs: int = 4) -> np.ndarray:
  """Node features from the graph alone: ``[N, 5 + num_eigvecs]`` float32, columns standardised.

  Columns: log(1 + degree), local clustering coefficient (Watts & Strogatz,
  1998), mean log(1 + degree) of the neighbours, log(N * PageRank) (damping
  0.85), log(1 + number of nodes within two hops), and the first
  ``num_eigvecs`` non-trivial Laplacian eigenmaps (a sign convention makes
  each one's largest-magnitude entry positive).
  """
  a = _adjacency(senders, receivers, num_nodes)
  deg = np.asarray(a.sum(1)).ravel()
  logdeg = np.log1p(deg)
  triangles = np.asarray((a @ a).multiply(a).sum(1)).ravel() / 2
  clustering = np.where(deg > 1, 2 * triangles / np.maximum(deg * (deg - 1), 1), 0.0)
  nbr_logdeg = np.where(deg > 0, (a @ logdeg) / np.maximum(deg, 1), 0.0)
  two_hop = np.asarray((((a @ a) + a) > 0).sum(1)).ravel()
  cols = [logdeg, clustering, nbr_logdeg, np.log(num_nodes * _pagerank(a)), np.log1p(two_hop)]
  x = np.concatenate([np.stack(cols, axis=1), _laplacian_eigenvectors(a, num_eigvecs)], axis=1)
  return standardise_columns(x)


def karate_task(*, train_per_class: int = 2, seed: int = 0, num_eigvecs: int = 4) -> dict:
  """Zachary's karate club as a binary node task with structural features.

  Args:
    train_per_class: training nodes drawn per club (the rest are evaluated).
    seed: NumPy seed of the draw.
    num_eigvecs: Laplacian eigenvectors among the features.

  Returns:
    The graph task dict (34 nodes, 78 edges, ``5 + num_eigvecs`` features).
  """
  g = karate.load()
  y = g["y"]
  rng = np.random.default_rng(seed)
  train = np.zeros(g["num_nodes"], bool)
  for c in (0, 1):
    train[rng.choice(np.flatnonzero(y == c), train_per_class, replace=False)] = True
  x = structural_features(g["senders"], g["receivers"], g["num_nodes"], num_eigvecs=num_eigvecs)
  return {"x": x, "y": y, "train_mask": train, "eval_mask": ~train, "senders": g["senders"],
          "receivers": g["receivers"], "num_nodes": g["num_nodes"], "task": "binary", "num_classes": 2}


def project_features(x: np.ndarray, num_features: int) -> np.ndarray:
  """At most ``num_features`` columns: the leading principal components of ``x`` if it has more.

  Unsupervised and transductive (fitted on every node's features, no
  labels): centre the columns, keep the top ``num_features`` right singular
  vectors (each signed so its largest-magnitude loading is positive), and
  standardise the projected columns. ``x`` with at most ``num_features``
  columns is only standardised. A graph with fewer nodes ``n`` than
  ``num_features`` has only ``n`` components: it gets ``n`` columns. A
  component of singular value zero (at most ``n - 1`` are not: the columns
  are centred) is a column of zeros, as a constant column is.
  """
  x = np.asarray(x, np.float64)
  if x.shape[1] <= num_features:
    return standardise_columns(x)
  centred = x - x.mean(axis=0)
  _, sv, vt = np.linalg.svd(centred, full_matrices=False)
  k = min(num_features, vt.shape[0])
  v = vt[:k].T
  top = v[np.argmax(np.abs(v), axis=0), np.arange(k)]
  # numpy's matrix_rank tolerance: a null component is rounding noise, which standardising would blow up
  null = sv[:k] <= (sv[0] if sv.size else 0.0) * max(x.shape) * np.finfo(np.float64).eps
  sign = np.where(null, 0.0, np.where(top < 0, -1.0, 1.0))
  return standardise_columns(centred @ (v * sign[None, :]))


def planetoid_task(data: dict, *, num_features: int) -> dict:
  """A graph read by ``datasets.graphs.planetoid.load`` as a multiclass node task.

  The public split: labelled ``train_index`` nodes are the context, labelled
  ``test_index`` nodes are evaluated; features are reduced to at most
  ``num_features`` by :func:`project_features`.
  """
  n = data["num_nodes"]
  y = np.asarray(data["y"])
  train = np.zeros(n, bool)
  train[np.asarray(data["train_index"])] = True
  train &= y >= 0
  test = np.zeros(n, bool)
  test[np.asarray(data["test_index"])] = True
  return {"x": project_features(data["x"], num_features), "y": y, "train_mask": train,
          "eval_mask": test & (y >= 0) & ~train, "senders": data["senders"], "receivers": data["receivers"],
          "num_nodes": n, "task": "multiclass", "num_classes": int(y.max()) + 1}
