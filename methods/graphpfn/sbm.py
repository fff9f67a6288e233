"""The two block-model levels of the GraphPFN structure prior, as the reference samples them.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 3.1; the reference's
``multi_level_sbm_with_pa.py`` and ``sbm.py`` (yandex-research/graphpfn).
The SBM nodes are split into ``k`` first-level subgraphs (sizes uniform over
the compositions with at least ``min_first_level_nodes`` each); each
subgraph is a degree-corrected SBM of average degree ``d1`` and the whole
node set one more, independent SBM of degree ``d2``
(:func:`methods.graphpfn.structure_params.level_degrees`). Each SBM, with
``g`` groups:

- group sizes uniform over the compositions of its ``n`` nodes with at least
  ``max(4, floor(0.1 n / g))`` nodes each;
- block densities: with probability 1/2 a unit diagonal and one shared
  off-diagonal density ``coef * U``, otherwise a ``U(0, 1)`` diagonal and
  off-diagonal ``coef * U * sqrt(P_aa P_cc)``;
- expected edges ``B = P * (n_a n_c)`` (``n_a^2`` on the diagonal) scaled so
  that the whole symmetric matrix sums to ``n d / 2``; block pair
  ``a <= c`` gets ``Poisson(B_ac)`` edges (:func:`block_rates`);
- node weights: with probability 1/2 Zipf(gamma), gamma ~ U(2, 3), else
  U(0, 1); an edge's ends are drawn in proportion to them inside their
  groups, the two ends of a diagonal-block edge without replacement.

Jittable form (this project's): every SBM is laid out on a padded position
axis (level 1 on the node ids, level 2 on a random permutation of them), so
each block is a contiguous range; ``Poisson(sum B)`` edge slots per level
pick a block pair in proportion to ``B`` and their ends by an exact integer
inverse CDF (:mod:`methods.graphpfn.inverse_cdf`). O(S) work and memory for
``S`` slots, nothing of size ``N x N``.

Reconstruction (not public): the reference's ``random_partition`` is read as
"uniform over the compositions with the minimum size" (as its older public
version does); the first-level subgraphs have no 10% minimum, the groups
do (``sample_sbm_groups``). Where an SBM is too small for ``g`` groups of 4
(which the reference refuses; never at its sizes) ``g`` is lowered to
``floor(n / 4)``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from methods.graphpfn import inverse_cdf
from methods.graphpfn import rng
from methods.graphpfn.hparams import StructureConfig
from methods.graphpfn.structure_params import Variant, pick

SLOT_CHUNK = 8192  # edge slots drawn per step of the slot loop


class SBMDraws(NamedTuple):
  """Per-SBM draws, ``[K + 1]``: the ``K = subgraphs_max`` first-level subgraphs, then the second level."""

  n_nodes: jax.Array  # [K + 1] int32 (0 for unused subgraphs)
  n_groups: jax.Array  # [K + 1] int32
  group_sizes: jax.Array  # [K + 1, G] int32
  uniform_density: jax.Array  # [K + 1] bool
  zipf: jax.Array  # [K + 1] bool: Zipf node weights
  zipf_gamma: jax.Array  # [K + 1] float32
  expected_edges: jax.Array  # [K + 1] float32: sum of B over the block pairs a <= c


class SBMEdges(NamedTuple):
  """Both levels' edges (a multigraph) and the node labels."""

  senders: jax.Array  # [S] int32
  receivers: jax.Array  # [S] int32
  mask: jax.Array  # [S] bool
  block1: jax.Array  # [N] int32: subgraph * groups_max + group
  block2: jax.Array  # [N] int32: second-level group
  valid: jax.Array  # [N] bool: the SBM nodes
  drawn: jax.Array  # [] int32: edges drawn, both levels (before simplification)
  draws: SBMDraws


