"""Problems from simulated systems: their data, their truth in library terms, systems from text.

The ``model_smc`` experiment builds its simulated tasks with these functions,
and so can a test or a notebook that needs a problem without the launcher::

  system = ode_systems.DAMPED_OSCILLATOR
  spec = problems.spec_for(system, init="fixed")
  data = problems.simulate(jax.random.key(0), system, spec, num_points=12)
  library = st.Library(system.states, st.default_bodies(system.states))
  truth = problems.truth_structure(problems.unit_coefficients(system)["equations"], library)

A system is any :class:`envs.ode_systems.OdeSystem` (the table
``envs.ode_systems.SYSTEMS``, or :func:`system_from_equations` for equations
given as text).
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envs import ode_systems
from methods.model_smc import expr as ex
from methods.model_smc import interpret
from methods.model_smc import structure as st
from methods.model_smc.model import Data
from methods.model_smc.model import ProblemSpec


def spec_for(system: ode_systems.OdeSystem, **settings) -> ProblemSpec:
  """The observation model of ``system``: its states, observed states, grid and noise kind, then ``settings``."""
  settings.setdefault("noise", system.noise)
  return ProblemSpec(states=tuple(system.states), observed=tuple(system.observed), dt=float(system.dt), **settings)


def simulate(key: jax.Array, system: ode_systems.OdeSystem, spec: ProblemSpec, *, num_points: Optional[int] = None,
             noise_scale: Optional[float] = None) -> Data:
  """One noisy dataset of ``system`` (``[T, O]`` observations) and the centres of its ``x0`` prior.

  Args:
    key: the observation noise's key (:func:`envs.ode_systems.simulate`).
    system: the system.
    spec: the observation model; with ``spec.init == "fixed"`` the initial
      states are the true ``x0``, otherwise the observed ones are centred on
      the first row and the latent ones on the true ``x0``.
    num_points: rows (default: the system's).
    noise_scale: observation noise sd (default: the system's).

  Returns:
    ``Data`` in float32.
  """
  y, _ = ode_systems.simulate(key, system, num_points=num_points, noise_scale=noise_scale)
  y = np.asarray(y, np.float64)
  x0 = np.asarray(system.x0, np.float64)
  if spec.init != "fixed":
    x0[list(system.observed)] = y[0]
  return Data(jnp.asarray(y, jnp.float32), jnp.asarray(x0, jnp.float32))


def unit_coefficients(system: ode_systems.OdeSystem) -> dict:
  """The true equations with a parameter (true value 1) on every parameter-free term.

  Library bodies carry a positive parameter each, so a term such as ``v`` is
  the body ``a*v`` with ``a = 1``.

  Returns:
    ``{"equations": {state: text}, "params": {name: value}}``.
  """
  eqs, params = {}, dict(system.params)
  for state, text in zip(system.states, system.equations):
    terms = []
    for sign, body in ex.split_terms(ex.parse(text, states=system.states, params=tuple(system.params))):
      if not ex.params_of(body):
        name = f"unit{len(params)}"
        params[name] = 1.0
        body = ex.BinOp("mul", ex.Sym("param", name), body)
      terms.append(("-" if sign < 0 else "+") + "(" + ex.to_text(body) + ")")
    eqs[state] = " ".join(terms) if terms else "0"
  return {"equations": eqs, "params": params}


def truth_structure(equations: dict, library: st.Library) -> Optional[st.Structure]:
  """The structure of ``equations`` (``{state: text}``) in ``library``'s terms; None if it needs other bodies."""
  scratch = st.Library(library.states, library.keys, limits=library.limits)
  m = st.from_equations(equations, scratch)
  if len(scratch) != len(library):
    return None
  return m


def system_from_equations(equations: Sequence[str], params: Sequence[str], *, x0: Sequence[float],
                          observed: Sequence[str], dt: float, num_points: int, noise: str,
                          noise_scale: float, description: str = "") -> ode_systems.OdeSystem:
  """A system from text: ``"x = rhs"`` per state and ``"name=value"`` parameters (safe parser and interpreter).

  Args:
    equations: one ``"state = right-hand side"`` per state
      (:func:`methods.model_smc.structure.parse_system`).
    params: the true parameters, as ``"name=value"``.
    x0: the initial states, one per equation.
    observed: the observed states (empty: all).
    dt, num_points: the observation grid.
    noise, noise_scale: the observation noise.
    description: what the system is (default: its equations).
  """
  states, trees, values = st.parse_system(equations, params)
  names = tuple(values)
  fns = [interpret.compile_expr(t, states=states, params=names) for t in trees]

  def rhs(x, p):
    theta = jnp.stack([jnp.asarray(p[n], x.dtype) for n in names]) if names else jnp.zeros((0,), x.dtype)
    return jnp.stack([jnp.asarray(f(x, theta, 0.0), x.dtype) for f in fns])

  obs = tuple(states.index(o) for o in observed) if observed else tuple(range(len(states)))
  return ode_systems.OdeSystem(
      name="equations", states=states, equations=tuple(ex.to_text(t) for t in trees), params=values,
      x0=tuple(x0), dt=dt, num_points=num_points, observed=obs, noise=noise, noise_scale=noise_scale, rhs=rhs,
      description=description or "Simulated from the equations: " + "; ".join(equations))
