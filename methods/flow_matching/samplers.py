"""ODE samplers from noise (t = 0) to data (t = 1), coarse-to-fine sampling and its cost model.

Briq et al., "Exploring and Exploiting Stability in Latent Flow Matching"
(ICML 2026), Sec. 5: because a small and a large model trained on the same
data map the same noise to nearly the same sample, the small model can
integrate the coarse part ``t in [0, t_split)`` and the large one the rest.
With ``N`` uniform steps ``t_k = k / N``, step ``k`` uses the small model iff
``t_k < t_split``; ``t_split = 0`` is the large model's sampler exactly and
``t_split = 1`` the small one's. The cost model (paper's speedup formula):
``speedup = 1 / ((1 - t_s) + t_s C_small / C_large)``.
:func:`coarse_to_fine` is the one coarse-to-fine sampler: ``t_split`` may be
traced, so one compiled program serves every split.

``velocity(x [B, ...], t [B]) -> [B, ...]`` is any velocity field (bind the
parameters and labels with a closure). :func:`solve` and
:func:`coarse_to_fine_solve` run the solver a :class:`SamplerConfig` names
(``euler`` | ``midpoint`` | ``heun`` on the uniform grid, ``dopri5`` adaptive)
and return the number of velocity evaluations.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from methods.flow_matching.config import SOLVERS, SamplerConfig

Velocity = Callable[[jax.Array, jax.Array], jax.Array]

# Velocity evaluations per step.
FORWARDS_PER_STEP = {"euler": 1, "midpoint": 2, "heun": 2}


def _step(velocity: Velocity, x, t, h, solver: str):
  tb = jnp.full((x.shape[0],), t)
  if solver == "euler":
    return x + h * velocity(x, tb)
  if solver == "midpoint":
    k1 = velocity(x, tb)
    return x + h * velocity(x + 0.5 * h * k1, tb + 0.5 * h)
  if solver == "heun":
    k1 = velocity(x, tb)
    k2 = velocity(x + h * k1, tb + h)
    return x + 0.5 * h * (k1 + k2)
  raise ValueError(f"unknown solver {solver!r}; allowed: {sorted(FORWARDS_PER_STEP)}")


def integrate(velocity: Velocity, x: jax.Array, *, start: int, stop: int, num_steps: int,
              solver: str = "euler") -> jax.Array:
  """Steps ``start .. stop - 1`` of the ``num_steps``-step uniform grid on [0, 1] (``t_k = k / num_steps``).

  Integrating ``[0, a)`` then ``[a, N)`` is bit-identical to ``[0, N)``: the
  times come from the same grid. ``start`` / ``stop`` may be traced (one
  compilation serves every split).
  """
  h = 1.0 / num_steps

  def body(k, x):
    return _step(velocity, x, k.astype(jnp.float32) / num_steps, h, solver)

  if isinstance(start, int) and isinstance(stop, int) and stop <= start:
    return x  # static empty range (traced bounds give an empty loop)
  return jax.lax.fori_loop(start, stop, lambda k, x: body(jnp.asarray(k), x), x)


def sample(velocity: Velocity, x0: jax.Array, *, num_steps: int, solver: str = "euler") -> jax.Array:
  """``x1`` from ``x0 [B, ...]`` with ``num_steps`` fixed steps of ``solver``."""
  return integrate(velocity, x0, start=0, stop=num_steps, num_steps=num_steps, solver=solver)


# t_split is resolved on a grid of 1/SPLIT_RESOLUTION of a step: float32 rounding of t_split * N
# (0.7 * 60 = 42.0000017 in float32) must not add a step.
SPLIT_RESOLUTION = 1000


def small_steps(t_split: float, num_steps: int) -> int:
  """Number of grid steps ``k`` with ``t_k = k / N < t_split`` (exact at the endpoints; static ``t_split``).

  Uses the rounding of :func:`small_steps_traced` (``t_split N`` to ``1 / SPLIT_RESOLUTION`` of a step).
  """
  if not 0.0 <= t_split <= 1.0:
    raise ValueError(f"t_split={t_split} is outside [0, 1]")
  m = round(float(t_split) * num_steps * SPLIT_RESOLUTION)
  return min(num_steps, -(-m // SPLIT_RESOLUTION))


def small_steps_traced(t_split: jax.Array, num_steps: int) -> jax.Array:
  """``[]`` int32: :func:`small_steps` of a traced ``t_split`` (``ceil(t_split N)``, clipped to ``[0, N]``).

  ``t_split N`` is rounded to ``1 / SPLIT_RESOLUTION`` of a step first, so a
  split on the grid (``0.7`` with ``N = 60``) counts exactly its steps.
  Values outside ``[0, 1]`` are clipped (a traced value cannot raise).
  """
  m = jnp.round(jnp.asarray(t_split, jnp.float32) * (num_steps * SPLIT_RESOLUTION)).astype(jnp.int32)
  return jnp.clip((m + SPLIT_RESOLUTION - 1) // SPLIT_RESOLUTION, 0, num_steps)


def coarse_to_fine(small: Velocity, large: Velocity, x0: jax.Array, *, t_split: float | jax.Array, num_steps: int,
                   solver: str = "euler") -> jax.Array:
  """Small model for ``t < t_split``, large for ``t >= t_split`` on one uniform grid (paper Sec. 5).

  The one coarse-to-fine sampler of the package. ``t_split`` may be a Python
  float or a traced ``[]`` array: jitted with ``t_split`` as an argument, one
  compilation serves every split. ``t_split = 0`` runs only the large model
  (bit-identical to :func:`sample` with ``large``), ``t_split = 1`` only the
  small one. ``num_steps`` and ``solver`` are static.

  Args:
    small, large: velocity fields ``(x [B, ...], t [B]) -> [B, ...]``.
    x0: ``[B, ...]`` noise at ``t = 0``.
    t_split: the switch time in ``[0, 1]``.
    num_steps: uniform steps ``N`` on ``[0, 1]``.
    solver: ``euler`` | ``midpoint`` | ``heun``.

  Returns:
    ``x1 [B, ...]``.
  """
  if solver not in FORWARDS_PER_STEP:
    raise ValueError(f"unknown solver {solver!r}; allowed: {sorted(FORWARDS_PER_STEP)}")
  if isinstance(t_split, (int, float)) and not 0.0 <= t_split <= 1.0:
    raise ValueError(f"t_split={t_split} is outside [0, 1]")
  n_small = small_steps_traced(t_split, num_steps)
  x = integrate(small, x0, start=0, stop=n_small, num_steps=num_steps, solver=solver)
  return integrate(large, x, start=n_small, stop=num_steps, num_steps=num_steps, solver=solver)


# Dopri5 evaluates the field 6 times per attempted step (7 stages, first-same-as-last) plus once at the start.
DOPRI5_FORWARDS_PER_STEP = 6


def sample_adaptive(velocity: Velocity, x0: jax.Array, *, t0: float = 0.0, t1: float = 1.0, rtol: float = 1e-4,
                    atol: float = 1e-4, max_steps: int = 4096) -> tuple[jax.Array, jax.Array]:
  """``(x(t1), nfe)`` from ``x(t0) = x0`` with diffrax's adaptive Dopri5 (Kidger, 2021); needs ``diffrax``.

  The batch ``x0 [B, ...]`` is one ODE system (one step-size sequence, error
  norm over every element). ``nfe`` (``[]`` int32) counts velocity
  evaluations of the whole batch: ``1 + 6 x`` attempted steps (accepted and
  rejected). ``t0 == t1`` (static) returns ``x0`` with ``nfe = 0``.
  """
  import diffrax  # pylint: disable=g-import-not-at-top

  if float(t0) == float(t1):
    return x0, jnp.zeros((), jnp.int32)
  term = diffrax.ODETerm(lambda t, x, _: velocity(x, jnp.full((x.shape[0],), t, x.dtype)))
  sol = diffrax.diffeqsolve(
      term, diffrax.Dopri5(), t0=t0, t1=t1, dt0=0.05 * (t1 - t0), y0=x0, max_steps=max_steps,
      stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol))
  nfe = 1 + DOPRI5_FORWARDS_PER_STEP * jnp.asarray(sol.stats["num_steps"], jnp.int32)
  return sol.ys[-1], nfe


def solve(velocity: Velocity, x0: jax.Array, cfg: SamplerConfig) -> tuple[jax.Array, jax.Array]:
  """``(x1, nfe)``: the sampler ``cfg.solver`` from ``t = 0`` to ``t = 1`` (``nfe`` = velocity evaluations)."""
  return coarse_to_fine_solve(velocity, velocity, x0, cfg, t_split=0.0)


def coarse_to_fine_solve(small: Velocity, large: Velocity, x0: jax.Array, cfg: SamplerConfig, *,
                         t_split: float, split_nfe: bool = False):
  """``(x1, nfe)``: coarse-to-fine with any solver of ``cfg``.

  ``t_split`` may be traced for the fixed-step solvers; ``dopri5`` needs a
  static float (its segment ends are static).

  With ``split_nfe``, ``nfe`` is ``(small's, large's)`` velocity evaluations.

  Fixed-step solvers use :func:`coarse_to_fine` on ``cfg.steps`` steps; the
  adaptive one integrates ``[0, t_split]`` with ``small`` and ``[t_split, 1]``
  with ``large`` (each segment adaptive), so ``t_split = 0`` / ``1`` are the
  large / small model alone exactly.
  """
  if cfg.solver in FORWARDS_PER_STEP:
    x = coarse_to_fine(small, large, x0, t_split=t_split, num_steps=cfg.steps, solver=cfg.solver)
    k, per = small_steps_traced(t_split, cfg.steps), FORWARDS_PER_STEP[cfg.solver]
    nfe = (k * per, (cfg.steps - k) * per)
  elif cfg.solver == "dopri5":
    kw = dict(rtol=cfg.rtol, atol=cfg.atol, max_steps=cfg.max_steps)
    x, nfe_small = sample_adaptive(small, x0, t0=0.0, t1=t_split, **kw)
    x, nfe_large = sample_adaptive(large, x, t0=t_split, t1=1.0, **kw)
    nfe = (nfe_small, nfe_large)
  else:
    raise ValueError(f"unknown solver {cfg.solver!r}; allowed: {list(SOLVERS)}")
  return x, (nfe if split_nfe else nfe[0] + nfe[1])
