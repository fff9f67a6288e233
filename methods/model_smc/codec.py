"""Checkpoint forms of the samplers' states: float arrays plus JSON, and back.

A checkpoint holds a state's float arrays (``-inf`` log-weights allowed) and
the rest as JSON. Structures are stored by their bodies' canonical text
(``[[[body, sign], ...] per equation]``), so a resumed run rebuilds them in
a library that may have grown in another order. Each state round-trips:
``decode_*(*encode_*(state, library), library)`` equals ``state``, with its
arrays in float64 and its counters as Python ``int`` / ``float``.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from methods.model_smc import expr as ex
from methods.model_smc import structure as st
from methods.model_smc.reference import ReferenceState
from methods.model_smc.smc import SMCState

# The float fields of an SMCState, stored as arrays; the others go to JSON.
SMC_ARRAYS = ("log_weights", "log_evidence", "beta", "log_normalizer")


def encode_structure(m: st.Structure, library: st.Library) -> list:
  """JSON form of a structure (bodies by canonical text)."""
  return [[[library.keys[k], s] for k, s in eq] for eq in m.terms]


def decode_structure(obj: list, library: st.Library) -> st.Structure:
  """The structure of :func:`encode_structure`'s ``obj`` (new bodies are added to ``library``)."""
  return st.Structure.make([[(library.add(ex.parse(b, states=library.states)), s) for b, s in eq] for eq in obj])


def _structures(obj, library: st.Library) -> tuple[st.Structure, ...]:
  return tuple(decode_structure(p, library) for p in obj)


def encode_smc(state: SMCState, library: st.Library) -> tuple[dict[str, Any], dict]:
  """``(arrays, meta)`` of a tempered-SMC state: :data:`SMC_ARRAYS` (``[N]`` and scalars), the rest as JSON."""
  arrays = {name: getattr(state, name) for name in SMC_ARRAYS}
  meta = {
      "particles": [encode_structure(m, library) for m in state.particles],
      "iteration": state.iteration,
      "proposals": state.proposals,
      "sweeps": state.sweeps,
      "moves": state.moves,
      "elites": None if state.elites is None else [encode_structure(m, library) for m in state.elites],
      "final_mass": [[[encode_structure(m, library), v] for m, v in sweep] for sweep in state.final_mass],
  }
  return arrays, meta


def decode_smc(arrays: Mapping[str, Any], meta: Mapping[str, Any], library: st.Library) -> SMCState:
  """The :class:`SMCState` of :func:`encode_smc`'s ``(arrays, meta)``."""
  elites = None if meta["elites"] is None else _structures(meta["elites"], library)
  return SMCState(
      particles=_structures(meta["particles"], library),
      log_weights=np.array(arrays["log_weights"], np.float64),
      log_evidence=np.array(arrays["log_evidence"], np.float64),
      beta=float(arrays["beta"]),
      log_normalizer=float(arrays["log_normalizer"]),
      iteration=int(meta["iteration"]),
      proposals=int(meta["proposals"]),
      elites=elites,
      sweeps=int(meta["sweeps"]),
      moves=float(meta["moves"]),
      final_mass=tuple(tuple((decode_structure(p, library), float(v)) for p, v in sweep)
                       for sweep in meta.get("final_mass", ())),
  )


def encode_reference(state: ReferenceState, library: st.Library) -> tuple[dict[str, Any], dict]:
  """``(arrays, meta)`` of an evidence-weighted state: ``log_evidence [N]``, the rest as JSON."""
  meta = {
      "particles": [encode_structure(m, library) for m in state.particles],
      "iteration": state.iteration,
      "proposals": state.proposals,
      "ancestry": [list(a) for a in state.ancestry],
      "history": list(state.history),
      "rejections": state.rejections,
  }
  return {"log_evidence": state.log_evidence}, meta


def decode_reference(arrays: Mapping[str, Any], meta: Mapping[str, Any], library: st.Library) -> ReferenceState:
  """The :class:`ReferenceState` of :func:`encode_reference`'s ``(arrays, meta)``."""
  return ReferenceState(
      particles=_structures(meta["particles"], library),
      log_evidence=np.array(arrays["log_evidence"], np.float64),
      ancestry=tuple(tuple(a) for a in meta["ancestry"]),
      history=tuple(meta["history"]),
      iteration=int(meta["iteration"]),
      proposals=int(meta["proposals"]),
      rejections=dict(meta["rejections"]),
  )
