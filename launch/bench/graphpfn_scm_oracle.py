r"""The GraphPFN reference's attribute and task generator in plain NumPy, and two-sample tests of this project's SCM.

  python -m launch.bench.graphpfn_scm_oracle --graphs=200

A NumPy re-implementation, written for this project, of the graph-aware SCM of yandex-research/graphpfn as its
pretraining config draws it (``exp/graphpfn/pretrain/main/pretrain.toml``; ``attributes/gnn_scm.py``,
``base_scm.py``, ``layers.py``, ``activations.py``, ``structural.py``, ``postprocessing/``; torch and DGL there).
Its ``common.py`` and ``input_sampler.py`` are not in the stored snapshot: weight init, root causes and the choice
of X and y follow its earlier ``gnn_scm.py`` and ``utils.py``. A draw the reference rejects is redrawn (new
hyperparameters, same graph); the steps and checks are listed in docs/graphpfn.md.

:func:`attribute_statistics` reduces an attributed graph of either generator to scalars (the share of the target's
variance explained by neighbours among them); :func:`scm_two_sample_panel` runs both generators on the same graphs
and tests each statistic (KS; chi-square for the task kind and the class count), Bonferroni at 1%.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import warnings
from typing import Callable, Mapping, NamedTuple, Sequence

import jax
import numpy as np
from scipy import stats
import threadpoolctl

from methods import graphpfn
from methods.graphpfn import AttributeConfig, StructureConfig, statistics, two_sample

ACTIVATIONS = ("tanh", "leaky_relu", "elu", "identity", "selu", "silu", "relu", "softplus", "relu6", "hardtanh",
               "sign", "rbf", "exp", "sqrt_abs", "unit_interval_indicator", "sine", "square", "abs", "random_fourier")
REGRESSION, BINARY, MULTICLASS = graphpfn.REGRESSION, graphpfn.BINARY, graphpfn.MULTICLASS
MIN_FEATURES, MAX_CATEGORIES, P_CAT = 4, 256, 0.2
DISCRETE_MAX = 32  # a column with at most this many distinct values counts as discrete
PCA_COMPONENTS = 8
# The structure test's sizes (tests/test_graphpfn_oracle.py): 64-128 nodes, degrees 1.5-32.
SMALL = StructureConfig(n_nodes_min=64, n_nodes_max=128, low_degree_max=16.0, high_degree_min=16.0,
                        high_degree_max=32.0, min_first_level_nodes=8, subgraphs_max=4, groups_max=6)
COUNT_STATS = ("task", "num_classes")
CONTINUOUS_STATS = ("n_features", "discrete_share", "mean_abs_skew", "mean_abs_corr", "majority_share",
                    "target_skew", "target_kurtosis", "train_share", "r2_own", "r2_gain")
SCM_STATS = COUNT_STATS + CONTINUOUS_STATS
# Departures that can move each statistic: docs/graphpfn.md's numbers, and letters for those found by this port.
DEPARTURES = {"task": "", "num_classes": "", "majority_share": "", "n_features": "10, 12, c, e",
              "discrete_share": "7, 9, 12, a", "mean_abs_skew": "1, 2, 3, 7, 9, b", "mean_abs_corr": "1, 2, 4, 6, b, c",
              "target_skew": "1, 3, 7, 11, d", "target_kurtosis": "1, 3, 7, 11, d", "train_share": "12",
              "r2_own": "1, 2, 4, 10, 11, b, c, d", "r2_gain": "1, 4, 8, b"}


class SanityCheckError(RuntimeError):
  """A draw the reference rejects (and redraws)."""


# One draw's hyperparameters as the pretraining config samples them (task: REGRESSION, BINARY or MULTICLASS).
OracleParams = NamedTuple("OracleParams", [
    ("n_features", int), ("n_causes", int), ("n_layers", int), ("hidden_dim", int), ("activations", tuple),
    ("strategy", str), ("pre_sample_stats", bool), ("noise_std", float), ("pre_sample_noise", bool),
    ("init_std", float), ("block_wise", bool), ("p_dropout", float), ("causal", bool), ("y_is_effect", bool),
    ("in_clique", bool), ("sort_features", bool), ("conv_type", str), ("graph_conv_ratio", float), ("use_degree", bool),
    ("use_pagerank", bool), ("task", int), ("n_classes", int), ("quantile", float), ("train_ratio", float)])


# x [n, F] float32, y [n] float32 (standardised value or class id), train_mask [n] (the first n_train nodes).
Attributes = NamedTuple("Attributes", [("x", np.ndarray), ("y", np.ndarray), ("task", int),
                                       ("train_mask", np.ndarray), ("params", OracleParams), ("attempts", int)])


def _meta_trunc_norm(rng, min_mean: float, max_mean: float, lower: float, rounded: bool):
  """``lower + truncnorm(mu, mu e^s)`` on ``[0, 1e6]``, ``log mu ~ U``, ``s ~ U(log 0.01, 0)``."""
  mu = math.exp(rng.uniform(math.log(min_mean), math.log(max_mean)))
  sigma = mu * math.exp(rng.uniform(math.log(0.01), 0.0))
  v = float(stats.truncnorm.rvs(-mu / sigma, (1e6 - mu) / sigma, loc=mu, scale=sigma, random_state=rng))
  return int(lower + round(v)) if rounded else lower + v


def sample_params(rng: np.random.Generator, *, ignore_graph: bool = False) -> OracleParams:
  """One draw of the pretraining config; ``ignore_graph`` switches the conv units and structural inputs off."""
  coin = lambda: bool(rng.random() < 0.5)  # noqa: E731
  n_features = int(rng.integers(4, 101))
  causal, y_is_effect, in_clique, sort_features = coin(), coin(), coin(), coin()
  n_layers = _meta_trunc_norm(rng, 1, 6, 2, True)
  weights, blocks = np.array([10.0 if a == "random_fourier" else 1.0 for a in ACTIVATIONS]), n_layers - int(causal)
  acts = rng.choice(len(ACTIVATIONS), size=blocks if coin() else 1, p=weights / weights.sum())  # per block, or one
  b, k = rng.uniform(0.1, 5.0, 2)
  return OracleParams(
      n_features=n_features, n_causes=_meta_trunc_norm(rng, 1, 12, 1, True) if causal else n_features,
      n_layers=n_layers, hidden_dim=_meta_trunc_norm(rng, 5, 130, 4, True),
      activations=tuple(ACTIVATIONS[i] for i in np.resize(acts, blocks)),
      strategy=("normal", "mixed", "uniform")[rng.integers(3)], pre_sample_stats=coin(),
      noise_std=_meta_trunc_norm(rng, 1e-4, 0.3, 0.0, False), pre_sample_noise=coin(),
      init_std=_meta_trunc_norm(rng, 0.01, 10.0, 0.0, False), block_wise=coin(), p_dropout=0.9 * rng.beta(b, k),
      causal=causal, y_is_effect=y_is_effect, in_clique=in_clique, sort_features=sort_features,
      conv_type=graphpfn.CONV_TYPES[rng.integers(5)], graph_conv_ratio=0.0 if ignore_graph else rng.integers(11) / 10,
      use_degree=coin() and not ignore_graph, use_pagerank=coin() and not ignore_graph,
      task=int(rng.integers(3)), n_classes=int(rng.integers(2, 11)), quantile=rng.uniform(0.01, 0.99),
      train_ratio=rng.uniform(0.05, 0.5))


# Both directions of every edge, sorted by dst; starts [n]: each node's first in-edge; degree [n] float32.
_Adjacency = NamedTuple("_Adjacency", [("src", np.ndarray), ("dst", np.ndarray), ("starts", np.ndarray),
                                       ("degree", np.ndarray)])


def _adjacency(senders, receivers, n: int) -> _Adjacency:
  src, dst = (np.concatenate(e).astype(np.int64) for e in ([senders, receivers], [receivers, senders]))
  src, dst = src[(order := np.argsort(dst, kind="stable"))], dst[order]
  return _Adjacency(src, dst, np.searchsorted(dst, np.arange(n)), np.bincount(dst, minlength=n).astype(np.float32))


def _segment(adj: _Adjacency, values: np.ndarray, reduce) -> np.ndarray:
  """``reduce`` (a ufunc) of ``values [2E, D]`` over each node's in-edges; 0 where a node has none."""
  out = np.zeros((len(adj.degree), values.shape[1]), values.dtype)
  if (has := adj.degree > 0).any():
    out[has] = reduce.reduceat(values, adj.starts[has], axis=0)
  return out


