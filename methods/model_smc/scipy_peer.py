"""The fit's SciPy peer: multi-start L-BFGS-B on the same objective, with its exact gradient.

A baseline of :func:`methods.model_smc.fit.fit_structure`: SciPy's
L-BFGS-B (``scipy.optimize.minimize``) from starts drawn as the fit draws its
restarts (the gradient-matching start, then that start plus Gaussian jitter
of sd ``cfg.jitter`` on the active term parameters), minimising the fit's
objective -- the negative log joint of the training rows -- with a jitted
``jax.value_and_grad`` of the same function passed to SciPy as float64
NumPy, so the comparison is between optimisers, not objectives or finite
differences. Every optimum is scored by the same jitted objective.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from methods.model_smc import evidence as ev
from methods.model_smc import fit as fit_lib


class ScipyPeer:
  """SciPy L-BFGS-B multi-start on the objective of :mod:`methods.model_smc.fit`, with its exact gradient.

  Args:
    model: the task's structured model.
    cfg: the task's fit config (objective, jitter).
    data: the task's data.
  """

  def __init__(self, model, cfg: fit_lib.FitConfig, data):
    self.model, self.cfg, self.data = model, cfg, data
    obj = functools.partial(fit_lib._objective, model, cfg)  # pylint: disable=protected-access
    self.value = jax.jit(lambda signs, phi: obj(signs, data, phi))
    self.value_and_grad = jax.jit(jax.value_and_grad(lambda phi, signs: obj(signs, data, phi)))
    self.hessian = jax.jit(jax.hessian(lambda phi, signs: obj(signs, data, phi)))

  def starts(self, signs: np.ndarray, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts [count, D], active [D] bool)``: gradient matching, then it plus jitter on the term parameters."""
    model = self.model
    s = jnp.asarray(signs)
    base = np.asarray(model.gradient_matching_init(s, self.data, num_rows=self.cfg.fit_rows), np.float64)
    active = np.asarray(model.layout.active_mask(s)) > 0
    slot = np.zeros_like(active)
    slot[: model.layout.num_slot_params] = True
    rng = np.random.default_rng(seed)
    eps = rng.standard_normal((count, base.shape[0])) * (active & slot)
    eps[0] = 0.0
    return base[None, :] + self.cfg.jitter * eps, active

  def fit(self, signs: np.ndarray, count: int, seed: int) -> tuple[np.ndarray, float]:
    """``(phi [D], objective)`` of the best of ``count`` L-BFGS-B runs (``inf`` if none was finite)."""
    s = jnp.asarray(signs)
    starts, active = self.starts(signs, count, seed)
    idx = np.flatnonzero(active)
    best_phi, best_val = starts[0], np.inf
    for start in starts:
      def f(a, start=start):
        phi = start.copy()
        phi[idx] = a
        v, g = self.value_and_grad(jnp.asarray(phi, jnp.float32), s)
        v, g = float(v), np.asarray(g, np.float64)[idx]
        if not (np.isfinite(v) and np.all(np.isfinite(g))):
          return 1e10, np.zeros_like(a)  # outside the domain: a wall for the line search
        return v, g

      res = optimize.minimize(f, start[idx], jac=True, method="L-BFGS-B")
      phi = start.copy()
      phi[idx] = res.x
      val = self.objective(signs, phi)
      if val < best_val:
        best_phi, best_val = phi, val
    return best_phi, best_val

  def objective(self, signs: np.ndarray, phi: np.ndarray) -> float:
    """The objective at ``phi`` (``inf`` if not finite), by the same jitted function for both sides."""
    v = float(self.value(jnp.asarray(signs), jnp.asarray(phi, jnp.float32)))
    return v if np.isfinite(v) else np.inf

  def log_evidence(self, signs: np.ndarray, phi: np.ndarray) -> float:
    """Laplace ``log Z`` at ``phi`` with the exact Hessian of the same objective."""
    s = jnp.asarray(signs)
    mask = self.model.layout.active_mask(s)
    p = jnp.asarray(phi, jnp.float32)
    h = ev.masked_matrix(self.hessian(p, s), mask)
    lap = ev.laplace_from_hessian(-self.value(s, p), h, mask, eig_floor=self.cfg.eig_floor)
    return float(lap.log_evidence)
