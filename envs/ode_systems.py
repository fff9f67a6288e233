"""Simulated ODE systems with known truth: Lotka-Volterra, SIR, damped oscillator.

Each :class:`OdeSystem` carries its true right-hand side as a ``jnp``
function, the same equations as text in ModelSMC's expression language (so a
discovered structure can be compared with the truth), its true parameters,
initial state, observation grid and noise. :func:`simulate` solves the ODE
with fine fixed-step RK4 and adds observation noise:

* ``lognormal``: ``log y = log z + sigma * eps`` (positive states);
* ``gaussian``: ``y = z + sigma * eps``.

Pure JAX, no dependency on ``methods``.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp


class OdeSystem(NamedTuple):
  """A simulated system with known truth.

  Attributes:
    name: registry key.
    states: state names.
    equations: the true right-hand sides as text, one per state; parameter
      names are the keys of ``params``.
    params: true parameter values.
    x0: initial state at ``t = 0``.
    dt: spacing of the observations.
    num_points: number of observations (``t = 0, dt, ...``).
    observed: indices of the observed states.
    noise: ``lognormal`` or ``gaussian``.
    noise_scale: ``sigma``.
    rhs: ``(x [S], params dict) -> dx/dt [S]``.
  """

  name: str
  states: tuple[str, ...]
  equations: tuple[str, ...]
  params: dict
  x0: tuple[float, ...]
  dt: float
  num_points: int
  observed: tuple[int, ...]
  noise: str
  noise_scale: float
  rhs: Callable


def _lotka_volterra(x, p):
  prey, pred = x[0], x[1]
  return jnp.stack([p["alpha"] * prey - p["beta"] * prey * pred,
                    p["delta"] * prey * pred - p["gamma"] * pred])


def _sir(x, p):
  s, i = x[0], x[1]
  infection = p["beta"] * s * i
  return jnp.stack([-infection, infection - p["gamma"] * i, p["gamma"] * i])


def _damped_oscillator(x, p):
  pos, vel = x[0], x[1]
  return jnp.stack([vel, -p["k"] * pos - p["c"] * vel])


LOTKA_VOLTERRA = OdeSystem(
    name="lotka_volterra",
    states=("x", "y"),
    equations=("alpha*x - beta*x*y", "delta*x*y - gamma*y"),
    # The Stan case study's posterior means for the Hudson's Bay pelts.
    params={"alpha": 0.55, "beta": 0.028, "gamma": 0.8, "delta": 0.024},
    x0=(30.0, 4.0),
    dt=1.0,
    num_points=21,
    observed=(0, 1),
    noise="lognormal",
    noise_scale=0.25,
    rhs=_lotka_volterra,
)

# Units: hundreds of people (the 1978 school had N = 763); time in days.
SIR = OdeSystem(
    name="sir",
    states=("S", "I", "R"),
    equations=("-beta*S*I", "beta*S*I - gamma*I", "gamma*I"),
    params={"beta": 0.25, "gamma": 0.5},
    x0=(7.62, 0.01, 0.0),
    dt=1.0,
    num_points=15,
    observed=(1, 2),
    noise="lognormal",
    noise_scale=0.15,
    rhs=_sir,
)

DAMPED_OSCILLATOR = OdeSystem(
    name="damped_oscillator",
    states=("x", "v"),
    equations=("v", "-k*x - c*v"),
    params={"k": 1.0, "c": 0.2},
    x0=(1.0, 0.0),
    dt=0.5,
    num_points=20,
    observed=(0, 1),
    noise="gaussian",
    noise_scale=0.1,
    rhs=_damped_oscillator,
)

SYSTEMS = {s.name: s for s in (LOTKA_VOLTERRA, SIR, DAMPED_OSCILLATOR)}


def solve(system: OdeSystem, params: dict | None = None, *, num_points: int | None = None,
          substeps: int = 50) -> jax.Array:
  """``[T, S]`` noise-free states at ``t = 0, dt, ...`` (RK4, ``substeps`` per interval)."""
  params = system.params if params is None else params
  n = system.num_points if num_points is None else num_points
  x0 = jnp.asarray(system.x0, jnp.float32)
  return rk4_solve(lambda x, t: system.rhs(x, params), x0, num_points=n, dt=system.dt, substeps=substeps,
                   bound=math.inf)


def rk4_solve(rhs: Callable, x0: jax.Array, *, num_points: int, dt: float, substeps: int,
              bound: float) -> jax.Array:
  """``[num_points, S]`` states at ``t = 0, dt, ...`` by fixed-step RK4.

  Args:
    rhs: ``(x [S], t) -> dx/dt [S]``.
    x0: ``[S]`` state at ``t = 0``.
    num_points: number of output times (static).
    dt: output spacing; the step is ``h = dt / substeps``.
    substeps: RK4 steps per output interval (static).
    bound: states are clipped to ``[-bound, bound]`` after each step.
  """
  h = dt / substeps

  def rk4(x, t):
    k1 = rhs(x, t)
    k2 = rhs(x + 0.5 * h * k1, t + 0.5 * h)
    k3 = rhs(x + 0.5 * h * k2, t + 0.5 * h)
    k4 = rhs(x + h * k3, t + h)
    return jnp.clip(x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4), -bound, bound)

  def interval(x, i):
    def sub(j, x):
      return rk4(x, (i * substeps + j) * h)
    x = jax.lax.fori_loop(0, substeps, sub, x)
    return x, x

  _, xs = jax.lax.scan(interval, x0, jnp.arange(num_points - 1))
  return jnp.concatenate([x0[None], xs], axis=0)


def simulate(key: jax.Array, system: OdeSystem, *, num_points: int | None = None,
             noise_scale: float | None = None) -> tuple[jax.Array, jax.Array]:
  """Noisy observations of ``system``.

  Args:
    key: PRNG key of the observation noise.
    system: the system.
    num_points: override of ``system.num_points``.
    noise_scale: override of ``system.noise_scale``.

  Returns:
    ``(y [T, O], z [T, S])``: observations of the observed states and the
    noise-free solution.
  """
  z = solve(system, num_points=num_points)
  sigma = system.noise_scale if noise_scale is None else noise_scale
  obs = z[:, jnp.asarray(system.observed)]
  eps = jax.random.normal(key, obs.shape, obs.dtype)
  if system.noise == "lognormal":
    y = jnp.exp(jnp.log(jnp.maximum(obs, 1e-12)) + sigma * eps)
  else:
    y = obs + sigma * eps
  return y, z
