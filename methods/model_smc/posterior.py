"""Parameter intervals of a fitted structure: Laplace and preconditioned MALA.

Given a structure ``m`` fitted by :func:`methods.model_smc.fit.fit_structure`
(the MAP ``phi*`` and ``H``, the negative Hessian of the log joint at it,
``Fit.neg_hessian``), two approximations of the parameter posterior
``p(phi | x, m)`` give central credible intervals at any levels:

* ``laplace``: the Gaussian ``N(phi*, H^-1)`` on the active coordinates
  (Tierney and Kadane 1986; MacKay 2003, *Information Theory, Inference, and
  Learning Algorithms*, ch. 27); the interval ``phi*_i +- z_q sd_i`` is taken
  in the fitted parameterisation (log rates, log noise sds, log or real
  initial states) and mapped to the natural scale.
* ``mala``: the Metropolis-adjusted Langevin algorithm (Roberts and Tweedie
  1996, *Bernoulli* 2(4)) from blackjax, run on the exact log joint in
  whitened coordinates ``phi = phi* + W z`` with ``W = H^{-1/2}`` (the Laplace
  covariance as preconditioner), every chain started at the MAP, the step
  size tuned during warm-up by dual averaging (Hoffman and Gelman 2014, *JMLR*
  15, Alg. 5) towards the acceptance rate ``0.574`` (Roberts and Rosenthal
  1998, *JRSS B* 60); intervals are the posterior sample quantiles, mapped to
  the natural scale. It captures what a Gaussian at the mode cannot: skewed
  posteriors and the heavier tails that come from the unknown noise sds (at
  the joint mode ``sigma^2`` is the residual sum of squares over ``n`` rather
  than ``n - p``, and ``H^-1`` treats it as known, so Laplace intervals of the
  rates are too narrow by about ``sqrt(n / (n - p))`` plus Student-t tails).

The density is the one whose Hessian ``Fit.neg_hessian`` holds: the log
likelihood of the fit rows plus ``FitConfig.prior_weight`` times the log
prior (for ``bic`` fits, which carry no prior, both methods give
likelihood-only intervals). Everything is pure JAX and vmappable over
datasets (:func:`make_batch_intervals` jits both methods over a batch).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from typing import Callable, NamedTuple, Sequence

import blackjax
import chex
import jax
import jax.numpy as jnp
import numpy as np

from methods.common import hparams
from methods.common import linalg
from methods.model_smc.fit import Fit
from methods.model_smc.fit import FitConfig
from methods.model_smc.model import Data
from methods.model_smc.model import StructuredModel

F = hparams.field
METHODS = ("laplace", "mala")


@dataclasses.dataclass(frozen=True)
class PosteriorConfig(hparams.Hyperparameters):
  """How parameter intervals are computed (config section ``posterior``)."""

  method: str = F("mala", "Interval method: laplace (Gaussian at the MAP) | mala (MALA chains).", choices=METHODS)
  num_chains: int = F(2, "MALA: chains per structure and dataset (all start at the MAP).", low=1)
  num_warmup: int = F(300, "MALA: warm-up steps per chain (step size tuned by dual averaging; discarded).", low=1)
  num_samples: int = F(800, "MALA: kept steps per chain.", low=2)
  step_size: float = F(0.3, "MALA: initial step size in whitened coordinates (blackjax's: x + s grad + "
                       "sqrt(2 s) noise).", low=0, low_open=True)
  target_accept: float = F(0.574, "MALA: acceptance rate targeted by the warm-up (Roberts and Rosenthal 1998).",
                           low=0, high=1, low_open=True, high_open=True)
  eig_floor: float = F(1e-6, "Floor of the Hessian's |eigenvalues| in the preconditioner.", low=0, low_open=True)


class Intervals(NamedTuple):
  """Central credible intervals on the natural scale (leading batch axes when vmapped).

  Attributes:
    lo: ``[L, D]`` lower ends, one row per level.
    hi: ``[L, D]`` upper ends.
    center: ``[D]`` the MAP (laplace) or the posterior median (mala).
    ok: scalar bool, the intervals exist (laplace: ``H`` positive definite
      on the active block; mala: every sample finite). Where not ``ok``,
      ``lo`` and ``hi`` are NaN.
  """

  lo: jax.Array
  hi: jax.Array
  center: jax.Array
  ok: jax.Array


class Chains(NamedTuple):
  """MALA draws and diagnostics of one structure and dataset.

  Attributes:
    phi: ``[C, N, D]`` kept draws in the fitted parameterisation.
    accept: ``[C]`` mean acceptance probability of the kept steps.
    step_size: ``[C]`` step size after warm-up.
    rhat: scalar, largest split-R-hat (Gelman et al. 2013, *Bayesian Data
      Analysis*, 3rd ed., sec. 11.4) over the active coordinates (1 when
      only one chain half is available or nothing varies).
  """

  phi: jax.Array
  accept: jax.Array
  step_size: jax.Array
  rhat: jax.Array


def log_joint(model: StructuredModel, cfg: FitConfig, signs: jax.Array, data: Data, phi: jax.Array) -> jax.Array:
  """``log p(y_fit | phi) + w log p(phi)``: minus the fit's objective (``w = cfg.prior_weight``)."""
  ll = model.log_likelihood(phi, signs, data, lo=0, hi=cfg.fit_rows)
  return ll + cfg.prior_weight * model.log_prior(phi, signs, data)


