"""Exact discrete draws by inverse CDF over integer weights, with guide tables.

The structure sampler draws millions of block pairs and edge endpoints from
discrete distributions. Each distribution's weights are quantised to
integer units (:func:`quantize`), so cumulative sums are exact int32 and a
draw is the integer search ``searchsorted(cum, t, "right")`` of a uniform
integer ``t`` (no float rounding between blocks: a block of small weights
after a block of huge ones is drawn as accurately as the first). The
search starts from a guide table (Chen & Asau, 1974) and bisects only the
few entries between two guide points, so a draw costs O(1) expected steps.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

UNITS_BITS = 24  # at most 2^24 units per distribution: a float32 uniform times the units is exact


class Tables(NamedTuple):
  """Integer weights stored back to back in segments, with their cumulative sums and guide tables.

  ``cum`` holds each segment's inclusive cumulative units (restarting at 0);
  ``guide[d, i]`` is the global index of the first entry of segment ``d``
  whose cumulative units exceed ``total[d] * i / cells``.
  """

  units: jax.Array  # [M] int32
  cum: jax.Array  # [M] int32
  guide: jax.Array  # [D, cells + 1] int32
  total: jax.Array  # [D] int32


def units_per_block(num_blocks: int) -> int:
  """Units per block so that ``num_blocks`` blocks of them fit in an int32 (a power of two, <= 2^24)."""
  bits = ((2**31 - 1) // max(num_blocks, 1)).bit_length() - 1
  return 1 << max(min(bits, UNITS_BITS), 1)


def quantize(weights: jax.Array, block: jax.Array, num_blocks: int, units: int) -> jax.Array:
  """``floor(units * w_i / W_block(i))``: each block's weights as integer units (about ``units`` per block).

  Args:
    weights: ``[M]`` non-negative float weights (0 on padding).
    block: ``[M]`` int32 block of each entry (``num_blocks`` or more: padding, ignored).
    num_blocks: static number of blocks.
    units: units per block (:func:`units_per_block`).

  Returns:
    ``[M]`` int32 units; an entry whose share of its block is below ``1 / units`` gets 0.
  """
  total = jax.ops.segment_sum(weights, block, num_segments=num_blocks + 1)
  share = weights / jnp.maximum(total[block], 1e-30)
  return jnp.where(block < num_blocks, jnp.floor(share * units), 0.0).astype(jnp.int32)


def tables(units: jax.Array, sizes: tuple[int, ...], cells: int) -> Tables:
  """Tables of the segments of ``units [sum(sizes)]`` (static ``sizes``), ``cells`` guide cells each."""
  cums, guides, totals, start = [], [], [], 0
  for size in sizes:
    c = jnp.cumsum(units[start:start + size])
    points = jnp.floor(c[-1].astype(jnp.float32) * (jnp.arange(cells + 1, dtype=jnp.float32) / cells))
    guides.append(start + jnp.searchsorted(c, points.astype(jnp.int32), side="right").astype(jnp.int32))
    cums.append(c)
    totals.append(c[-1])
    start += size
  return Tables(units, jnp.concatenate(cums), jnp.stack(guides), jnp.stack(totals))


def uniform_units(x: jax.Array, count: jax.Array) -> jax.Array:
  """A uniform integer in ``[0, count)`` from a float32 uniform ``x`` (``count <= 2^24``)."""
  return jnp.clip(jnp.floor(x * count.astype(jnp.float32)).astype(jnp.int32), 0, jnp.maximum(count - 1, 0))


def draw(tab: Tables, seg: jax.Array, lo: jax.Array, hi: jax.Array, t: jax.Array) -> jax.Array:
  """The index ``i`` in ``[lo, hi)`` of segment ``seg`` with ``cum[i - 1] <= t < cum[i]``.

  ``t`` is a cumulative-unit position inside the range (all arrays of one
  shape), so the index is drawn with probability proportional to its units
  when ``t`` is uniform over the range's units. A branchless binary search
  between the guide points around ``t``; it takes as many steps as the
  widest such bracket needs (a few, unless weights differ by orders of
  magnitude inside one guide cell).
  """
  cells = tab.guide.shape[-1] - 1
  share = t.astype(jnp.float32) / jnp.maximum(tab.total[seg], 1).astype(jnp.float32)
  j = jnp.clip(jnp.floor(share * cells), 0, cells - 1).astype(jnp.int32)
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
