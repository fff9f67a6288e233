"""ModelSMC: batched candidate fits against SciPy, and the pelts run against PySINDy.

Rows:
1. Candidate-model fits per second on the pelts: this project's jitted fit
   (BFGS restarts run to a convergence test, Newton polishing and the
   Laplace evidence, vmapped over a batch of different structures and
   sharded over the CPU devices; the fit whose optima the fit-quality panel
   ``launch.experiments.model_smc.fit_panel`` checks against SciPy) against
   sequential ``scipy.optimize.minimize`` (L-BFGS-B, finite-difference
   gradients, as many starts as the project's restarts, drawn the same way)
   of the same objective written in NumPy (same RK4, likelihood and priors),
   followed by a finite-difference Hessian for the same Laplace evidence.
   Compile time is reported and excluded. The notes compare the two sides'
   log evidences on the structures both fitted (positive: the project's fit
   reached a higher evidence).
2. The pelts held-out block: ModelSMC's posterior-mixture predictive density
   against PySINDy's (same rows, same observation model), as the ratio
   ``exp(lpd_ModelSMC - lpd_SINDy)``.
3. End-to-end wall time of that ModelSMC run (sampling, scoring, figures)
   against PySINDy's fit and forecast.
4. End-to-end wall time of a run on a system the project has never seen, the
   Van der Pol limit-cycle oscillator in polynomial form (``task=sim`` from
   ``sim.equations``, :func:`limit_cycle_config`), against PySINDy on the
   same rows; the notes give the answer (the true structure's rank by
   particle mass and the mixing check's total variation) and the compiles.
5. That run's per-phase breakdown (``results["profile"]``, from
   :mod:`launch.experiments.model_smc.profile`): seconds inside the batched
   fits against the whole run; the notes list every phase with its fits,
   first (compiling) fit calls, transfers, checkpoints, the rest, and XLA
   compiles.
"""

from __future__ import annotations

import math
import os
import tempfile
import time

import numpy as np
from scipy import optimize

from launch import mesh as mesh_lib
from launch import runner
from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import experiment as smc_exp
from launch.experiments.model_smc import tasks
from methods.model_smc import expr as ex
from methods.model_smc import interpret
from methods.model_smc import structure as st

_LOG_2PI = math.log(2 * math.pi)


class NumpyObjective:
  """``-(log p(y | phi) + log p(phi))`` of one structure, in NumPy (the SciPy peer's model)."""

  def __init__(self, evaluator, m: st.Structure):
    spec, lib = evaluator.spec, evaluator.library
    self.spec, self.cfg = spec, evaluator.cfg
    self.layout = evaluator.model().layout
    self.y = np.asarray(evaluator.data.y, np.float64)
    self.x0_ref = np.asarray(evaluator.data.x0_ref, np.float64)
    self.terms = []  # (equation, sign, fn, slot indices)
    for s, eq in enumerate(m.terms):
      for k, sign in eq:
        body = lib.bodies[k]
        fn = interpret.compile_expr(body, states=spec.states, params=ex.params_of(body), xp=np)
        self.terms.append((s, sign, fn, self.layout.slot_index[k][s]))
    self.mask = np.asarray(self.layout.active_mask(m.signs(len(lib))), bool)

  def simulate(self, phi, num_points):
    sp = self.spec
    h = sp.dt / sp.substeps
    x = np.exp(phi[self.layout.init_index]) if sp.init == "fit" else self.x0_ref.copy()
    thetas = [np.exp(phi[idx]) for _, _, _, idx in self.terms]

    def f(x, t):
      out = np.zeros_like(x)
      for (s, sign, fn, _), th in zip(self.terms, thetas):
        out[s] += sign * fn(x, th, t)
      return out

    out = [x]
    with np.errstate(all="ignore"):
      for i in range(num_points - 1):
        for j in range(sp.substeps):
          t = (i * sp.substeps + j) * h
          k1 = f(x, t)
          k2 = f(x + 0.5 * h * k1, t + 0.5 * h)
          k3 = f(x + 0.5 * h * k2, t + 0.5 * h)
          k4 = f(x + h * k3, t + h)
          x = np.clip(x + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4), -sp.state_bound, sp.state_bound)
        out.append(x)
    return np.stack(out)

  def __call__(self, phi) -> float:
    sp, n = self.spec, self.cfg.num_fit
    z = self.simulate(phi, n)[:, list(sp.observed)]
    log_sigma = phi[self.layout.noise_index][None, :]
    y = self.y[:n]
    with np.errstate(all="ignore"):
      mu = np.log(np.maximum(z + sp.noise_offset, sp.log_floor))
      ly = np.log(y + sp.noise_offset)
      r = (ly - mu) / np.exp(log_sigma)
      ll = np.nansum(-0.5 * r * r - log_sigma - 0.5 * _LOG_2PI - ly)
    loc, scale = sp.param_prior
    slots = np.arange(self.layout.num_slot_params)
    lp = np.sum(self.mask[slots] * (-0.5 * ((phi[slots] - loc) / scale) ** 2 - math.log(scale) - 0.5 * _LOG_2PI))
    nl, ns = sp.noise_prior
    lp += np.sum(-0.5 * ((phi[self.layout.noise_index] - nl) / ns) ** 2 - math.log(ns) - 0.5 * _LOG_2PI)
    if sp.init == "fit":
      ref = np.log(np.maximum(self.x0_ref, sp.log_floor))
      s0 = sp.init_prior_scale
      lp += np.sum(-0.5 * ((phi[self.layout.init_index] - ref) / s0) ** 2 - math.log(s0) - 0.5 * _LOG_2PI)
    value = -(ll + lp)
    return float(value) if np.isfinite(value) else 1e10