def natural_scale(model: StructuredModel, phi: jax.Array) -> jax.Array:
  """``[..., D]`` parameters on their natural scale: ``exp`` of the log-coordinates, real initial states as is."""
  is_log = np.ones((model.dim,), bool)
  if model.spec.init_scale == "real":
    is_log[model.layout.init_index] = False
  return jnp.where(jnp.asarray(is_log), jnp.exp(phi), phi)


def _normal_quantile(p: float) -> float:
  return statistics.NormalDist().inv_cdf(p)  # host float (static levels): no JAX op under a trace


def _levels(levels: Sequence[float]) -> tuple[float, ...]:
  levels = tuple(float(q) for q in levels)
  if not levels or any(not 0.0 < q < 1.0 for q in levels):
    raise ValueError(f"interval levels must lie in (0, 1), got {list(levels)}")
  return levels


def laplace_intervals(model: StructuredModel, phi: jax.Array, neg_hessian: jax.Array, mask: jax.Array,
                      levels: Sequence[float]) -> Intervals:
  """Laplace intervals ``phi*_i +- z_q sd_i`` (``sd^2 = diag H^-1``), mapped to the natural scale.

  Args:
    model: the structured model (for the natural-scale map).
    phi: ``[D]`` the MAP.
    neg_hessian: ``[D, D]`` masked negative Hessian of the log joint at ``phi``
      (``Fit.neg_hessian``: identity on the inactive block).
    mask: ``[D]`` active coordinates.
    levels: central levels ``q`` in (0, 1).

  Returns:
    :class:`Intervals` (inactive coordinates get zero width at their value).
  """
  levels = _levels(levels)
  chex.assert_shape(neg_hessian, (phi.shape[0], phi.shape[0]))
  h = 0.5 * (neg_hessian + neg_hessian.T)
  w, v = linalg.eigh(h)
  ok = jnp.all(w > 0) & jnp.all(jnp.isfinite(h)) & jnp.all(jnp.isfinite(phi))
  var = jnp.sum(v * v / jnp.where(w > 0, w, 1.0)[None, :], axis=1)
  sd = jnp.sqrt(var) * mask
  z = jnp.asarray([_normal_quantile(0.5 + q / 2) for q in levels], phi.dtype)[:, None]
  lo = natural_scale(model, phi[None, :] - z * sd[None, :])
  hi = natural_scale(model, phi[None, :] + z * sd[None, :])
  nan = jnp.full_like(lo, jnp.nan)
  return Intervals(jnp.where(ok, lo, nan), jnp.where(ok, hi, nan), natural_scale(model, phi), ok)


