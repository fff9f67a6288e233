"""Posterior predictive checks: held-out log density, interval coverage, bands.

For a structure ``m`` with fitted ``phi*`` and curvature ``H`` (the Laplace
posterior ``N(phi*, H^-1)`` on the active coordinates), :func:`draw` samples
``phi_s``, solves the ODE over every row (training and held-out) and adds
observation noise. With posterior masses ``pi(m)``:

* held-out log predictive density of the block ``y_h`` (rows ``lo..hi-1``):
  ``log sum_m pi(m) (1/S) sum_s p(y_h | phi_s, m)`` -- the joint density of
  the whole block, estimated by Monte Carlo;
* ``q``-coverage: the share of held-out observations inside the central
  ``q`` interval of the mixture predictive (weighted quantiles of the pooled
  samples).

The same scoring functions score PySINDy's point forecast (a predictive with
no parameter uncertainty), so every method is measured the same way.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from methods.model_smc.model import Data
from methods.model_smc.model import StructuredModel


class Draws(NamedTuple):
  """Posterior predictive draws of one structure.

  Attributes:
    y: ``[n, T, O]`` noisy predictive samples of the observations.
    z: ``[n, T, O]`` noise-free solutions (of the observed states).
    log_density: ``[n]`` ``log p(y[lo:hi] | phi_s)`` of the real data.
    phi: ``[n, D]`` the parameter draws.
  """

  y: jax.Array
  z: jax.Array
  log_density: jax.Array
  phi: jax.Array


def draw(model: StructuredModel, key: jax.Array, phi: jax.Array, neg_hessian: jax.Array, signs: jax.Array,
         data: Data, *, num_samples: int, num_points: int, lo: int, hi: int, eig_floor: float = 1e-6) -> Draws:
  """``num_samples`` predictive draws of structure ``signs`` over ``num_points`` rows.

  ``key`` draws the parameters and the observation noise; rows ``lo..hi-1``
  of ``data.y`` are scored.
  """
  k_phi, k_obs = jax.random.split(key)
  mask = model.layout.active_mask(signs)
  w, v = jnp.linalg.eigh(0.5 * (neg_hessian + neg_hessian.T))
  w = jnp.maximum(jnp.abs(w), eig_floor)
  eps = jax.random.normal(k_phi, (num_samples, phi.shape[0]), phi.dtype)
  phis = phi[None, :] + ((eps / jnp.sqrt(w)[None, :]) @ v.T) * mask[None, :]
  obs = np.asarray(model.spec.observed)
  z = jax.vmap(lambda p: model.simulate(p, signs, data, num_points)[:, obs])(phis)  # [n, T, O]
  log_sigma = phis[:, model.layout.noise_index]  # [n, O]
  noise = jax.random.normal(k_obs, z.shape, z.dtype)
  sp = model.spec
  if sp.noise == "lognormal":
    mu = jnp.log(jnp.maximum(z + sp.noise_offset, sp.log_floor))
    y = jnp.exp(mu + jnp.exp(log_sigma)[:, None, :] * noise) - sp.noise_offset
  else:
    y = z + jnp.exp(log_sigma)[:, None, :] * noise
  dens = jax.vmap(lambda zz, ls: jnp.sum(model.obs_log_density(zz[lo:hi], data.y[lo:hi], ls)))(z, log_sigma)
  return Draws(y, z, jnp.where(jnp.isfinite(dens), dens, -jnp.inf), phis)


@functools.lru_cache(maxsize=32)
def jitted_draw(model: StructuredModel, num_samples: int, num_points: int, lo: int, hi: int):
  """``draw`` jitted for one model and static sizes (cached)."""
  return jax.jit(functools.partial(draw, model, num_samples=num_samples, num_points=num_points, lo=lo, hi=hi))


def log_predictive_density(log_masses: Sequence[float], log_densities: Sequence[np.ndarray]) -> float:
  """``log sum_m pi_m mean_s exp(l_ms)`` for per-structure draws ``l_m [n_m]``."""
  terms = [lm + np.logaddexp.reduce(np.asarray(ld, np.float64)) - np.log(len(ld))
           for lm, ld in zip(log_masses, log_densities)]
  return float(np.logaddexp.reduce(np.asarray(terms, np.float64)))


def weighted_quantiles(samples: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> np.ndarray:
  """``[len(qs), ...]`` quantiles of ``samples [n, ...]`` with weights ``[n]`` (along axis 0)."""
  order = np.argsort(samples, axis=0)
  s = np.take_along_axis(samples, order, axis=0)
  w = np.asarray(weights, np.float64)[order]
  cdf = np.cumsum(w, axis=0)
  cdf = cdf / cdf[-1:]
  out = []
  for q in qs:
    idx = np.argmax(cdf >= q, axis=0)
    out.append(np.take_along_axis(s, idx[None], axis=0)[0])
  return np.stack(out)


def coverage(samples: np.ndarray, weights: np.ndarray, y: np.ndarray, level: float) -> float:
  """Share of ``y [T, O]`` inside the central ``level`` interval of ``samples [n, T, O]``."""
  lo, hi = weighted_quantiles(samples, weights, (0.5 - level / 2, 0.5 + level / 2))
  finite = np.isfinite(lo) & np.isfinite(hi)
  inside = (y >= lo) & (y <= hi) & finite
  return float(np.mean(inside))


def bands(samples: np.ndarray, weights: np.ndarray, levels: Sequence[float] = (0.5, 0.9)) -> dict:
  """``{"median": [T, O], "0.5": ([T, O], [T, O]), ...}`` predictive bands."""
  out = {"median": weighted_quantiles(samples, weights, (0.5,))[0]}
  for level in levels:
    lo, hi = weighted_quantiles(samples, weights, (0.5 - level / 2, 0.5 + level / 2))
    out[str(level)] = (lo, hi)
  return out
