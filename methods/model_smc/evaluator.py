"""Evidence of structures: a cache over batched, jitted fits.

:class:`Evaluator` turns a list of structures into ``log Z(m)`` values. Each
structure is fitted once (keyed by its canonical text); new structures are
fitted in fixed-size batches by one compiled function (padding the last
batch), so a whole run compiles once per library. The restarts' key of a
structure is derived from the seed and its canonical text, which makes
``log Z(m)`` a deterministic function of ``m``: the SMC target
``p(m) Z(m)^beta`` is well defined and a resumed run sees the same values.

The evaluator takes two optional hooks from the launcher: ``place`` puts a
batch's host arrays on devices (e.g. sharded over a mesh's ``data`` axis) and
``to_host`` brings results back; ``batch_size`` must then be a multiple of
the number of devices.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from methods.model_smc import fit as fit_lib
from methods.model_smc import structure as st
from methods.model_smc.model import Data
from methods.model_smc.model import ProblemSpec
from methods.model_smc.model import StructuredModel

_COMPILED: dict[tuple, tuple[StructuredModel, Callable]] = {}


# Fit labels: a structure whose restarts were all non-finite is a failed fit
# (its -inf evidence is not a low evidence); "nonfinite_at_optimum": some
# restart was finite but the polished optimum was not.
FIT_STATUS = ("ok", "all_restarts_nonfinite", "nonfinite_at_optimum")


class Record(NamedTuple):
  """What the cache keeps per structure (host values, JSON-able)."""

  log_evidence: float
  log_likelihood: float
  log_prior: float
  num_params: int
  positive_definite: bool
  grad_norm: float
  phi: tuple[float, ...]
  nonfinite_restarts: int = 0
  restarts: int = 1

  @property
  def status(self) -> str:
    """One of :data:`FIT_STATUS`."""
    if self.nonfinite_restarts >= self.restarts:
      return "all_restarts_nonfinite"
    return "ok" if np.isfinite(self.log_evidence) else "nonfinite_at_optimum"


def compiled(library_keys: tuple[str, ...], bodies: Sequence, spec: ProblemSpec,
             cfg: fit_lib.FitConfig) -> tuple[StructuredModel, Callable]:
  """The model and jitted batch fit for a library (shared within a process)."""
  cache_key = (library_keys, spec, cfg)
  if cache_key not in _COMPILED:
    model = StructuredModel(bodies, spec)
    _COMPILED[cache_key] = (model, fit_lib.make_batch_fit(model, cfg))
  return _COMPILED[cache_key]


def structure_seed(seed: int, key_text: str) -> int:
  return (zlib.crc32(key_text.encode()) ^ (seed * 0x9E3779B1)) & 0x7FFFFFFF


class Evaluator:
  """``log Z(m)`` for structures of a library, fitted on demand and cached.

  Args:
    library: the structures' library (may grow; the compiled fit follows it).
    spec: the observation model.
    cfg: fitting hyperparameters (incl. the evidence kind).
    data: the data (training rows first).
    seed: seed of the restarts' jitter.
    batch_size: structures per compiled call (pads the last one).
    place: host ``np.ndarray`` -> device array for batch inputs.
    to_host: device pytree -> host NumPy pytree.
  """

  def __init__(self, library: st.Library, spec: ProblemSpec, cfg: fit_lib.FitConfig, data: Data, *,
               seed: int = 0, batch_size: int = 16,
               place: Optional[Callable[[np.ndarray], Any]] = None,
               to_host: Optional[Callable[[Any], Any]] = None):
    self.library, self.spec, self.cfg, self.data = library, spec, cfg, data
    self.seed, self.batch_size = seed, batch_size
    self.place = place or jnp.asarray
    self.to_host = to_host or (lambda tree: jax.tree.map(np.asarray, tree))
    self.cache: dict[str, Record] = {}
    self.hessians: dict[str, np.ndarray] = {}  # not checkpointed; refitted on demand
    self.num_batches = 0

  @property
  def num_fits(self) -> int:
    return len(self.cache)

  def key(self, m: st.Structure) -> str:
    return st.key(m, self.library)

  def model(self) -> StructuredModel:
    return compiled(self.library.fingerprint, self.library.bodies, self.spec, self.cfg)[0]

  def batch_fit(self) -> Callable:
    """The compiled ``(signs [B, S, K], keys [B], data [B, ...]) -> Fit`` of the current library."""
    return compiled(self.library.fingerprint, self.library.bodies, self.spec, self.cfg)[1]

  def evaluate(self, structures: Sequence[st.Structure]) -> np.ndarray:
    """``[n]`` float64 log evidences (``-inf`` for failed fits)."""
    keys = [self.key(m) for m in structures]
    todo, seen = [], set()
    for k, m in zip(keys, structures):
      if k not in self.cache and k not in seen:
        todo.append((k, m))
        seen.add(k)
    for start in range(0, len(todo), self.batch_size):
      self._fit_batch(todo[start:start + self.batch_size])
    return np.array([self.cache[k].log_evidence for k in keys], np.float64)

  def fit_health(self, keys: Optional[Sequence[str]] = None) -> dict:
    """Counts of non-finite restarts and failed fits over ``keys`` (default: every fitted structure)."""
    recs = [self.cache[k] for k in (self.cache if keys is None else keys) if k in self.cache]
    status = [r.status for r in recs]
    return {"structures": len(recs), "restarts_per_fit": self.cfg.restarts,
            "nonfinite_restarts": int(sum(r.nonfinite_restarts for r in recs)),
            "structures_with_nonfinite_restarts": int(sum(r.nonfinite_restarts > 0 for r in recs)),
            **{f"failed_{s}": status.count(s) for s in FIT_STATUS[1:]}}

  def record(self, m: st.Structure) -> Record:
    k = self.key(m)
    if k not in self.cache:
      self.evaluate([m])
    return self.cache[k]

  def neg_hessian(self, m: st.Structure) -> np.ndarray:
    """``[D, D]`` masked curvature at the fitted parameters (refits if not in memory)."""
    k = self.key(m)
    if k not in self.hessians:
      kept = self.cache.pop(k, None)  # the refit only supplies the curvature
      self._fit_batch([(k, m)])
      if kept is not None:
        self.cache[k] = kept
    return self.hessians[k]

  def _fit_batch(self, items: list[tuple[str, st.Structure]]) -> None:
    model, fn = compiled(self.library.fingerprint, self.library.bodies, self.spec, self.cfg)
    n_bodies = len(self.library)
    pad = self.batch_size - len(items)
    signs = np.stack([m.signs(n_bodies) for _, m in items] + [items[0][1].signs(n_bodies)] * pad)
    seeds = [structure_seed(self.seed, k) for k, _ in items] + [0] * pad
    key_data = np.stack([np.asarray(jax.random.key_data(jax.random.key(s))) for s in seeds])
    data = jax.tree.map(lambda x: self.place(np.broadcast_to(np.asarray(x), (self.batch_size,) + x.shape)),
                        self.data)
    out = fn(self.place(signs), jax.random.wrap_key_data(self.place(key_data)), data)
    out = self.to_host(out)
    self.num_batches += 1
    for i, (k, _) in enumerate(items):
      self.cache[k] = Record(
          log_evidence=float(out.log_evidence[i]),
          log_likelihood=float(out.log_likelihood[i]),
          log_prior=float(out.log_prior[i]),
          num_params=int(out.num_params[i]),
          positive_definite=bool(out.positive_definite[i]),
          grad_norm=float(out.grad_norm[i]),
          phi=tuple(float(v) for v in out.phi[i]),
          nonfinite_restarts=int(out.nonfinite_restarts[i]),
          restarts=self.cfg.restarts,
      )
      self.hessians[k] = np.asarray(out.neg_hessian[i])
    del model

  # Checkpointing: the cache as JSON-able data.
  def state_dict(self) -> dict:
    def enc(v):
      return v if not isinstance(v, float) or np.isfinite(v) else str(v)
    return {"num_batches": self.num_batches,
            "cache": {k: [enc(v) for v in r[:6]] + [[enc(v) for v in r[6]]] + list(r[7:])
                      for k, r in self.cache.items()}}

  def load_state_dict(self, state: dict) -> None:
    self.num_batches = int(state.get("num_batches", 0))
    self.cache = {}
    for k, r in state["cache"].items():
      extra = [int(v) for v in r[7:9]] if len(r) > 8 else [0, self.cfg.restarts]  # older checkpoints: unknown
      self.cache[k] = Record(float(r[0]), float(r[1]), float(r[2]), int(r[3]), bool(r[4]), float(r[5]),
                             tuple(float(v) for v in r[6]), *extra)
