"""The GraphPFN structure prior: multi-level degree-corrected SBMs plus preferential attachment.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 3.1, sampler
``multi-level-sbm-with-pa`` of the reference: level 1 is a disjoint union of
degree-corrected SBMs (one per first-level subgraph), level 2 one global SBM
over all nodes; the union of their edges is cut to its largest connected
component, then preferential-attachment nodes join (Barabasi & Albert, 1999),
self-loops and parallel edges are removed and node ids are shuffled.

Jittable form (this project's; the block-density details are a
reconstruction from the reference's description): sizes are padded to the
config's maxima with masks. Level 1's subgraphs are one SBM whose block
densities are block-diagonal over subgraphs. An SBM draws
``Poisson(expected edges)`` edges into fixed slots; each slot picks a block
pair by inverse CDF over the expected counts ``lambda_rs ~ P_rs n_r n_s`` and
its endpoints by inverse CDF over the blocks' node weights (degree
correction), so the per-pair counts are the independent Poissons of the SBM.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from envs import graphs
from methods.graphpfn import rng
from methods.graphpfn.hparams import StructureConfig


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


def _sbm_slots(u, block, weight, valid, density):
  """Endpoints ``(u, v) [S]`` of ``num_slots`` edges of a degree-corrected SBM.

  ``u [3, S]`` are the slots' uniforms. Slot ``j`` picks block pair ``(r, s)`` (``r <= s``) with probability
  ``lambda_rs / sum(lambda)``, ``lambda_rs = P_rs n_r n_s`` (``P_rr n_r (n_r - 1) / 2``
  on the diagonal), then ``u`` in ``r`` and ``v`` in ``s`` with probability
  proportional to the node weights (Karrer & Newman, 2011).
  """
  n, b = block.shape[0], density.shape[0]
  block = jnp.where(valid, block, b)
  w = jnp.where(valid, weight, 0.0)
  sizes = jax.ops.segment_sum(valid.astype(jnp.float32), block, num_segments=b + 1)[:b]
  lam = density * sizes[:, None] * sizes[None, :]
  lam = jnp.where(jnp.eye(b, dtype=bool), density * sizes[:, None] * (sizes[:, None] - 1) / 2, lam)
  lam = jnp.triu(jnp.maximum(lam, 0.0)).reshape(-1)
  cdf = jnp.cumsum(lam)
  pair = jnp.searchsorted(cdf, u[0] * cdf[-1], side="right")
  pair = jnp.minimum(pair, b * b - 1)
  r, s = pair // b, pair % b
  order = jnp.argsort(block)
  cum = jnp.cumsum(w[order])
  total = jax.ops.segment_sum(w, block, num_segments=b + 1)[:b]
  start = jnp.cumsum(total) - total

  def pick(ui, blk):
    t = start[blk] + ui * total[blk]
    return order[jnp.minimum(jnp.searchsorted(cum, t, side="right"), n - 1)]

  return pick(u[1], r), pick(u[2], s)


def _sbm_levels(key, params: StructureParams, hp: StructureConfig, num_nodes: int, num_slots: int):
  """Both SBM levels: ``(senders, receivers, mask) [S]``, block labels ``[N]`` and the node mask."""
  k1, g1, g2 = hp.subgraphs_max, hp.groups_max, hp.groups_max
  b1 = k1 * g1
  k_u, k_poisson = jax.random.split(key)
  (u_sub, u_q1, u_g1, u_q2, u_g2, u_w, u_p1, u_d1, u_p2, u_d2, u_s1, u_s2) = rng.uniforms(
      k_u, (k1,), (k1, g1), (num_nodes,), (g2,), (num_nodes,), (num_nodes,), (b1, b1), (b1,),
      (g2, g2), (g2,), (3, num_slots), (3, num_slots))
  idx = jnp.arange(num_nodes)
  n_sbm = params.n_sbm
  valid = idx < n_sbm
  # First level: contiguous subgraphs of >= min_first_level_nodes; Dirichlet groups inside.
  spare = (n_sbm - params.n_subgraphs * hp.min_first_level_nodes).astype(jnp.float32)
  share = jnp.cumsum(_proportions(u_sub, params.n_subgraphs))
  bounds = hp.min_first_level_nodes * jnp.arange(1, k1 + 1) + jnp.round(share * spare).astype(jnp.int32)
  sub = jnp.minimum(jnp.searchsorted(bounds, idx, side="right"), params.n_subgraphs - 1)
  q1 = _proportions(u_q1, params.n_groups1)
  block1 = sub * g1 + _categorical(u_g1, q1[sub])
  q2 = _proportions(u_q2, params.n_groups2)
  block2 = _categorical(u_g2, jnp.broadcast_to(q2, (num_nodes, g2)))
  # Degree correction: power-law (Pareto, tail exponent gamma - 1) or equal node weights.
  pareto = jnp.maximum(u_w, 1e-6) ** (-1.0 / (params.zipf_gamma - 1.0))
  weight = jnp.where(params.zipf, jnp.minimum(pareto, num_nodes), 1.0)
  same_sub = (jnp.arange(b1)[:, None] // g1) == (jnp.arange(b1)[None, :] // g1)
  p1 = _densities(u_p1, u_d1, params.uniform_density1, hp.offdiagonal_coef, same_sub)
  p2 = _densities(u_p2, u_d2, params.uniform_density2, hp.offdiagonal_coef, True)
  m1, m2, _ = edge_targets(params, hp)
  c1, c2 = jax.random.poisson(k_poisson, jnp.stack([m1, m2])).astype(jnp.int32)
  u1, v1 = _sbm_slots(u_s1, block1, weight, valid, p1)
  u2, v2 = _sbm_slots(u_s2, block2, weight, valid, p2)
  slot = jnp.arange(num_slots)
  first = slot < c1
  u, v = jnp.where(first, u1, u2), jnp.where(first, v1, v2)
  mask = slot < jnp.minimum(c1 + c2, num_slots)
  return u, v, mask, block1, block2, valid, c1 + c2


def _attach(key, graph: graphs.Graph, params: StructureParams, hp: StructureConfig, t_max: int):
  """Preferential attachment: PA node ``t`` (id ``n_sbm + t``) links to randint(1, m) degree-weighted nodes.

  A uniformly drawn entry of the list of edge endpoints is a node drawn with
  probability proportional to its degree; each new node's endpoints are
  appended, so later nodes see earlier ones (Barabasi & Albert, 1999).

  Returns:
    ``(senders, receivers, mask) [T * m]`` of the PA edges and ``is_pa [N]``.
  """
  m = hp.pa_max_degree
  n = graph.node_mask.shape[0]
  ends = jnp.concatenate([graph.senders, graph.receivers])
  ok = jnp.concatenate([graph.edge_mask, graph.edge_mask])
  order = jnp.argsort(~ok, stable=True)
  buf = jnp.concatenate([ends[order], jnp.zeros((2 * t_max * m,), ends.dtype)])
  count = jnp.sum(ok).astype(jnp.int32)
  fallback = jnp.argmax(graph.node_mask).astype(ends.dtype)

  def step(carry, inp):
    buf, count = carry
    t, u = inp
    active = t < params.n_pa
    new = (params.n_sbm + t).astype(ends.dtype)
    links = rng.randint(u[0], 1, m)
    pos = jnp.minimum(jnp.floor(u[1:] * count).astype(jnp.int32), jnp.maximum(count - 1, 0))
    target = jnp.where(count > 0, buf[pos], fallback)
    use = active & (jnp.arange(m) < links)
    chunk = jnp.stack([jnp.full((m,), new), target], axis=1).reshape(-1)
    chunk = jnp.where(jnp.repeat(use, 2), chunk, new)
    buf = jax.lax.dynamic_update_slice(buf, chunk, (count,))
    count = count + 2 * jnp.sum(use).astype(jnp.int32)
    return (buf, count), (jnp.full((m,), new), target, use)

  (u,) = rng.uniforms(key, (t_max, m + 1))
  _, (s, r, use) = jax.lax.scan(step, (buf, count), (jnp.arange(t_max), u))
  idx = jnp.arange(n)
  is_pa = (idx >= params.n_sbm) & (idx < params.n_sbm + params.n_pa)
  return s.reshape(-1), r.reshape(-1), use.reshape(-1), is_pa


def sample_graph(key: jax.Array, params: StructureParams, hp: StructureConfig, *,
                 num_nodes: int | None = None, num_slots: int | None = None) -> StructureSample:
  """Samples one graph with hyperparameters ``params`` (jittable, vmappable).

  Args:
    key: used for the blocks, node weights, densities, edges, PA and the shuffle.
    params: from :func:`sample_params`.
    hp: the static config (fixes the padded sizes).
    num_nodes, num_slots: smaller static sizes for a size bucket (see
      :func:`bucket_of`): at least ``params.n_nodes`` nodes and the SBM edge
      slots its target needs (default: the config's maxima).

  Returns:
    A simple connected graph (its first ``num_nodes`` ids valid, in random
    order), padded to ``hp.n_nodes_max`` nodes and
    ``hp.sbm_edge_slots + hp.pa_edge_slots`` edges.
  """
  n = num_nodes or hp.n_nodes_max
  slots = num_slots or hp.sbm_edge_slots
  k_sbm, k_pa, k_perm = jax.random.split(key, 3)
  u, v, mask, block1, block2, valid, drawn = _sbm_levels(k_sbm, params, hp, n, slots)
  g = graphs.simplify(graphs.Graph(u.astype(jnp.int32), v.astype(jnp.int32), mask, valid))
  core = graphs.largest_component(g)
  g = graphs.Graph(g.senders, g.receivers, g.edge_mask & core[g.senders], core)
  ps, pr, pm, is_pa = _attach(k_pa, g, params, hp, math.ceil(hp.pa_ratio_max * n))
  g = graphs.Graph(
      jnp.concatenate([g.senders, ps]), jnp.concatenate([g.receivers, pr]),
      jnp.concatenate([g.edge_mask, pm]), core | is_pa,
  )
  g = graphs.simplify(g)
  order, new_id = graphs.compacting_permutation(k_perm, g.node_mask)
  g = graphs.relabel(g, new_id, g.node_mask[order])
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
