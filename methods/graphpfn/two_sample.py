"""Two-sample tests of sampled graphs against a reference sampler's graphs (host-side NumPy/SciPy).

Each graph is reduced to a few scalar statistics (:data:`STRUCTURE_STATS`),
one row per graph, so the rows of one sampler are independent draws.
Given two samplers' rows for the same per-graph hyperparameters, row
``i`` of each, :func:`compare` runs for every statistic

- the two-sample Kolmogorov-Smirnov test (distributions equal), and
- the Wilcoxon signed-rank test of the paired differences (under the null
  both graphs of a pair are independent draws from the same conditional
  distribution, so their difference is symmetric about 0; pairing removes
  the variation between hyperparameters and gives the test its power),

and rejects at level ``alpha`` after a Bonferroni correction over all of
them. The statistics follow what a reviewer of the GraphPFN prior checks
(Eremeev et al., 2025, Sec. 3.1): size and degrees, the degree tail,
clustering, label homophily at both SBM levels, the share of SBM nodes in
the largest component, how a first-level subgraph's degree grows with its
size, and the smallest second-level group.
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import jax
import numpy as np
from scipy import stats

from methods.graphpfn import statistics

STRUCTURE_STATS = (
    "num_edges", "mean_degree", "lcc_share", "degree_cv", "degree_top", "clustering", "homophily_level1",
    "homophily_level2", "subgraph_degree_slope", "min_group_share",
)


class TestResult(NamedTuple):
  """One test of one statistic."""

  statistic: str
  test: str  # "ks" or "signed_rank"
  value: float  # the KS distance, or the mean paired difference in pooled standard deviations
  p_value: float
  threshold: float  # alpha / number of tests (Bonferroni)
  reject: bool
  n: int  # graphs (pairs) used


def effective_groups(n_groups: int, n_nodes: int, min_group_size: int, groups_max: int) -> int:
  """Groups an SBM of ``n_nodes`` nodes gets from ``n_groups`` drawn (capped at its size and ``n / min_group_size``)."""
  return int(np.clip(min(n_groups, n_nodes, n_nodes // min_group_size), 1, groups_max))


def subgraph_degrees(g: Mapping, groups_max: int) -> tuple[np.ndarray, np.ndarray]:
  """``(sizes, degrees)`` of the first-level subgraphs present in graph ``g``: nodes kept, and the mean degree
  counting only edges inside the subgraph (both levels' edges; what the per-subgraph degree plot shows)."""
  u, v = np.asarray(g["senders"]), np.asarray(g["receivers"])
  b1 = np.asarray(g["block1"])
  sub = np.where(b1 >= 0, b1 // groups_max, -1)
  ids = sub[sub >= 0]
  if not len(ids):
    return np.zeros((0,)), np.zeros((0,))
  size = np.bincount(ids)
  ok = (sub[u] >= 0) & (sub[u] == sub[v])
  internal = np.bincount(sub[u][ok], minlength=len(size))
  present = size > 0
  return size[present].astype(float), 2 * internal[present] / size[present]


def _slope(g: Mapping, groups_max: int) -> float:
  """Slope of ``log(internal mean degree + 0.5)`` on ``log(size)`` over the first-level subgraphs."""
  size, degree = subgraph_degrees(g, groups_max)
  if len(size) < 2 or np.ptp(size) == 0:
    return math.nan
  return float(np.polyfit(np.log(size), np.log(degree + 0.5), 1)[0])


def structure_statistics(g: Mapping, *, n_sbm: int, groups2: int, groups_max: int) -> dict:
  """:data:`STRUCTURE_STATS` of one graph.

  Args:
    g: ``senders``, ``receivers`` (``[E]``, each edge once), ``num_nodes``,
      ``block1`` (``subgraph * groups_max + group``), ``block2`` (``-1`` for
      PA nodes).
    n_sbm: SBM nodes before the largest component was kept.
    groups2: the second-level SBM's effective number of groups.
    groups_max: the label stride of ``block1``.
  """
  u, v, n = np.asarray(g["senders"]), np.asarray(g["receivers"]), int(g["num_nodes"])
  b1, b2 = np.asarray(g["block1"]), np.asarray(g["block2"])
  deg = np.bincount(np.concatenate([u, v]), minlength=n).astype(float)
  mean = deg.mean() if n else math.nan
  labelled = (b1[u] >= 0) & (b1[v] >= 0)
  counts = np.bincount(b2[b2 >= 0], minlength=groups2)[:groups2]
  return {
      "num_edges": float(len(u)), "mean_degree": float(mean), "lcc_share": float(np.sum(b1 >= 0) / max(n_sbm, 1)),
      "degree_cv": float(deg.std() / mean) if mean > 0 else math.nan,
      "degree_top": float(deg.max() / mean) if mean > 0 else math.nan,
      "clustering": statistics.average_clustering(statistics.adjacency({"num_nodes": n, "senders": u, "receivers": v})),
      "homophily_level1": float(np.mean(b1[u][labelled] == b1[v][labelled])) if labelled.any() else math.nan,
      "homophily_level2": float(np.mean(b2[u][labelled] == b2[v][labelled])) if labelled.any() else math.nan,
      "subgraph_degree_slope": _slope(g, groups_max),
      "min_group_share": float(counts.min() / (n_sbm / groups2)),
  }


def host_graphs(batch) -> list[dict]:
  """The graphs of a batched :class:`methods.graphpfn.structure.StructureSample` as NumPy dicts, padding removed."""
  g = jax.tree.map(np.asarray, batch.graph)
  block1, block2 = np.asarray(batch.block1), np.asarray(batch.block2)
  out = []
  for i in range(g.node_mask.shape[0]):
    em = g.edge_mask[i]
    n = int(np.sum(g.node_mask[i]))
    out.append({"senders": g.senders[i][em], "receivers": g.receivers[i][em], "num_nodes": n,
                "block1": block1[i][:n], "block2": block2[i][:n]})
  return out


def table(rows: Sequence[Mapping], names: Sequence[str] = STRUCTURE_STATS) -> dict[str, np.ndarray]:
  """Per-graph statistic dicts to ``{name: [G] array}``."""
  return {k: np.asarray([r[k] for r in rows], float) for k in names}


def compare(ours: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], *, alpha: float = 0.01,
            names: Sequence[str] = STRUCTURE_STATS) -> list[TestResult]:
  """KS and paired signed-rank tests of every statistic, Bonferroni-corrected over all of them.

  ``ours[k][i]`` and ``reference[k][i]`` are statistic ``k`` of two graphs
  drawn with the same hyperparameters; NaN entries (undefined statistics)
  are left out (pairs with either NaN, for the paired test).
  """
  threshold = alpha / (2 * len(names))
  out = []
  for k in names:
    a, b = np.asarray(ours[k], float), np.asarray(reference[k], float)
    if a.shape != b.shape:
      raise ValueError(f"compare: statistic {k!r} has {a.shape[0]} graphs of ours and {b.shape[0]} of the reference")
    fa, fb = a[np.isfinite(a)], b[np.isfinite(b)]
    ks = stats.ks_2samp(fa, fb) if len(fa) and len(fb) else None
    p = float(ks.pvalue) if ks is not None else 1.0
    out.append(TestResult(k, "ks", float(ks.statistic) if ks is not None else math.nan, p, threshold, p < threshold,
                          min(len(fa), len(fb))))
    both = np.isfinite(a) & np.isfinite(b)
    d = a[both] - b[both]
    p = float(stats.wilcoxon(d).pvalue) if np.any(d != 0) else 1.0
    scale = np.sqrt((np.var(a[both]) + np.var(b[both])) / 2) if both.any() else math.nan
    out.append(TestResult(k, "signed_rank", float(d.mean() / scale) if scale > 0 else 0.0, p, threshold,
                          p < threshold, int(both.sum())))
  return out


def rejected(results: Sequence[TestResult]) -> list[str]:
  """``"statistic/test"`` of every rejecting test."""
  return [f"{r.statistic}/{r.test}" for r in results if r.reject]
