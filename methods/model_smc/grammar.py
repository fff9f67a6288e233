"""The grammar proposal: single edits of a structure, with their exact density.

From structure ``m`` one edit is drawn hierarchically:

1. a move type among those possible in ``m``, with probabilities
   ``move_probs = (add, remove, replace, operator)`` renormalised over the
   possible ones;
2. an equation, uniformly among those where the move is possible;
3. the details, uniformly:

   * **add** a body absent from the equation (if it has fewer than
     ``max_terms`` terms), with a uniform sign;
   * **remove** one of its terms;
   * **replace** one of its terms' bodies by an absent body (sign kept);
   * **change an operator** of one term: flip its sign (the ``+``/``-`` in
     front of it) or swap it for an absent body that differs from it by
     exactly one operator (e.g. ``a*x*y`` <-> ``a*x/y``).

:meth:`GrammarProposal.distribution` enumerates every edit of ``m`` and sums
the probabilities of edits that give the same structure, so
``q(m'|m)`` is exact and the Metropolis-Hastings ratio
``p(m') Z(m')^beta q(m|m') / (p(m) Z(m)^beta q(m'|m))`` is exact too. Every
move has a reverse move (add/remove, replace/replace, flip/flip,
swap/swap), so ``q(m'|m) > 0`` iff ``q(m|m') > 0``.
"""

from __future__ import annotations

import collections
import math
from typing import Sequence

import numpy as np

from methods.model_smc.structure import Library
from methods.model_smc.structure import Structure

MOVES = ("add", "remove", "replace", "operator")


class GrammarProposal:
  """Exact-density single-edit proposal over structures of a library."""

  def __init__(self, library: Library, *, max_terms: int,
               move_probs: Sequence[float] = (0.3, 0.3, 0.2, 0.2)):
    if len(move_probs) != len(MOVES) or min(move_probs) < 0 or sum(move_probs) <= 0:
      raise ValueError(f"move_probs must be {len(MOVES)} non-negative numbers for {MOVES}, got {move_probs}")
    self.library = library
    self.max_terms = max_terms
    self.move_probs = tuple(float(p) for p in move_probs)
    self._cache: dict[tuple, tuple[list[Structure], np.ndarray, np.ndarray, dict]] = {}

  def _entry(self, m: Structure):
    """``(structures, probabilities, their cumulative sums, {structure: log q})`` of ``m``, computed once."""
    cache_key = (m, len(self.library))
    if cache_key not in self._cache:
      probs = collections.OrderedDict()
      for m2, p in self._moves(m):
        probs[m2] = probs.get(m2, 0.0) + p
      out = list(probs)
      p = np.array([probs[s] for s in out], np.float64)
      self._cache[cache_key] = (out, p, np.cumsum(p), {s: math.log(v) for s, v in probs.items()})
    return self._cache[cache_key]

  def distribution(self, m: Structure) -> tuple[list[Structure], np.ndarray]:
    """All structures reachable in one edit and their probabilities ``q(.|m)``."""
    return self._entry(m)[:2]

  def log_prob(self, to: Structure, frm: Structure) -> float:
    """``log q(to | frm)`` (``-inf`` if unreachable): a dictionary lookup once ``frm``'s edits are known."""
    return self._entry(frm)[3].get(to, -math.inf)

  def sample(self, m: Structure, u: float) -> Structure:
    """The edit of ``m`` selected by a uniform ``u`` in [0, 1)."""
    out, probs, cdf, _ = self._entry(m)
    if not out:
      return m
    i = int(np.searchsorted(cdf, u * probs.sum(), side="right"))
    return out[min(i, len(out) - 1)]

  def _moves(self, m: Structure):
    """Yields ``(structure, probability)`` for every edit of ``m``."""
    lib = self.library
    k_all = range(len(lib))
    eqs = [dict(eq) for eq in m.terms]
    absent = [[k for k in k_all if k not in eq] for eq in eqs]
    eligible = {
        "add": [s for s, eq in enumerate(eqs) if len(eq) < self.max_terms and absent[s]],
        "remove": [s for s, eq in enumerate(eqs) if eq],
        "replace": [s for s, eq in enumerate(eqs) if eq and absent[s]],
        "operator": [s for s, eq in enumerate(eqs) if eq],
    }
    weights = {mv: p for mv, p in zip(MOVES, self.move_probs) if eligible[mv] and p > 0}
    total = sum(weights.values())

    def with_eq(s, new_eq):
      terms = list(m.terms)
      terms[s] = tuple(new_eq.items())
      return Structure.make(terms)

    for mv, w in weights.items():
      p_move = w / total / len(eligible[mv])
      for s in eligible[mv]:
        eq = eqs[s]
        if mv == "add":
          for k in absent[s]:
            for sign in (1, -1):
              yield with_eq(s, {**eq, k: sign}), p_move / len(absent[s]) / 2
        elif mv == "remove":
          for k in eq:
            yield with_eq(s, {j: v for j, v in eq.items() if j != k}), p_move / len(eq)
        elif mv == "replace":
          for k, sign in eq.items():
            rest = {j: v for j, v in eq.items() if j != k}
            for k2 in absent[s]:
              yield with_eq(s, {**rest, k2: sign}), p_move / len(eq) / len(absent[s])
        else:
          for k, sign in eq.items():
            rest = {j: v for j, v in eq.items() if j != k}
            alts = [{**rest, k: -sign}] + [{**rest, k2: sign} for k2 in lib.op_neighbors(k) if k2 not in eq]
            for alt in alts:
              yield with_eq(s, alt), p_move / len(eq) / len(alts)
