"""Statistics of prior samples (host-side NumPy/SciPy, one graph at a time).

What a reviewer of a graph prior looks at (GraphPFN, Eremeev et al., 2025,
Sec. 3 and App. A): size, mean degree, the degree tail (Hill, 1975,
estimator of the tail index), average clustering (Watts & Strogatz, 1998),
degree assortativity (Newman, 2002), the fraction of edges inside a block
at each SBM level, edge and adjusted label homophily (Platonov et al., 2023,
"Characterizing graph datasets for node classification"), feature
homophily, the mutual information between the label and the best single
feature, raw and neighbour-averaged, class balance and the train ratio.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

STATS = (
    "num_nodes", "num_edges", "mean_degree", "hill_tail_index", "clustering", "assortativity",
    "intra_block_level1", "intra_block_level2", "edge_homophily", "adjusted_homophily",
    "feature_homophily", "mi_raw", "mi_aggregated", "class_balance", "train_ratio", "num_features",
    "num_classes", "pa_share",
)


def host_sample(batch, i: int) -> dict:
  """Graph ``i`` of a batched :class:`methods.graphpfn.Sample` as NumPy arrays, padding removed."""
  g = batch.graph
  n = int(np.sum(np.asarray(g.node_mask[i])))
  em = np.asarray(g.edge_mask[i])
  f = int(np.sum(np.asarray(batch.feature_mask[i])))
  return {
      "senders": np.asarray(g.senders[i])[em], "receivers": np.asarray(g.receivers[i])[em],
      "num_nodes": n, "x": np.asarray(batch.x[i])[:n, :f], "y": np.asarray(batch.y[i])[:n],
      "train_mask": np.asarray(batch.train_mask[i])[:n], "task": int(batch.task[i]),
      "num_classes": int(batch.num_classes[i]), "block1": np.asarray(batch.block1[i])[:n],
      "block2": np.asarray(batch.block2[i])[:n], "is_pa": np.asarray(batch.is_pa[i])[:n],
  }


def adjacency(s: dict) -> sp.csr_matrix:
  n = s["num_nodes"]
  a = sp.coo_matrix((np.ones(len(s["senders"])), (s["senders"], s["receivers"])), shape=(n, n))
  return (a + a.T).tocsr()


def hill_tail_index(degrees: np.ndarray) -> float:
  """Hill estimator of the degree tail index over the top ``k = max(5, sqrt(n))`` degrees."""
  d = np.sort(degrees[degrees > 0])[::-1]
  k = max(5, int(math.sqrt(len(d))))
  if len(d) <= k or d[k] <= 0:
    return math.nan
  logs = np.log(d[:k] / d[k])
  return float(1.0 / np.mean(logs)) if np.mean(logs) > 0 else math.nan


def average_clustering(a: sp.csr_matrix) -> float:
  """Mean local clustering coefficient (0 for nodes of degree < 2)."""
  deg = np.asarray(a.sum(axis=1)).ravel()
  tri = np.asarray((a @ a).multiply(a).sum(axis=1)).ravel() / 2
  pairs = deg * (deg - 1) / 2
  local = np.where(pairs > 0, tri / np.maximum(pairs, 1), 0.0)
  return float(local.mean()) if len(local) else math.nan


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
  if len(a) < 2 or a.std() == 0 or b.std() == 0:
    return math.nan
  return float(np.corrcoef(a, b)[0, 1])


def _bins(v: np.ndarray, k: int = 8) -> np.ndarray:
  """Quantile bins ``0..k-1`` (ties share a bin)."""
  edges = np.unique(np.quantile(v, np.linspace(0, 1, k + 1)[1:-1]))
  return np.searchsorted(edges, v, side="right")


def mutual_information(a: np.ndarray, b: np.ndarray) -> float:
  """Plug-in mutual information (nats) of two discrete arrays."""
  _, ai = np.unique(a, return_inverse=True)
  _, bi = np.unique(b, return_inverse=True)
  joint = np.zeros((ai.max() + 1, bi.max() + 1))
  np.add.at(joint, (ai, bi), 1)
  joint /= joint.sum()
  pa, pb = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
  nz = joint > 0
  return float(np.sum(joint[nz] * np.log(joint[nz] / (pa @ pb)[nz])))


def _best_mi(x: np.ndarray, label: np.ndarray) -> float:
  if x.shape[1] == 0:
    return math.nan
  return max(mutual_information(_bins(x[:, j]), label) for j in range(x.shape[1]))


def graph_statistics(s: dict) -> dict:
  """Every statistic of :data:`STATS` for one host sample (NaN where undefined)."""
  n, u, v = s["num_nodes"], s["senders"], s["receivers"]
  a = adjacency(s)
  deg = np.asarray(a.sum(axis=1)).ravel()
  both_u, both_v = np.concatenate([u, v]), np.concatenate([v, u])
  out = {k: math.nan for k in STATS}
  out.update(num_nodes=n, num_edges=len(u), mean_degree=2 * len(u) / max(n, 1),
             hill_tail_index=hill_tail_index(deg), clustering=average_clustering(a),
             assortativity=_pearson(deg[both_u], deg[both_v]),
             train_ratio=float(np.mean(s["train_mask"])) if n else math.nan,
             num_features=s["x"].shape[1], num_classes=s["num_classes"],
             pa_share=float(np.mean(s["is_pa"])) if n else math.nan)
  for level in (1, 2):
    b = s[f"block{level}"]
    ok = (b[u] >= 0) & (b[v] >= 0)
    if ok.any():
      out[f"intra_block_level{level}"] = float(np.mean(b[u][ok] == b[v][ok]))
  x, y = s["x"], s["y"]
  if x.shape[1] and len(u):
    corr = [_pearson(x[both_u, j], x[both_v, j]) for j in range(x.shape[1])]
    out["feature_homophily"] = float(np.nanmean(corr)) if not np.all(np.isnan(corr)) else math.nan
  classification = s["task"] != 0
  label = y.astype(int) if classification else _bins(y)
  if n > 1:
    agg = (a @ x) / np.maximum(deg, 1)[:, None]
    out["mi_raw"], out["mi_aggregated"] = _best_mi(x, label), _best_mi(agg, label)
  if classification and len(u):
    same = label[u] == label[v]
    h = float(np.mean(same))
    k = max(int(label.max()) + 1, 1)
    p = np.bincount(label, weights=deg, minlength=k) / max(deg.sum(), 1)
    denom = 1 - np.sum(p**2)
    out["edge_homophily"] = h
    out["adjusted_homophily"] = (h - np.sum(p**2)) / denom if denom > 0 else math.nan
  if classification:
    counts = np.bincount(label, minlength=max(s["num_classes"], 1))
    q = counts[counts > 0] / counts.sum()
    out["class_balance"] = float(-np.sum(q * np.log(q)) / math.log(len(counts))) if len(counts) > 1 else math.nan
  return out


def summarize(values: np.ndarray) -> dict:
  """Mean, standard deviation, quantiles and NaN share of one statistic's values."""
  v = np.asarray(values, float)
  f = v[np.isfinite(v)]
  if not len(f):
    return {"count": 0, "nan_share": 1.0}
  q = np.quantile(f, [0.05, 0.25, 0.5, 0.75, 0.95])
  return {"count": int(len(f)), "nan_share": float(1 - len(f) / len(v)), "mean": float(f.mean()),
          "sd": float(f.std()), "q05": q[0], "q25": q[1], "median": q[2], "q75": q[3], "q95": q[4]}
