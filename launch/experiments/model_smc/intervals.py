"""Parameter intervals of the ``model_smc`` experiment's structures (section ``posterior``).

Every reported structure -- the top structures, the visited-set ones, hill
climbing's and the truth -- gets central 90% intervals of its parameters on
the natural scale by the method of ``posterior.method``
(:mod:`methods.model_smc.posterior`):

* ``laplace``: ``phi* +- z sd`` with ``sd^2 = diag H^-1`` at the MAP
  (Tierney and Kadane 1986), only where ``H`` is positive definite;
* ``mala``: sample quantiles of preconditioned MALA chains started at the
  MAP (Roberts and Tweedie 1996), whose split-R-hat and acceptance rate
  ride along.

Intervals are computed once per structure and cached; MALA's key is
derived from ``seed`` and the structure's canonical text, so a structure
has the same intervals wherever it is reported, and a resumed run the
same intervals as an uninterrupted one.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from methods.model_smc import posterior as post
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator

Z90 = 1.6448536269514722
LEVELS = (0.5, 0.9)  # MALA's levels; the table reports the 90% one


def finite_or_text(x: float) -> Any:
  """A float for JSON, or its text (``"-inf"``, ``"nan"``) when not finite."""
  return float(x) if math.isfinite(float(x)) else str(float(x))


_f = finite_or_text


def posterior_sd(h: np.ndarray) -> tuple[Optional[np.ndarray], str]:
  """``(sd [D], "")`` of the Laplace posterior ``N(phi*, H^-1)``, or ``(None, reason)``.

  Only a positive definite ``H`` (Cholesky in float64) defines a Laplace
  posterior; otherwise there is no interval, and the reason says why (an
  indefinite ``H`` is a saddle or a ridge, not a mode: its inverse would give
  zero-width or negative-variance "intervals").
  """
  h = 0.5 * (h + h.T)
  if not np.all(np.isfinite(h)):
    return None, "the Hessian at the optimum is not finite"
  try:
    chol = np.linalg.cholesky(h)
  except np.linalg.LinAlgError:
    w = np.linalg.eigvalsh(h)
    return None, f"the Hessian at the optimum is not positive definite (smallest eigenvalue {w[0]:.3g})"
  inv = np.linalg.inv(chol)
  return np.sqrt(np.sum(inv * inv, axis=0)), ""


def structure_key(base: jax.Array, key_text: str) -> jax.Array:
  """The MALA key of the structure with canonical text ``key_text``."""
  return jax.random.fold_in(base, zlib.crc32(key_text.encode()) & 0x7FFFFFFF)


class ParameterIntervals:
  """90% parameter intervals of fitted structures by one method, cached per structure.

  Args:
    evaluator: the run's evidence cache (fits, Hessians, model, data).
    hp: the interval method and MALA's settings (default: Laplace).
    key: base PRNG key of the MALA chains (default ``jax.random.key(0)``).
  """

  def __init__(self, evaluator: Evaluator, hp: Optional[post.PosteriorConfig] = None,
               key: Optional[jax.Array] = None):
    self.evaluator = evaluator
    self.hp = hp or post.PosteriorConfig(method="laplace")
    self.key = jax.random.key(0) if key is None else key
    self._cache: dict[str, tuple[dict, dict]] = {}

  @property
  def method(self) -> str:
    return self.hp.method

  def settings(self) -> dict:
    """What ``results.json`` records about the method (MALA's chain settings only for ``mala``)."""
    if self.method == "laplace":
      return {"method": "laplace", "level": 0.9}
    hp = self.hp
    return {"method": "mala", "level": 0.9, "num_chains": hp.num_chains, "num_warmup": hp.num_warmup,
            "num_samples": hp.num_samples, "target_accept": hp.target_accept}

  def table(self, m: st.Structure) -> dict:
    """``{name: {"map", "lo90", "hi90", "interval"}}`` on the natural scale.

    ``interval`` is the method (``"laplace"`` or ``"mala"``; MALA rows add
    the posterior ``median``) or ``"none"`` (then ``lo90 = hi90 = None`` and
    ``reason`` says why): an interval is never reported with zero width.
    """
    return self._compute(m)[0]

  def diagnostics(self, m: st.Structure) -> dict:
    """The method, and for MALA its chains' largest split-R-hat and mean acceptance."""
    return self._compute(m)[1]

  def _compute(self, m: st.Structure) -> tuple[dict, dict]:
    k = self.evaluator.key(m)
    if k not in self._cache:
      self._cache[k] = self._laplace(m) if self.method == "laplace" else self._mala(m, k)
    return self._cache[k]

  def _rows(self, m: st.Structure, value) -> dict:
    """One row per parameter of ``m``: ``value(i, natural)`` for its coordinate ``i`` of ``phi``."""
    ev = self.evaluator
    layout, lib = ev.model().layout, ev.library
    real_init = ev.spec.init_scale == "real"
    _, names = st.equations(m, lib)
    out = {}
    for name, (s, k, j) in zip(names, st.param_slots(m, lib)):
      out[name] = value(layout.slot_index[k][s, j], math.exp)
    for o, i in enumerate(layout.noise_index):
      out[f"sigma_{lib.states[ev.spec.observed[o]]}"] = value(i, math.exp)
    for s, i in enumerate(layout.init_index):
      out[f"{lib.states[s]}0"] = value(i, float if real_init else math.exp)
    return out

  def _laplace(self, m: st.Structure) -> tuple[dict, dict]:
    rec = self.evaluator.record(m)
    phi = self.evaluator.phi(m)
    sd, reason = posterior_sd(np.asarray(self.evaluator.neg_hessian(m), np.float64))
    if not np.isfinite(rec.log_evidence):
      sd, reason = None, f"failed fit ({rec.status})"

    def row(i, natural):
      out = {"map": _f(natural(phi[i]))}
      if sd is None or not (np.isfinite(sd[i]) and sd[i] > 0):
        return {**out, "lo90": None, "hi90": None, "interval": "none",
                "reason": reason or "zero or non-finite posterior sd"}
      return {**out, "lo90": _f(natural(phi[i] - Z90 * sd[i])), "hi90": _f(natural(phi[i] + Z90 * sd[i])),
              "interval": "laplace"}

    return self._rows(m, row), {"method": "laplace"}

  def _mala(self, m: st.Structure, key_text: str) -> tuple[dict, dict]:
    ev = self.evaluator
    rec = ev.record(m)
    phi = ev.phi(m)
    h = np.asarray(ev.neg_hessian(m), np.float64)
    reason, iv, diag = "", None, {"method": "mala"}
    if not np.isfinite(rec.log_evidence):
      reason = f"failed fit ({rec.status})"
    elif not np.all(np.isfinite(h)):
      reason = "the Hessian at the optimum is not finite (MALA's preconditioner)"
    else:
      model = ev.model()
      fn = post.make_mala_intervals(model, ev.cfg, self.hp, LEVELS)
      iv, chains = fn(structure_key(self.key, key_text), jnp.asarray(m.signs(len(ev.library))), ev.data,
                      jnp.asarray(phi, ev.data.y.dtype), jnp.asarray(h, ev.data.y.dtype))
      iv, chains = jax.tree.map(lambda x: np.asarray(x, np.float64), (iv, chains))
      diag.update(rhat=_f(chains.rhat), accept=_f(np.mean(chains.accept)))
      if not iv.ok:
        reason, iv = "MALA draws not finite", None
    top = LEVELS.index(0.9)

    def row(i, natural):
      out = {"map": _f(natural(phi[i]))}
      lo, hi = (np.nan, np.nan) if iv is None else (iv.lo[top, i], iv.hi[top, i])
      if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        return {**out, "lo90": None, "hi90": None, "interval": "none",
                "reason": reason or "zero-width or non-finite sample interval"}
      return {**out, "lo90": _f(lo), "hi90": _f(hi), "median": _f(iv.center[i]), "interval": "mala"}

    return self._rows(m, row), diag


def parameter_table(evaluator: Evaluator, m: st.Structure, intervals: Optional[ParameterIntervals] = None) -> dict:
  """:meth:`ParameterIntervals.table` of ``m`` (default: Laplace intervals)."""
  return (intervals or ParameterIntervals(evaluator)).table(m)
