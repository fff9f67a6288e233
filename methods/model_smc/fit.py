"""Parameter fitting of a structure and its evidence, vmappable over structures.

:func:`fit_structure` fits one structure (signs ``[S, K]``) to data: ``R``
restarts minimise the negative log joint in log-parameter space, all
restarts vmapped; the best restart is polished by a few saddle-free Newton
steps (``|eigenvalues|`` of the masked Hessian), then scored by the selected
evidence (:mod:`methods.model_smc.evidence`). Restart 0 starts from gradient
matching (or the prior centre); restarts ``1..knockouts`` each switch off one
active term parameter (set it ``knockout_sd`` prior sds below the prior
location; in log space a rate near zero is a flat region that a restart from
the middle does not reach, and the best fit of a poor structure often has a
term switched off); the others start from gradient matching plus Gaussian
jitter drawn with the structure's own key, so a structure's evidence is a
deterministic function of the structure and the seed. A restart whose objective was never
finite is counted (``Fit.nonfinite_restarts``); a structure whose restarts
were all non-finite is a failed fit (``-inf`` evidence, labelled as such by
the evaluator), not a low evidence.

Optimisers (``FitConfig.optimizer``):

* ``bfgs`` (default): dense BFGS (Nocedal and Wright 2006, Numerical
  Optimization, Alg. 6.1) with a vmap-friendly line search (a fixed ladder
  of step lengths evaluated at once), in a ``lax.while_loop`` with a
  stopping test per restart: a restart stops when the gradient norm over the
  active coordinates is at most ``gtol * (1 + |f|)`` or an iteration lowers
  the objective by at most ``ftol * (1 + |f|)`` twice in a row (the first
  time resets the inverse Hessian), or at ``max_iters``. Under ``jax.vmap``
  (over restarts and over a batch of structures) the loop runs while *any*
  entry is still going and stopped entries are frozen (their carry is not
  updated), so a structure's result does not depend on its batch neighbours. With
  ``keep < restarts`` only the ``keep`` restarts with the lowest objective
  after ``screen_iters`` iterations are continued.
* ``adam``: a fixed budget of ``steps`` Adam steps (cosine-decayed step) in
  one ``lax.scan``; on badly conditioned structures it stops tens to a
  thousand nats short of the optimum.

``jax.vmap(fit_structure, (0, 0, None))`` fits a batch of *different*
structures with one compiled function (see :func:`make_batch_fit`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp
import optax

from methods.common import hparams
from methods.common import linalg
from methods.model_smc import evidence as ev
from methods.model_smc.model import Data
from methods.model_smc.model import StructuredModel


F = hparams.field
OPTIMIZERS = ("bfgs", "adam")


@dataclasses.dataclass(frozen=True)
class FitConfig(hparams.Hyperparameters):
  """Static hyperparameters of a fit (config section ``fit``; ``num_fit`` is the run's)."""

  num_fit: int = F(16, "Training rows of Data.y (the fit never sees later rows).", low=3, config=False)
  evidence: str = F("laplace", "Evidence: laplace | bic | heldout.", choices=ev.EVIDENCE_KINDS)
  num_val: int = F(0, "With heldout evidence, the last num_val training rows are the validation block.", low=0)
  optimizer: str = F("bfgs", "bfgs: BFGS to a convergence test per restart; adam: a fixed budget of Adam steps.",
                     choices=OPTIMIZERS)
  restarts: int = F(16, "Optimisation restarts R (starts: gradient matching, knockouts, then it plus jitter).", low=1)
  keep: int = F(16, "BFGS: if below restarts, only the keep restarts with the lowest objective after "
                "screen_iters iterations are continued (cheaper; may drop a restart that was slow to find the "
                "best basin).", low=1)
  screen_iters: int = F(20, "BFGS: iterations of every restart before the keep best are continued.", low=1)
  max_iters: int = F(100, "BFGS: most iterations per restart (screening included; a restart that passes the "
                     "stopping test stops earlier).", low=1)
  gtol: float = F(1e-4, "Converged: gradient norm (active coordinates) <= gtol * (1 + |f|) at the optimum f.",
                  low=0)
  ftol: float = F(1e-6, "BFGS stops a restart when the gradient test passes or an iteration lowers f by at "
                  "most ftol * (1 + |f|).", low=0)
  linesearch_steps: int = F(5, "BFGS line search: step lengths tried per iteration (shrink^k, k < steps).", low=1)
  linesearch_shrink: float = F(0.3, "BFGS line search: ratio of successive step lengths.", low=0, high=1,
                               low_open=True, high_open=True)
  steps: int = F(300, "Adam: steps per restart.", low=1)
  learning_rate: float = F(0.05, "Adam: initial step (cosine-decayed to 5%).", low=0, low_open=True)
  jitter: float = F(0.5, "Sd of the restarts' perturbations of the start (log space).", low=0)
  knockouts: int = F(6, "Restarts 1..knockouts each start with one active term parameter switched off (one "
                     "per parameter, in slot order; restarts beyond the structure's parameters are jittered).",
                     low=0)
  knockout_prob: float = F(0.2, "The other jittered restarts switch off each active term parameter with this "
                           "probability (several terms at once).", low=0, high=1)
  knockout_sd: float = F(5.0, "A switched-off parameter starts this many prior sds below the prior location.",
                         low=0)
  newton_steps: int = F(3, "Saddle-free Newton polishing steps after the optimiser.", low=0)
  eig_floor: float = F(1e-6, "Floor of |eigenvalues| in Newton steps and Laplace.", low=0, low_open=True)
  batch_size: int = F(16, "Structures per compiled call (rounded up to a multiple of the devices).", low=1)

  def checks(self):
    if self.optimizer == "bfgs" and self.keep < self.restarts and self.screen_iters >= self.max_iters:
      yield "screen_iters", f"screening ({self.screen_iters} iterations) must stop before max_iters={self.max_iters}"
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
    converged: scalar bool, ``grad_norm <= gtol * (1 + |objective|)`` at
      the returned ``phi`` (after polishing).
    iterations: scalar int, optimiser iterations of the selected restart
      (``bfgs``: screening plus continuation; ``adam``: ``steps``).
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
  converged: jax.Array
  iterations: jax.Array


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


class _BfgsCarry(NamedTuple):
  it: jax.Array
  phi: jax.Array
  inv_hess: jax.Array
  value: jax.Array
  grad: jax.Array
  done: jax.Array
  fresh: jax.Array


def _bfgs_update(inv_hess, step, dg, fresh, eye):
  """BFGS update of the inverse Hessian ``[D, D]`` by the pair ``(step, dg)`` (Nocedal and Wright, eq. 6.17).

  Skipped without positive curvature (``s^T y <= 0``, up to rounding). The
  first update after a reset (``fresh``) starts from the scaled identity
  ``(s^T y / y^T y) I`` (Nocedal and Wright, eq. 6.20).

  Returns:
    ``(inv_hess, good)``: the updated matrix and whether the pair was used.
  """
  sy = jnp.dot(step, dg)
  good = sy > 1e-10 * jnp.linalg.norm(step) * jnp.linalg.norm(dg)
  rho = 1.0 / jnp.where(good, sy, 1.0)
  h0 = jnp.where(fresh, eye * sy / jnp.maximum(jnp.dot(dg, dg), 1e-30), inv_hess)
  v = eye - rho * jnp.outer(step, dg)
  updated = v @ h0 @ v.T + rho * jnp.outer(step, step)
  return jnp.where(good, updated, inv_hess), good


def _bfgs(model, cfg, signs, data, phi0, mask, max_iters):
  """BFGS from ``phi0 [D]`` to the stopping test, at most ``max_iters`` iterations.

  Dense inverse-Hessian BFGS (Nocedal and Wright 2006, Numerical
  Optimization, Alg. 6.1; ``D`` is a few dozen at most) with a line search
  that suits ``vmap``: the objective is evaluated at the fixed ladder of step
  lengths ``shrink^k``, ``k < linesearch_steps``, all at once, and the longest
  step with sufficient decrease (Armijo, ``c1 = 1e-4``) is taken (else the
  lowest point if it is lower); then one gradient at the new point. No
  data-dependent inner loop, so a batch of restarts and structures costs the
  same per iteration whatever their line searches do. The first step (and
  every step after a reset) is steepest descent of length at most 1;
  curvature pairs with ``s^T y <= 0`` are skipped.

  Only the active coordinates move (inactive ones are held at ``phi0`` inside
  the objective, so their gradient is exactly zero). A non-finite objective
  counts as ``+inf``. An iteration that lowers the objective by less than
  ``ftol * (1 + |f|)`` while the gradient test fails resets the inverse
  Hessian; a second such iteration in a row stops the restart.

  Returns:
    ``(phi, value, iterations)``; ``value`` is ``inf`` if the objective was
    never finite.
  """
  on = mask > 0
  d = phi0.shape[0]
  eye = jnp.eye(d, dtype=phi0.dtype)
  ladder = jnp.asarray([cfg.linesearch_shrink ** k for k in range(cfg.linesearch_steps)], phi0.dtype)

  def loss(phi):
    val = _objective(model, cfg, signs, data, jnp.where(on, phi, phi0))
    return jnp.where(jnp.isfinite(val), val, jnp.inf)

  vg = jax.value_and_grad(loss)

  def finite_grad(g):
    return jnp.where(on & jnp.isfinite(g), g, 0.0)

  def first_inv_hess(g):
    return eye / jnp.maximum(jnp.linalg.norm(g), 1.0)  # a first step of length <= 1

  def cond(c):
    return ~c.done & (c.it < max_iters)

  def body(c):
    p = -c.inv_hess @ c.grad
    slope = jnp.dot(c.grad, p)
    descent = slope < 0
    p = jnp.where(descent, p, -first_inv_hess(c.grad) @ c.grad)
    slope = jnp.where(descent, slope, -jnp.dot(c.grad, first_inv_hess(c.grad) @ c.grad))
    vals = jax.vmap(lambda t: loss(c.phi + t * p))(ladder)
    armijo = vals <= c.value + 1e-4 * ladder * slope
    k = jnp.where(jnp.any(armijo), jnp.argmax(armijo), jnp.argmin(vals))
    moved = vals[k] < c.value
    phi = jnp.where(moved, c.phi + ladder[k] * p, c.phi)
    new_val, new_grad = vg(phi)
    new_grad = finite_grad(new_grad)
    ok = jnp.isfinite(new_val)
    phi = jnp.where(ok, phi, c.phi)
    new_val = jnp.where(ok, new_val, c.value)
    new_grad = jnp.where(ok, new_grad, c.grad)
    inv_hess, good = _bfgs_update(c.inv_hess, phi - c.phi, new_grad - c.grad, c.fresh, eye)
    tol = 1.0 + jnp.abs(new_val)
    small_grad = jnp.linalg.norm(new_grad) <= cfg.gtol * tol
    stall = (c.value - new_val) <= cfg.ftol * tol
    reset = stall & ~small_grad & ~c.fresh
    inv_hess = jnp.where(reset, first_inv_hess(new_grad), inv_hess)
    done = small_grad | (stall & ~reset)
    return _BfgsCarry(c.it + 1, phi, inv_hess, new_val, new_grad, done, reset | (c.fresh & ~good))

  val0, grad0 = vg(phi0)
  grad0 = finite_grad(grad0)
  init = _BfgsCarry(jnp.zeros((), jnp.int32), phi0, first_inv_hess(grad0), val0, grad0, ~jnp.isfinite(val0),
                    jnp.ones((), bool))
  out = jax.lax.while_loop(cond, body, init)
  return jnp.where(on, out.phi, phi0), out.value, out.it


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
    w, v = linalg.eigh(h)
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


def _knockout_starts(model: StructuredModel, cfg: FitConfig, starts: jax.Array, slot_mask: jax.Array,
                     key: jax.Array) -> jax.Array:
  """``starts [R, D]`` with term parameters switched off (``loc - knockout_sd * scale`` of their prior).

  Restart ``j`` in ``1..knockouts`` is ``starts[0]`` with the ``j``-th active
  slot parameter (slot order) switched off (an index beyond the active
  parameters keeps its jittered start); every later restart keeps its jitter
  and switches off each active slot parameter with probability
  ``knockout_prob``, drawn with ``key``.
  """
  loc, scale = model.spec.param_prior
  off = loc - cfg.knockout_sd * scale
  on = slot_mask > 0
  drop = jax.random.bernoulli(key, cfg.knockout_prob, starts.shape) & on[None, :]
  drop = drop.at[0].set(False)
  starts = jnp.where(drop, off, starts)
  count = min(cfg.knockouts, cfg.restarts - 1)
  if count <= 0:
    return starts
  d = starts.shape[1]
  which = jnp.argsort(jnp.where(on, 0, 1), stable=True)[:count]  # active slot parameters first
  valid = jnp.arange(count) < jnp.sum(on)
  hot = jax.nn.one_hot(which, d, dtype=starts.dtype)  # [count, D]
  knocked = starts[0][None, :] * (1 - hot) + off * hot
  return starts.at[1:1 + count].set(jnp.where(valid[:, None], knocked, starts[1:1 + count]))


def fit_structure(model: StructuredModel, cfg: FitConfig, signs: jax.Array, key: jax.Array,
                  data: Data) -> Fit:
  """Fits structure ``signs [S, K]`` to ``data``; ``key`` draws the restarts' jitter."""
  mask = model.layout.active_mask(signs)
  base = model.gradient_matching_init(signs, data, num_rows=cfg.fit_rows)
  slot_mask = mask.at[model.layout.num_slot_params:].set(0.0)
  eps = jax.random.normal(key, (cfg.restarts, base.shape[0]), base.dtype)
  eps = eps.at[0].set(0.0)
  starts = base[None, :] + cfg.jitter * eps * slot_mask[None, :]
  starts = _knockout_starts(model, cfg, starts, slot_mask, jax.random.fold_in(key, 1))
  if cfg.optimizer == "bfgs":
    run = lambda p0, n: _bfgs(model, cfg, signs, data, p0, mask, n)  # noqa: E731
    if cfg.keep < cfg.restarts:  # screen every restart, continue the best `keep` only
      phis, vals, iters = jax.vmap(run, (0, None))(starts, cfg.screen_iters)
      nonfinite = jnp.sum(~jnp.isfinite(vals)).astype(jnp.int32)
      order = jnp.argsort(jnp.where(jnp.isfinite(vals), vals, jnp.inf))[:cfg.keep]
      phis, vals, more = jax.vmap(run, (0, None))(phis[order], max(cfg.max_iters - cfg.screen_iters, 1))
      iters = iters[order] + more
    else:
      phis, vals, iters = jax.vmap(run, (0, None))(starts, cfg.max_iters)
      nonfinite = jnp.sum(~jnp.isfinite(vals)).astype(jnp.int32)
  else:
    phis, vals = jax.vmap(lambda p0: _adam(model, cfg, signs, data, p0))(starts)
    nonfinite = jnp.sum(~jnp.isfinite(vals)).astype(jnp.int32)
    iters = jnp.full((cfg.restarts,), cfg.steps, jnp.int32)
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
  grad_norm = jnp.where(ok, jnp.linalg.norm(grad), jnp.inf)
  converged = ok & (grad_norm <= cfg.gtol * (1.0 + jnp.abs(val)))
  return Fit(phi, log_z, ll_train, lp, lap.dim.astype(jnp.int32), lap.positive_definite & ok,
             grad_norm, neg_hess, nonfinite, converged, iters[best].astype(jnp.int32))


def make_batch_fit(model: StructuredModel, cfg: FitConfig, mesh: Optional[jax.sharding.Mesh] = None):
  """Jitted ``(signs [B, S, K], keys [B], data [B, ...]) -> Fit`` with ``[B]`` leading axes.

  Each batch entry is a (structure, dataset) pair: the evaluator repeats one
  dataset over the batch; simulation studies fit one structure to many
  datasets with the same compiled function.

  With ``mesh``, ``jax.shard_map`` splits the batch over all of its devices
  (``B`` a multiple of their number): each device runs its own loops, which
  stop when its own entries have stopped, with no per-iteration all-reduce
  of the stopping tests as under ``jax.jit`` of sharded inputs.
  """
  per_entry = jax.vmap(functools.partial(fit_structure, model, cfg), in_axes=(0, 0, 0))
  if mesh is not None and mesh.devices.size > 1:
    split = jax.sharding.PartitionSpec(mesh.axis_names)
    per_entry = jax.shard_map(per_entry, mesh=mesh, in_specs=split, out_specs=split, check_vma=False)  # no collectives
  fit = jax.jit(per_entry)

  def batch_fit(signs: jax.Array, keys: jax.Array, data: Data) -> Fit:
    chex.assert_shape(signs, (None, len(model.spec.states), None))
    chex.assert_equal_shape_prefix([signs, keys, data.y], 1)
    if mesh is not None and signs.shape[0] % mesh.devices.size:
      raise ValueError(f"batch of {signs.shape[0]} structures: not a multiple of the mesh's "
                       f"{mesh.devices.size} devices")
    return fit(signs, keys, data)

  return batch_fit


def num_data(cfg: FitConfig, model: StructuredModel) -> int:
  return cfg.num_fit * len(model.spec.observed)

