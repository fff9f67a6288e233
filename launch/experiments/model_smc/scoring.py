"""Scoring of the ``model_smc`` experiment: the sampler, its baselines and the truth.

Every method -- the particle mixture, the top structure, the visited-set
posterior, N = 1 hill climbing and PySINDy -- is scored on the same held-out
rows with the same predictive metrics (:mod:`launch.experiments.model_smc.report`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Optional

from absl import logging
import jax
import numpy as np

from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import figures
from launch.experiments.model_smc import intervals as intervals_lib
from launch.experiments.model_smc import profile as profile_lib
from launch.experiments.model_smc import report
from launch.experiments.model_smc import sampler
from launch.experiments.model_smc import tasks
from methods.model_smc import expr as ex
from methods.model_smc import posterior as post
from methods.model_smc import reference
from methods.model_smc import sindy
from methods.model_smc import smc
from methods.model_smc import structure as st


PROGRESS_S = 20.0  # seconds between the progress lines of hill climbing


def hill_climb(config, task, evaluator, grammar, budget: int) -> dict:
  """N = 1 hill climbing with ``budget`` proposals (the sampler's own count)."""
  t0 = time.perf_counter()
  library = evaluator.library
  prior = smc_config.SECTIONS.build(config, st.PriorConfig)
  start = prior.sample(smc.host_rng(jax.random.key(config.seed + 1)), len(library), len(library.states))
  propose = sampler.proposer(config, task, evaluator, grammar)
  chunk = evaluator.batch_size if config.proposal == "grammar" else 1
  last = [t0]

  def progress(used, total, best):
    now = time.perf_counter()
    if now - last[0] >= PROGRESS_S or used >= total:
      last[0] = now
      eta = (now - t0) * (total - used) / max(used, 1)
      logging.info("[model_smc %s] hill climbing: %d/%d proposals, best log Z %.2f, %d fits | phase ETA %s",
                   config.task, used, total, best, evaluator.num_fits, profile_lib.fmt_seconds(eta))

  res = reference.hill_climb(jax.random.key(config.seed + 2), evaluator, propose, budget=budget, start=start,
                             chunk=chunk, callback=progress)
  logging.info("[model_smc %s] hill climbing: %d proposals, %d improvements, log Z %.2f",
               config.task, res.proposals, res.accepted, res.log_evidence)
  return {"structure": res.structure, "log_evidence": res.log_evidence, "proposals": res.proposals,
          "accepted": res.accepted, "trace": [list(t) for t in res.trace], "rejections": res.rejections,
          "wall_time_s": time.perf_counter() - t0}


def finish(config, ctx, task, evaluator, sampled: sampler.Sampled, hill: Optional[dict],
           profile: Optional[profile_lib.Profile] = None) -> dict:
  """Scores every method on the held-out rows; parameter intervals (section ``posterior``); figures; results.

  Each stage is logged when it starts and timed as its own phase of ``profile``.
  """
  stage = _Stages(config.task, profile)
  key = jax.random.key(config.seed + 3)
  intervals = intervals_lib.ParameterIntervals(evaluator, smc_config.SECTIONS.build(config, post.PosteriorConfig),
                                               jax.random.key(config.seed + 4))
  top_k = config.predictive.top_k
  top_keys = list(sampled.mass)[:top_k]
  top = [sampled.structure(k, evaluator.library) for k in top_keys]
  masses = [sampled.mass[k] for k in top_keys]
  kw = dict(num_samples=config.predictive.num_samples, num_fit=task.num_fit, num_points=task.num_points)
  with stage(f"predictive draws and intervals of the {len(top)} top structures"):
    mixture = report.predictive_scores(jax.random.fold_in(key, 0), evaluator, top, masses, **kw)
    top_rows = []
    for m, mass, scores in zip(top, masses, mixture["per_structure"]):
      top_rows.append({"mass": mass, **report.describe(evaluator, m, intervals), **scores})
  if config.algorithm == "tempered":
    num_particles = smc_config.SECTIONS.build(config, smc.TemperingConfig).num_particles
  else:
    num_particles = smc_config.SECTIONS.build(config, reference.ReferenceConfig).num_particles
  results = {
      "experiment": "model_smc", "task": task.name, "dataset": task.dataset, "citation": task.citation,
      "algorithm": config.algorithm, "proposal": config.proposal, "evidence": config.fit.evidence,
      "num_particles": num_particles,
      "states": list(task.states), "observed": list(task.observed_names),
      "rows": {"fit": task.num_fit, "heldout": task.num_points - task.num_fit,
               "times": np.asarray(task.times).tolist()},
      "library": list(evaluator.library.keys),
      "smc": {"iterations": sampled.iterations, "final_beta": sampled.beta,
              "log_normalizer": report.finite_or_text(sampled.log_normalizer), "proposals": sampled.proposals,
              "fits": sampled.fits, "wall_time_s": sampled.elapsed, "rejections": sampled.rejections,
              "top": top_rows, "mixture": {k: v for k, v in mixture.items() if k != "per_structure"},
              "runs": [{**{k: v for k, v in r.items() if k != "mass"},
                        "mass": dict(list(r["mass"].items())[:top_k])} for r in sampled.runs],
              "diagnostics": sampled.diagnostics},
      "fit_health": sampled.fit_health,
      "init_scale": task.spec.init_scale,
      "parameter_intervals": intervals.settings(),
      "comparison": {},
  }
  if sampled.mixing is not None:
    results["mixing"] = sampled.mixing
    results["total_variation"] = sampled.mixing["total_variation"]
  results["comparison"]["ModelSMC (posterior mixture)"] = pick(mixture)
  if top_rows:
    results["comparison"]["ModelSMC (top structure)"] = pick(top_rows[0])
  if sampled.visited:
    with stage("the visited-set posterior's top structures"):
      _score_visited(results, jax.random.fold_in(key, 2), evaluator, sampled.visited, top_rows, intervals, top_k,
                     kw)
  if hill is not None:
    with stage("hill climbing's structure"):
      _score_hill(results, jax.random.fold_in(key, 1), evaluator, hill, intervals, kw)
  sindy_median = None
  if "sindy" in config.baselines:
    with stage("PySINDy"):
      sindy_median = _score_sindy(results, config, task)
  if task.truth is not None:
    with stage("the true structure"):
      results["truth"] = truth(task, evaluator, sampled, intervals)
  y = np.asarray(task.data.y, np.float64)
  with stage("figures"):
    failed = figures.make_figures(results, ctx.writer, y, np.asarray(task.times), task.time_label,
                                  task.observed_names, sindy_median)
  if failed:
    results["figure_errors"] = failed
  return results


class _Stages:
  """``with stage(what):`` logs the scoring stage and times it as the profile's phase ``scoring``."""

  def __init__(self, task: str, profile: Optional[profile_lib.Profile]):
    self.task, self.profile, self.t0 = task, profile, time.perf_counter()

  @contextlib.contextmanager
  def __call__(self, what: str):
    logging.info("[model_smc %s] scoring: %s (%.0f s into scoring)", self.task, what, time.perf_counter() - self.t0)
    if self.profile is None:
      yield
      return
    with self.profile.phase("scoring"):
      yield


def sampler_summary(config, task, evaluator, sampled: sampler.Sampled, hill: Optional[dict]) -> dict:
  """What the run found before any scoring: ``sampler_results.json``, written before :func:`finish`.

  Needs no fit beyond the sampler's and hill climbing's (equations, log
  evidences and masses from the cache), so a failure while scoring or
  plotting cannot lose it.
  """
  lib = evaluator.library
  top_k = config.predictive.top_k

  def row(k: str, mass: float) -> dict:
    rec = evaluator.cache.get(k)
    eqs, _ = st.equations(st.from_key(k, lib), lib)
    return {"key": k, "mass": mass, "equations": {f"d{s}/dt": e for s, e in zip(lib.states, eqs)},
            "log_evidence": report.finite_or_text(rec.log_evidence) if rec else None,
            "visited_mass": (sampled.visited or {}).get("mass", {}).get(k)}

  out = {
      "experiment": "model_smc", "status": "sampler_only", "task": task.name, "dataset": task.dataset,
      "algorithm": config.algorithm, "proposal": config.proposal, "states": list(task.states),
      "rows": {"fit": task.num_fit, "heldout": task.num_points - task.num_fit}, "library": list(lib.keys),
      "smc": {"iterations": sampled.iterations, "final_beta": sampled.beta,
              "log_normalizer": report.finite_or_text(sampled.log_normalizer), "proposals": sampled.proposals,
              "fits": sampled.fits, "wall_time_s": sampled.elapsed, "rejections": sampled.rejections,
              "top": [row(k, v) for k, v in list(sampled.mass.items())[:top_k]],
              "runs": [{**{k: v for k, v in r.items() if k != "mass"},
                        "mass": dict(list(r["mass"].items())[:top_k])} for r in sampled.runs]},
      "fit_health": sampled.fit_health,
  }
  if sampled.mixing is not None:
    out["mixing"], out["total_variation"] = sampled.mixing, sampled.mixing["total_variation"]
  if sampled.visited:
    out["visited"] = {"num_structures": sampled.visited["num_structures"],
                      "top": [row(k, sampled.mass.get(k, 0.0)) for k in sampled.visited["order"][:top_k]]}
  if hill is not None:
    out["hill_climb"] = {"key": evaluator.key(hill["structure"]), "log_evidence": hill["log_evidence"],
                         "proposals": hill["proposals"], "accepted": hill["accepted"],
                         "wall_time_s": hill["wall_time_s"]}
  if task.truth is not None:
    out["truth"] = truth_rank(task, evaluator, sampled)
  return out


def _score_visited(results, key, evaluator, visited_summary, top_rows, intervals, top_k: int, kw) -> None:
  """The visited-set posterior's top structures and their mixture (into ``results``)."""
  visited = visited_summary["mass"]
  for row in top_rows:
    row["visited_mass"] = visited.get(row["key"], 0.0)
  v_keys = list(visited)[:top_k]
  v_structs = [st.from_key(k, evaluator.library) for k in v_keys]
  v_mix = report.predictive_scores(key, evaluator, v_structs, [visited[k] for k in v_keys], **kw)
  results["visited"] = {
      "num_structures": visited_summary["num_structures"],
      "top": [{"key": k, "mass": visited[k], **report.describe(evaluator, m, intervals), **sc}
              for k, m, sc in zip(v_keys, v_structs, v_mix["per_structure"])],
      "mixture": {k: v for k, v in v_mix.items() if k not in ("per_structure", "bands")},
  }
  results["comparison"]["ModelSMC (visited-set posterior)"] = pick(v_mix)


def _score_hill(results, key, evaluator, hill: dict, intervals, kw) -> None:
  """Hill climbing's structure, scored like the others (into ``results``)."""
  h = report.predictive_scores(key, evaluator, [hill["structure"]], [1.0], **kw)
  results["hill_climb"] = {**report.describe(evaluator, hill["structure"], intervals), "proposals": hill["proposals"],
                           "accepted": hill["accepted"], "trace": hill["trace"], "rejections": hill["rejections"],
                           "wall_time_s": hill["wall_time_s"], **pick(h), "median": h["bands"]["median"]}
  results["comparison"][f"hill climbing (N=1, {hill['proposals']} proposals)"] = pick(h)


def _score_sindy(results, config, task) -> Optional[list]:
  """PySINDy's fit and scores (into ``results``); returns its median forecast for the figure (None if it failed)."""
  t0 = time.perf_counter()
  y = np.asarray(task.data.y, np.float64)
  try:
    sf = sindy.fit(y, dt=task.spec.dt, num_fit=task.num_fit, num_points=task.num_points,
                   states=task.observed_names, threshold=config.sindy.threshold, degree=config.sindy.degree,
                   noise=task.spec.noise, noise_offset=task.spec.noise_offset)
    scores = report.sindy_scores(sf, y, task.num_fit, noise=task.spec.noise, noise_offset=task.spec.noise_offset,
                                 num_samples=config.predictive.num_samples, seed=config.seed)
  except ValueError as e:
    logging.warning("[model_smc %s] PySINDy baseline not scored: %s", config.task, e)
    results["sindy"] = {"error": str(e)}
    return None
  sindy_median = scores.pop("median")
  results["sindy"] = {"equations": sf.equations, "sigma": sf.sigma.tolist(), "num_terms": sf.num_terms,
                      "wall_time_s": time.perf_counter() - t0, **scores}
  results["comparison"][f"PySINDy (STLSQ, degree-{config.sindy.degree} library)"] = pick(scores)
  return sindy_median


def pick(scores: dict) -> dict:
  return {k: scores[k] for k in ("heldout_lpd", "coverage50", "coverage90", "train_coverage50", "train_coverage90")}


def truth_rank(task, evaluator, sampled) -> dict:
  """Whether the sampler visited the true structure, its rank and mass by particles and in the visited set."""
  m = tasks.truth_structure(task, evaluator.library)
  if m is None:
    return {"key": None, "rank": None, "mass": 0.0, "note": "truth outside the library"}
  k = evaluator.key(m)
  ranking = list(sampled.mass)
  order = (sampled.visited or {}).get("order")
  return {"key": k, "visited": k in sampled.fitted if sampled.fitted else None,
          "rank": ranking.index(k) + 1 if k in ranking else None, "mass": float(sampled.mass.get(k, 0.0)),
          "visited_rank": order.index(k) + 1 if order and k in order else None,
          "visited_mass": float((sampled.visited or {}).get("mass", {}).get(k, 0.0))}


def truth(task, evaluator, sampled, intervals: Optional[intervals_lib.ParameterIntervals] = None) -> dict:
  """Whether the sampler visited the true structure, its ranks and mass; coverage of its parameters.

  Coverage is by the 90% intervals of ``intervals`` (default: Laplace). A
  parameter without an interval (a failed fit, a Hessian that is not
  positive definite for Laplace, non-finite draws for MALA) never counts as
  covered; ``no_interval`` counts them.
  """
  intervals = intervals or intervals_lib.ParameterIntervals(evaluator)
  m = tasks.truth_structure(task, evaluator.library)
  ranks = truth_rank(task, evaluator, sampled)
  if m is None:
    return {**ranks, "covered": 0, "num_params": 0, "interval_method": intervals.method}
  table = intervals.table(m)  # fits the truth if the sampler never did
  status = evaluator.record(m).status
  # Match true parameters to fitted ones by the order of appearance.
  _, true_names = st.equations(m, evaluator.library)
  scratch = st.Library(evaluator.library.states)
  ordered = []
  for state in evaluator.library.states:
    tree = ex.parse(task.truth["equations"][state], states=scratch.states)
    terms = sorted(((ex.canonical_text(b), ex.params_of(b)) for _, b in ex.split_terms(tree)), key=lambda t: t[0])
    for _, names in terms:
      ordered += list(names)
  params = {}
  covered = none = 0
  reasons = set()
  for name, true_name in zip(true_names, ordered):
    row = table[name]
    truth = float(task.truth["params"][true_name])
    if row["interval"] == "none":
      inside = False
      none += 1
      reasons.add(row["reason"])
    else:
      inside = float(row["lo90"]) <= truth <= float(row["hi90"])
    covered += int(inside)
    params[true_name] = {"true": truth, **row, "covered": inside}
  mala = {f"mala_{k}": v for k, v in intervals.diagnostics(m).items() if k != "method"}
  return {**ranks, "status": status, "interval_method": intervals.method, **mala, "covered": covered,
          "no_interval": none, "no_interval_reason": "; ".join(sorted(reasons)), "num_params": len(params),
          "params": params}
