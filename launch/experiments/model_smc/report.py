"""Scoring, tables and figures of the ``model_smc`` experiment.

Every method is scored on the held-out rows with the same functions
(:mod:`methods.model_smc.predictive`): the joint log predictive density of
the held-out block and the share of held-out observations inside the
central 50% / 90% predictive intervals. ModelSMC's predictive mixes its top
structures by posterior mass (each with its Laplace parameter posterior);
hill climbing uses its single structure (with its Laplace posterior);
SINDy is a point forecast plus the fitted noise. Parameter intervals (Laplace
or MALA, config section ``posterior``) are computed by
:mod:`launch.experiments.model_smc.intervals`.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import numpy as np

from launch import tables
from launch.experiments.model_smc import intervals as intervals_lib
from methods.model_smc import llm as llm_lib
from methods.model_smc import predictive
from methods.model_smc import sindy
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator

# Re-exported: the tests and scoring use them through this module.
finite_or_text = intervals_lib.finite_or_text
posterior_sd = intervals_lib.posterior_sd
parameter_table = intervals_lib.parameter_table
Z90 = intervals_lib.Z90
_f = finite_or_text


def describe(evaluator: Evaluator, m: st.Structure,
             intervals: Optional[intervals_lib.ParameterIntervals] = None) -> dict:
  """Equations, fit statistics and parameters (with 90% intervals by ``intervals``' method) of one structure."""
  intervals = intervals or intervals_lib.ParameterIntervals(evaluator)
  rec = evaluator.record(m)
  eqs, _ = st.equations(m, evaluator.library)
  return {
      "key": evaluator.key(m),
      "equations": {f"d{s}/dt": e for s, e in zip(evaluator.library.states, eqs)},
      "log_evidence": _f(rec.log_evidence),
      "log_likelihood": _f(rec.log_likelihood),
      "num_params": rec.num_params,
      "hessian_positive_definite": rec.positive_definite,
      "fit_status": rec.status,
      "nonfinite_restarts": rec.nonfinite_restarts,
      "params": intervals.table(m),
      "intervals": intervals.diagnostics(m),
  }


def predictive_scores(key: jax.Array, evaluator: Evaluator, structures: Sequence[st.Structure],
                      masses: Sequence[float], *, num_samples: int, num_fit: int, num_points: int) -> dict:
  """Held-out density, coverage and bands of the mixture of ``structures``."""
  model = evaluator.model()
  fn = predictive.jitted_draw(model, num_samples, num_points, num_fit, num_points)
  y_true = np.asarray(evaluator.data.y, np.float64)
  masses = np.asarray(masses, np.float64)
  masses = masses / masses.sum()
  samples, weights, log_dens, per = [], [], [], []
  n_bodies = len(evaluator.library)
  for i, (m, w) in enumerate(zip(structures, masses)):
    d = fn(jax.random.fold_in(key, i), np.asarray(evaluator.phi(m), np.float32), evaluator.neg_hessian(m),
           m.signs(n_bodies), evaluator.data)
    y = np.asarray(d.y, np.float64)
    ld = np.asarray(d.log_density, np.float64)
    samples.append(y)
    weights.append(np.full(len(y), w / len(y)))
    log_dens.append(ld)
    per.append(_scores(y, np.full(len(y), 1.0 / len(y)), y_true, num_fit,
                       predictive.log_predictive_density([0.0], [ld])))
  y_all, w_all = np.concatenate(samples), np.concatenate(weights)
  lpd = predictive.log_predictive_density(np.log(np.maximum(masses, 1e-300)), log_dens)
  out = _scores(y_all, w_all, y_true, num_fit, lpd)
  out["per_structure"] = per
  b = predictive.bands(y_all, w_all)
  out["bands"] = {k: (np.asarray(v).tolist() if k == "median" else [np.asarray(v[0]).tolist(), np.asarray(v[1]).tolist()])
                  for k, v in b.items()}
  return out


def _scores(samples, weights, y_true, num_fit, lpd) -> dict:
  held, train = y_true[num_fit:], y_true[:num_fit]
  def cov(level, rows, ys):
    s = samples[:, rows]
    ok = np.isfinite(ys)
    if not ok.any():
      return float("nan")
    lo, hi = predictive.weighted_quantiles(s, weights, (0.5 - level / 2, 0.5 + level / 2))
    inside = (ys >= lo) & (ys <= hi)
    return float(np.mean(inside[ok]))
  return {
      "heldout_lpd": _f(lpd),
      "coverage50": _f(cov(0.5, slice(num_fit, None), held)),
      "coverage90": _f(cov(0.9, slice(num_fit, None), held)),
      "train_coverage50": _f(cov(0.5, slice(0, num_fit), train)),
      "train_coverage90": _f(cov(0.9, slice(0, num_fit), train)),
  }


def sindy_scores(fit_, y_true: np.ndarray, num_fit: int, *, noise: str, noise_offset: float, num_samples: int,
                 seed: int) -> dict:
  """SINDy's held-out density and coverage (same definitions)."""
  lpd = sindy.log_density(fit_, y_true, num_fit, len(y_true), noise=noise, noise_offset=noise_offset)
  samples = sindy.predictive_samples(seed, fit_, num_samples, noise=noise, noise_offset=noise_offset)
  samples = np.where(np.isfinite(samples), samples, np.nan)
  w = np.full(num_samples, 1.0 / num_samples)
  out = _scores(np.nan_to_num(samples, nan=np.inf), w, y_true, num_fit, lpd)
  b = predictive.bands(np.nan_to_num(samples, nan=np.inf), w)
  out["median"] = np.asarray(b["median"]).tolist()
  return out


# ----------------------------------------------------------------------------
# Tables.


def _num(x, fmt="{:.2f}") -> str:
  try:
    v = float(x)
  except (TypeError, ValueError):
    return str(x)
  return fmt.format(v) if math.isfinite(v) else str(v)


def format_table(results: dict) -> str:
  """Plain-text summary: top structures, then the side-by-side comparison."""
  lines = [f"ModelSMC on {results['task']} ({results['dataset']}); {results['algorithm']} SMC, "
           f"{results['proposal']} proposal, {results['evidence']} evidence, N = {results['num_particles']}"]
  if results["task"] == "exact":
    ex_ = results["exact"]
    lines.append(f"exact check over {ex_['num_structures']} structures, {ex_['repeats']} SMC runs: "
                 f"max |z| = {ex_['max_abs_z']:.2f}, total variation {ex_['total_variation']:.4f}, "
                 f"log normaliser {ex_['log_normalizer_smc']:.3f} +- {ex_['log_normalizer_se']:.3f} "
                 f"(brute force {ex_['log_normalizer_exact']:.3f})")
    lines += tables.text(["p(m|x) exact", "SMC mean", "s.e.", "z", "structure"],
                         [[f"{row['exact']:.4f}", f"{row['smc']:.4f}", f"{row['se']:.4f}", f"{row['z']:.2f}",
                           row["key"]] for row in ex_["table"][:8]], align=">>>><")
    lines += [health_line(results["fit_health"])] if results.get("fit_health") else []
    return "\n".join(lines)
  smc = results["smc"]
  if results.get("mixing"):
    lines.append(mixing_line(results["mixing"]))
  lines.append(f"tempering steps {smc['iterations']}, final beta {smc['final_beta']:.3f}, proposals "
               f"{smc['proposals']}, structures fitted {smc['fits']}, log normaliser "
               f"{_num(smc['log_normalizer'])}, {smc['wall_time_s']:.0f} s")
  lines += tables.text(["mass", "visited", "log Z", "lpd", "equations"], [
      [f"{row['mass']:.3f}", _num(row.get("visited_mass", float("nan")), "{:.3f}"), _num(row["log_evidence"]),
       _num(row["heldout_lpd"]), "; ".join(f"{k} = {v}" for k, v in row["equations"].items())]
      for row in smc["top"]], align=">>>><")
  lines += ["", f"held-out rows {results['rows']['heldout']}:"]
  lines += tables.text(["method", "lpd", "cov50", "cov90"], [
      [name, _num(row["heldout_lpd"]), _num(row["coverage50"]), _num(row["coverage90"])]
      for name, row in results["comparison"].items()])
  lines += [health_line(results["fit_health"])] if results.get("fit_health") else []
  lines += rejection_lines(results)
  lines.append(intervals_line(results))
  if results.get("truth"):
    lines.append("truth: " + truth_line(results["truth"]))
  return "\n".join(lines)


def mixing_line(mx: dict) -> str:
  """PASS/FAIL of "TV < threshold and every run has the same top structure", with the numbers."""
  n = mx["num_runs"]
  verdict = "PASS" if mx["passed"] else "FAIL"
  tv = mx["total_variation"]
  parts = [f"mixing {verdict}: total variation {tv:.3f} {'<' if tv < mx['threshold'] else '>='} "
           f"{mx['threshold']:g} between the particle mass pooled over {n} run{'s' if n > 1 else ''} and "
           f"p(m) Z(m) over the {mx['num_structures']} visited structures"]
  distinct = len(set(mx["top_runs"]))
  parts.append(f"the {n} runs agree on the top structure" if mx["agree"]
               else f"the {n} runs disagree on the top structure ({distinct} different)")
  if "total_variation_iid_bound" in mx:
    parts.append(f"{n} x N independent exact draws would give a TV of at most {mx['total_variation_iid_bound']:.3f} "
                 "on average")
  parts.append("per-run TV " + "/".join(f"{t:.2f}" for t in mx["total_variation_runs"]))
  parts.append("pooled top's mass per run " + "/".join(f"{m:.2f}" for m in mx["top_mass_runs"])
               + f" (sd {mx['top_mass_spread']:.3f})")
  h = mx.get("hill_climb")
  if h:
    if h["in_sampler_visited"]:
      parts.append("hill climbing's structure is in the sampler's visited set")
    elif h["sampler_found_better_or_equal"]:
      parts.append(f"the sampler's best log p(m) Z(m) ({h['sampler_best_log_joint']:.2f}) is above hill "
                   f"climbing's ({h['log_joint']:.2f})")
    else:
      parts.append(f"hill climbing found a higher log p(m) Z(m) ({h['log_joint']:.2f}) than the sampler visited "
                   f"({h['sampler_best_log_joint']:.2f})")
  return "; ".join(parts)


def mixing_markdown(mx: dict) -> list[str]:
  """The mixing check for the README: its verdict line, then one row per run."""
  out = ["**Mixing check:** " + mixing_line(mx) + ".\n",
         "| run | top structure (particles) | its mass | TV to the visited-set posterior |", "|---:|---|---:|---:|"]
  for r, (top, tv) in enumerate(zip(mx["top_runs"], mx["total_variation_runs"])):
    mass = mx["top_mass_runs"][r] if top == mx["top"] else float("nan")
    out.append(f"| {r + 1} | `{top}` | {_num(mass, '{:.3f}') if top == mx['top'] else '-'} | {tv:.3f} |")
  out.append(f"| pooled | `{mx['top']}` | - | {mx['total_variation']:.3f} |")
  return out


def rejection_lines(results: dict) -> list[str]:
  """How many proposals were rejected and why (LLM proposals, or any failed fit), per search."""
  lines = []
  for label, part in (("ModelSMC", results.get("smc") or {}), ("hill climbing", results.get("hill_climb") or {})):
    rejections = part.get("rejections") or {}
    if "proposals" in part and (results.get("proposal") == "llm" or "fit" in rejections):
      lines.append(f"{label}: " + llm_lib.RejectionCounter(rejections).summary(int(part.get("proposals", 0))))
  return lines


def health_line(h: dict) -> str:
  """One line on restarts that never became finite and failed fits."""
  return (f"fits: {h['structures']} structures x {h['restarts_per_fit']} restarts; "
          f"{h['nonfinite_restarts']} restarts never finite (in {h['structures_with_nonfinite_restarts']} "
          f"structures); failed fits: {h['failed_all_restarts_nonfinite']} with every restart non-finite, "
          f"{h['failed_nonfinite_at_optimum']} non-finite at the optimum (excluded from the posterior, not scored "
          "as low evidence)")


def truth_line(t: dict) -> str:
  """Where the true structure stands: visited or not, both ranks, interval coverage."""
  if t.get("key") is None:
    return t.get("note", "truth outside the library")
  if not t.get("visited", True):
    head = "the true structure was never visited by the sampler"
  else:
    v_rank = t.get("visited_rank")
    head = (f"visited; rank {t['rank'] if t['rank'] is not None else '-'} by particle mass ({t['mass']:.3f}), "
            f"rank {v_rank if v_rank is not None else '-'} in the visited-set posterior "
            f"({t.get('visited_mass', 0.0):.3f})")
  if t.get("status", "ok") != "ok":
    return f"{head}; its fit failed ({t['status']}): no intervals"
  none = t.get("no_interval", 0)
  tail = f" ({none} without an interval: {t.get('no_interval_reason', '')})" if none else ""
  method = t.get("interval_method", "laplace")
  if method == "mala" and "mala_rhat" in t:
    method += f", split-R-hat {_num(t['mala_rhat'], '{:.3f}')}"
  return f"{head}; 90% intervals ({method}) cover {t['covered']} of {t['num_params']} true parameters{tail}"


def intervals_line(results: dict) -> str:
  """How the parameter intervals were computed (results without the record: Laplace, the former default)."""
  s = results.get("parameter_intervals", {"method": "laplace"})
  if s["method"] == "mala":
    return (f"parameter intervals: mala (central 90%, {s['num_chains']} preconditioned MALA chains x "
            f"{s['num_samples']} draws after {s['num_warmup']} warm-up steps, from the MAP)")
  return "parameter intervals: laplace (central 90%, Gaussian at the MAP)"


def markdown_table(results: dict) -> str:
  """Markdown for the README (via ``launch.report``)."""
  out = []
  if results["task"] == "exact":
    ex_ = results["exact"]
    out.append(f"Exact check: {ex_['num_structures']} structures fitted by brute force; {ex_['repeats']} "
               f"independent SMC runs (N = {results['num_particles']}). Largest |z| = {ex_['max_abs_z']:.2f}; "
               f"total variation {ex_['total_variation']:.4f}; log normaliser {ex_['log_normalizer_smc']:.3f} "
               f"± {ex_['log_normalizer_se']:.3f} vs exact {ex_['log_normalizer_exact']:.3f}.\n")
    out.append("| p(m\\|x) exact | SMC mean | s.e. | z | structure |")
    out.append("|---:|---:|---:|---:|---|")
    for row in ex_["table"][:6]:
      out.append(f"| {row['exact']:.4f} | {row['smc']:.4f} | {row['se']:.4f} | {row['z']:+.2f} | `{row['key']}` |")
    if results.get("fit_health"):
      out.append("\nFits: " + health_line(results["fit_health"]).split(": ", 1)[1] + ".")
    return "\n".join(out) + "\n"
  smc = results["smc"]
  out.append(f"**{results['dataset']}** ({results['rows']['fit']} rows fitted, {results['rows']['heldout']} held out); "
             f"tempered SMC, N = {results['num_particles']}, {smc['iterations']} tempering steps, "
             f"{smc['proposals']} proposals, {smc['fits']} structures fitted, {smc['wall_time_s']:.0f} s.\n")
  if results.get("mixing"):
    out += mixing_markdown(results["mixing"]) + [""]
  out.append("| SMC posterior mass | visited-set p(m\\|x) | log Z | held-out lpd | equations |")
  out.append("|---:|---:|---:|---:|---|")
  for row in smc["top"]:
    eqs = "<br>".join(f"`{k} = {v}`" for k, v in row["equations"].items())
    out.append(f"| {row['mass']:.3f} | {_num(row.get('visited_mass', float('nan')), '{:.3f}')} | "
               f"{_num(row['log_evidence'])} | {_num(row['heldout_lpd'])} | {eqs} |")
  if results.get("visited"):
    v = results["visited"]["top"][0]
    eqs = "; ".join(f"`{k} = {e}`" for k, e in v["equations"].items())
    out.append(f"\nHighest p(m) Z(m) among the {results['visited']['num_structures']} structures fitted: "
               f"{eqs} (log Z {_num(v['log_evidence'])}, visited-set mass {v['mass']:.3f}).")
  out.append("")
  out.append("| method (same data, same held-out rows) | held-out lpd | 50% coverage | 90% coverage |")
  out.append("|---|---:|---:|---:|")
  for name, row in results["comparison"].items():
    out.append(f"| {name} | {_num(row['heldout_lpd'])} | {_num(row['coverage50'])} | {_num(row['coverage90'])} |")
  if results.get("fit_health"):
    out.append("\nFits: " + health_line(results["fit_health"]).split(": ", 1)[1] + ".")
  if results.get("parameter_intervals"):
    line = intervals_line(results)
    out.append("\n" + line[0].upper() + line[1:] + ".")
  if results.get("truth"):
    out.append("\nTrue structure: " + truth_line(results["truth"]) + ".")
  return "\n".join(out) + "\n"


def headline_table(results: dict) -> str:
  """The README's table: the top structure, the mixing check and the held-out comparison with the baselines."""
  smc = results["smc"]
  top = smc["top"][0]
  eqs = "; ".join(f"`{k} = {v}`" for k, v in top["equations"].items())
  out = [f"**{results['dataset']}**, {results['rows']['heldout']} held-out rows: top structure (mass "
         f"{top['mass']:.3f}) {eqs}."]
  if results.get("mixing"):
    out.append(f"Check: {mixing_line(results['mixing']).split(';')[0]}.")
  out += ["", "| method (same data, same held-out rows) | held-out lpd | 50% coverage | 90% coverage |",
          "|---|---:|---:|---:|"]
  for name, row in results["comparison"].items():
    out.append(f"| {name} | {_num(row['heldout_lpd'])} | {_num(row['coverage50'])} | {_num(row['coverage90'])} |")
  return "\n".join(out) + "\n"