def _conv(rng, adj: _Adjacency, x, p: OracleParams):
  """``p.conv_type`` over the in-neighbours (GCN: ``1 / sqrt(d_u d_v)``, no self-loop; attention: single head,
  random q/k/v and output layers, over the neighbours and the node itself)."""
  if p.conv_type == "gcn":
    d = np.maximum(adj.degree, 1.0)
    return _segment(adj, x[adj.src] / np.sqrt(d[adj.src] * d[adj.dst])[:, None], np.add)
  if p.conv_type != "gt":
    ufunc = {"sage-mean": np.add, "sage-min": np.minimum, "sage-max": np.maximum}[p.conv_type]
    out = _segment(adj, x[adj.src], ufunc)
    return out / np.maximum(adj.degree, 1.0)[:, None] if p.conv_type == "sage-mean" else out
  n, d = x.shape
  wqkv, bqkv = _linear_init(rng, d, 3 * d, p, first=False)
  wo, bo = _linear_init(rng, d, d, p, first=False)
  q, k, v = np.split(x @ wqkv.T + bqkv, 3, axis=1)
  src, dst = np.concatenate([adj.src, np.arange(n)]), np.concatenate([adj.dst, np.arange(n)])
  score = np.sum(k[src] * q[dst], axis=1) / math.sqrt(d)
  top = np.full(n, -np.inf, np.float32)
  np.maximum.at(top, dst, score)
  w = np.exp(score - top[dst])
  out = np.zeros_like(v)
  np.add.at(out, dst, w[:, None] * v[src])
  return (out / np.bincount(dst, weights=w, minlength=n)[:, None].astype(np.float32)) @ wo.T + bo