def _whitening(neg_hessian: jax.Array, mask: jax.Array, eig_floor: float) -> jax.Array:
  """Symmetric ``W = H^{-1/2}`` (``|eigenvalues|`` floored), zero off the active block's coupling."""
  h = 0.5 * (neg_hessian + neg_hessian.T)
  h = jnp.where(jnp.isfinite(h), h, 0.0)
  w, v = linalg.eigh(h)
  w = jnp.maximum(jnp.abs(w), eig_floor)
  root = (v / jnp.sqrt(w)[None, :]) @ v.T
  return root * mask[:, None] * mask[None, :]


def _split_rhat(x: jax.Array) -> jax.Array:
  """``[D]`` split-R-hat of draws ``x [C, N, D]``."""
  half = x.shape[1] // 2
  parts = jnp.concatenate([x[:, :half], x[:, half:2 * half]], axis=0)  # [2C, n, D]
  n = parts.shape[1]
  means = parts.mean(axis=1)
  within = parts.var(axis=1, ddof=1).mean(axis=0)
  between = n * means.var(axis=0, ddof=1)
  var_plus = (n - 1) / n * within + between / n
  return jnp.where(within > 0, jnp.sqrt(var_plus / jnp.where(within > 0, within, 1.0)), 1.0)


def mala_sample(logdensity: Callable[[jax.Array], jax.Array], hp: PosteriorConfig, key: jax.Array,
                phi: jax.Array, neg_hessian: jax.Array, mask: jax.Array) -> Chains:
  """``hp.num_chains`` MALA chains on ``logdensity``, preconditioned by ``neg_hessian^-1``, started at ``phi``.

  Chains run in ``z`` with ``phi = phi0 + W z`` (``W = H^{-1/2}`` on the
  active block, ``|eigenvalues|`` floored); inactive ``z`` coordinates have
  a standard normal density and never reach ``phi``. A non-finite log
  density (e.g. an ODE that leaves its domain) is ``-inf``: the proposal
  is rejected. Pure and vmappable.

  Args:
    logdensity: ``phi [D] -> log density`` (up to a constant).
    hp: the sampler's hyperparameters.
    key: PRNG key of the chains.
    phi: ``[D]`` the start (the MAP).
    neg_hessian: ``[D, D]`` ``-grad^2 logdensity`` at ``phi`` (masked).
    mask: ``[D]`` 1 for the sampled coordinates, 0 for those kept at ``phi``.

  Returns:
    :class:`Chains`.
  """
  chex.assert_shape(neg_hessian, (phi.shape[0], phi.shape[0]))
  chex.assert_shape(mask, phi.shape)
  mask = mask.astype(phi.dtype)
  root = _whitening(neg_hessian, mask, hp.eig_floor)

  def to_phi(z):
    return phi + root @ z

  def logdensity_z(z):
    val = logdensity(to_phi(z)) - 0.5 * jnp.sum((1.0 - mask) * z * z)
    return jnp.where(jnp.isfinite(val), val, -jnp.inf)

  kernel = blackjax.mcmc.mala.build_kernel()
  da_init, da_update, da_final = blackjax.optimizers.dual_averaging.dual_averaging()

  def one_chain(key):
    k_warm, k_draw = jax.random.split(key)
    state = blackjax.mcmc.mala.init(jnp.zeros_like(phi), logdensity_z)

    def warm(carry, k):
      state, da = carry
      state, info = kernel(k, state, logdensity_z, jnp.exp(da.log_x))
      accept = jnp.where(jnp.isfinite(info.acceptance_rate), info.acceptance_rate, 0.0)
      return (state, da_update(da, hp.target_accept - accept)), None

    (state, da), _ = jax.lax.scan(warm, (state, da_init(jnp.asarray(hp.step_size, phi.dtype))),
                                  jax.random.split(k_warm, hp.num_warmup))
    step = da_final(da)

    def draw(state, k):
      state, info = kernel(k, state, logdensity_z, step)
      accept = jnp.where(jnp.isfinite(info.acceptance_rate), info.acceptance_rate, 0.0)
      return state, (to_phi(state.position), accept)

    _, (phis, accept) = jax.lax.scan(draw, state, jax.random.split(k_draw, hp.num_samples))
    return phis, accept.mean(), step

  phis, accept, steps = jax.vmap(one_chain)(jax.random.split(key, hp.num_chains))
  rhat = _split_rhat(phis)
  rhat = jnp.max(jnp.where(mask > 0, jnp.where(jnp.isfinite(rhat), rhat, jnp.inf), 1.0))
  return Chains(phis, accept, steps, rhat)


