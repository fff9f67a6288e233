"""Bracketing by bisection, jittable (a fixed number of halvings in a ``fori_loop``)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def bisect(move_lo: Callable[[jax.Array], jax.Array], lo: jax.Array, hi: jax.Array,
           iterations: int) -> tuple[jax.Array, jax.Array]:
  """Halves the bracket ``[lo, hi]`` ``iterations`` times.

  Args:
    move_lo: ``mid -> bool``: ``True`` when the root lies above ``mid`` (the
      lower end moves up to ``mid``), ``False`` when it lies below.
    lo, hi: scalar ends of the initial bracket.
    iterations: number of halvings (static); the bracket shrinks to
      ``(hi - lo) 2^-iterations``.

  Returns:
    The final bracket ``(lo, hi)``.
  """

  def body(_, bracket):
    lo, hi = bracket
    mid = 0.5 * (lo + hi)
    up = move_lo(mid)
    return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

  return jax.lax.fori_loop(0, iterations, body, (lo, hi))