def _linear_init(rng, d_in: int, d_out: int, p: OracleParams, first: bool):
  """A layer's ``(W [out, in], b [out])``: block-wise or Bernoulli dropout init; biases keep torch's default."""
  w = np.zeros((d_out, d_in), np.float32)
  if p.block_wise:
    blocks = int(rng.integers(1, math.ceil(math.sqrt(min(d_out, d_in))) + 1))
    r, c = d_out // blocks, d_in // blocks
    keep = blocks * r * c / w.size
    for i in range(blocks):
      w[i * r:(i + 1) * r, i * c:(i + 1) * c] = rng.normal(0.0, p.init_std / math.sqrt(keep), (r, c)) if keep else 0
  else:
    drop = 0.0 if first else min(p.p_dropout, 0.99)
    w[:] = rng.normal(0.0, p.init_std / math.sqrt(1 - drop), w.shape) * (rng.random(w.shape) >= drop)
  return w, (rng.uniform(-1.0, 1.0, d_out) / math.sqrt(d_in)).astype(np.float32)


def _activate(rng, name: str, x):
  """Standardise (first batch), random scale ``exp(2 z1) (x + z2)``, then the activation."""
  x = (x - x.mean(0)) / (x.std(0, ddof=1) + 1e-6)
  x = np.float32(math.exp(2 * rng.normal())) * (x + np.float32(rng.normal()))
  if name == "random_fourier":
    freqs = 256 * rng.random(256)
    bias, decay = 2 * math.pi * rng.random(256), -math.exp(rng.uniform(math.log(0.7), math.log(3.0)))
    weights = freqs ** decay / np.sqrt(np.sum(freqs ** (2 * decay))) * rng.normal(size=256)
    z, f32 = (x - x.mean(0)) / (x.std(0, ddof=1) + 1e-6), [a.astype(np.float32) for a in (freqs, bias, weights)]
    return sum(np.sin(z[..., None] * f32[0][c] + f32[1][c]) @ f32[2][c] for c in np.array_split(np.arange(256), 8))
  fns: dict[str, Callable] = {
      "tanh": np.tanh, "leaky_relu": lambda v: np.where(v > 0, v, 0.01 * v), "identity": lambda v: v,
      "elu": lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0))), "relu": lambda v: np.maximum(v, 0),
      "selu": lambda v: 1.0507 * np.where(v > 0, v, 1.67326 * np.expm1(np.minimum(v, 0))), "sine": np.sin,
      "silu": lambda v: v / (1 + np.exp(-v)), "softplus": lambda v: np.logaddexp(0, v), "exp": np.exp,
      "relu6": lambda v: np.clip(v, 0, 6), "hardtanh": lambda v: np.clip(v, -1, 1), "square": np.square, "abs": np.abs,
      "sign": lambda v: 2.0 * (v >= 0) - 1.0, "rbf": lambda v: np.exp(-v * v), "sqrt_abs": lambda v: np.sqrt(np.abs(v)),
      "unit_interval_indicator": lambda v: 1.0 * (np.abs(v) <= 1)}
  return fns[name](x).astype(np.float32)


