"""PySINDy baseline, scored with the same predictive metrics as ModelSMC.

``ps.SINDy(optimizer=ps.STLSQ(threshold), feature_library=ps.PolynomialLibrary(degree))``
is fitted on the training rows (finite-difference derivatives, every state
observed). Its ODE is integrated from the first observation over all rows
(SciPy LSODA; a solution that leaves ``[-bound, bound]`` or fails is marked
non-finite from there on). SINDy gives a point estimate, so its predictive
is the observation model of :class:`methods.model_smc.model.ProblemSpec`
around the trajectory with the noise scale estimated from the training
residuals (maximum likelihood; an exact fit gets a small positive floor, see
:func:`_sigma`): held-out density and interval coverage then come from the
same functions as for ModelSMC.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple, Sequence

import numpy as np
from scipy import integrate


class SindyFit(NamedTuple):
  """A fitted SINDy model and its forecast.

  Attributes:
    equations: one text per state (PySINDy's notation).
    z: ``[T, S]`` integrated trajectory over all rows (NaN after a failure).
    sigma: ``[O]`` noise scales fitted on the training rows.
    num_terms: non-zero coefficients.
  """

  equations: list[str]
  z: np.ndarray
  sigma: np.ndarray
  num_terms: int


def fit(y: np.ndarray, *, dt: float, num_fit: int, num_points: int, states: Sequence[str],
        threshold: float = 0.01, degree: int = 2, noise: str = "lognormal", noise_offset: float = 0.0,
        log_floor: float = 1e-6, bound: float = 1e6) -> SindyFit:
  """Fits SINDy on rows ``< num_fit`` of ``y [T, S]`` and forecasts ``num_points`` rows.

  Leading rows with a missing value (NaN) are skipped: the model starts at
  the first complete row. Later missing training values are filled by
  linear interpolation in time for SINDy's regression only (SINDy needs
  every value; its noise scale is fitted on the observed values). ``states``
  names the columns (SINDy sees only these variables, e.g. the observed ones
  of a partly observed system).
  """
  import pysindy as ps  # pylint: disable=g-import-not-at-top

  y = np.asarray(y, np.float64)
  complete = np.all(np.isfinite(y), axis=1)
  r0 = int(np.argmax(complete))
  if not complete[r0] or num_fit - r0 < 3 or np.sum(complete[r0:num_fit]) < 3:
    raise ValueError("SINDy needs at least 3 complete training rows")
  t_fit = np.arange(num_fit - r0) * dt
  y_fit = y[r0:num_fit].copy()
  for o in range(y.shape[1]):
    seen = np.isfinite(y_fit[:, o])
    y_fit[~seen, o] = np.interp(t_fit[~seen], t_fit[seen], y_fit[seen, o])
  model = ps.SINDy(optimizer=ps.STLSQ(threshold=threshold), feature_library=ps.PolynomialLibrary(degree=degree))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model.fit(y_fit, t=t_fit, feature_names=list(states))
  coef = np.asarray(model.coefficients())
  t_all = np.arange(num_points - r0) * dt

  def rhs(_, x):
    return model.predict(x[None, :])[0]

  def escape(_, x):
    return bound - np.max(np.abs(x))
  escape.terminal = True

  z = np.full((num_points, y.shape[1]), np.nan)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
      sol = integrate.solve_ivp(rhs, (0.0, t_all[-1]), y[r0], t_eval=t_all, method="LSODA",
                                rtol=1e-6, atol=1e-8, events=escape)
      z[r0:r0 + sol.y.shape[1]] = sol.y.T
    except (ValueError, RuntimeError, OverflowError, FloatingPointError):
      pass
  z[~np.isfinite(z)] = np.nan
  seen = np.abs(y[r0:num_fit][np.isfinite(y[r0:num_fit])])
  scale = float(seen.max()) if seen.size and seen.max() > 0 else 1.0
  sigma = np.array([_sigma(z[r0:num_fit, o], y[r0:num_fit, o], noise, noise_offset, log_floor, scale)
                    for o in range(y.shape[1])])
  return SindyFit(model.equations(precision=4), z, sigma, int(np.count_nonzero(coef)))


SIGMA_FLOOR = 1e-6  # the noise sd of an exact fit, relative to the data's scale


def _sigma(z, y, noise, offset, floor, scale) -> float:
  """Maximum-likelihood noise sd of the residuals of ``y`` around ``z`` (NaN: no residual).

  An exact fit (every residual 0, e.g. a column of zeros) would give sd 0 and
  a held-out density of ``-inf`` or NaN; its sd is :data:`SIGMA_FLOOR` times
  the data's scale instead (``scale``, the largest absolute training value of
  any column, for Gaussian noise; 1 on the log scale of lognormal noise), so
  it gets a finite, very high density. Any residual that is not 0 gives the
  plain root mean square.
  """
  if noise == "lognormal":
    r = np.log(y + offset) - np.log(np.maximum(z + offset, floor))
    scale = 1.0
  else:
    r = y - z
  r = r[np.isfinite(r)]
  if not r.size:
    return math.nan
  rms = float(np.sqrt(np.mean(r * r)))
  return rms if rms > 0 else SIGMA_FLOOR * scale


def log_density(fit_: SindyFit, y: np.ndarray, lo: int, hi: int, *, noise: str, noise_offset: float = 0.0,
                log_floor: float = 1e-6) -> float:
  """``log p(y[lo:hi] | SINDy)`` under the fitted observation model (``-inf`` if undefined)."""
  z, yy = fit_.z[lo:hi], np.asarray(y[lo:hi], np.float64)
  seen = np.isfinite(yy)
  yy = np.where(seen, yy, 1.0)
  s = fit_.sigma[None, :]
  if noise == "lognormal":
    ly = np.log(yy + noise_offset)
    r = (ly - np.log(np.maximum(z + noise_offset, log_floor))) / s
    dens = -0.5 * r * r - np.log(s) - 0.5 * math.log(2 * math.pi) - ly
  else:
    r = (yy - z) / s
    dens = -0.5 * r * r - np.log(s) - 0.5 * math.log(2 * math.pi)
  total = float(np.sum(np.where(seen, dens, 0.0)))
  return total if math.isfinite(total) else -math.inf


def predictive_samples(key_seed: int, fit_: SindyFit, num_samples: int, *, noise: str,
                       noise_offset: float = 0.0, log_floor: float = 1e-6) -> np.ndarray:
  """``[n, T, S]`` draws of the observation model around SINDy's trajectory."""
  rng = np.random.default_rng(key_seed)
  eps = rng.standard_normal((num_samples,) + fit_.z.shape)
  s = fit_.sigma[None, None, :]
  if noise == "lognormal":
    mu = np.log(np.maximum(fit_.z + noise_offset, log_floor))
    return np.exp(mu[None] + s * eps) - noise_offset
  return fit_.z[None] + s * eps
