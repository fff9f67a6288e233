"""One graph's structure hyperparameters: drawn from the config's ranges, and the degrees they imply.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 3.1, sampler
``multi-level-sbm-with-pa`` of the reference (``pretrain.toml``): the
number of nodes is log-uniform, the average degree log-uniform in one of
two ranges, the PA share, the level split, the number of first-level
subgraphs and the number of SBM groups are drawn per graph; everything else
(subgraph and group sizes, densities, node weights) is drawn inside each
SBM by :mod:`methods.graphpfn.sbm`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from methods.graphpfn import rng
from methods.graphpfn.hparams import StructureConfig


class Variant(NamedTuple):
  """This project's earlier variants of the five points where the reference differs, as flags (all off: the reference).

  :func:`variant_of` reads them from a :class:`StructureConfig` (Python
  bools, so the compiled sampler holds only the chosen branch); passing
  traced flags instead (``jnp`` bools, e.g. ``jax.tree.map(jnp.asarray,
  ...)``) lets one compiled sampler draw every variant, as the two-sample
  tests do.
  """

  size_weighted: Any  # level-1 edges spread over subgraphs by density times both block sizes
  no_cap: Any  # no cap of the first-level degree at min_first_level_nodes - 1
  equal_weights: Any  # equal node weights instead of U(0, 1) (non-Zipf SBMs)
  unconstrained_groups: Any  # group sizes with empty groups allowed, no minimum size
  n_choose_2: Any  # n (n - 1) / 2 node pairs in a diagonal block instead of n^2


VARIANTS = Variant._fields


def variant_of(hp: StructureConfig) -> Variant:
  """The options of ``hp`` as static flags."""
  return Variant(hp.subgraph_degree == "size_weighted", not hp.cap_first_level_degree, hp.node_weights == "equal",
                 hp.group_sizes == "unconstrained", hp.diagonal_pairs == "n_choose_2")


def only(name: str) -> Variant:
  """Traced flags with only variant ``name`` on (``"reference"``: none)."""
  if name != "reference" and name not in VARIANTS:
    raise ValueError(f"unknown structure variant {name!r}; known: {['reference', *VARIANTS]}")
  return Variant(*(jnp.asarray(f == name) for f in VARIANTS))


def pick(flag, on, off):
  """``on`` where ``flag`` else ``off``: a Python branch for a static flag, ``jnp.where`` for a traced one."""
  if isinstance(flag, (bool, np.bool_)):
    return on if flag else off
  return jnp.where(flag, on, off)


class StructureParams(NamedTuple):
  """One graph's structure hyperparameters (scalars; ``[B]`` when batched)."""

  n_nodes: jax.Array  # int32: target nodes, SBM + PA
  n_pa: jax.Array  # int32: preferential-attachment nodes, n_nodes - max(floor(n_nodes (1 - pa_ratio)), min_first + 1)
  avg_degree: jax.Array  # float32: target average degree
  first_level_ratio: jax.Array  # float32: share of the SBM degree at level 1, as drawn (before the cap)
  n_subgraphs: jax.Array  # int32: first-level subgraphs (capped at n_sbm // min_first_level_nodes)
  n_groups1: jax.Array  # int32: groups of each first-level SBM (before capping at its size)
  n_groups2: jax.Array  # int32: groups of the second-level SBM (= n_groups1 unless n_groups_per_sbm)
  pa_ratio: jax.Array  # float32: PA share of the nodes ~ U(0, pa_ratio_max)

  @property
  def n_sbm(self) -> jax.Array:
    return self.n_nodes - self.n_pa


