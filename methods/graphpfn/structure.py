"""The GraphPFN structure prior: multi-level degree-corrected SBMs plus preferential attachment.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 3.1, sampler
``multi-level-sbm-with-pa`` of the reference: level 1 is a disjoint union of
degree-corrected SBMs (one per first-level subgraph), level 2 one global SBM
over all nodes; the union of their edges is cut to its largest connected
component, then preferential-attachment nodes join (Barabasi & Albert, 1999),
self-loops and parallel edges are removed and node ids are shuffled.

Jittable form (this project's; the block-density details are a
reconstruction from the reference's description): sizes are padded to the
config's maxima (or a size bucket's, :func:`bucket_of`) with masks. Level
1's subgraphs are one SBM whose block densities are block-diagonal over
subgraphs. An SBM draws ``Poisson(expected edges)`` edges into fixed slots;
each slot picks a block pair by inverse CDF over the expected counts
``lambda_rs ~ P_rs n_r n_s`` and its endpoints by inverse CDF over the
blocks' node weights (degree correction), so the per-pair counts are the
independent Poissons of the SBM (a multigraph; parallel edges and self-loops
are merged or dropped afterwards, as the reference does).

Cost (CPU or accelerator), for ``S`` edge slots and ``N`` nodes: nothing of
size ``N x N``. The slots are drawn in chunks of :data:`SLOT_CHUNK` (each
chunk's arrays stay in cache) by a guide-table inverse CDF (O(1) expected
steps per draw; with equal node weights the endpoint is read off directly);
duplicates go by one sort of the int32 keys ``u N + v`` (O(S log S)); the
largest component by hooking with pointer jumping
(``envs.graphs.components``); preferential attachment is vectorised over the
new nodes (:func:`_attach`), the same process as the sequential loop. One
graph at a time (``jit`` or ``lax.map``), the cost follows the graph's own
edge count, not the padded one: chunks past the drawn slots are skipped and
the sort and the component search read only the slots in use
(``envs.graphs.on_prefix``); under ``jax.vmap`` every slot is processed (a
skipped chunk would still run as a select), with the same samples.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs import graphs
from methods.graphpfn import rng
from methods.graphpfn.hparams import StructureConfig


SLOT_CHUNK = 8192  # edge slots drawn per step of the slot loop


class StructureParams(NamedTuple):
  """One graph's structure hyperparameters (scalars; ``[B]`` when batched)."""

  n_nodes: jax.Array  # int32: target nodes, SBM + PA
  n_pa: jax.Array  # int32: preferential-attachment nodes
  avg_degree: jax.Array  # float32: target average degree
  first_level_ratio: jax.Array  # float32: share of SBM edges at level 1
  n_subgraphs: jax.Array  # int32: first-level subgraphs
  n_groups1: jax.Array  # int32: blocks of each first-level SBM
  n_groups2: jax.Array  # int32: blocks of the second-level SBM
  uniform_density1: jax.Array  # bool
  uniform_density2: jax.Array  # bool
  zipf: jax.Array  # bool: power-law node weights
  zipf_gamma: jax.Array  # float32

  @property
  def n_sbm(self) -> jax.Array:
    return self.n_nodes - self.n_pa


class StructureSample(NamedTuple):
  """A sampled graph with its generation labels (node ids already shuffled)."""

  graph: graphs.Graph
  block1: jax.Array  # [N] int32: first-level block (subgraph * groups_max + group); -1 for PA/padding
  block2: jax.Array  # [N] int32: second-level block; -1 for PA/padding
  is_pa: jax.Array  # [N] bool
  sbm_edges: jax.Array  # [] int32: SBM edges drawn (before simplification)
  params: StructureParams


