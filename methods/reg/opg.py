"""OPG: Orthogonal Policy Gradient, REG's policy extraction (reconstruction).

The paper (ICML 2026, abstract only public) extracts the policy with "an
aggressive, mode-seeking policy gradient projected onto the subspace orthogonal
to a stable in-sample behaviour-cloning gradient". Implemented here, on the
actor's parameters ``phi``:

  g_pg   = grad_phi( -E_s Q(s, pi_phi(s)) )          (min of the twin Qs)
  g_bc   = grad_phi( -E_D log pi_phi(a_D | s) )
  g_perp = g_pg - <g_pg, g_bc> / max(||g_bc||^2, eps) g_bc
  g      = g_bc + eta g_perp

on the flattened parameter vector (``jax.flatten_util.ravel_pytree``). Keeping
the BC gradient and adding the orthogonalised one follows the closest
precedent, O-DICE's orthogonal-gradient update. The projection is applied twice
(classical Gram-Schmidt with re-orthogonalisation) so that ``g_perp`` is
orthogonal to ``g_bc`` to float32 round-off even when the two nearly align.

Ablations (all static switches of :func:`combine`):
  * ``projection="layer"``: project each layer's (module's) block separately;
  * ``conflict_only=True``: project only where ``<g_pg, g_bc> < 0``;
  * ``direction="perp"``: the pure orthogonal step ``eta g_perp``;
  * ``projection="none"``: ``g_bc + eta g_pg`` (TD3+BC-like);
  * ``direction="bc"``: pure behaviour cloning ``g_bc``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp

PROJECTIONS = ("flat", "layer", "none")
DIRECTIONS = ("bc_plus_perp", "perp", "bc")


class OPGInfo(NamedTuple):
  """Diagnostics of one OPG direction (scalars)."""

  cos_pg_bc: jax.Array  # cosine between the raw gradients g_pg and g_bc
  cos_perp_bc: jax.Array  # cosine between g_perp and g_bc (0 up to round-off)
  conflict: jax.Array  # fraction of projected blocks with <g_pg, g_bc> < 0
  norm_pg: jax.Array
  norm_bc: jax.Array


def _cos(a: jax.Array, b: jax.Array) -> jax.Array:
  return jnp.vdot(a, b) / jnp.maximum(jnp.linalg.norm(a) * jnp.linalg.norm(b), 1e-30)


def project_out(g: jax.Array, d: jax.Array, eps: float = 1e-12, conflict_only: bool = False) -> jax.Array:
  """``g - <g, d> / max(||d||^2, eps) d`` for flat vectors ``[P]`` (twice, for round-off).

  With ``conflict_only`` the projection applies only when ``<g, d> < 0``.
  """
  dd = jnp.maximum(jnp.vdot(d, d), eps)
  perp = g - jnp.vdot(g, d) / dd * d
  perp = perp - jnp.vdot(perp, d) / dd * d
  if conflict_only:
    return jnp.where(jnp.vdot(g, d) < 0, perp, g)
  return perp


def _layer_blocks(tree: Any) -> dict[str, list[int]]:
  """Leaf indices grouped by their parent module (``.../Dense_0/{kernel,bias}`` form one block)."""
  paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
  blocks: dict[str, list[int]] = {}
  for i, path in enumerate(paths):
    parent = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path[:-1])
    blocks.setdefault(parent, []).append(i)
  return blocks


def orthogonal_component(
    g_pg: Any, g_bc: Any, *, projection: str = "flat", conflict_only: bool = False, eps: float = 1e-12
) -> tuple[Any, jax.Array]:
  """``g_perp`` (a pytree like ``g_pg``) and the fraction of blocks in conflict.

  Args:
    g_pg: policy-gradient pytree (gradient of ``-Q``).
    g_bc: behaviour-cloning gradient pytree (gradient of the NLL), same structure.
    projection: ``"flat"`` (the whole parameter vector), ``"layer"`` (per module)
      or ``"none"`` (``g_pg`` unchanged).
    conflict_only: project only blocks where ``<g_pg, g_bc> < 0``.
    eps: floor of ``||g_bc||^2``.
  """
  if projection == "none":
    flat_pg, _ = ravel_pytree(g_pg)
    flat_bc, _ = ravel_pytree(g_bc)
    return g_pg, (jnp.vdot(flat_pg, flat_bc) < 0).astype(jnp.float32)
  if projection == "flat":
    flat_pg, unravel = ravel_pytree(g_pg)
    flat_bc, _ = ravel_pytree(g_bc)
    perp = project_out(flat_pg, flat_bc, eps, conflict_only)
    return unravel(perp), (jnp.vdot(flat_pg, flat_bc) < 0).astype(jnp.float32)
  if projection != "layer":
    raise ValueError(f"projection={projection!r}; allowed: {PROJECTIONS}")
  leaves_pg, treedef = jax.tree.flatten(g_pg)
  leaves_bc = jax.tree.leaves(g_bc)
  out = list(leaves_pg)
  conflicts = []
  for idx in _layer_blocks(g_pg).values():
    a = jnp.concatenate([leaves_pg[i].ravel() for i in idx])
    b = jnp.concatenate([leaves_bc[i].ravel() for i in idx])
    conflicts.append(jnp.vdot(a, b) < 0)
    perp = project_out(a, b, eps, conflict_only)
    start = 0
    for i in idx:
      n = leaves_pg[i].size
      out[i] = perp[start:start + n].reshape(leaves_pg[i].shape)
      start += n
  return jax.tree.unflatten(treedef, out), jnp.mean(jnp.stack(conflicts).astype(jnp.float32))


def combine(
    g_pg: Any,
    g_bc: Any,
    *,
    eta: float,
    projection: str = "flat",
    conflict_only: bool = False,
    direction: str = "bc_plus_perp",
    eps: float = 1e-12,
) -> tuple[Any, OPGInfo]:
  """OPG's update direction ``g`` (a gradient to descend) and its diagnostics.

  Args:
    g_pg: gradient of ``-E Q(s, pi(s))`` w.r.t. the actor parameters.
    g_bc: gradient of ``-E log pi(a_D | s)`` w.r.t. the same parameters.
    eta: step size of the orthogonal (or, with ``projection="none"``, raw) policy gradient.
    projection: see :func:`orthogonal_component`.
    conflict_only: see :func:`orthogonal_component`.
    direction: ``"bc_plus_perp"`` (``g_bc + eta g_perp``), ``"perp"``
      (``eta g_perp``) or ``"bc"`` (``g_bc``).
    eps: floor of ``||g_bc||^2``.

  Returns:
    ``(g, OPGInfo)``.
  """
  if direction not in DIRECTIONS:
    raise ValueError(f"direction={direction!r}; allowed: {DIRECTIONS}")
  perp, conflict = orthogonal_component(g_pg, g_bc, projection=projection, conflict_only=conflict_only, eps=eps)
  flat_pg, _ = ravel_pytree(g_pg)
  flat_bc, _ = ravel_pytree(g_bc)
  flat_perp, _ = ravel_pytree(perp)
  info = OPGInfo(
      cos_pg_bc=_cos(flat_pg, flat_bc),
      cos_perp_bc=_cos(flat_perp, flat_bc),
      conflict=conflict,
      norm_pg=jnp.linalg.norm(flat_pg),
      norm_bc=jnp.linalg.norm(flat_bc),
  )
  if direction == "bc":
    return g_bc, info
  if direction == "perp":
    return jax.tree.map(lambda p: eta * p, perp), info
  return jax.tree.map(lambda b, p: b + eta * p, g_bc, perp), info
