"""Data-driven candidate structures from gradient matching.

A reconstruction, not part of ModelSMC's paper: a cheap, deterministic
proposal set that points the sampler at the structures the data support.
For each equation ``s`` and every subset ``A`` of at most ``max_terms``
linear bodies (``theta * g(x, t)``), the central differences of the
observations ``d_s`` are regressed on the bodies' features by least squares
(gradient matching; Varah 1982, SIAM J. Sci. Stat. Comput. 3:28; the
regression step of SINDy, Brunton, Proctor and Kutz 2016, PNAS 113:3932,
without thresholding). A subset scores

    ``-T/2 log(RSS_A / T) - |A|/2 log T``

(the Gaussian BIC of the regression) and takes the signs of its
coefficients. The ``per_equation`` best subsets of every equation are
combined and the ``count`` combinations with the highest total score are the
candidates. They depend on the data only (no random numbers), so independent
sampler runs given the same candidates stay independent.

Needs every state observed (otherwise there are no derivatives to match):
then, and for a library without linear bodies, there are no candidates.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from methods.model_smc.model import Data
from methods.model_smc.model import StructuredModel
from methods.model_smc.structure import Structure

_MAX_COMBINATIONS = 100_000  # per_equation is lowered until the product of the equations' lists fits


def equation_subsets(deriv: np.ndarray, feats: np.ndarray, usable: np.ndarray,
                     max_terms: int) -> list[tuple[float, tuple[tuple[int, int], ...]]]:
  """Every subset of the usable bodies with its score and signs, best first.

  Args:
    deriv: ``[T]`` derivative estimates of one state.
    feats: ``[T, K]`` body features.
    usable: ``[K]`` bool, bodies that may enter (linear, finite features).
    max_terms: the largest subset.

  Returns:
    ``[(score, ((k, sign), ...)), ...]`` sorted by decreasing score; a subset
    with a zero coefficient is left out (its sign is undefined).
  """
  t = deriv.shape[0]
  ks = [k for k in range(feats.shape[1]) if usable[k]]
  out = []
  for size in range(0, max_terms + 1):
    for subset in itertools.combinations(ks, size):
      if size:
        f = feats[:, list(subset)]
        coef, *_ = np.linalg.lstsq(f, deriv, rcond=None)
        if not np.all(np.isfinite(coef)) or np.any(coef == 0):
          continue
        resid = deriv - f @ coef
      else:
        coef, resid = np.zeros(0), deriv
      rss = max(float(resid @ resid), 1e-300)
      score = -0.5 * t * math.log(rss / t) - 0.5 * size * math.log(t)
      out.append((score, tuple((k, int(np.sign(c))) for k, c in zip(subset, coef))))
  out.sort(key=lambda r: -r[0])
  return out


def candidates(model: StructuredModel, data: Data, *, num_rows: int, max_terms: int, count: int,
               per_equation: int = 8) -> tuple[Structure, ...]:
  """The ``count`` best combinations of the equations' best gradient-matching subsets.

  Args:
    model: the structured model (its library and observation spec).
    data: the data; rows ``0..num_rows-1`` are used.
    num_rows: training rows.
    max_terms: most terms per equation (the structure prior's).
    count: candidates returned (fewer if fewer exist).
    per_equation: best subsets kept per equation before combining.

  Returns:
    Distinct structures, best total score first; empty when a state is
    unobserved, ``count`` is 0 or no body is linear.
  """
  gm = model.gradient_matching_features(data, num_rows=num_rows)
  if gm is None or count <= 0:
    return ()
  deriv, feats = (np.asarray(a, np.float64) for a in gm)
  usable = np.asarray(model.linear_bodies()) & np.all(np.isfinite(feats), axis=0)
  if not usable.any() or not np.all(np.isfinite(deriv)):
    return ()
  num_states = deriv.shape[1]
  keep = max(1, min(per_equation, int(_MAX_COMBINATIONS ** (1.0 / num_states))))
  lists = [equation_subsets(deriv[:, s], feats, usable, max_terms)[:keep] for s in range(num_states)]
  # Each list holds distinct subsets, so distinct combinations are distinct structures.
  combos = sorted(itertools.product(*lists), key=lambda c: -sum(score for score, _ in c))[:count]
  return tuple(Structure.make([terms for _, terms in combo]) for combo in combos)
