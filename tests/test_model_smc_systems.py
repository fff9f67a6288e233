"""Simulated ODE systems with known truth (envs.ode_systems)."""

import jax
import numpy as np
import pytest

from envs import ode_systems
from methods.model_smc import expr as ex
from methods.model_smc import interpret
from methods.model_smc.model import ProblemSpec


@pytest.mark.parametrize("name", sorted(ode_systems.SYSTEMS))
def test_truth_text_matches_the_simulator(name):
  system = ode_systems.SYSTEMS[name]
  z = np.asarray(ode_systems.solve(system))
  assert z.shape == (system.num_points, len(system.states)) and np.all(np.isfinite(z))
  names = tuple(system.params)
  theta = np.array([system.params[p] for p in names])
  for s, text in enumerate(system.equations):
    fn = interpret.compile_expr(ex.parse(text, states=system.states, params=names), states=system.states,
                                params=names, xp=np)
    for x in z[::5]:
      np.testing.assert_allclose(fn(x.astype(np.float64), theta, 0.0),
                                 float(system.rhs(x, system.params)[s]), rtol=1e-5, atol=1e-6)


def test_sir_conserves_its_population_and_noise_is_as_declared():
  z = np.asarray(ode_systems.solve(ode_systems.SIR))
  np.testing.assert_allclose(z.sum(1), z[0].sum(), rtol=1e-5)
  y, zz = ode_systems.simulate(jax.random.key(0), ode_systems.LOTKA_VOLTERRA, num_points=200, noise_scale=0.25)
  r = np.log(np.asarray(y)) - np.log(np.asarray(zz))
  assert abs(r.std() - 0.25) < 4 * 0.25 / np.sqrt(2 * r.size)


@pytest.mark.parametrize("name", sorted(ode_systems.SYSTEMS))
def test_lognormal_systems_stay_where_the_fitted_model_has_a_log(name):
  """Log-normal observations need every observed state, from t = 0 on, well above the model's log floor."""
  system = ode_systems.SYSTEMS[name]
  if system.noise != "lognormal":
    return
  z = np.asarray(ode_systems.solve(system))[:, list(system.observed)]
  assert np.all(np.asarray(system.x0) > 0), system.x0
  assert np.all(z > 1e3 * ProblemSpec().log_floor), z.min(axis=0)
