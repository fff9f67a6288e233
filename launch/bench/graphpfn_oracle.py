"""The GraphPFN reference's structure sampler in plain NumPy: the tests' oracle and the benchmark's peer.

:func:`two_sample_panel` runs the two-sample tests of the JAX sampler (the
default and each earlier variant) against it, for the tests and the
report's table and per-subgraph degree plot.

A NumPy re-implementation, written for this project, of the sampling
algorithm of yandex-research/graphpfn (``multi_level_sbm_with_pa.py``,
``sbm.py``, ``preferential_attachment.py``, which use torch and DGL;
GraphPFN, Eremeev et al., 2025, Sec. 3.1), vectorised as a NumPy user would
(edge ends by ``searchsorted`` over cumulative weights, no Python loop over
edges; the reference loops over block pairs and PA nodes). It
draws a graph for given per-graph hyperparameters (those of
:func:`methods.graphpfn.structure.sample_params`), so the JAX sampler and
this one can be compared on the same hyperparameters:

1. the SBM nodes are split into ``k`` first-level subgraphs (uniform over
   the compositions, each >= ``min_first_level_nodes``);
2. every subgraph is a degree-corrected SBM of degree ``d1``, the whole
   SBM node set (in random order) one more of degree ``d2``
   (:func:`methods.graphpfn.structure.level_degrees`: PA-corrected degree,
   first-level share capped at ``(min_first_level_nodes - 1) / degree``);
3. each SBM (:func:`_sbm`): groups uniform over the compositions with
   ``>= max(4, 0.1 n / g)`` nodes, densities, ``B = P * n n^T`` scaled to
   ``n d / 2`` over the whole matrix, ``Poisson(B_ac)`` edges per pair
   ``a <= c``, ends by Zipf or U(0, 1) node weights (a diagonal block's two
   ends distinct);
4. union, simple graph, largest component, preferential attachment
   without replacement (:func:`_attach`), shuffled ids.

The :class:`methods.graphpfn.StructureConfig` options switch the same
variants as in the JAX sampler, so each deliberately broken variant has its
oracle counterpart too.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import jax
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from methods.graphpfn import StructureConfig
from methods.graphpfn import structure
from methods.graphpfn import two_sample


class OracleGraph(NamedTuple):
  """A sampled graph (ids shuffled) with the labels the statistics need."""

  senders: np.ndarray  # [E] int64, each edge once, senders < receivers
  receivers: np.ndarray  # [E] int64
  num_nodes: int
  block1: np.ndarray  # [n] subgraph * groups_max + group; -1 for PA nodes
  block2: np.ndarray  # [n] second-level group; -1 for PA nodes
  is_pa: np.ndarray  # [n] bool
  sbm_edges: int  # SBM edges drawn, before simplification


def partition(rng: np.random.Generator, total: int, parts: int, min_size: int) -> np.ndarray:
  """Sizes of ``parts`` parts of ``total``, each >= ``min_size``, uniform over such compositions."""
  m = total - (min_size - 1) * parts
  if parts < 1 or m < parts:
    raise ValueError(f"partition: {parts} parts of >= {min_size} do not fit in {total}")
  cuts = np.sort(rng.choice(np.arange(1, m), size=parts - 1, replace=False))
  return np.diff(np.concatenate([[0], cuts, [m]])) + (min_size - 1)


def _densities(rng, g, hp: StructureConfig):
  uniform = rng.random() < hp.uniform_density_prob
  diag = np.ones(g) if uniform else rng.random(g)
  if uniform:
    p = np.full((g, g), hp.offdiagonal_coef * rng.random())
  else:
    u = np.triu(rng.random((g, g)), 1)
    p = hp.offdiagonal_coef * (u + u.T) * np.sqrt(np.outer(diag, diag))
  np.fill_diagonal(p, diag)
  return p


def _ends(rng, cum, base, total, pick):
  """Node indices drawn by weight inside groups ``pick`` (cumulative weights ``cum``)."""
  t = base[pick] + rng.random(len(pick)) * total[pick]
  return np.minimum(np.searchsorted(cum, t, side="right"), len(cum) - 1)


class _SBM(NamedTuple):
  sizes: np.ndarray  # [g] group sizes
  label: np.ndarray  # [n] group of each node
  weights: np.ndarray  # [g, g] P * node pairs, before the scaling to the nominal edge count
  node_weights: np.ndarray  # [n]


def _sbm_setup(rng, n: int, groups: int, hp: StructureConfig) -> _SBM:
  """One SBM's groups, densities and node weights (the reference's ``sample_sbm`` up to the edges)."""
  g = max(min(groups, n, n // hp.min_group_size), 1)
  least = max(hp.min_group_size, int(n / g * hp.min_group_fraction)) if hp.group_sizes == "min_size" else 0
  sizes = partition(rng, n, g, least)
  weights = _densities(rng, g, hp) * np.outer(sizes, sizes).astype(float)
  if hp.diagonal_pairs == "n_choose_2":
    np.fill_diagonal(weights, np.diag(weights) / np.maximum(sizes, 1) ** 2 * sizes * (sizes - 1) / 2)
  if rng.random() < hp.zipf_prob:
    w = rng.zipf(rng.uniform(hp.zipf_gamma_min, hp.zipf_gamma_max), n).astype(float)
  else:
    w = rng.random(n) if hp.node_weights == "uniform" else np.ones(n)
  return _SBM(sizes, np.repeat(np.arange(g), sizes), weights, w)


def _sbm_edges(rng, sbm: _SBM, rates: np.ndarray):
  """``Poisson(rates[a, c])`` edges per group pair ``a <= c``, ends by node weight (distinct on the diagonal)."""
  g = len(sbm.sizes)
  a, c = np.triu_indices(g)
  counts = rng.poisson(rates[a, c])
  counts[(a == c) & (sbm.sizes[a] < 2)] = 0
  pair = np.repeat(np.arange(len(a)), counts)
  cum = np.cumsum(sbm.node_weights)
  total = np.bincount(sbm.label, weights=sbm.node_weights, minlength=g)
  base = np.concatenate([[0.0], np.cumsum(total)[:-1]])
  u = _ends(rng, cum, base, total, a[pair])
  v = _ends(rng, cum, base, total, c[pair])
  same = np.flatnonzero((a[pair] == c[pair]) & (u == v))
  for _ in range(1000):  # a diagonal block's second end: redrawn until it differs from the first
    if not len(same):
      break
    v[same] = _ends(rng, cum, base, total, c[pair][same])
    same = same[u[same] == v[same]]
  keep = u != v
  return u[keep], v[keep]


def _scaled(weights: np.ndarray, nominal: float, weight_sum: float) -> np.ndarray:
  return weights * (nominal / weight_sum) if weight_sum > 0 else np.zeros_like(weights)


def _level_degrees(p: Mapping, hp: StructureConfig):
  r, d = float(p["pa_ratio"]), float(p["avg_degree"])
  degree = max((d - r * (1.0 + hp.pa_max_degree) / 2) / (1.0 - r), 1.0) if r > 0 else d
  ratio = float(p["first_level_ratio"])
  if hp.cap_first_level_degree:
    ratio = min(ratio, (hp.min_first_level_nodes - 1) / degree)
  return degree * ratio, degree * (1.0 - ratio)


def _levels(rng, p: Mapping, hp: StructureConfig):
  """Both SBM levels over the ``n_sbm`` nodes: ``(u, v, block1, block2)``."""
  n_sbm = int(p["n_nodes"]) - int(p["n_pa"])
  d1, d2 = _level_degrees(p, hp)
  g1, g2 = int(p["n_groups1"]), int(p["n_groups2"])
  sub_sizes = partition(rng, n_sbm, int(p["n_subgraphs"]), hp.min_first_level_nodes)
  groups = [g1 if s == 0 or not hp.n_groups_per_sbm else int(rng.integers(hp.groups_min, hp.groups_max + 1))
            for s in range(len(sub_sizes))]
  subs = [_sbm_setup(rng, int(size), g, hp) for size, g in zip(sub_sizes, groups)]
  sums = [s.weights.sum() for s in subs]
  if hp.subgraph_degree == "size_weighted":  # one nominal count spread over all subgraphs by weight
    rates = [_scaled(s.weights, 0.5 * n_sbm * d1, sum(sums)) for s in subs]
  else:
    rates = [_scaled(s.weights, 0.5 * size * d1, w) for s, size, w in zip(subs, sub_sizes, sums)]
  us, vs, block1, start = [], [], [], 0
  for k, (s, r) in enumerate(zip(subs, rates)):
    u, v = _sbm_edges(rng, s, r)
    us.append(u + start)
    vs.append(v + start)
    block1.append(k * hp.groups_max + s.label)
    start += len(s.label)
  top = _sbm_setup(rng, n_sbm, g2, hp)
  u, v = _sbm_edges(rng, top, _scaled(top.weights, 0.5 * n_sbm * d2, top.weights.sum()))
  perm = rng.permutation(n_sbm)  # second-level node i is node perm[i]: its groups independent of the first level's
  block2 = np.empty(n_sbm, np.int64)
  block2[perm] = top.label
  return np.concatenate(us + [perm[u]]), np.concatenate(vs + [perm[v]]), np.concatenate(block1), block2


def _simple(u, v, n):
  lo, hi = np.minimum(u, v), np.maximum(u, v)
  key = np.unique((lo * n + hi)[lo != hi])
  return key // n, key % n


def _attach(rng, u, v, core_nodes: np.ndarray, n_pa: int, first_id: int, max_degree: int):
  """Barabasi-Albert onto the core: node ``first_id + t`` links to ``min(randint(1, m), nodes so far)``
  distinct nodes drawn by degree (the reference's ``choice(..., replace=False, p=degree / sum)``)."""
  ends = np.empty(2 * len(u) + 2 * n_pa * max_degree, np.int64)
  ends[:len(u)], ends[len(u):2 * len(u)] = u, v
  length = 2 * len(u)
  links = rng.integers(1, max_degree + 1, n_pa)
  new_u, new_v = [], []
  for t in range(n_pa):
    need = min(int(links[t]), len(core_nodes) + t)
    chosen: list[int] = []
    while len(chosen) < need:
      if length == 0:
        chosen.append(int(core_nodes[0]))
        break
      for x in ends[(rng.random(need + 2) * length).astype(np.int64)]:
        if x not in chosen and len(chosen) < need:
          chosen.append(int(x))
    node = first_id + t
    for x in chosen:
      ends[length], ends[length + 1] = node, x
      length += 2
      new_u.append(node)
      new_v.append(x)
  return np.asarray(new_u, np.int64), np.asarray(new_v, np.int64)


def sample(p: Mapping, hp: StructureConfig, rng: np.random.Generator) -> OracleGraph:
  """One graph for hyperparameters ``p`` (a mapping with the fields of ``StructureParams``, host scalars)."""
  n_sbm, n_pa = int(p["n_nodes"]) - int(p["n_pa"]), int(p["n_pa"])
  u, v, block1, block2 = _levels(rng, p, hp)
  drawn = len(u)
  u, v = _simple(u, v, n_sbm)
  adj = sp.coo_matrix((np.ones(len(u)), (u, v)), shape=(n_sbm, n_sbm))
  _, label = csgraph.connected_components(adj, directed=False)
  core = label == np.argmax(np.bincount(label))
  inside = core[u] & core[v]
  u, v = u[inside], v[inside]
  pu, pv = _attach(rng, u, v, np.flatnonzero(core), n_pa, n_sbm, hp.pa_max_degree)
  keep = np.concatenate([np.flatnonzero(core), n_sbm + np.arange(n_pa)])
  new_id = np.full(n_sbm + n_pa, -1, np.int64)
  new_id[keep] = rng.permutation(len(keep))
  a, b = new_id[np.concatenate([u, pu])], new_id[np.concatenate([v, pv])]
  n = len(keep)
  labels = [np.full(n, -1, np.int64) for _ in range(2)]
  for out, lab in zip(labels, (block1, block2)):
    out[new_id[np.flatnonzero(core)]] = lab[core]
  is_pa = np.zeros(n, bool)
  is_pa[new_id[n_sbm:]] = True
  return OracleGraph(np.minimum(a, b), np.maximum(a, b), n, labels[0], labels[1], is_pa, drawn)


class Panel(NamedTuple):
  """Two-sample tests of the JAX sampler's variants against this oracle on the same hyperparameters."""

  results: dict  # variant name -> list of methods.graphpfn.two_sample.TestResult
  ours: dict  # variant name -> {statistic: [G]}
  reference: dict  # {statistic: [G]}
  subgraphs: dict  # "oracle" and each JAX variant -> (sizes, degrees) of every first-level subgraph


def two_sample_panel(hp: StructureConfig, *, graphs: int, seed: int = 0,
                     variants: tuple[str, ...] = ("reference", *structure.VARIANTS)) -> Panel:
  """Samples ``graphs`` hyperparameter sets, a JAX graph per variant and an oracle graph (``hp``'s options) for
  each, and compares their :data:`methods.graphpfn.two_sample.STRUCTURE_STATS` (KS and paired signed-rank,
  Bonferroni at 1%). The JAX variants share one compilation (traced :class:`methods.graphpfn.Variant` flags)."""
  params = jax.jit(jax.vmap(lambda k: structure.sample_params(k, hp)))(
      jax.random.split(jax.random.fold_in(jax.random.key(seed), 0), graphs))
  host = jax.tree.map(np.asarray, params)
  fn = jax.jit(jax.vmap(lambda k, p, v: structure.sample_graph(k, p, hp, variant=v), in_axes=(0, 0, None)))
  keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), 1), graphs)
  rng = np.random.default_rng(seed)
  kwargs = []
  for i in range(graphs):
    n_sbm = int(host.n_nodes[i] - host.n_pa[i])
    groups = two_sample.effective_groups(int(host.n_groups2[i]), n_sbm, hp.min_group_size, hp.groups_max)
    kwargs.append(dict(n_sbm=n_sbm, groups2=groups, groups_max=hp.groups_max))

  def summary(gs):
    rows = [two_sample.structure_statistics(g, **kw) for g, kw in zip(gs, kwargs)]
    pairs = [two_sample.subgraph_degrees(g, hp.groups_max) for g in gs]
    return two_sample.table(rows), (np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))

  mine = [sample({f: getattr(host, f)[i] for f in structure.StructureParams._fields}, hp, rng)._asdict()
          for i in range(graphs)]
  reference, subgraphs = summary(mine)
  subgraphs = {"oracle": subgraphs}
  ours, results = {}, {}
  for name in variants:
    ours[name], subgraphs[name] = summary(two_sample.host_graphs(fn(keys, params, structure.only(name))))
    results[name] = two_sample.compare(ours[name], reference)
  return Panel(results, ours, reference, subgraphs)
