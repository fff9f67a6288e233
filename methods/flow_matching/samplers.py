"""ODE samplers from noise (t = 0) to data (t = 1), coarse-to-fine sampling and its cost model.

Briq et al., "Exploring and Exploiting Stability in Latent Flow Matching"
(ICML 2026), Sec. 5: because a small and a large model trained on the same
data map the same noise to nearly the same sample, the small model can
integrate the coarse part ``t in [0, t_split)`` and the large one the rest.
With ``N`` uniform steps ``t_k = k / N``, step ``k`` uses the small model iff
``t_k < t_split``; ``t_split = 0`` is the large model's sampler exactly and
``t_split = 1`` the small one's. The cost model (paper's speedup formula):
``speedup = 1 / ((1 - t_s) + t_s C_small / C_large)``.

``velocity(x [B, ...], t [B]) -> [B, ...]`` is any velocity field (bind the
parameters and labels with a closure).
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp

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


def small_steps(t_split: float, num_steps: int) -> int:
  """Number of grid steps ``k`` with ``t_k = k / N < t_split`` (exact at the endpoints)."""
  if not 0.0 <= t_split <= 1.0:
    raise ValueError(f"t_split={t_split} is outside [0, 1]")
  return min(num_steps, math.ceil(round(t_split * num_steps, 9)))


def coarse_to_fine(small: Velocity, large: Velocity, x0: jax.Array, *, t_split: float, num_steps: int,
                   solver: str = "euler") -> jax.Array:
  """Small model for ``t < t_split``, large for ``t >= t_split`` on one uniform grid (paper Sec. 5)."""
  n_small = small_steps(t_split, num_steps)
  x = integrate(small, x0, start=0, stop=n_small, num_steps=num_steps, solver=solver)
  return integrate(large, x, start=n_small, stop=num_steps, num_steps=num_steps, solver=solver)


def cost_model(t_split: float, cost_small: float, cost_large: float, num_steps: int | None = None) -> dict:
  """Speedup of coarse-to-fine over the large model alone.

  Returns ``{"speedup_formula": 1 / ((1 - t_s) + t_s C_s / C_l)}`` and, with
  ``num_steps``, ``"speedup_grid"`` (the same with the grid's step counts) and
  ``"small_steps"``. ``cost_*`` are per-forward costs (FLOPs or seconds).
  """
  r = cost_small / cost_large
  out = {"speedup_formula": 1.0 / ((1.0 - t_split) + t_split * r)}
  if num_steps is not None:
    n = small_steps(t_split, num_steps)
    out["small_steps"] = n
    out["speedup_grid"] = num_steps / ((num_steps - n) + n * r)
  return out


def sample_adaptive(velocity: Velocity, x0: jax.Array, *, rtol: float = 1e-4, atol: float = 1e-4,
                    max_steps: int = 4096) -> tuple[jax.Array, jax.Array]:
  """``(x1, accepted steps)`` with diffrax's adaptive Dopri5 (Kidger, 2021); needs ``diffrax``."""
  import diffrax  # pylint: disable=g-import-not-at-top

  term = diffrax.ODETerm(lambda t, x, _: velocity(x, jnp.full((x.shape[0],), t)))
  sol = diffrax.diffeqsolve(
      term, diffrax.Dopri5(), t0=0.0, t1=1.0, dt0=0.05, y0=x0, max_steps=max_steps,
      stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol))
  return sol.ys[-1], sol.stats["num_accepted_steps"]
