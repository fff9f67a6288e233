"""Simulated ODE systems with known truth: Lotka-Volterra, SIR, damped oscillator, toggle switch,
Michaelis-Menten uptake.

Each :class:`OdeSystem` carries its true right-hand side as a ``jnp``
function, the same equations as text in ModelSMC's expression language (so a
discovered structure can be compared with the truth), its true parameters,
initial state, observation grid and noise. :func:`simulate` solves the ODE
with fine fixed-step RK4 and adds observation noise:

* ``lognormal``: ``log y = log z + sigma * eps`` (positive states);
* ``gaussian``: ``y = z + sigma * eps``.

:data:`SYSTEMS` is the one table of simulated systems. Pure JAX, no
dependency on ``methods``.
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
    description: what the states mean (for LLM prompts and reports).
    library: ModelSMC's default candidate term bodies for this system (empty:
      the default library built from the state names).
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
  description: str = ""
  library: tuple[str, ...] = ()


def _lotka_volterra(x, p):
  prey, pred = x[0], x[1]
  return jnp.stack([p["alpha"] * prey - p["beta"] * prey * pred,
                    p["delta"] * prey * pred - p["gamma"] * pred])


def _sir(x, p):
  s, i = x[0], x[1]
  infection = p["beta"] * s * i
  return jnp.stack([-infection, infection - p["gamma"] * i, p["gamma"] * i])


def _toggle_switch(x, p):
  u, v = x[0], x[1]
  return jnp.stack([p["alpha"] / (p["K"] + v**2) - p["delta"] * u,
                    p["beta"] / (p["K"] + u**2) - p["delta"] * v])


def _monod_uptake(x, p):
  s, b = x[0], x[1]
  uptake = s * b / (p["K"] + s)
  return jnp.stack([-p["vmax"] * uptake, p["yield_vmax"] * uptake - p["death"] * b])


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
    description="Simulated predator-prey data: x prey, y predator, one row per time unit.",
)

# Units: hundreds of people (the 1978 school had N = 763: 761 susceptible, one infected, one recovered at
# t = 0); time in days. Every state starts positive, as log-normal observations need (a state at 0 has no
# log: its t = 0 observation would not follow the fitted model), and every state is observed: with S
# latent only the product beta * S(0) of dI/dt would be identified (the real influenza task keeps S latent).
SIR = OdeSystem(
    name="sir",
    states=("S", "I", "R"),
    equations=("-beta*S*I", "beta*S*I - gamma*I", "gamma*I"),
    params={"beta": 0.25, "gamma": 0.5},
    x0=(7.61, 0.01, 0.01),
    dt=1.0,
    num_points=15,
    observed=(0, 1, 2),
    noise="lognormal",
    noise_scale=0.15,
    rhs=_sir,
    description="Simulated epidemic in hundreds of people: S susceptible, I infected, R recovered; t in days.",
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
    description="Simulated oscillator: x position, v velocity.",
    library=("a*x", "a*v"),
)

# Two mutually repressing genes (Gardner, Cantor and Collins 2000, Nature 403:339): Hill repression with
# coefficient 2, terms outside the quadratic library; the library holds the true Hill bodies.
TOGGLE_SWITCH = OdeSystem(
    name="toggle_switch",
    states=("u", "v"),
    equations=("alpha/(K + v^2) - delta*u", "beta/(K + u^2) - delta*v"),
    params={"alpha": 3.0, "beta": 2.0, "K": 1.0, "delta": 0.8},
    x0=(0.3, 2.5),
    dt=0.5,
    num_points=20,
    observed=(0, 1),
    noise="lognormal",
    noise_scale=0.1,
    rhs=_toggle_switch,
    description="Simulated toggle switch: u and v concentrations of two mutually repressing proteins.",
    library=("a/(b + v^2)", "a/(b + u^2)", "a*u", "a*v", "a", "a*u*v"),
)

# Michaelis-Menten (Monod) uptake of a substrate S by a biomass B in a batch culture, with biomass death.
MONOD_UPTAKE = OdeSystem(
    name="monod_uptake",
    states=("S", "B"),
    equations=("-(vmax*S*B/(K + S))", "yield_vmax*S*B/(K + S) - death*B"),
    params={"vmax": 0.4, "K": 3.0, "yield_vmax": 0.2, "death": 0.04},
    x0=(10.0, 0.5),
    dt=1.0,
    num_points=20,
    observed=(0, 1),
    noise="lognormal",
    noise_scale=0.1,
    rhs=_monod_uptake,
    description="Simulated batch culture: S substrate, B biomass (Michaelis-Menten uptake, biomass death).",
    library=("a*S*B/(b + S)", "a*S", "a*B", "a*S*B", "a"),
)

# The one table of simulated systems: a new system is one entry here (the
# ModelSMC experiment runs it with task=sim and --config.sim.system=<name>).
SYSTEMS = {s.name: s for s in (LOTKA_VOLTERRA, SIR, DAMPED_OSCILLATOR, TOGGLE_SWITCH, MONOD_UPTAKE)}
NOISE_KINDS = ("lognormal", "gaussian")


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

  Overflow cannot happen silently inside a step: every stage's input state
  is clipped to ``[-bound, bound]``, every stage slope to ``[-bound / h,
  bound / h]`` (an infinite slope from an overflowing right-hand side
  becomes the largest allowed one) and the step's result to ``[-bound,
  bound]``. Inside the bound all clips are the identity, so solutions that
  stay bounded are unchanged. A NaN slope (a right-hand side outside its
  domain, e.g. ``log`` of a negative state) is not hidden: it propagates.

  Args:
    rhs: ``(x [S], t) -> dx/dt [S]``.
    x0: ``[S]`` state at ``t = 0``.
    num_points: number of output times (static).
    dt: output spacing; the step is ``h = dt / substeps``.
    substeps: RK4 steps per output interval (static).
    bound: the bound of every stage's state (``math.inf``: no bound).
  """
  h = dt / substeps
  slope_bound = bound / h

  def stage(x, t):
    return jnp.clip(rhs(jnp.clip(x, -bound, bound), t), -slope_bound, slope_bound)

  def rk4(x, t):
    k1 = stage(x, t)
    k2 = stage(x + 0.5 * h * k1, t + 0.5 * h)
    k3 = stage(x + 0.5 * h * k2, t + 0.5 * h)
    k4 = stage(x + h * k3, t + h)
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