def mala_chains(model: StructuredModel, cfg: FitConfig, hp: PosteriorConfig, key: jax.Array, signs: jax.Array,
                data: Data, phi: jax.Array, neg_hessian: jax.Array) -> Chains:
  """:func:`mala_sample` of ``p(phi | y_fit, m)`` (:func:`log_joint`) from the MAP ``phi`` with ``Fit.neg_hessian``."""
  mask = model.layout.active_mask(signs).astype(phi.dtype)
  return mala_sample(lambda p: log_joint(model, cfg, signs, data, p), hp, key, phi, neg_hessian, mask)


def sample_intervals(model: StructuredModel, draws: jax.Array, levels: Sequence[float]) -> Intervals:
  """Central quantile intervals of draws ``[..., D]`` (all leading axes pooled), on the natural scale."""
  levels = _levels(levels)
  flat = draws.reshape(-1, draws.shape[-1])
  probs = [0.5 - q / 2 for q in levels] + [0.5 + q / 2 for q in levels] + [0.5]
  qs = jnp.quantile(flat, jnp.asarray(probs, flat.dtype), axis=0)  # [2L + 1, D]
  ok = jnp.all(jnp.isfinite(flat))
  nat = natural_scale(model, qs)  # monotone per coordinate: quantiles map to quantiles
  n = len(levels)
  nan = jnp.full_like(nat[:n], jnp.nan)
  return Intervals(jnp.where(ok, nat[:n], nan), jnp.where(ok, nat[n:2 * n], nan), nat[-1], ok)


def intervals(model: StructuredModel, cfg: FitConfig, hp: PosteriorConfig, key: jax.Array, signs: jax.Array,
              data: Data, phi: jax.Array, neg_hessian: jax.Array, levels: Sequence[float],
              method: str | None = None) -> Intervals:
  """Intervals of one fitted structure (MAP ``phi``, ``Fit.neg_hessian``) by ``method`` (default ``hp.method``).

  ``key`` is used by ``mala`` only. Jit it with ``levels`` and ``method``
  static (:func:`make_intervals`).
  """
  method = hp.method if method is None else method
  mask = model.layout.active_mask(signs).astype(phi.dtype)
  if method == "laplace":
    return laplace_intervals(model, phi, neg_hessian, mask, levels)
  if method == "mala":
    return mala_intervals(model, cfg, hp, key, signs, data, phi, neg_hessian, levels)[0]
  raise ValueError(f"unknown interval method {method!r}; allowed: {list(METHODS)}")


class ChainSummary(NamedTuple):
  """The MALA chains' diagnostics that go with their intervals (no draws)."""

  accept: jax.Array  # [C] mean acceptance probability of the kept steps
  step_size: jax.Array  # [C] step size after warm-up
  rhat: jax.Array  # scalar, largest split-R-hat over the active coordinates