def random_partition(u: jax.Array, total: jax.Array, parts: jax.Array, min_size: jax.Array) -> jax.Array:
  """Sizes ``[P]`` of ``parts`` parts of ``total``, each >= ``min_size``, uniform over such compositions.

  The ``parts - 1`` cut points are a uniform subset of ``{1, ..., m - 1}``,
  ``m = total - (min_size - 1) parts`` (Floyd's algorithm, one step per
  uniform of ``u [P - 1]``); parts past ``parts`` are 0. ``min_size = 0``
  allows empty parts. Needs ``parts <= P`` and ``total >= parts * min_size``.
  """
  p = u.shape[-1] + 1
  m = total - (min_size - 1) * parts
  cuts, top = parts - 1, m - 1
  chosen = jnp.full((p - 1,), jnp.iinfo(jnp.int32).max, jnp.int32)
  for i in range(p - 1):
    j = top - cuts + 1 + i
    t = jnp.clip(1 + jnp.floor(u[i] * j.astype(jnp.float32)).astype(jnp.int32), 1, jnp.maximum(j, 1))
    pick = jnp.where(jnp.any(chosen == t), j, t)
    chosen = chosen.at[i].set(jnp.where(i < cuts, pick, chosen[i]))
  ends = jnp.concatenate([jnp.minimum(jnp.sort(chosen), m), m[None]])
  raw = ends - jnp.concatenate([jnp.zeros((1,), jnp.int32), ends[:-1]])
  return jnp.where(jnp.arange(p) < parts, raw + min_size - 1, 0).astype(jnp.int32)


def zipf(key: jax.Array, gamma: jax.Array) -> jax.Array:
  """Zipf(gamma) integers (``P(k) ~ k^-gamma``, ``k >= 1``) as float32, one per entry of ``gamma``.

  Devroye's rejection method (Non-Uniform Random Variate Generation, 1986,
  Sec. X.6): ``X = floor(U^(-1 / (gamma - 1)))`` is accepted when
  ``V X (T - 1) / (b - 1) <= T / b``, ``T = (1 + 1 / X)^(gamma - 1)``,
  ``b = 2^(gamma - 1)``; rounds of fresh uniforms until every entry is
  accepted (a few in expectation). Values past float32's uniforms
  (``U >= 2^-24``, so ``X <= 2^(24 / (gamma - 1))``) never occur.
  """
  am1 = gamma - 1.0
  b = 2.0**am1

  def body(c):
    i, x, done = c
    u, v = rng.uniforms(jax.random.fold_in(key, i), gamma.shape, gamma.shape)
    big = jnp.floor((1.0 - u) ** (-1.0 / am1))
    t = jnp.exp(am1 * jnp.log1p(1.0 / big))
    ok = jnp.isfinite(big) & (v * big * (t - 1.0) / (b - 1.0) <= t / b)
    return i + 1, jnp.where(~done & ok, big, x), done | ok

  _, x, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[2]), body,
                               (jnp.int32(0), jnp.ones_like(gamma), jnp.zeros(gamma.shape, bool)))
  return x


def pair_weights(density: jax.Array, sizes: jax.Array, n_choose_2=False) -> jax.Array:
  """``P_ac * pairs(a, c)`` ``[G, G]``: ``n_a n_c`` node pairs, ``n_a^2`` (or ``n_a (n_a - 1) / 2``) on the diagonal."""
  n = sizes.astype(jnp.float32)
  pairs = n[:, None] * n[None, :]
  diagonal = pick(n_choose_2, n * (n - 1) / 2, n * n)
  return density * jnp.where(jnp.eye(n.shape[0], dtype=bool), diagonal[:, None] * jnp.ones_like(pairs), pairs)


def block_rates(weights: jax.Array, nominal: jax.Array, weight_sum: jax.Array) -> jax.Array:
  """Expected edges ``B [G, G] = weights * nominal / weight_sum`` (the reference's scaling of ``P * n n^T``).

  Block pair ``a < c`` gets ``Poisson(B_ac)`` edges and ``a = a``
  ``Poisson(B_aa)``: the SBM's expectation is the upper triangle's sum,
  ``(nominal + trace(B)) / 2``, not ``nominal``.
  """
  return jnp.where(weight_sum > 0, weights * (nominal / jnp.maximum(weight_sum, 1e-30)), 0.0)