def scipy_fit(obj: NumpyObjective, start: np.ndarray, restarts: int, jitter: float, seed: int) -> float:
  """L-BFGS-B restarts on the active coordinates, then the Laplace evidence (FD Hessian)."""
  active = np.flatnonzero(obj.mask)
  rng = np.random.default_rng(seed)
  full = start.astype(np.float64).copy()

  def f(a):
    phi = full.copy()
    phi[active] = a
    return obj(phi)

  best = None
  slots = active < obj.layout.num_slot_params
  for r in range(restarts):
    a0 = full[active] + (jitter * rng.standard_normal(len(active)) * slots if r else 0.0)
    res = optimize.minimize(f, a0, method="L-BFGS-B")
    if best is None or res.fun < best.fun:
      best = res
  a, d, eps = best.x, len(active), 1e-3
  hess = np.zeros((d, d))
  f0 = best.fun
  for i in range(d):
    for j in range(i, d):
      ei, ej = np.eye(d)[i] * eps, np.eye(d)[j] * eps
      if i == j:
        hess[i, i] = (f(a + ei) - 2 * f0 + f(a - ei)) / eps**2
      else:
        hess[i, j] = hess[j, i] = (f(a + ei + ej) - f(a + ei - ej) - f(a - ei + ej) + f(a - ei - ej)) / (4 * eps**2)
  w = np.linalg.eigvalsh(0.5 * (hess + hess.T))
  return float(-f0 + 0.5 * d * _LOG_2PI - 0.5 * np.sum(np.log(np.maximum(np.abs(w), 1e-6))))


def _fit_rate(quick: bool) -> dict:
  config = smc_config.get_config("cpu,task=pelts")
  task = tasks.build(config)
  lib = st.Library(task.states, tasks.library_of(config, task.states))
  mesh = mesh_lib.make_mesh()
  evaluator = smc_exp.make_evaluator(config, task, lib, mesh)
  prior = smc_config.SECTIONS.build(config, st.PriorConfig)
  rng = np.random.default_rng(0)
  n_jax = evaluator.batch_size * (1 if quick else 4)
  structures = [st.from_equations({"hare": "a*hare - b*hare*lynx", "lynx": "c*hare*lynx - d*lynx"}, lib)]
  seen = {structures[0]}
  while len(structures) < n_jax + 1:
    m = st.sample_prior(rng, len(lib), len(lib.states), p_include=0.3, max_terms=prior.max_terms)
    if m not in seen and m.num_terms() > 0:
      seen.add(m)
      structures.append(m)
  t0 = time.perf_counter()
  evaluator.evaluate(structures[-1:])  # compiles
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  log_z = evaluator.evaluate(structures[:n_jax])
  jax_rate = n_jax / (time.perf_counter() - t0)

  n_scipy = 2 if quick else 4
  model = evaluator.model()
  t0 = time.perf_counter()
  scipy_z = []
  for i, m in enumerate(structures[:n_scipy]):
    obj = NumpyObjective(evaluator, m)
    start = np.asarray(model.gradient_matching_init(m.signs(len(lib)), task.data, num_rows=config.num_fit))
    scipy_z.append(scipy_fit(obj, start, config.fit.restarts, config.fit.jitter, seed=i))
  scipy_rate = n_scipy / (time.perf_counter() - t0)
  diffs = [a - b for a, b in zip(log_z[:n_scipy], scipy_z) if np.isfinite(a) and np.isfinite(b)]
  return {
      "benchmark": f"pelts candidate fits ({config.fit.optimizer} x{config.fit.restarts} restarts to convergence "
                   "+ Newton + Laplace), "
                   f"{n_jax} JAX / {n_scipy} SciPy structures",
      "ours": jax_rate,
      "peer": scipy_rate,
      "unit": "fits/s",
      "peer_name": "sequential scipy.optimize L-BFGS-B + FD Hessian (NumPy RK4)",
      "ratio": jax_rate / scipy_rate,
      "notes": (f"{mesh_lib.describe_devices()}, batch {evaluator.batch_size}; compile {compile_s:.0f}s excluded; "
                f"log Z JAX - SciPy on the shared structures: {', '.join(f'{d:+.2f}' for d in diffs)}"),
  }


