"""Marginal-likelihood estimates: Laplace, BIC and held-out predictive.

* Laplace (Tierney and Kadane 1986; MacKay 2003, ch. 27):
  ``log Z ~= log p(x | phi*) + log p(phi*) + (d/2) log 2 pi - (1/2) log |H|``
  with ``H = -grad^2 [log p(x | phi) + log p(phi)]`` at the MAP ``phi*`` (by
  ``jax.hessian``), over the ``d`` active coordinates. Exact for
  linear-Gaussian models.
* BIC (Schwarz 1978): ``log Z ~= log p(x | phi_ML) - (d/2) log n``.
* Held-out: ``log p(x_val | phi*(x_fit))``, the plug-in predictive density of
  a validation block (the end of the training window) after fitting the rest.

The SMC weights use whichever one the config selects (``evidence``).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from methods.common import linalg

EVIDENCE_KINDS = ("laplace", "bic", "heldout")
_LOG_2PI = math.log(2 * math.pi)


class Laplace(NamedTuple):
  """Laplace approximation at a mode.

  Attributes:
    log_evidence: scalar ``log Z`` estimate.
    log_joint: scalar log joint density at the mode.
    neg_hessian: ``[D, D]`` ``-grad^2 log joint``, masked: inactive rows and
      columns replaced by the identity (so its inverse is the posterior
      covariance on the active block and 1 elsewhere).
    log_det: scalar ``log |H|`` over the active block.
    dim: scalar number of active coordinates ``d``.
    positive_definite: whether ``H`` was positive definite (a proper mode).
  """

  log_evidence: jax.Array
  log_joint: jax.Array
  neg_hessian: jax.Array
  log_det: jax.Array
  dim: jax.Array
  positive_definite: jax.Array


def masked_matrix(h: jax.Array, mask: jax.Array) -> jax.Array:
  """``M h M + (I - M)`` for a ``[D]`` 0/1 mask (inactive block -> identity)."""
  m = mask[:, None] * mask[None, :]
  return h * m + jnp.diag(1.0 - mask)


def laplace(
    log_joint: Callable[[jax.Array], jax.Array],
    phi: jax.Array,
    mask: Optional[jax.Array] = None,
    *,
    eig_floor: float = 1e-6,
) -> Laplace:
  """Laplace approximation of ``log integral exp(log_joint(phi)) dphi``.

  Args:
    log_joint: ``phi [D] -> log p(x, phi)`` (normalised prior included).
    phi: ``[D]`` the mode (MAP).
    mask: ``[D]`` 1 for the coordinates that are integrated, 0 for unused
      ones (which must not affect ``log_joint``); default all.
    eig_floor: eigenvalues of ``H`` are taken in absolute value and floored
      here (a non-converged mode is flagged by ``positive_definite``).

  Returns:
    A :class:`Laplace`.
  """
  d_total = phi.shape[0]
  mask = jnp.ones((d_total,), phi.dtype) if mask is None else mask.astype(phi.dtype)
  h = masked_matrix(-jax.hessian(log_joint)(phi), mask)
  return laplace_from_hessian(log_joint(phi), h, mask, eig_floor=eig_floor)


def laplace_from_hessian(log_joint_value: jax.Array, neg_hessian: jax.Array, mask: jax.Array, *,
                         eig_floor: float = 1e-6) -> Laplace:
  """:func:`laplace` from an already computed masked ``-grad^2 log joint [D, D]``."""
  h = 0.5 * (neg_hessian + neg_hessian.T)
  eig = linalg.eigvalsh(h)
  log_det = jnp.sum(jnp.log(jnp.maximum(jnp.abs(eig), eig_floor)))
  dim = jnp.sum(mask)
  log_z = log_joint_value + 0.5 * dim * _LOG_2PI - 0.5 * log_det
  ok = jnp.all(eig > 0) & jnp.isfinite(log_z)
  return Laplace(jnp.where(jnp.isfinite(log_z), log_z, -jnp.inf), log_joint_value, h, log_det, dim, ok)


def bic(log_likelihood: jax.Array, dim: jax.Array, num_data: int) -> jax.Array:
  """``log p(x | phi_ML) - (d/2) log n`` (``-inf`` if not finite)."""
  out = log_likelihood - 0.5 * dim * math.log(num_data)
  return jnp.where(jnp.isfinite(out), out, -jnp.inf)


def gaussian_log_evidence(y: jax.Array, design: jax.Array, prior_mean: jax.Array,
                          prior_cov: jax.Array, noise_var: float) -> jax.Array:
  """Closed-form ``log N(y; A mu, A Sigma A^T + s^2 I)`` of a linear-Gaussian model."""
  mean = design @ prior_mean
  cov = design @ prior_cov @ design.T + noise_var * jnp.eye(y.shape[0], dtype=y.dtype)
  chol = jnp.linalg.cholesky(cov)
  r = jax.scipy.linalg.solve_triangular(chol, y - mean, lower=True)
  return -0.5 * jnp.sum(r * r) - jnp.sum(jnp.log(jnp.diag(chol))) - 0.5 * y.shape[0] * _LOG_2PI