def _causes(rng, n: int, c: int, p: OracleParams) -> np.ndarray:
  """Root causes ``[n, c]`` (the reference's ``XSampler``)."""
  if p.strategy == "uniform":
    return rng.random((n, c)).astype(np.float32)
  means = rng.normal(size=c) if p.pre_sample_stats else np.zeros(c)
  normal = rng.normal(means, np.abs(rng.normal(size=c) * means) if p.pre_sample_stats else 1.0, (n, c))
  if p.strategy == "normal":
    return normal.astype(np.float32)
  zipf_p, multi_p, normal_p = rng.random(3) * 0.66
  out = normal.astype(np.float32)
  for j in range(c):  # normal, else multinomial (2-20 categories, standardised), else Zipf (<= 10, centred), else U
    if rng.random() > normal_p:
      continue
    if rng.random() > multi_p:
      v = rng.choice(k := int(rng.integers(2, 21)), n, p=(w := rng.random(k)) / w.sum()).astype(float)
      out[:, j] = (v - v.mean()) / v.std(ddof=1) if v.std() > 0 else np.nan
    elif rng.random() > zipf_p:
      out[:, j] = (v := np.minimum(rng.zipf(2.0 + 2 * rng.random(), n), 10)) - v.mean()
    else:
      out[:, j] = rng.random(n)
  return out


