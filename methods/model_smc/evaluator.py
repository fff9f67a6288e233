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
the number of devices. Given that ``mesh`` too, each device fits its own
share of a batch with no communication between devices
(:func:`methods.model_smc.fit.make_batch_fit`).
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from methods.model_smc import fit as fit_lib
from methods.model_smc import structure as st
from methods.model_smc.model import Data
from methods.model_smc.model import Layout
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
  num_bodies: int = 0  # library size of the fit, the layout of phi (0: unknown, read from phi's length)

  @property
  def status(self) -> str:
    """One of :data:`FIT_STATUS`."""
    if self.nonfinite_restarts >= self.restarts:
      return "all_restarts_nonfinite"
    return "ok" if np.isfinite(self.log_evidence) else "nonfinite_at_optimum"


def compiled(library_keys: tuple[str, ...], bodies: Sequence, spec: ProblemSpec,
             cfg: fit_lib.FitConfig, mesh: Optional[jax.sharding.Mesh] = None
             ) -> tuple[StructuredModel, Callable]:
  """The model and jitted batch fit for a library (shared within a process)."""
  cache_key = (library_keys, spec, cfg, mesh)
  if cache_key not in _COMPILED:
    model = StructuredModel(bodies, spec)
    _COMPILED[cache_key] = (model, fit_lib.make_batch_fit(model, cfg, mesh))
  return _COMPILED[cache_key]