def _densities(uniform, base, u_diag, u_off, coef):
  """Block densities ``[NB, G, G]`` of every SBM: unit diagonal and ``coef * base`` off it where ``uniform``,
  else a ``U(0, 1)`` diagonal and ``coef * U * sqrt(P_aa P_cc)`` off it."""
  g = u_diag.shape[-1]
  diag = jnp.where(uniform[:, None], 1.0, u_diag)
  off_u = jnp.triu(u_off, 1) + jnp.swapaxes(jnp.triu(u_off, 1), 1, 2)
  scale = jnp.sqrt(diag[:, :, None] * diag[:, None, :])
  off = coef * jnp.where(uniform[:, None, None], base[:, None, None] * jnp.ones_like(off_u), off_u * scale)
  return jnp.where(jnp.eye(g, dtype=bool)[None], diag[:, :, None] * jnp.ones_like(off), off)


def sbm_draws(key: jax.Array, params, hp: StructureConfig, d1: jax.Array, d2: jax.Array, variant: Variant):
  """Every SBM's sizes, groups, coins and expected block edges (``variant``: :class:`Variant` flags).

  Returns:
    ``(draws, rates [NB, G, G])``, ``NB = subgraphs_max + 1``.
  """
  k, g = hp.subgraphs_max, hp.groups_max
  nb = k + 1
  u_sub, u_gn, u_grp, u_coin, u_diag, u_off = rng.uniforms(
      key, (max(k - 1, 1),), (nb,), (nb, max(g - 1, 1)), (nb, 4), (nb, g), (nb, g, g))
  n_sbm = params.n_sbm.astype(jnp.int32)
  sub = random_partition(u_sub[:k - 1] if k > 1 else u_sub[:0], n_sbm, params.n_subgraphs,
                         jnp.int32(hp.min_first_level_nodes))
  sizes = jnp.concatenate([sub, n_sbm[None]])
  idx = jnp.arange(nb)
  drawn = jnp.where(idx == k, params.n_groups2, params.n_groups1)
  if hp.n_groups_per_sbm:
    drawn = jnp.where((idx == 0) | (idx == k), drawn, rng.randint(u_gn, hp.groups_min, hp.groups_max))
  groups = jnp.clip(jnp.minimum(jnp.minimum(drawn, sizes), sizes // hp.min_group_size), 1, g).astype(jnp.int32)
  least = jnp.maximum(hp.min_group_size, jnp.floor(sizes / groups * hp.min_group_fraction).astype(jnp.int32))
  least = pick(variant.unconstrained_groups, jnp.zeros((nb,), jnp.int32), least)
  group_sizes = jax.vmap(random_partition)(u_grp[:, :g - 1], sizes, groups, least)
  uniform = u_coin[:, 0] < hp.uniform_density_prob
  density = _densities(uniform, u_coin[:, 3], u_diag, u_off, hp.offdiagonal_coef)
  weights = jax.vmap(pair_weights, in_axes=(0, 0, None))(density, group_sizes, variant.n_choose_2)
  nominal = 0.5 * sizes.astype(jnp.float32) * jnp.where(idx == k, d2, d1)
  total = jnp.sum(weights, axis=(1, 2))
  # The size-weighted variant: level 1 as one SBM, its edges spread by weight over all subgraphs.
  joint = 0.5 * n_sbm * d1 * total / jnp.maximum(jnp.sum(jnp.where(idx < k, total, 0.0)), 1e-30)
  nominal = pick(variant.size_weighted, jnp.where(idx == k, nominal, joint), nominal)
  rates = jax.vmap(block_rates)(weights, nominal, total)
  zipf_on = u_coin[:, 1] < hp.zipf_prob
  gamma = rng.uniform(u_coin[:, 2], hp.zipf_gamma_min, hp.zipf_gamma_max)
  upper = jnp.triu(jnp.ones((g, g), bool))[None]
  expected = jnp.sum(jnp.where(upper, rates, 0.0), axis=(1, 2))
  return SBMDraws(sizes, groups, group_sizes, uniform, zipf_on, gamma, expected), rates


class _Layout(NamedTuple):
  """Where the SBMs' blocks sit on the position axis ``[0, 2N)``: level 1 on ``[0, N)`` (position = node id),
  level 2 on ``[N, 2N)`` (position ``N + j`` is node ``order2[j]``)."""

  lo: jax.Array  # [R] int32: first position of each block (R = (K + 1) * G blocks)
  hi: jax.Array  # [R] int32
  block: jax.Array  # [2N] int32: block of each position (R: padding)
  order2: jax.Array  # [N] int32
  units: jax.Array  # [2N] int32: node weights as integer units per block
  nodes: inverse_cdf.Tables  # segments [0, N) and [N, 2N)
  base: jax.Array  # [R] int32: cumulative units before each block (inside its segment)
  size: jax.Array  # [R] int32: units of each block


def _layout(key: jax.Array, draws: SBMDraws, hp: StructureConfig, num_nodes: int, equal_weights) -> _Layout:
  """Blocks as contiguous position ranges, the level-2 permutation and the node weights' tables."""
  n, g = num_nodes, hp.groups_max
  nb = draws.n_nodes.shape[0]
  blocks = nb * g
  k_perm, k_zipf, k_uniform = jax.random.split(key, 3)
  n_sbm = draws.n_nodes[-1]
  start = jnp.concatenate([jnp.cumsum(draws.n_nodes[:-1]) - draws.n_nodes[:-1], jnp.full((1,), n, jnp.int32)])
  offset = jnp.cumsum(draws.group_sizes, axis=1) - draws.group_sizes
  lo = (start[:, None] + offset).reshape(-1).astype(jnp.int32)
  hi = lo + draws.group_sizes.reshape(-1)
  pos = jnp.arange(2 * n)
  valid = (pos < n_sbm) | ((pos >= n) & (pos < n + n_sbm))
  block = jnp.where(valid, jnp.searchsorted(hi, pos, side="right"), blocks).astype(jnp.int32)
  (score,) = rng.uniforms(k_perm, (n,))
  order2 = jnp.argsort(jnp.where(jnp.arange(n) < n_sbm, score, 2.0 + jnp.arange(n) / n)).astype(jnp.int32)
  sbm = jnp.minimum(block // g, nb - 1)
  # Node weights, drawn per position (iid, so a position's weight is its node's): Zipf or U(0, 1) (or 1).
  heavy = zipf(k_zipf, draws.zipf_gamma[sbm])
  light = pick(equal_weights, jnp.ones((2 * n,)), rng.uniforms(k_uniform, (2 * n,))[0])
  weight = jnp.where(valid, jnp.where(draws.zipf[sbm], heavy, light), 0.0)
  units = inverse_cdf.quantize(weight, block, blocks, inverse_cdf.units_per_block(blocks))
  nodes = inverse_cdf.tables(units, (n, n), 2 * n)
  size = jax.ops.segment_sum(units, block, num_segments=blocks + 1)[:blocks]
  base = jnp.where(hi > lo, (nodes.cum - units)[jnp.minimum(lo, 2 * n - 1)], 0)
  return _Layout(lo, hi, block, order2, units, nodes, base, size)


@functools.lru_cache(maxsize=None)
def _pair_lists(num_sbms: int, groups: int):
  """Static block pairs ``(r, c)``, ``r <= c`` inside each SBM (flat block ids), the first-level SBMs first."""
  tri = [(a, c) for a in range(groups) for c in range(a, groups)]
  first = [b * groups + a for b in range(num_sbms) for a, _ in tri]
  second = [b * groups + c for b in range(num_sbms) for _, c in tri]
  return np.asarray(first, np.int32), np.asarray(second, np.int32), len(tri)


def _ends(lay: _Layout, level, r, s, x1, x2, num_nodes):
  """Both ends (node ids) of slots in block pair ``(r, s)`` and whether the pair can hold an edge.

  ``u`` is drawn in block ``r`` by weight; ``v`` in block ``s`` by weight, or,
  on a diagonal block, among the block's other nodes (the reference's
  ``multinomial(..., 2, replacement=False)``): a uniform position in the
  block's units minus ``u``'s, shifted past ``u``'s own range.
  """
  t = lay.base[r] + inverse_cdf.uniform_units(x1, lay.size[r])
  pu = inverse_cdf.draw(lay.nodes, level, lay.lo[r], lay.hi[r], t)
  q = lay.units[pu]
  diag = r == s
  room = jnp.where(diag, lay.size[r] - q, lay.size[s])
  t = lay.base[s] + inverse_cdf.uniform_units(x2, room)
  t = jnp.where(diag & (t >= lay.nodes.cum[pu] - q), t + q, t)
  pv = inverse_cdf.draw(lay.nodes, level, lay.lo[s], lay.hi[s], t)
  node = lambda p: jnp.where(p < num_nodes, p, lay.order2[jnp.clip(p - num_nodes, 0, num_nodes - 1)])  # noqa: E731
  return node(pu), node(pv), room > 0


class SlotPlan(NamedTuple):
  """Everything the slot loop of :func:`sbm_levels` reads: the draws, the layout and the block pairs' tables."""

  draws: SBMDraws
  layout: _Layout
  pairs: inverse_cdf.Tables  # the block pairs' rates: level 1's pairs, then level 2's
  c1: jax.Array  # [] int32: level 1's edges (slots [0, c1))
  drawn: jax.Array  # [] int32: both levels' edges, c1 + c2 (may exceed the slots)
  key: jax.Array  # the slots' key (:func:`slot_uniforms`)


def slot_plan(key: jax.Array, params, hp: StructureConfig, num_nodes: int, d1: jax.Array, d2: jax.Array,
              variant: Variant) -> SlotPlan:
  """The SBM draws, the layout, the pairs' tables and the edge counts of :func:`sbm_levels` (its arguments)."""
  k_draws, k_layout, k_count, k_slots = jax.random.split(key, 4)
  draws, rates = sbm_draws(k_draws, params, hp, d1, d2, variant)
  lay = _layout(k_layout, draws, hp, num_nodes, variant.equal_weights)
  nb, g = rates.shape[0], hp.groups_max
  pr, pc, tri = _pair_lists(nb, g)
  flat = rates.reshape(nb, g * g)[:, (pr[:tri] % g) * g + pc[:tri] % g].reshape(-1)  # [NB * T] pair rates
  level_of_pair = (np.arange(nb * tri) >= (nb - 1) * tri).astype(np.int32)
  pairs = inverse_cdf.tables(inverse_cdf.quantize(flat, jnp.asarray(level_of_pair), 2, 1 << inverse_cdf.UNITS_BITS),
                             ((nb - 1) * tri, tri), 4 * max((nb - 1) * tri, tri))
  totals = jnp.stack([jnp.sum(flat[:(nb - 1) * tri]), jnp.sum(flat[(nb - 1) * tri:])])
  c1, c2 = jax.random.poisson(k_count, totals).astype(jnp.int32)
  return SlotPlan(draws, lay, pairs, c1, c1 + c2, k_slots)


def slot_chunk(num_slots: int) -> int:
  """Slots per step of the slot loop (:data:`SLOT_CHUNK`, or fewer when there are fewer slots)."""
  return min(num_slots, SLOT_CHUNK)


def slot_uniforms(key: jax.Array, i: jax.Array, size: int) -> jax.Array:
  """``[3, size]`` uniforms of the slots of chunk ``i`` (block pair, first end, second end)."""
  (x,) = rng.uniforms(jax.random.fold_in(key, i), (3, size))
  return x


def over_slot_chunks(fn, empty, num_slots: int, drawn: jax.Array):
  """``fn(i)`` for every chunk ``i`` of ``num_slots`` slots, stacked; ``empty(i)`` for the chunks past ``drawn``.

  The skipped chunks cost nothing for one graph at a time (under ``vmap``
  both branches run).
  """
  size = slot_chunk(num_slots)
  return jax.lax.map(lambda i: jax.lax.cond(i * size < drawn, fn, empty, i), jnp.arange(-(-num_slots // size)))


def sbm_levels(key: jax.Array, params, hp: StructureConfig, num_nodes: int, num_slots: int,
               d1: jax.Array, d2: jax.Array, variant: Variant) -> SBMEdges:
  """Both SBM levels' edges in ``num_slots`` slots (a multigraph; the caller simplifies it).

  Slots ``[0, c1)`` hold level 1's ``c1 ~ Poisson(sum B)`` edges, the next
  ``c2`` level 2's. Each slot draws a block pair ``(a, c)``, ``a <= c``, of
  its level with probability ``B_ac / sum(B)``, then its ends by node weight
  (:func:`_ends`): the per-pair counts are the reference's independent
  Poissons and the ends its draws. Slots past ``num_slots`` are dropped (the
  slots cover the target plus 6 standard deviations).

  Args:
    key: used for the SBM draws, the level-2 permutation, node weights, edge counts and slots.
    params: the graph's :class:`methods.graphpfn.structure_params.StructureParams`.
    hp: the static config.
    num_nodes, num_slots: static sizes (at least ``params.n_nodes`` and the edge target's slots).
    d1, d2: first- and second-level degrees (:func:`methods.graphpfn.structure_params.level_degrees`).
    variant: :class:`methods.graphpfn.structure_params.Variant` flags.
  """
  plan = slot_plan(key, params, hp, num_nodes, d1, d2, variant)
  lay, pairs, c1 = plan.layout, plan.pairs, plan.c1
  nb, g = plan.draws.n_nodes.shape[0], hp.groups_max
  pr, pc, tri = _pair_lists(nb, g)
  drawn = jnp.minimum(plan.drawn, num_slots)
  pair_lo, pair_hi = jnp.asarray([0, (nb - 1) * tri], jnp.int32), jnp.asarray([(nb - 1) * tri, nb * tri], jnp.int32)
  size = slot_chunk(num_slots)

  def chunk(i):
    """Slots ``[i C, (i + 1) C)``: each step's arrays stay in cache."""
    x = slot_uniforms(plan.key, i, size)
    slot = i * size + jnp.arange(size)
    level = (slot >= c1).astype(jnp.int32)
    pair = inverse_cdf.draw(pairs, level, pair_lo[level], pair_hi[level],
                            inverse_cdf.uniform_units(x[0], pairs.total[level]))
    u, v, ok = _ends(lay, level, jnp.asarray(pr)[pair], jnp.asarray(pc)[pair], x[1], x[2], num_nodes)
    return u, v, ok & (slot < drawn)

  def skip(i):
    del i
    return jnp.zeros((size,), jnp.int32), jnp.zeros((size,), jnp.int32), jnp.zeros((size,), bool)

  u, v, mask = over_slot_chunks(chunk, skip, num_slots, drawn)
  u, v, mask = (a.reshape(-1)[:num_slots] for a in (u, v, mask))
  n, k = num_nodes, nb - 1
  block1 = lay.block[:n]
  block2 = jnp.zeros((n,), jnp.int32).at[lay.order2].set(lay.block[n:] - k * g)
  valid = jnp.arange(n) < params.n_sbm
  return SBMEdges(u, v, mask, block1, block2, valid, plan.drawn, plan.draws)