def _forward(rng, adj: _Adjacency, p: OracleParams):
  """The SCM's ``(X, y)`` on causes and the drawn structural inputs (``log(1 + degree)``, PageRank): units of the
  blocks (causal; y the last unit when ``y_is_effect``) or the causes and the output."""
  width = max(p.hidden_dim, 1 + 2 * p.n_features) if p.causal else p.hidden_dim
  n, causes = len(adj.degree), _causes(rng, len(adj.degree), p.n_causes, p)
  inputs = [causes] + ([np.log1p(adj.degree)[:, None]] if p.use_degree else [])
  if p.use_pagerank:  # log(1e-6 + PageRank), damping U(0.6, 0.9), at most 30 steps
    alpha, pv, out_deg = 0.6 + 0.3 * rng.random(), np.full(n, 1.0 / n), np.maximum(adj.degree, 1.0)
    for _ in range(30):
      prev, pv = pv, alpha * _segment(adj, (pv / out_deg)[adj.src][:, None], np.add)[:, 0] + (1 - alpha) / n
      if np.abs(pv - prev).sum() < 1e-6:
        break
    inputs.append(np.log(1e-6 + pv)[:, None].astype(np.float32))
  h, outputs = np.concatenate(inputs, axis=1), []
  for i, act in enumerate(("",) + p.activations):  # the first layer, then activation -> layer -> noise blocks
    h = _activate(rng, act, h) if act else h
    d_out = 1 if (not p.causal and i == len(p.activations)) else width
    w, b = _linear_init(rng, h.shape[1], d_out, p, first=not act)
    h, conv = h @ w.T + b, rng.random(d_out) < p.graph_conv_ratio  # MixedGraphLinear: conv units by a mask
    h = np.where(conv[None, :], _conv(rng, adj, h, p), h) if conv.any() else h
    if act:
      std = np.abs(rng.normal(size=(1, d_out)) * p.noise_std) if p.pre_sample_noise else p.noise_std
      outputs.append(h := (h + rng.normal(size=h.shape) * std).astype(np.float32))
  if not p.causal:
    return causes, outputs[-1][:, 0]
  flat = np.concatenate(outputs, axis=1)
  d, f = flat.shape[1], p.n_features
  perm = int(rng.integers(0, d - f)) + rng.permutation(1 + f) if p.in_clique else rng.permutation(d - 1)
  idx = np.sort(perm[1:1 + f]) if p.sort_features else perm[1:1 + f]
  return flat[:, idx], flat[:, d - 1 if p.y_is_effect else perm[0]]


def _scale(x):
  """Standardised columns (``ddof=1``, std >= 1e-6), clipped to +-100."""
  return np.clip((x - x.mean(0)) / np.maximum(x.std(0, ddof=1), 1e-6), -100, 100)


def _relabel(rng, c: np.ndarray) -> np.ndarray:
  """Class ids to ``0..k-1`` (k the values present) in a random order (the reference's ``permute_classes``)."""
  values, inverse = np.unique(c, return_inverse=True)
  return rng.permutation(len(values))[inverse] if len(values) > 1 else c


def _postprocess(rng, x):
  """Categorical columns, two-pass 4-sigma clipping, standardisation, column permutation."""
  if rng.random() < P_CAT:  # each column with probability U(0, 1): ranks at random nodes' values
    x, col_prob, n = x.copy(), rng.random(), x.shape[0]
    for j in np.flatnonzero(rng.random(x.shape[1]) < col_prob):
      k = min(max(round(rng.gamma(1.0, 10.0)), 2), MAX_CATEGORIES)
      c = np.sum(x[:, j, None] > x[rng.integers(0, n, k - 1), j][None, :], axis=1)
      x[:, j] = _relabel(rng, c) if rng.random() > 0.3 else c
  mean, std = x.mean(0), np.maximum(x.std(0, ddof=1), 1e-6)
  inside = np.where(np.abs(x - mean) <= 4 * std, x, np.nan)  # second pass: bounds from the values inside
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    m2, s2 = np.nanmean(inside, 0), np.maximum(np.nanstd(inside, 0, ddof=1), 1e-6)
  m2, s2 = np.where(np.isnan(m2), mean, m2), np.where(np.isnan(s2), 0.0, s2)
  x = _scale(np.clip(x, m2 - 4 * s2, m2 + 4 * s2))
  return x[:, rng.permutation(x.shape[1])]