def mala_intervals(model: StructuredModel, cfg: FitConfig, hp: PosteriorConfig, key: jax.Array, signs: jax.Array,
                   data: Data, phi: jax.Array, neg_hessian: jax.Array, levels: Sequence[float]
                   ) -> tuple[Intervals, ChainSummary]:
  """MALA intervals of one fitted structure (from the MAP ``phi``) and the chains' diagnostics."""
  chains = mala_chains(model, cfg, hp, key, signs, data, phi, neg_hessian)
  out = sample_intervals(model, chains.phi, levels)
  return out._replace(ok=out.ok & jnp.all(jnp.isfinite(phi))), ChainSummary(chains.accept, chains.step_size,
                                                                            chains.rhat)


@functools.lru_cache(maxsize=32)
def _make_mala_intervals(model, cfg, hp, levels):
  def fn(key, signs, data, phi, neg_hessian):
    return mala_intervals(model, cfg, hp, key, signs, data, phi, neg_hessian, levels)

  return jax.jit(fn)


def make_mala_intervals(model: StructuredModel, cfg: FitConfig, hp: PosteriorConfig, levels: Sequence[float]):
  """Jitted ``(key, signs [S, K], data, phi [D], neg_hessian [D, D]) -> (Intervals, ChainSummary)``.

  Cached like :func:`make_intervals`: every structure over one library
  shares one compiled function.
  """
  return _make_mala_intervals(model, cfg, hp, _levels(levels))


def make_intervals(model: StructuredModel, cfg: FitConfig, hp: PosteriorConfig, levels: Sequence[float],
                   method: str | None = None):
  """Jitted ``(key, signs [S, K], data, phi [D], neg_hessian [D, D]) -> Intervals`` of one structure.

  Cached per (model, configs, levels, method): every structure over one
  library shares one compiled function.
  """
  return _make_intervals(model, cfg, hp, _levels(levels), method)


@functools.lru_cache(maxsize=32)
def _make_intervals(model, cfg, hp, levels, method):
  def fn(key, signs, data, phi, neg_hessian):
    return intervals(model, cfg, hp, key, signs, data, phi, neg_hessian, levels, method)

  return jax.jit(fn)


class BatchIntervals(NamedTuple):
  """Both methods' intervals of a batch (leading axis ``[B]``) and the chains' diagnostics."""

  laplace: Intervals
  mala: Intervals
  accept: jax.Array  # [B, C]
  step_size: jax.Array  # [B, C]
  rhat: jax.Array  # [B]


def make_batch_intervals(model: StructuredModel, cfg: FitConfig, hp: PosteriorConfig, levels: Sequence[float]):
  """Jitted ``(keys [B], signs [B, S, K], data [B, ...], fit: Fit [B]) -> BatchIntervals``.

  One compiled function runs Laplace and MALA for every (structure,
  dataset) pair of the batch (e.g. one structure fitted to many simulated
  datasets).
  """
  levels = _levels(levels)

  def one(key, signs, data, fit):
    mask = model.layout.active_mask(signs).astype(fit.phi.dtype)
    lap = laplace_intervals(model, fit.phi, fit.neg_hessian, mask, levels)
    chains = mala_chains(model, cfg, hp, key, signs, data, fit.phi, fit.neg_hessian)
    mala = sample_intervals(model, chains.phi, levels)
    mala = mala._replace(ok=mala.ok & jnp.all(jnp.isfinite(fit.phi)))
    return BatchIntervals(lap, mala, chains.accept, chains.step_size, chains.rhat)

  fn = jax.jit(jax.vmap(one))

  def batch(keys: jax.Array, signs: jax.Array, data: Data, fit: Fit) -> BatchIntervals:
    chex.assert_shape(signs, (None, len(model.spec.states), None))
    chex.assert_equal_shape_prefix([signs, keys, data.y, fit.phi], 1)
    return fn(keys, signs, data, fit)

  return batch


def covered(intervals_: Intervals, truth: jax.Array) -> jax.Array:
  """``[..., L, D]`` whether ``truth [..., D]`` (natural scale) lies in each interval (no interval: False)."""
  t = truth[..., None, :]
  return (intervals_.lo <= t) & (t <= intervals_.hi)

