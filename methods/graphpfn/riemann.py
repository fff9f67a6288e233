"""The binned ("Riemann") regression head of prior-data fitted networks.

Mueller, Hollmann, Pineda Arango, Grabocka, Hutter (2022), "Transformers can
do Bayesian inference", Sec. 4.1: a regression target's predictive
distribution is a piecewise-constant density over ``K`` bins (a bar
distribution); the network outputs ``K`` logits, bin ``k`` has probability
``p_k = softmax(logits)_k`` and density ``p_k / w_k`` on ``[b_k, b_{k+1})``
(width ``w_k``). The borders are fitted once to samples of the prior's
targets so that each bin holds about the same prior mass (their Sec. 4.1:
"we use the prior's samples to choose bins with equal probability").

Simplification (documented, a reconstruction): the paper's full-support
variant replaces the two outer bars with half-normal tails; here the support
is ``[b_0, b_K]`` and targets outside it are clipped to it, which the
standardised targets of the prior (and the training-node standardisation of
:mod:`methods.graphpfn.model`) make rare.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def fit_borders(values, num_bins: int, *, min_width_ratio: float = 1e-3) -> jax.Array:
  """Bin borders with equal mass under ``values``: the empirical quantiles at ``k / K``.

  Args:
    values: samples of (standardised) prior targets, any shape; non-finite
      entries are ignored.
    num_bins: ``K``.
    min_width_ratio: each bin is at least this share of the range divided by
      ``K`` wide (repeated values would otherwise give empty bins).

  Returns:
    ``[K + 1]`` float32 strictly increasing borders.

  Raises:
    ValueError: fewer than two distinct finite values, or ``num_bins < 1``.
  """
  v = np.asarray(values, np.float64).ravel()
  v = v[np.isfinite(v)]
  if num_bins < 1:
    raise ValueError(f"num_bins={num_bins} must be >= 1")
  if v.size < 2 or v.min() == v.max():
    raise ValueError(f"values: need at least two distinct finite values to fit bins, got {v.size} finite values")
  b = np.quantile(v, np.linspace(0.0, 1.0, num_bins + 1))
  step = min_width_ratio * (b[-1] - b[0]) / num_bins
  for k in range(1, num_bins + 1):
    b[k] = max(b[k], b[k - 1] + step)
  return jnp.asarray(b, jnp.float32)


def _widths(borders: jax.Array) -> jax.Array:
  return borders[1:] - borders[:-1]


def bin_index(y: jax.Array, borders: jax.Array) -> jax.Array:
  """Bin of each target ``y [...]`` (clipped to the support): ``[...]`` int32 in ``[0, K)``."""
  k = borders.shape[0] - 1
  yc = jnp.clip(y, borders[0], borders[-1])
  return jnp.clip(jnp.searchsorted(borders, yc, side="right") - 1, 0, k - 1).astype(jnp.int32)


def log_prob(logits: jax.Array, y: jax.Array, borders: jax.Array) -> jax.Array:
  """Log density of ``y [...]`` under the bar distribution ``logits [..., K]``: ``log p_k - log w_k``."""
  idx = bin_index(y, borders)
  logp = jax.nn.log_softmax(logits, axis=-1)
  picked = jnp.take_along_axis(logp, idx[..., None], axis=-1)[..., 0]
  return picked - jnp.log(_widths(borders))[idx]


def mean(logits: jax.Array, borders: jax.Array) -> jax.Array:
  """Mean ``sum_k p_k (b_k + b_{k+1}) / 2``: ``[...]`` for ``logits [..., K]``."""
  centres = (borders[1:] + borders[:-1]) / 2
  return jax.nn.softmax(logits, axis=-1) @ centres


def cdf(logits: jax.Array, y: jax.Array, borders: jax.Array) -> jax.Array:
  """``P(Y <= y)``: ``[...]`` for ``logits [..., K]``, ``y [...]`` (linear inside a bin)."""
  p = jax.nn.softmax(logits, axis=-1)
  idx = bin_index(y, borders)
  below = jnp.cumsum(p, axis=-1) - p
  frac = (jnp.clip(y, borders[0], borders[-1]) - borders[idx]) / _widths(borders)[idx]
  pick = lambda a: jnp.take_along_axis(a, idx[..., None], axis=-1)[..., 0]  # noqa: E731
  return pick(below) + jnp.clip(frac, 0.0, 1.0) * pick(p)


def quantile(logits: jax.Array, q: float | jax.Array, borders: jax.Array) -> jax.Array:
  """The ``q``-quantile (the inverse of :func:`cdf`): ``[...]`` for ``logits [..., K]``, ``q`` scalar or ``[...]``."""
  p = jax.nn.softmax(logits, axis=-1)
  upper = jnp.cumsum(p, axis=-1)
  q = jnp.broadcast_to(jnp.asarray(q, logits.dtype), logits.shape[:-1])
  k = borders.shape[0] - 1
  idx = jnp.clip(jnp.sum((upper < q[..., None]).astype(jnp.int32), axis=-1), 0, k - 1)
  pick = lambda a: jnp.take_along_axis(a, idx[..., None], axis=-1)[..., 0]  # noqa: E731
  pk = pick(p)
  frac = jnp.clip((q - (pick(upper) - pk)) / jnp.maximum(pk, 1e-30), 0.0, 1.0)
  return borders[idx] + frac * _widths(borders)[idx]


def median(logits: jax.Array, borders: jax.Array) -> jax.Array:
  """The median, :func:`quantile` at 0.5."""
  return quantile(logits, 0.5, borders)