def _attempt(rng, adj: _Adjacency, n_requested: int, p: OracleParams, attempts: int) -> Attributes:
  """One draw on ``p``; the task from the standardised target (binary at the drawn quantile, multiclass at random
  nodes' values, classes relabelled at random); :class:`SanityCheckError` where the reference rejects it."""
  n, n_train = len(adj.degree), int(n_requested * p.train_ratio)
  if n_train >= n or n_train < 1:
    raise SanityCheckError(f"{n_train} training nodes of {n}")
  with np.errstate(all="ignore"):
    x, y = _forward(rng, adj, p)
  if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
    raise SanityCheckError("SCM produced NaN or infinite values")
  x = _postprocess(rng, x.astype(np.float64))
  x = x[:, x[:n_train].max(0) > x[:n_train].min(0)]
  if x.shape[1] < MIN_FEATURES:
    raise SanityCheckError(f"{x.shape[1]} features kept")
  z = _scale(y[:, None].astype(np.float64))[:, 0]
  if p.task == BINARY:
    c = (z < np.quantile(z, p.quantile)).astype(np.int64)
    c = 1 - c if rng.random() < 0.5 else c
  elif p.task == MULTICLASS:
    c = np.sum(z[:, None] > z[rng.integers(0, n, p.n_classes - 1)][None, :], axis=1)
    c = _relabel(rng, c) if rng.random() > 0.2 else c
    c = p.n_classes - 1 - c if rng.random() < 0.5 else c
  target = z if p.task == REGRESSION else _relabel(rng, c)
  if p.task != REGRESSION and len(np.unique(target[:n_train])) < 2:
    raise SanityCheckError("one class among the training nodes")
  return Attributes(x.astype(np.float32), target.astype(np.float32), p.task, np.arange(n) < n_train, p, attempts)


def sample_attributes(senders, receivers, num_nodes: int, seed, *, n_requested: int | None = None,
                      ignore_graph: bool = False, max_attempts: int = 200) -> Attributes:
  """The reference's features, target and split on a simple graph (``senders``/``receivers`` ``[E]``, each edge
  once), reproducible by ``seed``. ``n_requested``: the node count the structure prior drew, before its largest
  component (the reference counts the training nodes from it; default ``num_nodes``). ``ignore_graph``: the
  altered oracle, with no conv units and no structural inputs. Raises :class:`SanityCheckError` after
  ``max_attempts`` rejected draws."""
  rng = np.random.default_rng(seed)
  adj = _adjacency(np.asarray(senders), np.asarray(receivers), int(num_nodes))
  for attempt in range(1, max_attempts + 1):
    try:
      with threadpoolctl.threadpool_limits(1):  # BLAS threads on small matrices spin on a busy machine
        p = sample_params(rng, ignore_graph=ignore_graph)
        return _attempt(rng, adj, n_requested or int(num_nodes), p, attempt)
    except SanityCheckError:
      continue
  raise SanityCheckError(f"no valid draw in {max_attempts} attempts on a graph of {num_nodes} nodes")