@jax.jit
def _key_data(seeds: jax.Array) -> jax.Array:
  """``[B, ...]`` raw key data of ``jax.random.key(seed)`` for each seed, in one call."""
  return jax.vmap(lambda s: jax.random.key_data(jax.random.key(s)))(seeds)


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
    mesh: the devices a batch is split over (``place``'s sharding; default: one device).
  """

  def __init__(self, library: st.Library, spec: ProblemSpec, cfg: fit_lib.FitConfig, data: Data, *,
               seed: int = 0, batch_size: int = 16,
               place: Optional[Callable[[np.ndarray], Any]] = None,
               to_host: Optional[Callable[[Any], Any]] = None,
               mesh: Optional[jax.sharding.Mesh] = None):
    self.library, self.spec, self.cfg, self.data = library, spec, cfg, data
    self.seed, self.batch_size, self.mesh = seed, batch_size, mesh
    self.place = place or jnp.asarray
    self.to_host = to_host or (lambda tree: jax.tree.map(np.asarray, tree))
    self.cache: dict[str, Record] = {}
    self.hessians: dict[str, np.ndarray] = {}  # not checkpointed; refitted on demand
    self.num_batches = 0
    self._layouts: dict[int, Layout] = {}
    self._keys: dict[st.Structure, str] = {}
    self._placed = None  # the data on the devices, repeated over the batch
    self._called: set = set()  # compiled fits called at least once (their first call compiles them)
    # Seconds in the fits after each compiled fit's first call, in those first calls (tracing, compiling,
    # one batch), and in host-device transfers; calls counted after the first.
    self.timing = {"fit_seconds": 0.0, "first_call_seconds": 0.0, "transfer_seconds": 0.0, "fit_calls": 0}

  @property
  def num_fits(self) -> int:
    return len(self.cache)

  def key(self, m: st.Structure) -> str:
    """``m``'s canonical text, computed once per structure (the library only grows, so a key never changes)."""
    k = self._keys.get(m)
    if k is None:
      k = self._keys[m] = st.key(m, self.library)
    return k

  def model(self) -> StructuredModel:
    return compiled(self.library.fingerprint, self.library.bodies, self.spec, self.cfg, self.mesh)[0]

  def batch_fit(self) -> Callable:
    """The compiled ``(signs [B, S, K], keys [B], data [B, ...]) -> Fit`` of the current library."""
    return compiled(self.library.fingerprint, self.library.bodies, self.spec, self.cfg, self.mesh)[1]

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

  def layout(self, num_bodies: Optional[int] = None) -> Layout:
    """The parameter layout over the first ``num_bodies`` bodies (default: the whole library)."""
    n = len(self.library) if num_bodies is None else num_bodies
    if n not in self._layouts:
      self._layouts[n] = Layout([self.library.n_params(k) for k in range(n)], self.spec)
    return self._layouts[n]

  def _fit_bodies(self, rec: Record) -> int:
    """The library size ``rec`` was fitted in (older checkpoints: the smallest whose layout fits its phi)."""
    if rec.num_bodies:
      return rec.num_bodies
    return next((n for n in range(1, len(self.library) + 1) if self.layout(n).dim == len(rec.phi)),
                len(self.library))

  def phi(self, m: st.Structure) -> np.ndarray:
    """``[D]`` float64 fitted parameters of ``m`` in the current library's layout (fits ``m`` if needed).

    A fit made before the library grew (an LLM's new body) is moved to the
    current layout (:meth:`methods.model_smc.model.Layout.embed_index`);
    the coordinates of bodies it did not have are inactive (prior centre).
    """
    rec = self.record(m)
    small, full = self.layout(self._fit_bodies(rec)), self.layout()
    phi = np.asarray(rec.phi, np.float64)
    if small.dim == full.dim:
      return phi
    out = np.full((full.dim,), self.spec.param_prior_loc, np.float64)
    out[full.embed_index(small)] = phi
    return out

  def neg_hessian(self, m: st.Structure) -> np.ndarray:
    """``[D, D]`` masked curvature at the fitted parameters, in the current library's layout.

    Not kept in checkpoints: after a resume it is recomputed by refitting
    ``m`` in the library its record was fitted in (the same fit, so the same
    optimum). A fit made before the library grew is moved to the current
    layout; the coordinates it did not have get the identity, as inactive
    coordinates do in :class:`methods.model_smc.fit.Fit`.
    """
    k = self.key(m)
    rec = self.record(m)
    n = self._fit_bodies(rec)
    if k not in self.hessians:
      self.cache.pop(k)  # the refit only supplies the curvature
      try:
        self._fit_batch([(k, m)], num_bodies=n)
      finally:
        self.cache[k] = rec
    h = np.asarray(self.hessians[k])
    small, full = self.layout(n), self.layout()
    if small.dim == full.dim:
      return h
    out = np.eye(full.dim, dtype=h.dtype)
    idx = full.embed_index(small)
    out[np.ix_(idx, idx)] = h
    return out

  def _fit_batch(self, items: list[tuple[str, st.Structure]], num_bodies: Optional[int] = None) -> None:
    n_bodies = len(self.library) if num_bodies is None else num_bodies
    lib = self.library
    model, fn = compiled(tuple(lib.keys[:n_bodies]), lib.bodies[:n_bodies], self.spec, self.cfg, self.mesh)
    pad = self.batch_size - len(items)
    t0 = time.perf_counter()
    signs = np.stack([m.signs(n_bodies) for _, m in items] + [items[0][1].signs(n_bodies)] * pad)
    seeds = np.array([structure_seed(self.seed, k) for k, _ in items] + [0] * pad, np.uint32)
    keys = jax.random.wrap_key_data(self.place(np.asarray(_key_data(seeds))))
    if self._placed is None:  # the data, repeated over the batch, placed once
      self._placed = jax.tree.map(
          lambda x: self.place(np.ascontiguousarray(np.broadcast_to(np.asarray(x), (self.batch_size,) + x.shape))),
          self.data)
    signs = self.place(signs)
    t1 = time.perf_counter()
    out = jax.block_until_ready(fn(signs, keys, self._placed))
    t2 = time.perf_counter()
    out = self.to_host(out)
    t3 = time.perf_counter()
    first = fn not in self._called
    self._called.add(fn)
    self.timing["first_call_seconds" if first else "fit_seconds"] += t2 - t1
    self.timing["transfer_seconds"] += (t1 - t0) + (t3 - t2)
    self.timing["fit_calls"] += 0 if first else 1
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
          num_bodies=n_bodies,
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
      extra = [int(v) for v in r[7:10]] if len(r) > 8 else [0, self.cfg.restarts]  # older checkpoints: unknown
      self.cache[k] = Record(float(r[0]), float(r[1]), float(r[2]), int(r[3]), bool(r[4]), float(r[5]),
                             tuple(float(v) for v in r[6]), *extra)
