r"""ModelSMC fit quality: the project's fit against SciPy multi-start L-BFGS-B on a fixed panel of structures.

The Laplace evidence that weights a structure is only as good as the optimum
its fit reaches. This experiment fits a fixed panel of structures -- for each
of the pelts, the simulated Lotka-Volterra data, the influenza outbreak and
two simulated systems with terms outside the quadratic library (a Hill
toggle switch and Michaelis-Menten uptake, :data:`envs.ode_systems.SYSTEMS`)
the true or textbook structure and random draws of the structure prior --
with

* this project's fit (:func:`methods.model_smc.fit.fit_structure`, BFGS restarts to a convergence test, the task's
  ``model_smc`` config at the same preset, batched and jitted), and
* the peer (:class:`methods.model_smc.scipy_peer.ScipyPeer`): SciPy's
  L-BFGS-B (``scipy.optimize.minimize``) from ``scipy_starts`` starts drawn
  the same way as the project's restarts (the gradient-matching start, then
  that start plus Gaussian jitter of sd ``fit.jitter`` on the term
  parameters), on the same objective -- the negative log joint of the
  training rows -- with its *exact* gradient (a jitted
  ``jax.value_and_grad`` of the same function, passed to SciPy as float64
  NumPy), so the peer is SciPy's optimiser, not finite differences;

and optionally the fixed-budget Adam fit (``fit.optimizer="adam"``).
Every optimum is scored by the same jitted objective. Criterion: the
project's objective is within ``tol`` nats of the better of the two on at
least ``min_share`` of the structures and never more than ``max_gap`` nats
above it. ``log Z`` at both optima (Laplace with the exact Hessian) is
reported too.

  python -m launch.main --config=launch/configs/model_smc_fit_panel.py:cpu --workdir=runs/model_smc_fit_panel
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from launch.configs import model_smc as smc_config
from launch.configs import model_smc_fit_panel as panel_config
from launch.configs.model_smc_fit_panel import PANEL_TASKS
from launch.configs.model_smc_fit_panel import Panel
from launch.experiments.model_smc import experiment as smc_exp
from launch.experiments.model_smc import tasks
from launch.runtime import Context
from launch.runtime import Experiment
from methods.model_smc import structure as st
from methods.model_smc.scipy_peer import ScipyPeer

# A textbook structure fitted first on the real-data tasks (the simulated ones start with their truth).
_TEXTBOOK = {
    "pelts": {"hare": "a*hare - b*hare*lynx", "lynx": "c*hare*lynx - d*lynx"},
    "flu": {"S": "a*S*I", "I": "a*S*I - b*I", "C": "a*I - b*C"},
}


class PanelState(NamedTuple):
  """Checkpointed progress: tasks done (the rows travel in the checkpoint's metadata)."""

  tasks_done: jax.Array


def task_config(preset: str, name: str) -> ml_collections.ConfigDict:
  """The model_smc config of panel task ``name`` at ``preset``."""
  return smc_config.get_config(f"{preset},{PANEL_TASKS[name]}")


def panel_structures(name: str, task: tasks.Task, library: st.Library, count: int, seed: int, *,
                     p_include: float, max_terms: int) -> list[st.Structure]:
  """The fixed structures of a task: the truth (or a textbook model), then distinct prior draws."""
  out = []
  truth = tasks.truth_structure(task, library)
  if truth is not None:
    out.append(truth)
  elif name in _TEXTBOOK:
    out.append(st.from_equations(_TEXTBOOK[name], library))
  rng = np.random.default_rng([seed, list(PANEL_TASKS).index(name)])
  seen = set(out)
  while len(out) < count:
    m = st.sample_prior(rng, len(library), len(library.states), p_include=p_include, max_terms=max_terms)
    if m not in seen and m.num_terms() > 0:
      seen.add(m)
      out.append(m)
  return out[:count]


def run_task(preset: str, name: str, panel: Panel, seed: int, mesh) -> dict:
  """Fits one task's structures with the project's fit (and Adam) and the SciPy peer; returns its rows."""
  config = task_config(preset, name)
  task = tasks.build(config)
  library = st.Library(task.states, tasks.library_of(config, task.states))
  prior = smc_config.SECTIONS.build(config, st.PriorConfig)
  structures = panel_structures(name, task, library, panel.structures_per_task, seed, p_include=panel.p_include,
                                max_terms=prior.max_terms)
  evaluator = smc_exp.make_evaluator(config, task, library, mesh)
  t0 = time.perf_counter()
  evaluator.evaluate(structures[:1])
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  evaluator.evaluate(structures)
  ours_s = time.perf_counter() - t0
  adam = None
  if panel.compare_adam:
    config_adam = task_config(preset, name)
    config_adam.fit.optimizer = "adam"
    config_adam.fit.restarts = min(config_adam.fit.restarts, 4)  # the Adam fit: at most 4 restarts,
    config_adam.fit.knockouts = 0  # no knockout starts
    config_adam.fit.knockout_prob = 0.0
    adam = smc_exp.make_evaluator(config_adam, task, library, mesh)
    adam.evaluate(structures)
  peer = ScipyPeer(evaluator.model(), evaluator.cfg, task.data)
  n_bodies = len(library)
  rows = []
  t_scipy = 0.0
  for i, m in enumerate(structures):
    signs = m.signs(n_bodies)
    rec = evaluator.record(m)
    ours = peer.objective(signs, np.asarray(rec.phi))
    t0 = time.perf_counter()
    phi_s, scipy_val = peer.fit(signs, panel.scipy_starts, seed=seed * 100_003 + i)
    t_scipy += time.perf_counter() - t0
    row = {
        "task": name, "structure": evaluator.key(m), "terms": m.num_terms(), "params": rec.num_params,
        "ours": ours, "scipy": scipy_val, "log_z_ours": rec.log_evidence,
        "log_z_scipy": peer.log_evidence(signs, phi_s) if np.isfinite(scipy_val) else -np.inf,
        "grad_norm": rec.grad_norm, "status": rec.status,
    }
    if adam is not None:
      row["adam"] = peer.objective(signs, np.asarray(adam.record(m).phi))
    rows.append(row)
  return {"task": name, "rows": rows, "compile_s": compile_s, "ours_s": ours_s, "scipy_s": t_scipy,
          "restarts": evaluator.cfg.restarts, "optimizer": evaluator.cfg.optimizer,
          "max_iters": evaluator.cfg.max_iters}


def _gap(a: float, b: float) -> float:
  """How far ``a`` is above ``min(a, b)`` (0 if both are non-finite, inf if only ``a`` is)."""
  best = min(a, b)
  if not np.isfinite(best):
    return 0.0
  return a - best if np.isfinite(a) else np.inf


def summarize(per_task: list[dict], panel: Panel) -> dict:
  """Shares within ``tol`` and worst gaps, per task and overall, and the verdict."""
  def stats(rows):
    gaps = np.array([_gap(r["ours"], r["scipy"]) for r in rows])
    scipy_gaps = np.array([_gap(r["scipy"], r["ours"]) for r in rows])
    out = {"structures": len(rows), "within_tol": int(np.sum(gaps <= panel.tol)),
           "max_gap": float(np.max(gaps)) if len(rows) else 0.0,
           "ours_better": int(np.sum(scipy_gaps > panel.tol)),
           "scipy_within_tol": int(np.sum(scipy_gaps <= panel.tol))}
    if rows and "adam" in rows[0]:
      adam_gaps = np.array([r["adam"] - min(r["ours"], r["scipy"]) if np.isfinite(r["adam"]) else np.inf
                            for r in rows])
      out["adam_within_tol"] = int(np.sum(np.abs(adam_gaps) <= panel.tol))
      out["adam_max_gap"] = float(np.max(adam_gaps))
      # Structures where the Adam fit found a lower optimum than both (the panel's criterion does not see them).
      out["adam_better"] = int(np.sum(adam_gaps < -panel.tol))
    dz = [r["log_z_ours"] - r["log_z_scipy"] for r in rows
          if np.isfinite(r["log_z_ours"]) and np.isfinite(r["log_z_scipy"])]
    out["max_abs_log_z_diff"] = float(np.max(np.abs(dz))) if dz else 0.0
    return out

  tasks_out = {t["task"]: {**stats(t["rows"]), "ours_s": t["ours_s"], "scipy_s": t["scipy_s"],
                           "compile_s": t["compile_s"]} for t in per_task}
  all_rows = [r for t in per_task for r in t["rows"]]
  total = stats(all_rows)
  total["ours_s"] = sum(t["ours_s"] for t in per_task)
  total["scipy_s"] = sum(t["scipy_s"] for t in per_task)
  share = total["within_tol"] / max(total["structures"], 1)
  passed = share >= panel.min_share and total["max_gap"] <= panel.max_gap
  return {"tasks": tasks_out, "total": total, "share_within_tol": share, "passed": bool(passed)}


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs the panel task by task (a checkpoint after each); returns ``results.json``'s content."""
  panel = panel_config.SECTIONS.build(config, Panel)
  step, _, meta = ctx.restore_or(PanelState(jnp.zeros((), jnp.int32)))
  done = list(meta["per_task"]) if meta else []
  for i, name in enumerate(panel.tasks):
    if i < len(done):
      continue
    out = run_task(config.preset, name, panel, config.seed, ctx.mesh)
    done.append(_jsonable(out))
    g = summarize([out], panel)["tasks"][name]
    ctx.writer.log(i + 1, **{f"{name}/within_tol": g["within_tol"], f"{name}/max_gap": g["max_gap"]})
    ctx.save(i + 1, PanelState(jnp.asarray(i + 1, jnp.int32)), {"per_task": done}, force=True)
  del step
  per_task = [_unjson(t) for t in done]
  out = summarize(per_task, panel)
  fit_keys = {name: {k: t[k] for k in ("optimizer", "restarts", "max_iters")} for name, t in
              zip(panel.tasks, per_task)}
  return {**out, "panel": dataclasses.asdict(panel), "preset": config.preset, "fit": fit_keys,
          "rows": [r for t in per_task for r in t["rows"]]}


def _jsonable(out: dict) -> dict:
  def enc(v):
    if isinstance(v, float) and not np.isfinite(v):
      return str(v)
    return v
  return {**{k: enc(v) for k, v in out.items() if k != "rows"},
          "rows": [{k: enc(v) for k, v in r.items()} for r in out["rows"]]}


def _unjson(out: dict) -> dict:
  def dec(k, v):
    if isinstance(v, str) and k not in ("task", "structure", "status", "optimizer"):
      return float(v)
    return v
  return {**{k: dec(k, v) for k, v in out.items() if k != "rows"},
          "rows": [{k: dec(k, v) for k, v in r.items()} for r in out["rows"]]}


def format_table(results: dict) -> str:
  """Plain-text summary (what the launcher logs)."""
  return markdown_table(results)


def markdown_table(results: dict) -> str:
  """The README block: per task and overall, the share of structures at the optimum and the worst gaps."""
  panel = results["panel"]
  tol = panel["tol"]
  has_adam = "adam_within_tol" in results["total"]
  adam_head = f" Adam within {tol:g} | Adam worst gap | Adam better by > {tol:g} |" if has_adam else ""
  head = (f"| task | structures | ours within {tol:g} nats | ours worst gap | ours better by > {tol:g} | "
          f"SciPy within {tol:g} |" + adam_head + " max abs log Z diff | ours s | SciPy s |")
  sep = "|" + "---|" * (head.count("|") - 1)
  lines = [head, sep]

  def row(label, g):
    cells = [label, str(g["structures"]), str(g["within_tol"]), f"{g['max_gap']:.2f}", str(g["ours_better"]),
             str(g["scipy_within_tol"])]
    if has_adam:
      cells += [str(g["adam_within_tol"]), f"{g['adam_max_gap']:.2f}", str(g.get("adam_better", 0))]
    cells += [f"{g['max_abs_log_z_diff']:.2f}", f"{g['ours_s']:.1f}", f"{g['scipy_s']:.1f}"]
    return "| " + " | ".join(cells) + " |"

  for name, g in results["tasks"].items():
    lines.append(row(name, g))
  lines.append(row("**all**", results["total"]))
  fit = next(iter(results["fit"].values()))
  verdict = "passed" if results["passed"] else "FAILED"
  lines.append("")
  lines.append(
      f"Criterion ({verdict}): the project's optimum (negative log joint) within {tol:g} nats of the better of "
      f"the two on >= {panel['min_share']:.0%} of the structures ({results['share_within_tol']:.1%}) and never "
      f"more than {panel['max_gap']:g} nats above it (worst {results['total']['max_gap']:.2f}). Project fit: "
      f"{fit['optimizer']}, {fit['restarts']} restarts, <= {fit['max_iters']} iterations each ({results['preset']} "
      f"preset); SciPy: L-BFGS-B from {panel['scipy_starts']} starts with the exact gradient. 'ours s' is the "
      "batched fit's wall time after compilation (sharded over the CPU devices), 'SciPy s' the sequential "
      "multi-start's. Gaps are objective minus the better of ours and SciPy's (nats)."
      + (" 'Adam better' counts structures where the Adam fit found a lower optimum than both." if has_adam
         else ""))
  return "\n".join(lines) + "\n"


EXPERIMENT = Experiment(
    declaration=panel_config.SECTIONS,
    get_config=panel_config.get_config,
    run=run,
    summary=format_table,
    markdown=markdown_table,
)
