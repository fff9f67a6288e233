"""Parameter fitting of a structure and its evidence, vmappable over structures.

:func:`fit_structure` fits one structure (signs ``[S, K]``) to data: ``R``
restarts of Adam (optax, cosine-decayed step) on the negative log joint in
log-parameter space, all restarts vmapped and every optimisation step inside
one ``lax.scan``; the best restart is polished by a few saddle-free Newton
steps (``|eigenvalues|`` of the masked Hessian), then scored by the selected
evidence (:mod:`methods.model_smc.evidence`). Restart 0 starts from gradient
matching (or the prior centre), the others from it plus Gaussian jitter drawn
with the structure's own key, so a structure's evidence is a deterministic
function of the structure and the seed. A restart whose objective was never
finite is counted (``Fit.nonfinite_restarts``); a structure whose restarts
were all non-finite is a failed fit (``-inf`` evidence, labelled as such by
the evaluator), not a low evidence.

``jax.vmap(fit_structure, (0, 0, None))`` fits a batch of *different*
structures with one compiled function (see :func:`make_batch_fit`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from methods.common import hparams
from methods.model_smc import evidence as ev
from methods.model_smc.model import Data
from methods.model_smc.model import StructuredModel


F = hparams.field


@dataclasses.dataclass(frozen=True)
class FitConfig(hparams.Hyperparameters):
  """Static hyperparameters of a fit (config section ``fit``; ``num_fit`` is the run's)."""

  num_fit: int = F(16, "Training rows of Data.y (the fit never sees later rows).", low=3, config=False)
  evidence: str = F("laplace", "Evidence: laplace | bic | heldout.", choices=ev.EVIDENCE_KINDS)
  num_val: int = F(0, "With heldout evidence, the last num_val training rows are the validation block.", low=0)
  restarts: int = F(4, "Optimisation restarts R.", low=1)
  steps: int = F(300, "Adam steps per restart.", low=1)
  learning_rate: float = F(0.05, "Initial Adam step (cosine-decayed to 5%).", low=0, low_open=True)
  jitter: float = F(0.5, "Sd of the restarts' perturbations of the start (log space).", low=0)
  newton_steps: int = F(3, "Saddle-free Newton polishing steps after Adam.", low=0)
  eig_floor: float = F(1e-6, "Floor of |eigenvalues| in Newton steps and Laplace.", low=0, low_open=True)
  batch_size: int = F(16, "Structures per compiled call (rounded up to a multiple of the devices).", low=1)

  def checks(self):
    if self.evidence == "heldout" and not 0 < self.num_val < self.num_fit - 1:
      yield "num_val", f"heldout evidence needs 0 < num_val < num_fit - 1 = {self.num_fit - 1} (num_val={self.num_val})"

  @property
  def fit_rows(self) -> int:
    return self.num_fit - self.num_val if self.evidence == "heldout" else self.num_fit

  @property
  def prior_weight(self) -> float:
    return 0.0 if self.evidence == "bic" else 1.0


class Fit(NamedTuple):
  """Result of fitting one structure (leading batch axes when vmapped).

  Attributes:
    phi: ``[D]`` fitted unconstrained parameters (MAP; ML for ``bic``).
    log_evidence: scalar score used as ``log Z(m)`` (``-inf`` if the fit failed).
    log_likelihood: scalar ``log p(y_train | phi)`` on all training rows.
    log_prior: scalar log prior density of ``phi``.
    num_params: scalar number of active parameters ``d``.
    positive_definite: scalar bool, Hessian positive definite at ``phi``.
    grad_norm: scalar norm of the objective's gradient at ``phi``.
    neg_hessian: ``[D, D]`` Hessian of the objective at ``phi``, masked
      (inactive block = identity): the Laplace precision for ``laplace``,
      the observed information for ``bic``, the fit-window posterior
      precision for ``heldout``.
    nonfinite_restarts: scalar int, restarts whose objective was never finite.
  """

  phi: jax.Array
  log_evidence: jax.Array
  log_likelihood: jax.Array
  log_prior: jax.Array
  num_params: jax.Array
  positive_definite: jax.Array
  grad_norm: jax.Array
  neg_hessian: jax.Array
  nonfinite_restarts: jax.Array


def _objective(model: StructuredModel, cfg: FitConfig, signs, data, phi, hi=None):
  hi = cfg.fit_rows if hi is None else hi
  ll = model.log_likelihood(phi, signs, data, lo=0, hi=hi)
  lp = model.log_prior(phi, signs, data)
  return -(ll + cfg.prior_weight * lp)


def _finite_or(x, fallback):
  return jnp.where(jnp.isfinite(x), x, fallback)


def _adam(model, cfg, signs, data, phi0):
  """Adam from ``phi0 [D]``; returns the best iterate and its objective."""
  loss = functools.partial(_objective, model, cfg, signs, data)
  schedule = optax.cosine_decay_schedule(cfg.learning_rate, max(cfg.steps, 1), alpha=0.05)
  opt = optax.adam(schedule)
  vg = jax.value_and_grad(loss)

  def step(carry, _):
    phi, state, best_phi, best_val = carry
    val, g = vg(phi)
    ok = jnp.isfinite(val) & jnp.all(jnp.isfinite(g))
    g = jnp.where(ok, g, 0.0)
    updates, state = opt.update(g, state, phi)
    # A non-finite objective (e.g. log of a negative state) pulls the
    # iterate half-way back to its start instead of stopping it.
    new_phi = jnp.where(ok, phi + updates, 0.5 * (phi + phi0))
    better = ok & (val < best_val)
    return (new_phi, state, jnp.where(better, phi, best_phi), jnp.where(better, val, best_val)), None

  init = (phi0, opt.init(phi0), phi0, jnp.asarray(jnp.inf, phi0.dtype))
  (_, _, best_phi, best_val), _ = jax.lax.scan(step, init, None, length=cfg.steps)
  return best_phi, best_val


def _grad_and_hessian(loss, phi):
  """``(grad [D], hessian [D, D])`` of ``loss`` at ``phi``.

  The Hessian is ``jax.hessian``'s forward-over-reverse product (``jvp`` of
  ``grad`` along each basis vector); the gradient is its primal output, so
  one trace gives both.
  """
  basis = jnp.eye(phi.shape[0], dtype=phi.dtype)
  grads, hess = jax.vmap(lambda v: jax.jvp(jax.grad(loss), (phi,), (v,)))(basis)
  return grads[0], hess


def _polish(model, cfg, signs, data, phi, val, mask):
  """Saddle-free Newton steps with a backtracking line search, masked.

  Runs ``newton_steps + 1`` passes; the last one only evaluates, so the
  returned gradient and masked Hessian of the objective belong to the
  returned ``phi`` (one Hessian trace serves polishing and Laplace).
  """
  loss = functools.partial(_objective, model, cfg, signs, data)
  scales = jnp.asarray((1.0, 0.5, 0.125), phi.dtype)

  def body(i, carry):
    phi, val, _, _ = carry
    g, h = _grad_and_hessian(loss, phi)
    g = jnp.where(jnp.isfinite(g), g, 0.0) * mask
    h = ev.masked_matrix(jnp.where(jnp.isfinite(h), h, 0.0), mask)
    h = 0.5 * (h + h.T)
    w, v = jnp.linalg.eigh(h)
    w = jnp.maximum(jnp.abs(w), cfg.eig_floor)
    step = v @ ((v.T @ g) / w)
    step = jnp.where(jnp.all(jnp.isfinite(step)) & (i < cfg.newton_steps), step, 0.0)

    def try_scale(best, scale):
      cand = phi - scale * step
      cv = _finite_or(loss(cand), jnp.inf)
      better = cv < best[1]
      return (jnp.where(better, cand, best[0]), jnp.where(better, cv, best[1])), None

    (phi, val), _ = jax.lax.scan(try_scale, (phi, val), scales)
    return phi, val, g, h

  d = phi.shape[0]
  init = (phi, val, jnp.zeros((d,), phi.dtype), jnp.eye(d, dtype=phi.dtype))
  return jax.lax.fori_loop(0, cfg.newton_steps + 1, body, init)


def fit_structure(model: StructuredModel, cfg: FitConfig, signs: jax.Array, key: jax.Array,
                  data: Data) -> Fit:
  """Fits structure ``signs [S, K]`` to ``data``; ``key`` draws the restarts' jitter."""
  mask = model.layout.active_mask(signs)
  base = model.gradient_matching_init(signs, data, num_rows=cfg.fit_rows)
  slot_mask = mask.at[model.layout.num_slot_params:].set(0.0)
  eps = jax.random.normal(key, (cfg.restarts, base.shape[0]), base.dtype)
  eps = eps.at[0].set(0.0)
  starts = base[None, :] + cfg.jitter * eps * slot_mask[None, :]
  phis, vals = jax.vmap(lambda p0: _adam(model, cfg, signs, data, p0))(starts)
  best = jnp.argmin(jnp.where(jnp.isfinite(vals), vals, jnp.inf))
  phi, val, grad, neg_hess = _polish(model, cfg, signs, data, phis[best], vals[best], mask)

  lp = model.log_prior(phi, signs, data)
  if cfg.fit_rows == cfg.num_fit:  # the objective is -(ll + w * lp) on the training rows
    ll_train = -val - cfg.prior_weight * lp
  else:
    ll_train = model.log_likelihood(phi, signs, data, lo=0, hi=cfg.num_fit)
  # With Laplace evidence the objective is exactly -log joint on the training
  # window, so its Hessian is the Laplace precision.
  lap = ev.laplace_from_hessian(-val, neg_hess, mask, eig_floor=cfg.eig_floor)
  if cfg.evidence == "laplace":
    log_z = lap.log_evidence
  elif cfg.evidence == "bic":
    log_z = ev.bic(ll_train, lap.dim, num_data(cfg, model))
  else:
    held = model.log_likelihood(phi, signs, data, lo=cfg.fit_rows, hi=cfg.num_fit)
    log_z = jnp.where(jnp.isfinite(held), held, -jnp.inf)
  ok = jnp.all(jnp.isfinite(phi)) & jnp.isfinite(ll_train) & jnp.isfinite(val)
  log_z = jnp.where(ok, log_z, -jnp.inf)
  nonfinite = jnp.sum(~jnp.isfinite(vals)).astype(jnp.int32)
  return Fit(phi, log_z, ll_train, lp, lap.dim.astype(jnp.int32), lap.positive_definite & ok,
             jnp.where(ok, jnp.linalg.norm(grad), jnp.inf), neg_hess, nonfinite)


def make_batch_fit(model: StructuredModel, cfg: FitConfig):
  """Jitted ``(signs [B, S, K], keys [B], data [B, ...]) -> Fit`` with ``[B]`` leading axes.

  Each batch entry is a (structure, dataset) pair: the evaluator repeats one
  dataset over the batch; simulation studies fit one structure to many
  datasets with the same compiled function.
  """
  fit = jax.jit(jax.vmap(functools.partial(fit_structure, model, cfg), in_axes=(0, 0, 0)))

  def batch_fit(signs: jax.Array, keys: jax.Array, data: Data) -> Fit:
    chex.assert_shape(signs, (None, len(model.spec.states), None))
    chex.assert_equal_shape_prefix([signs, keys, data.y], 1)
    return fit(signs, keys, data)

  return batch_fit


def num_data(cfg: FitConfig, model: StructuredModel) -> int:
  return cfg.num_fit * len(model.spec.observed)