def sample_params(key: jax.Array, hp: StructureConfig) -> StructureParams:
  """Draws one graph's hyperparameters from ``hp``'s ranges (GraphPFN Sec. 3.1)."""
  (u,) = rng.uniforms(key, (12,))
  n = jnp.floor(rng.log_uniform(u[0], hp.n_nodes_min, hp.n_nodes_max + 1.0))
  n = jnp.clip(n, hp.n_nodes_min, hp.n_nodes_max).astype(jnp.int32)
  deg = jnp.where(u[1] < hp.high_degree_prob, rng.log_uniform(u[2], hp.high_degree_min, hp.high_degree_max),
                  rng.log_uniform(u[2], hp.low_degree_min, hp.low_degree_max))
  pa = jnp.floor(u[3] * hp.pa_ratio_max * n).astype(jnp.int32)
  subgraphs = jnp.clip(rng.randint(u[4], hp.subgraphs_min, hp.subgraphs_max), 1,
                       jnp.maximum((n - pa) // hp.min_first_level_nodes, 1))
  return StructureParams(
      n_nodes=n,
      n_pa=pa,
      avg_degree=deg.astype(jnp.float32),
      first_level_ratio=rng.uniform(u[5], hp.first_level_ratio_min, hp.first_level_ratio_max),
      n_subgraphs=subgraphs.astype(jnp.int32),
      n_groups1=rng.randint(u[6], hp.groups_min, hp.groups_max),
      n_groups2=rng.randint(u[7], hp.groups_min, hp.groups_max),
      uniform_density1=u[8] < hp.uniform_density_prob,
      uniform_density2=u[9] < hp.uniform_density_prob,
      zipf=u[10] < hp.zipf_prob,
      zipf_gamma=rng.uniform(u[11], hp.zipf_gamma_min, hp.zipf_gamma_max),
  )


def edge_targets(params: StructureParams, hp: StructureConfig):
  """Expected edges ``(level 1, level 2, PA)``: ``n d / 2`` in all, PA's share taken off first."""
  total = params.n_nodes.astype(jnp.float32) * params.avg_degree / 2
  pa = params.n_pa.astype(jnp.float32) * (1 + hp.pa_max_degree) / 2
  sbm = jnp.maximum(total - pa, params.n_sbm.astype(jnp.float32) / 2)
  return params.first_level_ratio * sbm, (1 - params.first_level_ratio) * sbm, pa


def _proportions(u, count):
  """Dirichlet(1) proportions over the first ``count`` entries of the last axis (from uniforms ``u``)."""
  g = -jnp.log(jnp.maximum(u, 1e-12)) + 1e-6  # Gamma(1) = Exp(1)
  g = jnp.where(jnp.arange(u.shape[-1]) < count, g, 0.0)
  return g / jnp.sum(g, axis=-1, keepdims=True)


def _categorical(u, probs):
  """One draw per row of ``probs [R, C]`` (inverse CDF of uniforms ``u [R]``)."""
  u = u[:, None]
  return jnp.minimum(jnp.sum(jnp.cumsum(probs, axis=-1) <= u, axis=-1), probs.shape[-1] - 1)


def _densities(u, diag, uniform, coef, allowed):
  """Block densities ``P [B, B]``: unit or U(0,1) diagonal; coef * U off it (times sqrt(d_r d_s))."""
  num_blocks = diag.shape[0]
  u = jnp.triu(u, 1) + jnp.triu(u, 1).T
  d = jnp.where(uniform, 1.0, diag)
  off = coef * u * jnp.where(uniform, 1.0, jnp.sqrt(d[:, None] * d[None, :]))
  p = jnp.where(jnp.eye(num_blocks, dtype=bool), d[:, None] * jnp.ones((1, num_blocks)), off)
  return jnp.where(allowed, p, 0.0)


class _Tables(NamedTuple):
  """Inverse-CDF tables of discrete distributions stored back to back, one segment each.

  ``cum`` holds each segment's cumulative weights (restarting at 0);
  ``guide[d, i]`` is the global index of the first entry of segment ``d``
  whose cumulative weight exceeds ``total[d] * i / K`` (a guide table, Chen &
  Asau, 1974), so a draw bisects over the few entries between two guide
  points instead of the whole segment.
  """

  cum: jax.Array  # [M] float32
  guide: jax.Array  # [D, K + 1] int32
  total: jax.Array  # [D] float32


def _tables(weights: jax.Array, sizes: tuple[int, ...], cells: int) -> _Tables:
  """Tables of the segments of ``weights [sum(sizes)]`` (static ``sizes``), ``cells`` guide cells each."""
  cums, guides, totals, start = [], [], [], 0
  for size in sizes:
    c = jnp.cumsum(weights[start:start + size])
    points = c[-1] * (jnp.arange(cells + 1, dtype=jnp.float32) / cells)
    guides.append(start + jnp.searchsorted(c, points, side="right").astype(jnp.int32))
    cums.append(c)
    totals.append(c[-1])
    start += size
  return _Tables(jnp.concatenate(cums), jnp.stack(guides), jnp.stack(totals))


def _draw(tab: _Tables, seg, lo, hi, base, top, x):
  """Index in ``[lo, hi)`` of segment ``seg`` drawn with probability proportional to its weight.

  The inverse CDF of the uniforms ``x`` restricted to the range (whose
  cumulative weights run from ``base`` to ``top``; all arrays of one shape):
  ``searchsorted(cum, t, "right")`` clamped to the range, found by a
  branchless binary search between the guide points around ``t``. The
  search takes as many steps as the widest such bracket needs (a few: a
  guide cell holds a few entries unless weights differ by orders of
  magnitude).
  """
  cells = tab.guide.shape[-1] - 1
  t = base + x * (top - base)
  j = jnp.clip(jnp.floor(t / jnp.maximum(tab.total[seg], 1e-30) * cells), 0, cells - 1).astype(jnp.int32)
  b = jnp.minimum(tab.guide[seg, jnp.minimum(j + 2, cells)], hi - 1)
  a = jnp.minimum(jnp.maximum(tab.guide[seg, jnp.maximum(j - 1, 0)], lo), b)
  # a + #{i in [a, b): cum[i] <= t}, in steps of h = 2^k, ..., 1 (2h > the widest bracket).
  span = jnp.max(b - a)
  h = jnp.where(span > 0, jnp.left_shift(jnp.int32(1), 31 - jax.lax.clz(jnp.maximum(span, 1))), 0)
  last = tab.cum.shape[0] - 1

  def body(c):
    a, h = c
    i = a + (h - 1)
    up = (i < b) & (tab.cum[jnp.minimum(i, last)] <= t)
    return jnp.where(up, a + h, a), h // 2

  a, _ = jax.lax.while_loop(lambda c: c[1] > 0, body, (a, h))
  return a


def _pair_lists(num_sub: int, groups1: int, groups2: int):
  """Static block pairs ``(r, s)``, ``r <= s``: level 1's inside each subgraph, then level 2's (ids offset)."""
  tri1 = [(a, b) for a in range(groups1) for b in range(a, groups1)]
  tri2 = [(a, b) for a in range(groups2) for b in range(a, groups2)]
  r = [k * groups1 + a for k in range(num_sub) for a, _ in tri1] + [num_sub * groups1 + a for a, _ in tri2]
  s = [k * groups1 + b for k in range(num_sub) for _, b in tri1] + [num_sub * groups1 + b for _, b in tri2]
  return np.asarray(r, np.int32), np.asarray(s, np.int32), num_sub * len(tri1), len(tri2)


def _by_block(block, num_blocks: int, valid):
  """``(order, start, size)``: nodes sorted by block (padding last), each block's start and size ``[B]``."""
  block = jnp.where(valid, block, num_blocks)
  order = jnp.argsort(block, stable=True)
  sizes = jax.ops.segment_sum(valid.astype(jnp.int32), block, num_segments=num_blocks + 1)[:num_blocks]
  return order, jnp.cumsum(sizes) - sizes, sizes


def _draw_equal_weights(seg, lo, hi, base, top, x):
  """:func:`_draw` when every node weighs 1 (cumulative weights are counts): the same index, no search."""
  del seg
  t = base + x * (top - base)
  return jnp.minimum(lo + jnp.clip(jnp.floor(t) - base, 0, hi - lo).astype(jnp.int32), hi - 1)


def _assign_blocks(params: StructureParams, hp: StructureConfig, num_nodes: int, u_sub, u_q1, u_g1, u_q2, u_g2):
  """``(valid, block1, block2) [N]``: the node mask and each node's level-1 and level-2 block.

  Level 1: contiguous subgraphs of >= ``min_first_level_nodes`` nodes, Dirichlet
  groups inside each; level 2: Dirichlet groups over all nodes.
  """
  k1, g1, g2 = hp.subgraphs_max, hp.groups_max, hp.groups_max
  idx = jnp.arange(num_nodes)
  valid = idx < params.n_sbm
  spare = (params.n_sbm - params.n_subgraphs * hp.min_first_level_nodes).astype(jnp.float32)
  share = jnp.cumsum(_proportions(u_sub, params.n_subgraphs))
  bounds = hp.min_first_level_nodes * jnp.arange(1, k1 + 1) + jnp.round(share * spare).astype(jnp.int32)
  sub = jnp.minimum(jnp.searchsorted(bounds, idx, side="right"), params.n_subgraphs - 1)
  q1 = _proportions(u_q1, params.n_groups1)
  block1 = sub * g1 + _categorical(u_g1, q1[sub])
  q2 = _proportions(u_q2, params.n_groups2)
  block2 = _categorical(u_g2, jnp.broadcast_to(q2, (num_nodes, g2)))
  return valid, block1, block2


def _sbm_levels(key, params: StructureParams, hp: StructureConfig, num_nodes: int, num_slots: int):
  """Both SBM levels: ``(senders, receivers, mask) [S]``, block labels ``[N]`` and the node mask.

  Slots ``[0, c1)`` hold level 1's ``c1 ~ Poisson(m1)`` edges, the next
  ``c2 ~ Poisson(m2)`` level 2's. Each slot draws a block pair ``(r, s)``,
  ``r <= s``, with probability ``lambda_rs / sum(lambda)`` of its level
  (``lambda_rs = P_rs n_r n_s``, ``P_rr n_r (n_r - 1) / 2`` on the
  diagonal), then ``u`` in ``r`` and ``v`` in ``s`` with probability
  proportional to the node weights (degree correction, Karrer & Newman,
  2011): the per-pair counts are the SBM's independent Poissons. Every draw
  is an inverse CDF over a guide table (:func:`_draw`): O(S) work and
  memory, no ``N x N`` array.
  """
  k1, g1, g2 = hp.subgraphs_max, hp.groups_max, hp.groups_max
  b1 = k1 * g1
  k_u, k_poisson, k_slots = jax.random.split(key, 3)
  (u_sub, u_q1, u_g1, u_q2, u_g2, u_w, u_p1, u_d1, u_p2, u_d2) = rng.uniforms(
      k_u, (k1,), (k1, g1), (num_nodes,), (g2,), (num_nodes,), (num_nodes,), (b1, b1), (b1,),
      (g2, g2), (g2,))
  valid, block1, block2 = _assign_blocks(params, hp, num_nodes, u_sub, u_q1, u_g1, u_q2, u_g2)
  # Degree correction: power-law (Pareto, tail exponent gamma - 1) or equal node weights.
  pareto = jnp.maximum(u_w, 1e-6) ** (-1.0 / (params.zipf_gamma - 1.0))
  weight = jnp.where(valid, jnp.where(params.zipf, jnp.minimum(pareto, num_nodes), 1.0), 0.0)
  same_sub = (jnp.arange(b1)[:, None] // g1) == (jnp.arange(b1)[None, :] // g1)
  p1 = _densities(u_p1, u_d1, params.uniform_density1, hp.offdiagonal_coef, same_sub)
  p2 = _densities(u_p2, u_d2, params.uniform_density2, hp.offdiagonal_coef, True)
  m1, m2, _ = edge_targets(params, hp)
  c1, c2 = jax.random.poisson(k_poisson, jnp.stack([m1, m2])).astype(jnp.int32)

  # Nodes of each level sorted by block (padding last): block r of the combined list
  # (level-1 blocks, then level-2 blocks) is the range [lo[r], hi[r]) of `order`.
  order1, lo1, n1 = _by_block(block1, b1, valid)
  order2, lo2, n2 = _by_block(block2, g2, valid)
  order = jnp.concatenate([order1, order2])
  lo = jnp.concatenate([lo1, num_nodes + lo2])
  hi = lo + jnp.concatenate([n1, n2])
  nodes = _tables(weight[order], (num_nodes, num_nodes), 2 * num_nodes)
  # Block pairs of both levels and their expected edge counts lambda_rs.
  pr, ps, np1, np2 = _pair_lists(k1, g1, g2)
  size = jnp.concatenate([n1, n2]).astype(jnp.float32)
  dens = jnp.concatenate([p1[pr[:np1], ps[:np1]], p2[pr[np1:] - b1, ps[np1:] - b1]])
  lam = jnp.where(pr == ps, dens * size[pr] * (size[pr] - 1) / 2, dens * size[pr] * size[ps])
  pairs = _tables(jnp.maximum(lam, 0.0), (np1, np2), 4 * max(np1, np2))
  # The last pair of positive weight ends each level's range (a draw at u -> 1 never lands past it).
  last = jnp.stack([jnp.searchsorted(pairs.cum[:np1], pairs.total[0], side="left"),
                    np1 + jnp.searchsorted(pairs.cum[np1:], pairs.total[1], side="left")]).astype(jnp.int32)
  base = jnp.where(lo % num_nodes == 0, 0.0, nodes.cum[jnp.maximum(lo - 1, 0)])
  top = nodes.cum[jnp.maximum(hi - 1, 0)]
  pair_lo = jnp.asarray([0, np1], jnp.int32)
  drawn = jnp.minimum(c1 + c2, num_slots)

  def chunk(i):
    """Slots ``[i C, (i + 1) C)``: each step's arrays stay in cache."""
    (x,) = rng.uniforms(jax.random.fold_in(k_slots, i), (3, chunk_size))
    slot = i * chunk_size + jnp.arange(chunk_size)
    level = (slot >= c1).astype(jnp.int32)
    pair = _draw(pairs, level, pair_lo[level], last[level] + 1, 0.0, pairs.total[level], x[0])
    blk = jnp.concatenate([jnp.asarray(pr)[pair], jnp.asarray(ps)[pair]])
    args = (jnp.concatenate([level, level]), lo[blk], hi[blk], base[blk], top[blk], jnp.concatenate([x[1], x[2]]))
    ends = order[jax.lax.cond(params.zipf, functools.partial(_draw, nodes), _draw_equal_weights, *args)]
    return ends[:chunk_size], ends[chunk_size:], slot < drawn

  def skip(i):
    del i
    return jnp.zeros((chunk_size,), order.dtype), jnp.zeros((chunk_size,), order.dtype), jnp.zeros((chunk_size,), bool)

  chunk_size = min(num_slots, SLOT_CHUNK)
  num_chunks = -(-num_slots // chunk_size)
  # Chunks past the drawn slots are skipped (one graph at a time; under vmap both branches run).
  u, v, mask = jax.lax.map(lambda i: jax.lax.cond(i * chunk_size < drawn, chunk, skip, i), jnp.arange(num_chunks))
  u, v, mask = (x.reshape(-1)[:num_slots] for x in (u, v, mask))
  return u, v, mask, block1, block2, valid, c1 + c2


def _attach(key, deg: jax.Array, node_mask: jax.Array, params: StructureParams, hp: StructureConfig, t_max: int):
  """Preferential attachment: PA node ``t`` (id ``n_sbm + t``) links to randint(1, m) degree-weighted nodes.

  Barabasi & Albert (1999) as the reference runs it, one node after another:
  node ``t`` draws each target as a uniform entry of the list of edge
  endpoints (the core's, then those appended by nodes ``< t``), so a node is
  drawn with probability proportional to its current degree. Vectorised:
  the number of links of each node is drawn first, which fixes the list's
  length when node ``t`` draws (``2 E_core + 2 sum_{t' < t} links``); an
  entry inside the core's part is the node whose degree range contains it
  (inverse CDF of the core degrees); an entry appended by an earlier node is
  that node or that node's target, resolved by pointer jumping (``O(log)``
  rounds of gathers). Same distribution as the sequential loop.

  Returns:
    ``(senders, receivers, mask) [T * m]`` of the PA edges (duplicate targets
    of one node dropped) and ``is_pa [N]``.
  """
  m = hp.pa_max_degree
  n = node_mask.shape[0]
  cumdeg = jnp.cumsum(deg)
  core_ends = cumdeg[-1]
  (u,) = rng.uniforms(key, (t_max, m + 1))
  t = jnp.arange(t_max, dtype=jnp.int32)
  active = t < params.n_pa
  links = jnp.where(active, rng.randint(u[:, 0], 1, m), 0)
  done_links = jnp.cumsum(links)
  before = done_links - links
  count = core_ends + 2 * before  # length of the endpoint list when node t draws
  pos = jnp.minimum(jnp.floor(u[:, 1:] * count[:, None].astype(jnp.float32)).astype(jnp.int32),
                    jnp.maximum(count - 1, 0)[:, None])
  use = jnp.arange(m)[None, :] < links[:, None]
  core_node = jnp.searchsorted(cumdeg, pos, side="right").astype(jnp.int32)
  q = jnp.maximum(pos - core_ends, 0)
  k = q // 2  # the k-th PA link (in order of nodes, then links)
  owner = jnp.minimum(jnp.searchsorted(done_links, k, side="right"), t_max - 1).astype(jnp.int32)
  flat = owner * m + (k - before[owner])
  fallback = jnp.argmax(node_mask).astype(jnp.int32)
  in_core = pos < core_ends
  val = jnp.where(count[:, None] == 0, fallback, jnp.where(in_core, core_node, params.n_sbm + owner))
  done = (count[:, None] == 0) | in_core | (q % 2 == 0) | ~use
  ptr = jnp.where(done, jnp.arange(t_max * m).reshape(t_max, m), flat)
  val, done, ptr = val.reshape(-1), done.reshape(-1), ptr.reshape(-1)

  def jump(c):
    val, done, ptr = c
    return (jnp.where(~done & done[ptr], val[ptr], val), done | done[ptr],
            jnp.where(done | done[ptr], ptr, ptr[ptr]))

  val, _, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[1]), jump, (val, done, ptr))
  target = val.reshape(t_max, m).astype(jnp.int32)
  # A node that drew the same target twice keeps one edge.
  same = (target[:, :, None] == target[:, None, :]) & use[:, None, :] & jnp.tri(m, k=-1, dtype=bool)[None]
  keep = use & ~jnp.any(same, axis=-1)
  new = jnp.broadcast_to((params.n_sbm + t)[:, None], (t_max, m)).astype(jnp.int32)
  idx = jnp.arange(n)
  is_pa = (idx >= params.n_sbm) & (idx < params.n_sbm + params.n_pa)
  return target.reshape(-1), new.reshape(-1), keep.reshape(-1), is_pa


def sample_graph(key: jax.Array, params: StructureParams, hp: StructureConfig, *,
                 num_nodes: int | None = None, num_slots: int | None = None) -> StructureSample:
  """Samples one graph with hyperparameters ``params`` (jittable, vmappable).

  Args:
    key: used for the blocks, node weights, densities, edges, PA and the shuffle.
    params: from :func:`sample_params`.
    hp: the static config (fixes the padded sizes).
    num_nodes: the padded node count of a size bucket (:func:`bucket_of`), at least ``params.n_nodes``.
    num_slots: the bucket's SBM edge slots (default for both: the config's maxima).

  Returns:
    A simple connected graph (its first ``num_nodes`` ids valid, in random
    order), padded to ``hp.n_nodes_max`` nodes and
    ``hp.sbm_edge_slots + hp.pa_edge_slots`` edges.
  """
  n = num_nodes or hp.n_nodes_max
  slots = num_slots or hp.sbm_edge_slots
  k_sbm, k_pa, k_perm = jax.random.split(key, 3)
  u, v, mask, block1, block2, valid, drawn = _sbm_levels(k_sbm, params, hp, n, slots)
  # Slots from `used` on are masked: the sort, the components, the degrees and the renaming skip them.
  used = jnp.minimum(drawn, slots)
  g = graphs.simplify(graphs.Graph(u.astype(jnp.int32), v.astype(jnp.int32), mask, valid), used)
  edges = (g.senders, g.receivers, g.edge_mask)
  sizes = graphs.prefix_sizes(slots, finest=4, smallest=slots // 16)

  def core_degrees(e, node_mask):
    """The largest component and its degrees."""
    label = graphs.components(graphs.Graph(*e, node_mask))
    size = jax.ops.segment_sum(node_mask.astype(jnp.int32), label, num_segments=n)
    core = node_mask & (label == jnp.argmax(size))
    ones = (e[2] & core[e[0]]).astype(jnp.int32)
    return core, jax.ops.segment_sum(ones, e[0], num_segments=n) + jax.ops.segment_sum(ones, e[1], num_segments=n)

  core, deg = graphs.on_prefix(core_degrees, used, edges, valid, sizes)
  ps, pr, pm, is_pa = _attach(k_pa, deg, core, params, hp, math.ceil(hp.pa_ratio_max * n))
  node_mask = core | is_pa
  order, new_id = graphs.compacting_permutation(k_perm, node_mask)

  def rename(e, rest):
    """The core's edges renamed, stored as ``(min, max)``; masked slots keep node 0's new id."""
    core, new_id = rest
    a, b = new_id[e[0]], new_id[e[1]]
    pad = lambda x, fill: jnp.pad(x, (0, slots - x.shape[0]), constant_values=fill)  # noqa: E731
    return (pad(jnp.minimum(a, b), new_id[0]), pad(jnp.maximum(a, b), new_id[0]),
            pad(e[2] & core[e[0]], False))

  s, r, m = graphs.on_prefix(rename, used, edges, (core, new_id), graphs.prefix_sizes(slots))
  a, b = new_id[ps], new_id[pr]  # PA edges: already simple (a new node to an older one, once per target)
  g = graphs.Graph(jnp.concatenate([s, jnp.minimum(a, b)]), jnp.concatenate([r, jnp.maximum(a, b)]),
                   jnp.concatenate([m, pm]), node_mask[order])
  keep = lambda b: jnp.where(core & ~is_pa, b, -1)[order].astype(jnp.int32)  # noqa: E731
  return StructureSample(g, keep(block1), keep(block2), is_pa[order], drawn, params)


def bucket_of(n_nodes: int, avg_degree: float, hp: StructureConfig) -> tuple[int, int]:
  """Static ``(num_nodes, num_slots)`` of a graph's size bucket: powers of two, capped at the maxima.

  Sampling each bucket with its own compiled sampler avoids padding every
  graph to the largest one (the edge slots cover the target plus 6 Poisson
  standard deviations, as :attr:`StructureConfig.sbm_edge_slots` does).
  """
  m = n_nodes * avg_degree / 2
  need = m + 6 * math.sqrt(m) + 16
  nodes = min(max(64, 1 << math.ceil(math.log2(max(n_nodes, 1)))), hp.n_nodes_max)
  slots = min(max(256, 1 << math.ceil(math.log2(need))), hp.sbm_edge_slots)
  return nodes, slots


def sample(key: jax.Array, hp: StructureConfig) -> StructureSample:
  """Hyperparameters and a graph from one key."""
  k1, k2 = jax.random.split(key)
  return sample_graph(k2, sample_params(k1, hp), hp)
