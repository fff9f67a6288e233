"""Disjoint, class-stratified splits of a labelled image set for the evaluation protocol.

The latent flow-matching protocol needs data that the generative models never
see: the feature network of FID / KID is trained on its own split and its
accuracy measured on another (:data:`PROTOCOL_PARTS`). :func:`stratified_split`
cuts any labelled set into named disjoint parts with the same class
proportions, from a fixed seed.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

# The default protocol: autoencoder and flows / feature-network training / feature-network test.
PROTOCOL_PARTS = (("generative", 0.6), ("feature", 0.3), ("feature_test", 0.1))
PROTOCOL_SEED = 20261


def min_per_class(parts: Sequence[tuple[str, float]] = PROTOCOL_PARTS) -> int:
  """Rows per class that guarantee every part at least one of them: ``ceil(1 / smallest fraction)``.

  With that many, ``floor(n * fraction) >= 1`` for every part, whatever the
  largest remainders do (a few classes smaller than this may still split into
  every part, but are not guaranteed to).
  """
  return math.ceil(1.0 / min(f for _, f in parts) - 1e-9)


def _apportion(n: int, fractions: np.ndarray) -> np.ndarray:
  """Integer counts summing to ``n``, proportional to ``fractions`` (largest remainders, ties by order)."""
  exact = n * fractions
  counts = np.floor(exact).astype(np.int64)
  order = np.argsort(-(exact - counts), kind="stable")
  counts[order[: n - counts.sum()]] += 1
  return counts


def stratified_split(labels, parts: Sequence[tuple[str, float]] = PROTOCOL_PARTS, *,
                     seed: int = PROTOCOL_SEED) -> dict[str, np.ndarray]:
  """``{part: sorted row indices}``: disjoint parts covering every row, each with the classes' proportions.

  Args:
    labels: ``[N]`` integer classes.
    parts: ``(name, fraction)`` pairs; fractions positive, summing to 1.
    seed: the shuffle within each class (fixed: the same split everywhere).

  Returns:
    One sorted int64 index array per part; within every class the part sizes
    are the class size apportioned by ``fractions`` (largest remainders), so
    each part's size is within ``len(parts)`` x classes of ``fraction * N``.
  """
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"labels must be an integer [N] array; got dtype {labels.dtype}, shape {labels.shape}")
  names = [p[0] for p in parts]
  fractions = np.asarray([p[1] for p in parts], np.float64)
  if len(set(names)) != len(names):
    raise ValueError(f"split part names repeat: {names}")
  if np.any(fractions <= 0) or abs(fractions.sum() - 1.0) > 1e-9:
    raise ValueError(f"split fractions must be positive and sum to 1; got {dict(parts)}")
  rng = np.random.default_rng(seed)
  out: list[list[np.ndarray]] = [[] for _ in parts]
  for c in np.unique(labels):
    rows = rng.permutation(np.nonzero(labels == c)[0])
    bounds = np.concatenate([[0], np.cumsum(_apportion(rows.size, fractions))])
    for j in range(len(parts)):
      out[j].append(rows[bounds[j]:bounds[j + 1]])
  return {name: np.sort(np.concatenate(chunks)) for name, chunks in zip(names, out)}