def sample_params(key: jax.Array, hp: StructureConfig) -> StructureParams:
  """Draws one graph's hyperparameters from ``hp``'s ranges (GraphPFN Sec. 3.1, the reference's ``pretrain.toml``).

  ``n_nodes`` is ``round(exp(U(log min, log max)))`` (the reference's
  ``log_uniform_int``); the SBM keeps ``max(floor(n (1 - pa_ratio)),
  min_first_level_nodes + 1)`` nodes and PA adds the rest.

  Args:
    key: the draws' key.
    hp: the ranges.

  Returns:
    Scalars (``jax.vmap`` over keys for a batch).
  """
  (u,) = rng.uniforms(key, (8,))
  n = jnp.round(rng.log_uniform(u[0], float(hp.n_nodes_min), float(hp.n_nodes_max)))
  n = jnp.clip(n, hp.n_nodes_min, hp.n_nodes_max).astype(jnp.int32)
  deg = jnp.where(u[1] < hp.high_degree_prob, rng.log_uniform(u[2], hp.high_degree_min, hp.high_degree_max),
                  rng.log_uniform(u[2], hp.low_degree_min, hp.low_degree_max))
  ratio = (u[3] * hp.pa_ratio_max).astype(jnp.float32)
  n_sbm = jnp.maximum(jnp.floor(n.astype(jnp.float32) * (1.0 - ratio)).astype(jnp.int32), hp.min_first_level_nodes + 1)
  n_sbm = jnp.minimum(n_sbm, n)
  subgraphs = jnp.clip(rng.randint(u[4], hp.subgraphs_min, hp.subgraphs_max), 1,
                       jnp.maximum(n_sbm // hp.min_first_level_nodes, 1))
  groups1 = rng.randint(u[6], hp.groups_min, hp.groups_max)
  groups2 = rng.randint(u[7], hp.groups_min, hp.groups_max) if hp.n_groups_per_sbm else groups1
  return StructureParams(
      n_nodes=n,
      n_pa=(n - n_sbm).astype(jnp.int32),
      avg_degree=deg.astype(jnp.float32),
      first_level_ratio=rng.uniform(u[5], hp.first_level_ratio_min, hp.first_level_ratio_max).astype(jnp.float32),
      n_subgraphs=subgraphs.astype(jnp.int32),
      n_groups1=groups1,
      n_groups2=groups2,
      pa_ratio=ratio,
  )


def level_degrees(params: StructureParams, hp: StructureConfig, variant: Variant | None = None):
  """``(sbm_degree, first_level_degree, second_level_degree)`` of the SBM nodes (the reference's split).

  The SBM degree makes up for the PA edges,
  ``max((d - r (1 + m) / 2) / (1 - r), 1)`` for PA share ``r > 0`` and at
  most ``m`` links per PA node; level 1 gets the share
  ``min(first_level_ratio, (min_first_level_nodes - 1) / sbm_degree)`` of it
  (the cap keeps a subgraph of the fewest nodes simple; off with
  ``cap_first_level_degree=False`` or ``variant.no_cap``), level 2 the rest.
  """
  variant = variant_of(hp) if variant is None else variant
  r = params.pa_ratio
  pa_degree = (1.0 + hp.pa_max_degree) / 2
  adjusted = jnp.maximum((params.avg_degree - r * pa_degree) / jnp.maximum(1.0 - r, 1e-6), 1.0)
  sbm_degree = jnp.where(r > 0, adjusted, params.avg_degree)
  ratio = params.first_level_ratio
  ratio = pick(variant.no_cap, ratio, jnp.minimum(ratio, (hp.min_first_level_nodes - 1) / sbm_degree))
  return sbm_degree, sbm_degree * ratio, sbm_degree * (1.0 - ratio)


def edge_targets(params: StructureParams, hp: StructureConfig):
  """Nominal edges ``(level 1, level 2, PA)``: ``n_sbm d_level / 2`` per level, ``n_pa (1 + m) / 2`` for PA.

  An SBM's expected edge count is at most its nominal one: the reference
  scales the full symmetric matrix of block counts to the nominal count and
  then draws its upper triangle, so the expectation is
  ``(nominal + diagonal blocks' share) / 2`` (:func:`methods.graphpfn.sbm.block_rates`).
  """
  _, d1, d2 = level_degrees(params, hp)
  n = params.n_sbm.astype(jnp.float32)
  return 0.5 * n * d1, 0.5 * n * d2, params.n_pa.astype(jnp.float32) * (1 + hp.pa_max_degree) / 2
