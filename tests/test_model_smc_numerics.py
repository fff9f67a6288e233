"""ModelSMC numerics: bounded RK4 stages, the initial states' scale per noise model, PySINDy's noise sd.

The experiment-level numerics (a new simulated system with a negative
initial state, failed fits, indefinite Hessians) are in
``tests/test_model_smc_scoring.py``.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from envs import ode_systems
from methods.common import hparams
from methods.model_smc import model as mdl
from methods.model_smc import pooled
from methods.model_smc import sindy


def test_lognormal_noise_keeps_the_log_scale():
  spec = mdl.ProblemSpec(states=("x",), observed=(0,), noise="lognormal")
  assert spec.init_scale == "log"
  assert mdl.ProblemSpec(states=("x",), observed=(0,), noise="gaussian").init_scale == "real"
  with pytest.raises(hparams.HparamError, match="init_space"):
    mdl.ProblemSpec(states=("x",), observed=(0,), noise="lognormal", init_space="real")


def test_rk4_stages_stay_finite_where_clipping_after_the_step_gave_nan():
  # Van der Pol with an x^2*y term: from (5, 5) the state overflows inside a step.
  def rhs(x, t):
    del t
    return jnp.stack([x[1], (1.0 - x[0] ** 2) * x[1] - x[0]])

  x0 = jnp.array([5.0, 5.0])
  z = ode_systems.rk4_solve(rhs, x0, num_points=5, dt=0.5, substeps=2, bound=1e4)
  assert np.all(np.isfinite(np.asarray(z)))
  h, x = 0.25, x0  # the previous scheme: clip only after a full step
  for _ in range(8):
    k1 = rhs(x, 0.0)
    k2 = rhs(x + 0.5 * h * k1, 0.0)
    k3 = rhs(x + 0.5 * h * k2, 0.0)
    k4 = rhs(x + h * k3, 0.0)
    x = jnp.clip(x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), -1e4, 1e4)
  assert not np.any(np.isfinite(np.asarray(x)))
  # Inside the bound the solution is the plain RK4 one.
  ok = ode_systems.rk4_solve(lambda x, t: -x, jnp.array([1.0]), num_points=3, dt=1.0, substeps=10, bound=1e4)
  np.testing.assert_allclose(np.asarray(ok)[:, 0], np.exp(-np.arange(3.0)), rtol=1e-5)


def test_an_exact_sindy_fit_has_a_finite_heldout_density():
  t = np.arange(20.0)
  y = np.stack([20 + 10 * np.sin(t / 3), np.zeros(20)], axis=1)  # an all-zero column: SINDy fits it exactly
  kw = dict(dt=1.0, num_fit=15, num_points=20, states=("prey", "z"), noise="gaussian")
  fit = sindy.fit(y, **kw)
  assert fit.sigma[1] == sindy.SIGMA_FLOOR * y[:15].max()  # the floor, relative to the training data's scale
  lpd = sindy.log_density(fit, y, 15, 20, noise="gaussian")
  assert np.isfinite(lpd) and lpd > 0
  # A residual that is not 0 keeps the plain root mean square.
  r = np.array([0.1, -0.2, 0.3])
  assert sindy._sigma(np.zeros(3), r, "gaussian", 0.0, 1e-6, 30.0) == float(np.sqrt(np.mean(r * r)))
  assert sindy._sigma(np.ones(3), np.ones(3), "lognormal", 0.0, 1e-6, 30.0) == sindy.SIGMA_FLOOR


def test_total_variation_does_not_depend_on_the_order_of_the_keys():
  """Its sum runs over a set of structure keys, whose order changes with Python's hash seed between processes."""
  rng = np.random.default_rng(0)
  keys = [f"m{i}" for i in range(200)]
  p = dict(zip(keys, rng.dirichlet(np.ones(200)) * 10.0 ** rng.integers(-8, 1, 200)))
  q = dict(zip(keys[50:], rng.dirichlet(np.ones(150))))
  values = {pooled.total_variation(dict(sorted(p.items(), key=lambda kv: rng.random())),
                                   dict(sorted(q.items(), key=lambda kv: rng.random()))) for _ in range(20)}
  assert len(values) == 1