def _moments(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Skewness and excess kurtosis of each column of ``v [n, D]`` (NaN for a constant column)."""
  c = v - v.mean(0)
  var = np.mean(c ** 2, 0)
  with np.errstate(all="ignore"):
    return (np.where(var > 0, np.mean(c ** 3, 0) / var ** 1.5, np.nan),
            np.where(var > 0, np.mean(c ** 4, 0) / var ** 2 - 3, np.nan))


def attribute_statistics(senders, receivers, num_nodes: int, x: np.ndarray, y: np.ndarray, task: int,
                         train_mask: np.ndarray) -> dict:
  """:data:`SCM_STATS` of one attributed graph (features ``[n, F]``, target ``[n]``, split ``[n]``).

  ``r2_own`` and ``r2_gain``: the adjusted R^2 of the target (one-hot for classes) on ``[1, Z]``, and what adding
  ``mean_nb(Z)`` gains, ``Z`` the top ``PCA_COMPONENTS`` principal components of the features, ``mean_nb`` the mean
  over a node's neighbours (a one-hop SGC-style fit; the PCA keeps it well-posed on small graphs).
  """
  n, f = x.shape
  distinct = np.array([len(np.unique(x[:, j])) for j in range(f)])
  skews = np.abs(_moments(x[:, distinct > DISCRETE_MAX])[0])
  corr = np.abs(np.corrcoef(x, rowvar=False)[np.triu_indices(f, 1)]) if f >= 2 else np.full(1, np.nan)
  out = dict.fromkeys(SCM_STATS, math.nan) | {
      "task": float(task), "n_features": float(f), "discrete_share": float(np.mean(distinct <= DISCRETE_MAX)),
      "mean_abs_skew": float(np.nanmean(skews)) if np.isfinite(skews).any() else math.nan,
      "mean_abs_corr": float(np.mean(corr)), "train_share": float(np.mean(train_mask))}
  if task == REGRESSION:
    out["target_skew"], out["target_kurtosis"] = (float(m[0]) for m in _moments(y[:, None].astype(np.float64)))
    target = y[:, None].astype(np.float64)
  else:
    classes, counts = np.unique(y, return_counts=True)
    out["num_classes"], out["majority_share"] = float(len(classes)), float(counts.max() / n)
    target = (y[:, None] == classes[None, :]).astype(np.float64)
  xc, t = x.astype(np.float64) - x.mean(0), target - target.mean(0)
  sst = float(np.sum(t ** 2))
  if sst <= 0 or n < 4:
    return out
  adj = _adjacency(np.asarray(senders), np.asarray(receivers), n)
  with threadpoolctl.threadpool_limits(1):  # neighbour R^2: PCA of the features, then two least-squares fits
    eig, vec = np.linalg.eigh(xc.T @ xc)  # ascending
    k = int(min(PCA_COMPONENTS, np.sum(eig > 1e-9 * max(eig.max(initial=0.0), 1e-12)), (n - 2) // 2))
    z = xc @ vec[:, ::-1][:, :k]
    zn = _segment(adj, z[adj.src], np.add) / np.maximum(adj.degree, 1.0)[:, None]
    r2 = []
    for design in (z, np.concatenate([z, zn], axis=1)):
      design = np.concatenate([np.ones((n, 1)), design], axis=1)
      resid = t - design @ np.linalg.lstsq(design, t, rcond=None)[0]
      r2.append(1 - float(np.sum(resid ** 2)) / sst * (n - 1) / (n - design.shape[1]))
  return out | {"r2_own": r2[0], "r2_gain": r2[1] - r2[0]}


def compare(ours: Mapping[str, np.ndarray], oracle: Mapping[str, np.ndarray], *, alpha: float = 0.01,
            names: Sequence[str] = SCM_STATS) -> list[two_sample.TestResult]:
  """Chi-square (:data:`COUNT_STATS`) or two-sample KS per statistic, Bonferroni-corrected; NaN entries left out."""
  threshold, out = alpha / len(names), []
  for k in names:
    a, b = (np.asarray(v[k], float) for v in (ours, oracle))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if min(len(a), len(b)) == 0 or len(levels := np.union1d(a, b)) < 2:
      test, value, p = "none", math.nan, 1.0
    elif k in COUNT_STATS:
      test, (value, p) = "chi2", stats.chi2_contingency([np.sum(a[:, None] == levels, 0),
                                                         np.sum(b[:, None] == levels, 0)])[:2]
    else:
      test, (value, p) = "ks", stats.ks_2samp(a, b)
    out.append(two_sample.TestResult(k, test, float(value), float(p), threshold, p < threshold, min(len(a), len(b))))
  return out


Row = NamedTuple("Row", [("statistic", str), ("test", str), ("ours", str), ("oracle", str), ("value", float),
                         ("p_value", float), ("agree", bool), ("departures", str)])  # one line of the panel's table


# rows [Row]; results [TestResult]; ours, oracle: statistic -> [G] (NaN: undefined, or our sample not ok).
ScmPanel = NamedTuple("ScmPanel", [("rows", list), ("results", list), ("ours", dict), ("oracle", dict),
                                   ("ours_ok", int)])


def _summary(k: str, v: np.ndarray) -> str:
  v = v[np.isfinite(v)]
  if k == "task" and len(v):
    return " / ".join(f"{t} {np.mean(v == c):.0%}" for c, t in ((REGRESSION, "R"), (BINARY, "B"), (MULTICLASS, "M")))
  return f"{np.mean(v):.3g} (median {np.median(v):.3g}, n={len(v)})" if len(v) else "-"


def host_samples(batch) -> list[dict]:
  """A batched :class:`methods.graphpfn.Sample` as :func:`methods.graphpfn.statistics.host_sample` dicts, with
  the sample's own check (``ok``) and the node count it was drawn for (``n_requested``)."""
  batch = jax.tree.map(np.asarray, batch)
  return [dict(statistics.host_sample(batch, i), ok=bool(batch.ok[i]), n_requested=int(batch.structure.n_nodes[i]))
          for i in range(batch.graph.node_mask.shape[0])]


def scm_two_sample_panel(*, graphs: int, seed: int = 0, structure_hp: StructureConfig = SMALL,
                         attribute_hp: AttributeConfig | None = None, batch: int = 32,
                         oracle: Callable[..., Attributes] = sample_attributes) -> ScmPanel:
  """This project's prior (``structure_hp``, ``attribute_hp``, default :class:`AttributeConfig`) on ``graphs``
  keys, and ``oracle`` on each of its graphs (seeded ``(seed, i)``); :func:`compare` of their statistics."""
  fn = graphpfn.batch_fn(structure_hp, attribute_hp or AttributeConfig())
  keys = jax.random.split(jax.random.key(seed), -(-graphs // batch) * batch)
  samples = [g for c in range(0, len(keys), batch) for g in host_samples(fn(keys[c:c + batch]))][:graphs]
  stats_of = lambda g, a: attribute_statistics(  # noqa: E731
      g["senders"], g["receivers"], g["num_nodes"], a["x"], a["y"], a["task"], a["train_mask"])
  mine = [stats_of(g, g) if g["ok"] else dict.fromkeys(SCM_STATS, math.nan) for g in samples]
  ref = [stats_of(g, oracle(g["senders"], g["receivers"], g["num_nodes"], (seed, i),
                            n_requested=g["n_requested"])._asdict()) for i, g in enumerate(samples)]
  ours, theirs = two_sample.table(mine, SCM_STATS), two_sample.table(ref, SCM_STATS)
  results = compare(ours, theirs)
  rows = [Row(r.statistic, r.test, _summary(r.statistic, ours[r.statistic]), _summary(r.statistic, theirs[r.statistic]),
              r.value, r.p_value, not r.reject, DEPARTURES[r.statistic] or "none documented")
          for r in results]
  return ScmPanel(rows, results, ours, theirs, sum(g["ok"] for g in samples))


def markdown(rows: Sequence[Row]) -> str:
  """The panel's table: one line per :class:`Row`."""
  head = "| statistic | test | ours | oracle | test statistic | p-value | agree | departures that can explain it |"
  return "\n".join([head, "|---" * 8 + "|"] + [
      f"| {r.statistic} | {r.test} | {r.ours} | {r.oracle} | {r.value:.3f} | {r.p_value:.2g} | "
      f"{'yes' if r.agree else 'no'} | {'-' if r.agree else r.departures} |" for r in rows])


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--graphs", type=int, default=200, help="Graphs (one sample of each generator on each).")
  parser.add_argument("--seed", type=int, default=0, help="Seed of the keys and of the oracle's generators.")
  parser.add_argument("--n_nodes_max", type=int, default=SMALL.n_nodes_max, help="Most nodes (64 at least).")
  args = parser.parse_args(argv)
  hp = dataclasses.replace(SMALL, n_nodes_max=args.n_nodes_max)
  panel = scm_two_sample_panel(graphs=args.graphs, seed=args.seed, structure_hp=hp)
  print(f"{args.graphs} graphs of {hp.n_nodes_min}-{hp.n_nodes_max} nodes, seed {args.seed}; samples of ours that "
        f"passed its own check: {panel.ours_ok}; Bonferroni threshold {panel.results[0].threshold:.2g}\n")
  print(markdown(panel.rows))


if __name__ == "__main__":
  main()
