"""The GraphPFN structure prior: multi-level degree-corrected SBMs plus preferential attachment.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 3.1, sampler
``multi-level-sbm-with-pa`` of the reference (yandex-research/graphpfn,
``multi_level_sbm_with_pa.py`` with ``sbm.py``): level 1 is a disjoint union
of degree-corrected SBMs (one per first-level subgraph, each of the same
expected degree), level 2 one global SBM over all SBM nodes
(:mod:`methods.graphpfn.sbm`); the union of their edges is simplified and
cut to its largest connected component, then preferential-attachment nodes
join (:mod:`methods.graphpfn.attachment`) and node ids are shuffled.

The reference's prior is the default on every point. This project's earlier
variants stay available as :class:`StructureConfig` options, off by default:
``subgraph_degree="size_weighted"`` (level-1 edges spread over all
subgraphs by density times both block sizes, so a subgraph's degree grows
with its size), ``cap_first_level_degree=False``, ``node_weights="equal"``,
``group_sizes="unconstrained"`` (empty and tiny groups allowed) and
``diagonal_pairs="n_choose_2"`` (which roughly doubles the odds of
between-block edges); ``n_groups_per_sbm=True`` draws the number of groups
per SBM (the reference code's runtime form) instead of per graph (its
pretraining config).

Cost (CPU or accelerator), for ``S`` edge slots and ``N`` nodes: nothing of
size ``N x N``. Slots are drawn in chunks by an exact integer inverse CDF
over guide tables (O(1) expected steps per draw); duplicates go by one sort
of the int32 keys ``u N + v`` (O(S log S)); the largest component by
hooking with pointer jumping (``envs.graphs.components``). One graph at a
time (``jit`` or ``lax.map``), the cost follows the graph's own edge count,
not the padded one: chunks past the drawn slots are skipped and the sort
and the component search read only the slots in use
(``envs.graphs.on_prefix``); under ``jax.vmap`` every slot is processed (a
skipped chunk would still run as a select), with the same samples.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from envs import graphs
from methods.graphpfn import attachment
from methods.graphpfn import sbm
from methods.graphpfn.hparams import StructureConfig
from methods.graphpfn.structure_params import (VARIANTS, StructureParams, Variant, edge_targets, level_degrees, only,
                                               sample_params, variant_of)

__all__ = ["VARIANTS", "StructureConfig", "StructureParams", "StructureSample", "Variant", "bucket_of", "edge_targets",
           "level_degrees", "only", "sample", "sample_graph", "sample_params", "variant_of"]


class StructureSample(NamedTuple):
  """A sampled graph with its generation labels (node ids already shuffled)."""

  graph: graphs.Graph
  block1: jax.Array  # [N] int32: first-level block (subgraph * groups_max + group); -1 for PA/padding
  block2: jax.Array  # [N] int32: second-level group; -1 for PA/padding
  is_pa: jax.Array  # [N] bool
  sbm_edges: jax.Array  # [] int32: SBM edges drawn (before simplification)
  params: StructureParams
  sbm: sbm.SBMDraws  # per-SBM sizes, groups and coins


def sample_graph(key: jax.Array, params: StructureParams, hp: StructureConfig, *, num_nodes: int | None = None,
                 num_slots: int | None = None, variant: Variant | None = None) -> StructureSample:
  """Samples one graph with hyperparameters ``params`` (jittable, vmappable).

  Args:
    key: used for the blocks, node weights, densities, edges, PA and the shuffle.
    params: from :func:`sample_params`.
    hp: the static config (fixes the padded sizes).
    num_nodes: a smaller static node count for a size bucket (see
      :func:`bucket_of`), at least ``params.n_nodes`` (default: the config's
      maximum).
    num_slots: the SBM edge slots of that bucket, as many as its target
      needs (default: the config's maximum).
    variant: :class:`Variant` flags overriding ``hp``'s options (traced
      flags: one compilation for every variant); default ``variant_of(hp)``.

  Returns:
    A simple connected graph (its first ``num_nodes`` ids valid, in random
    order), padded to ``hp.n_nodes_max`` nodes and
    ``hp.sbm_edge_slots + hp.pa_edge_slots`` edges.
  """
  n = num_nodes or hp.n_nodes_max
  slots = num_slots or hp.sbm_edge_slots
  k_sbm, k_pa, k_perm = jax.random.split(key, 3)
  variant = variant_of(hp) if variant is None else variant
  _, d1, d2 = level_degrees(params, hp, variant)
  levels = sbm.sbm_levels(k_sbm, params, hp, n, slots, d1, d2, variant)
  u, v, mask, valid, drawn = levels.senders, levels.receivers, levels.mask, levels.valid, levels.drawn
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
  ps, pr, pm, is_pa = attachment.attach(k_pa, deg, core, params.n_sbm, params.n_pa, max_degree=hp.pa_max_degree,
                                        t_max=math.ceil(hp.pa_ratio_max * n))
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
  return StructureSample(g, keep(levels.block1), keep(levels.block2), is_pa[order], drawn, params, levels.draws)


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


def sample(key: jax.Array, hp: StructureConfig, variant: Variant | None = None) -> StructureSample:
  """Hyperparameters and a graph from one key (``variant``: as in :func:`sample_graph`)."""
  k1, k2 = jax.random.split(key)
  return sample_graph(k2, sample_params(k1, hp), hp, variant=variant)