def _pelts_rows(quick: bool) -> list[dict]:
  preset = "smoke" if quick else "cpu"
  config = smc_config.get_config(f"{preset},task=pelts")
  config.baselines = ("sindy",)
  config.checkpoint.enabled = False
  with tempfile.TemporaryDirectory() as workdir:
    t0 = time.perf_counter()
    results = runner.run(config, os.path.join(workdir, "pelts"), log_summary=False)
    wall = time.perf_counter() - t0
  comp = results["comparison"]
  sindy_label = f"PySINDy (STLSQ, degree-{config.sindy.degree} library)"
  ours = float(comp["ModelSMC (posterior mixture)"]["heldout_lpd"])
  peer = float(comp[sindy_label]["heldout_lpd"])
  sindy_s = float(results["sindy"]["wall_time_s"])
  return [
      {
          "benchmark": f"pelts 1916-1920 held-out density ({preset} preset)",
          "ours": ours, "peer": peer, "unit": "nats (lpd)",
          "peer_name": f"PySINDy, STLSQ + degree-{config.sindy.degree} library",
          "ratio": math.exp(min(ours - peer, 700.0)),
          "notes": (f"ratio = exp(lpd difference); 90% coverage {comp['ModelSMC (posterior mixture)']['coverage90']} "
                    f"vs {comp[sindy_label]['coverage90']}"),
      },
      {
          "benchmark": f"pelts end-to-end wall time ({preset} preset)",
          "ours": wall, "peer": sindy_s, "unit": "s",
          "peer_name": "PySINDy fit + forecast",
          "ratio": sindy_s / max(wall, 1e-9),
          "notes": (f"ModelSMC: {results['smc']['iterations']} tempering steps, {results['smc']['fits']} structures "
                    "fitted (incl. compile); times, lower is faster: the ratio is peer time / our time "
                    "(below 1: ModelSMC is slower)"),
      },
  ]


# The limit-cycle system of rows 4-5: Van der Pol, dx/dt = y, dy/dt = mu*y - mu*x^2*y - x (mu = 1), one
# parameter per term, Gaussian noise of sd 0.1; its cubic term x^2*y is appended to the default quadratic library.
LIMIT_CYCLE = dict(equations=("x = a*y", "y = b*y - c*x^2*y - d*x"), params=("a=1.0", "b=1.0", "c=1.0", "d=1.0"),
                   x0=(2.0, 0.0), dt=0.5, num_points=24, noise_scale=0.1)


def limit_cycle_config(preset: str):
  """The ``task=sim`` config of the Van der Pol oscillator at ``preset`` (the command line in the docs)."""
  config = smc_config.get_config(f"{preset},task=sim")
  for key, value in LIMIT_CYCLE.items():
    config.sim[key] = value
  config.library_extra = ("a*x^2*y",)
  config.problem.noise = "gaussian"  # x and y change sign: lognormal noise does not apply
  return config


def _phase_notes(profile: dict) -> str:
  parts = []
  for name, r in profile.items():
    if name != "total":
      parts.append(f"{name} {r['seconds']:.0f} s (fits {r['fit_seconds']:.0f}, first calls "
                   f"{r['first_call_seconds']:.0f}, transfers {r['transfer_seconds']:.0f}, checkpoints "
                   f"{r['checkpoint_seconds']:.0f}, other {r['other_seconds']:.0f}; {r['compiles']} compiles)")
  return "; ".join(parts)


def _limit_cycle_rows(quick: bool) -> list[dict]:
  preset = "smoke" if quick else "cpu"
  config = limit_cycle_config(preset)
  config.checkpoint.enabled = False
  with tempfile.TemporaryDirectory() as workdir:
    t0 = time.perf_counter()
    results = runner.run(config, os.path.join(workdir, "limit_cycle"), log_summary=False)
    wall = time.perf_counter() - t0
  sindy_s = float(results["sindy"].get("wall_time_s", float("nan")))
  truth = results.get("truth") or {}
  tv = results.get("total_variation")
  profile = results["profile"]
  total = profile["total"]
  fit_s = total["fit_seconds"] + total["first_call_seconds"]
  return [
      {
          "benchmark": f"Van der Pol limit cycle end-to-end wall time ({preset} preset)",
          "ours": wall, "peer": sindy_s, "unit": "s", "peer_name": "PySINDy fit + forecast",
          "ratio": sindy_s / max(wall, 1e-9),
          "notes": (f"answer: true structure rank {truth.get('rank')} by particle mass (mass "
                    f"{float(truth.get('mass', 0.0)):.3f}), mixing TV "
                    f"{'n/a' if tv is None else format(float(tv), '.3f')}; {results['smc']['fits']} structures "
                    f"fitted, {total['compiles']} XLA compiles; peer time / our time"),
      },
      {
          "benchmark": f"Van der Pol limit cycle: time inside the fits ({preset} preset)",
          "ours": total["seconds"], "peer": fit_s, "unit": "s",
          "peer_name": "of which batched fits (incl. their first, compiling calls)",
          "ratio": fit_s / max(total["seconds"], 1e-9),
          "notes": _phase_notes(profile),
      },
  ]


def run(quick: bool) -> list[dict]:
  rows = [_fit_rate(quick)]
  print(f"fits: {rows[0]['ours']:.2f}/s (JAX) vs {rows[0]['peer']:.3f}/s (SciPy)", flush=True)
  rows += _pelts_rows(quick)
  rows += _limit_cycle_rows(quick)
  return rows
