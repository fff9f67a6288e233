"""Experiment ``model_smc``: ModelSMC against PySINDy and N = 1 hill climbing.

Config: ``launch/configs/model_smc.py``. A run (1) samples structures with
tempered SMC (or the reference's evidence-weighted scheme), checkpointing
after every iteration (particles, weights, the evidence cache) so a killed
run resumes and ends with the same numbers; (2) runs hill climbing with the
same number of proposals; (3) fits PySINDy; (4) scores all of them on the
held-out rows with the same predictive metrics and draws the figures. The
``exact`` task instead fits every structure of a small space and compares
the frequencies of repeated SMC runs with the brute-force posterior.

Fits of new structures are batched; the batch axis is sharded over the
mesh's ``data`` axis (the batch size is rounded up to a multiple of the
number of devices).
"""

from __future__ import annotations

import math
import time
from typing import Optional

from absl import logging
import jax
import ml_collections
import numpy as np

from launch import config_schema as cs
from launch import llm_client
from launch import mesh as mesh_lib
from launch.configs import common
from launch.configs import model_smc as smc_config
from launch.experiments import model_smc_exact
from launch.experiments import model_smc_report as report
from launch.experiments import model_smc_tasks as tasks
from launch.runtime import Context, Experiment
from methods.model_smc import evidence as ev
from methods.model_smc import expr as ex
from methods.model_smc import fit as fit_lib
from methods.model_smc import grammar as grammar_lib
from methods.model_smc import llm as llm_lib
from methods.model_smc import model as mdl
from methods.model_smc import reference
from methods.model_smc import sindy
from methods.model_smc import smc
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator

ALGORITHMS = ("tempered", "evidence_weighted")
PROPOSALS = ("grammar", "llm")
BASELINES = ("hill_climb", "sindy")
_ROWS = {"pelts": 21, "lv_sim": 21, "flu": 15}


# ----------------------------------------------------------------------------
# Validation.


class _Text(cs.Constraint):
  """A non-empty string (the parser checks the rest, in ``_checks``)."""

  def check(self, value):
    return None if isinstance(value, str) and value.strip() else f"{value!r} is not a non-empty expression"


def _checks(config):
  """Cross-field checks (each yields ``(key, message)``)."""
  if config.proposal == "llm" and config.algorithm != "evidence_weighted":
    yield "proposal", ("the LLM proposal has no known density, so it runs only with "
                       "algorithm='evidence_weighted' (the tempered sampler needs the grammar's exact q)")
  if config.task == "exact" and config.algorithm != "tempered":
    yield "algorithm", "the exact check tests the tempered sampler; use algorithm='tempered'"
  rows = _ROWS.get(config.task)
  if rows is not None and not 3 <= config.num_fit < rows:
    yield "num_fit", f"{config.num_fit} training rows; task {config.task!r} has {rows} rows (need 3 <= num_fit < {rows})"
  if config.task == "exact" and config.num_fit < 3:
    yield "num_fit", "the exact task needs at least 3 rows"
  if config.fit.evidence == "heldout" and not 0 < config.fit.num_val < config.num_fit - 1:
    yield "fit.num_val", f"heldout evidence needs 0 < num_val < num_fit - 1 = {config.num_fit - 1}"
  states = {"pelts": ("hare", "lynx"), "lv_sim": ("x", "y"), "flu": ("S", "I", "C"), "exact": ("x", "v")}[config.task]
  seen = set()
  for i, body in enumerate(config.library):
    try:
      key = ex.canonical_text(ex.parse(body, states=states))
    except ex.UnsafeExpression as e:
      yield f"library[{i}]", f"{body!r}: {e.reason} (states of task {config.task!r}: {list(states)})"
      continue
    if key in seen:
      yield f"library[{i}]", f"{body!r} repeats another body (canonical form {key!r})"
    seen.add(key)
  if len(config.smc.move_probs) != 4 or min(config.smc.move_probs) < 0 or sum(config.smc.move_probs) <= 0:
    yield "smc.move_probs", "four non-negative probabilities (add, remove, replace, operator) with a positive sum"
  if len(set(config.baselines)) != len(config.baselines):
    yield "baselines", f"duplicate entries in {list(config.baselines)}"
  if config.task == "exact" and "sindy" in config.baselines:
    yield "baselines", "the exact task has no held-out rows to score SINDy on"


def schema() -> cs.Schema:
  pos = cs.positive()
  constraints = {
      **common.BASE_CONSTRAINTS,
      "experiment": cs.OneOf(("model_smc",)),
      "task": cs.OneOf(smc_config.TASKS),
      "library": cs.Each(_Text(), nonempty=True),
      "algorithm": cs.OneOf(ALGORITHMS),
      "proposal": cs.OneOf(PROPOSALS),
      "problem.substeps": cs.Range(lo=1),
      "problem.noise": cs.OneOf(mdl.NOISE_KINDS),
      "problem.noise_offset": cs.Range(lo=0),
      "problem.init": cs.OneOf(mdl.INIT_KINDS),
      "problem.param_prior_scale": pos,
      "problem.noise_prior_scale": pos,
      "problem.init_prior_scale": pos,
      "problem.state_bound": pos,
      "num_fit": cs.Range(lo=3),
      "fit.evidence": cs.OneOf(ev.EVIDENCE_KINDS),
      "fit.num_val": cs.Range(lo=0),
      "fit.restarts": cs.Range(lo=1),
      "fit.steps": cs.Range(lo=1),
      "fit.learning_rate": pos,
      "fit.jitter": cs.Range(lo=0),
      "fit.newton_steps": cs.Range(lo=0),
      "fit.batch_size": cs.Range(lo=1),
      "smc.num_particles": cs.Range(lo=2),
      "smc.target_ess": cs.Range(lo=0, hi=1, lo_open=True, hi_open=True),
      "smc.resample_threshold": cs.Range(lo=0, hi=1, lo_open=True),
      "smc.mcmc_steps": cs.Range(lo=1),
      "smc.max_delta": cs.Range(lo=0, hi=1, lo_open=True),
      "smc.max_iterations": cs.Range(lo=1),
      "smc.p_include": cs.Range(lo=0, hi=1, lo_open=True, hi_open=True),
      "smc.max_terms": cs.Range(lo=1),
      "reference.num_particles": cs.Range(lo=1),
      "reference.alpha": cs.Range(lo=0, hi=1, hi_open=True),
      "reference.temperature": pos,
      "reference.iterations": cs.Range(lo=1),
      "reference.ancestors": cs.Range(lo=0, hi=3),
      "llm.timeout_s": pos,
      "llm.temperature": cs.Range(lo=0),
      "llm.max_tokens": cs.Range(lo=1),
      "llm.max_params": cs.Range(lo=1),
      "baselines": cs.Each(cs.OneOf(BASELINES)),
      "sindy.threshold": cs.Range(lo=0),
      "sindy.degree": cs.Range(lo=1, hi=4),
      "predictive.num_samples": cs.Range(lo=2),
      "predictive.top_k": cs.Range(lo=1),
      "exact.repeats": cs.Range(lo=2),
      "sim.noise_scale": pos,
      "sim.data_seed": cs.Range(lo=0),
  }
  return cs.Schema(smc_config.get_config(), constraints,
                   checks=(common.mesh_check, lambda c: list(_checks(c))))


# ----------------------------------------------------------------------------
# Set-up.


def _fit_config(config) -> fit_lib.FitConfig:
  f = config.fit
  return fit_lib.FitConfig(num_fit=config.num_fit, evidence=f.evidence, num_val=f.num_val, restarts=f.restarts,
                           steps=f.steps, learning_rate=f.learning_rate, jitter=f.jitter,
                           newton_steps=f.newton_steps)


def smc_config_of(config) -> smc.SMCConfig:
  c = config.smc
  return smc.SMCConfig(num_particles=c.num_particles, target_ess=c.target_ess,
                       resample_threshold=c.resample_threshold, mcmc_steps=c.mcmc_steps, max_delta=c.max_delta,
                       max_iterations=c.max_iterations, p_include=c.p_include, max_terms=c.max_terms)


def make_evaluator(config, task: tasks.Task, library: st.Library, mesh) -> Evaluator:
  """The evidence cache; batches are sharded over ``mesh``'s data axis."""
  batch = mesh_lib.padded_size(config.fit.batch_size, mesh)
  sharding = mesh_lib.data_sharding(mesh)

  def place(x):
    return mesh_lib.global_array(x.shape, sharding, lambda idx: x[idx])

  return Evaluator(library, task.spec, _fit_config(config), task.data, seed=config.seed, batch_size=batch,
                   place=place, to_host=mesh_lib.to_host)


def encode(m: st.Structure, library: st.Library) -> list:
  """JSON form of a structure (bodies by canonical text)."""
  return [[[library.keys[k], s] for k, s in eq] for eq in m.terms]


def decode(obj: list, library: st.Library) -> st.Structure:
  return st.Structure.make([[(library.add(ex.parse(b, states=library.states)), s) for b, s in eq] for eq in obj])


def _progress(task: str, label: str, t0: float, it: int, beta: float, info: dict, fits: int) -> None:
  elapsed = time.perf_counter() - t0
  eta = elapsed * (1 - beta) / beta if 0 < beta < 1 else 0.0
  rate = fits / elapsed if elapsed > 0 else float("nan")
  extra = " ".join(f"{k} {v}" for k, v in info.items())
  logging.info("[model_smc %s] %s %d beta %.4f %s | %d fits (%.1f fits/s) ETA %s", task, label, it, beta, extra,
               fits, rate, f"{eta:.0f}s" if beta > 0 else "?")


# ----------------------------------------------------------------------------
# Runs.


def _arrays(n: int, log_w=None, log_z=None, beta=0.0, log_norm=0.0) -> dict:
  """The sampler's arrays for a checkpoint (``-inf`` stored as ``-1e300``)."""
  def enc(x):
    return np.zeros(n, np.float64) if x is None else np.nan_to_num(np.asarray(x, np.float64), neginf=-1e300)
  return {"log_weights": enc(log_w), "log_evidence": enc(log_z),
          "scalars": np.nan_to_num(np.array([beta, log_norm], np.float64), neginf=-1e300)}


def _dec(x) -> np.ndarray:
  x = np.array(x, np.float64)
  x[x <= -1e299] = -np.inf
  return x


def _run_sampler(config, ctx: Context, task, evaluator, grammar, meta: Optional[dict], start_step: int,
                 state_arrays) -> dict:
  """Runs (or resumes) the structure sampler; returns its final summary dict."""
  key = jax.random.key(config.seed)
  lib = evaluator.library
  diagnostics = list(meta["diagnostics"]) if meta else []
  elapsed0 = float(meta["elapsed"]) if meta else 0.0
  t0 = time.perf_counter()

  if config.algorithm == "tempered":
    cfg = smc_config_of(config)
    state = None
    if meta:
      s = meta["sampler"]
      state = smc.SMCState(tuple(decode(p, lib) for p in s["particles"]),
                           _dec(state_arrays["log_weights"]), _dec(state_arrays["log_evidence"]),
                           float(state_arrays["scalars"][0]), float(state_arrays["scalars"][1]),
                           int(s["iteration"]), int(s["proposals"]))

    def callback(state, info):
      d = info._asdict()
      d["mass"] = dict(list(d["mass"].items())[:config.predictive.top_k])
      d["elapsed_s"] = elapsed0 + time.perf_counter() - t0
      diagnostics.append(d)
      ctx.writer.log(state.iteration, beta=info.beta, ess=info.ess, resampled=int(info.resampled),
                     acceptance=info.acceptance, unique=info.unique, log_normalizer=info.log_normalizer,
                     proposals=info.proposals, fits=info.fits, top_mass=next(iter(info.mass.values())))
      _progress(config.task, "iteration", t0, state.iteration, info.beta,
                {"ESS": f"{info.ess:.1f}", "acc": f"{info.acceptance:.2f}", "unique": info.unique},
                info.fits)
      meta_out = {"stage": "sampler", "diagnostics": diagnostics, "elapsed": d["elapsed_s"],
                  "library": list(lib.keys), "evaluator": evaluator.state_dict(),
                  "sampler": {"particles": [encode(m, lib) for m in state.particles],
                              "iteration": state.iteration, "proposals": state.proposals}}
      ctx.save(state.iteration, _arrays(cfg.num_particles, state.log_weights, state.log_evidence, state.beta,
                                        state.log_normalizer), meta_out, force=state.beta >= 1.0)

    final = smc.run(key, evaluator, grammar, cfg, state=state, callback=callback)
    mass = smc.posterior_mass(final.particles, final.log_weights, evaluator.key)
    by_key = {evaluator.key(m): m for m in final.particles}
    return {"particles": final.particles, "mass": mass, "by_key": by_key, "iterations": final.iteration,
            "beta": final.beta, "log_normalizer": final.log_normalizer, "proposals": final.proposals,
            "diagnostics": diagnostics, "elapsed": elapsed0 + time.perf_counter() - t0, "rejections": {}}

  # The reference's evidence-weighted scheme.
  rcfg = reference.ReferenceConfig(num_particles=config.reference.num_particles, alpha=config.reference.alpha,
                                   temperature=config.reference.temperature,
                                   iterations=config.reference.iterations,
                                   resample_threshold=config.smc.resample_threshold,
                                   ancestors=config.reference.ancestors)
  propose = _proposer(config, task, evaluator, grammar)
  state = None
  if meta:
    s = meta["sampler"]
    state = reference.ReferenceState(tuple(decode(p, lib) for p in s["particles"]), _dec(state_arrays["log_evidence"]),
                                     tuple(tuple(a) for a in s["ancestry"]), tuple(s["history"]),
                                     int(s["iteration"]), int(s["proposals"]), dict(s["rejections"]))

  def rcallback(state, info):
    d = info._asdict()
    d["mass"] = dict(list(d["mass"].items())[:config.predictive.top_k])
    d["beta"] = 1.0
    d["elapsed_s"] = elapsed0 + time.perf_counter() - t0
    d["acceptance"] = info.accepted / max(info.proposals, 1)
    diagnostics.append(d)
    ctx.writer.log(state.iteration, ess=info.ess, resampled=int(info.resampled), proposals=info.proposals,
                   accepted=info.accepted, unique=info.unique, best_log_evidence=info.best_log_evidence,
                   fits=info.fits, rejected=sum(info.rejections.values()))
    for kind, count in info.rejections.items():
      logging.info("proposals rejected so far (%s): %d", kind, count)
    _progress(config.task, "iteration", t0, state.iteration, state.iteration / rcfg.iterations,
              {"ESS": f"{info.ess:.1f}", "best": f"{info.best_log_evidence:.2f}"}, info.fits)
    meta_out = {"stage": "sampler", "diagnostics": diagnostics, "elapsed": d["elapsed_s"],
                "library": list(lib.keys), "evaluator": evaluator.state_dict(),
                "sampler": {"particles": [encode(m, lib) for m in state.particles], "iteration": state.iteration,
                            "proposals": state.proposals, "ancestry": [list(a) for a in state.ancestry],
                            "history": list(state.history), "rejections": state.rejections}}
    ctx.save(state.iteration, _arrays(rcfg.num_particles, None, state.log_evidence), meta_out,
             force=state.iteration >= rcfg.iterations)

  final = reference.run_reference(key, evaluator, propose, rcfg, p_include=config.smc.p_include,
                                  max_terms=config.smc.max_terms, state=state, callback=rcallback)
  mass = smc.posterior_mass(final.particles, final.log_evidence / rcfg.temperature, evaluator.key)
  return {"particles": final.particles, "mass": mass, "by_key": {evaluator.key(m): m for m in final.particles},
          "iterations": final.iteration, "beta": 1.0, "log_normalizer": float("nan"), "proposals": final.proposals,
          "diagnostics": diagnostics, "elapsed": elapsed0 + time.perf_counter() - t0,
          "rejections": final.rejections}


def _proposer(config, task, evaluator, grammar):
  if config.proposal == "grammar":
    return reference.grammar_proposer(grammar)
  l = config.llm
  client = llm_client.ChatClient.from_config(llm_client.LLMConfig(
      base_url=l.base_url, model=l.model, api_key_env=l.api_key_env, timeout_s=l.timeout_s,
      temperature=l.temperature, max_tokens=l.max_tokens))
  return reference.llm_proposer(llm_lib.LLMProposer(client, evaluator.library, task.description,
                                                    max_params=l.max_params))


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs the task; returns ``results.json``'s content."""
  task = tasks.build(config)
  library = st.Library(task.states, config.library)
  evaluator = make_evaluator(config, task, library, ctx.mesh)
  grammar = grammar_lib.GrammarProposal(library, max_terms=config.smc.max_terms, move_probs=config.smc.move_probs)
  if config.task == "exact":
    return model_smc_exact.run_exact(config, ctx, task, evaluator, grammar, smc_config_of(config))

  n = config.smc.num_particles if config.algorithm == "tempered" else config.reference.num_particles
  step, arrays, meta = ctx.restore_or(_arrays(n))
  if meta:
    for k in meta["library"]:
      library.add(ex.parse(k, states=library.states))
    evaluator.load_state_dict(meta["evaluator"])
    logging.info("resuming model_smc from step %d (stage %s)", step, meta["stage"])
  if meta and meta["stage"] == "done":
    sampled = _restore_done(meta, library)
  else:
    sampled = _run_sampler(config, ctx, task, evaluator, grammar, meta if meta else None, step, arrays)
    sampled["fits"] = evaluator.num_fits  # the sampler's own; the baselines add theirs to the cache
    if config.algorithm == "tempered":  # before the baselines add their own structures to the cache
      visited = _visited_posterior(config, evaluator)
      sampled["visited"] = {"num_structures": len(visited), "mass": dict(list(visited.items())[:50])}

  # N = 1 hill climbing with the same number of proposals.
  hill = None
  if "hill_climb" in config.baselines:
    if meta and meta["stage"] == "done" and meta.get("hill") is not None:
      hill = meta["hill"]
      hill["structure"] = decode(hill["structure"], library)
    else:
      t0 = time.perf_counter()
      start = st.sample_prior(smc.host_rng(jax.random.key(config.seed + 1)), len(library), len(library.states),
                              p_include=config.smc.p_include, max_terms=config.smc.max_terms)
      propose = _proposer(config, task, evaluator, grammar)
      chunk = evaluator.batch_size if config.proposal == "grammar" else 1
      res = reference.hill_climb(jax.random.key(config.seed + 2), evaluator, propose,
                                 budget=sampled["proposals"], start=start, chunk=chunk)
      hill = {"structure": res.structure, "log_evidence": res.log_evidence, "proposals": res.proposals,
              "accepted": res.accepted, "trace": [list(t) for t in res.trace], "rejections": res.rejections,
              "wall_time_s": time.perf_counter() - t0}
      logging.info("[model_smc %s] hill climbing: %d proposals, %d improvements, log Z %.2f",
                   config.task, res.proposals, res.accepted, res.log_evidence)
  done_meta = {
      "stage": "done", "library": list(library.keys), "evaluator": evaluator.state_dict(),
      "sampled": {"particles": [encode(m, library) for m in sampled["particles"]], "mass": sampled["mass"],
                  "iterations": sampled["iterations"], "beta": sampled["beta"],
                  "log_normalizer": sampled["log_normalizer"] if math.isfinite(sampled["log_normalizer"]) else "nan",
                  "proposals": sampled["proposals"], "diagnostics": sampled["diagnostics"],
                  "elapsed": sampled["elapsed"], "rejections": sampled["rejections"],
                  "visited": sampled.get("visited"), "fits": sampled["fits"]},
      "hill": None if hill is None else {**hill, "structure": encode(hill["structure"], library)},
  }
  if not (meta and meta["stage"] == "done"):
    ctx.save(sampled["iterations"] + 1, _arrays(n), done_meta, force=True)
  return _finish(config, ctx, task, evaluator, sampled, hill)


def _restore_done(meta: dict, library: st.Library) -> dict:
  s = meta["sampled"]
  particles = tuple(decode(p, library) for p in s["particles"])
  by_key = {st.key(m, library): m for m in particles}
  return {"particles": particles, "mass": s["mass"], "by_key": by_key, "iterations": s["iterations"],
          "beta": s["beta"], "log_normalizer": float(s["log_normalizer"]), "proposals": s["proposals"],
          "diagnostics": s["diagnostics"], "elapsed": s["elapsed"], "rejections": s["rejections"],
          "visited": s.get("visited"), "fits": s["fits"]}


def _finish(config, ctx, task, evaluator, sampled, hill) -> dict:
  """Scores every method on the held-out rows; figures; results."""
  key = jax.random.key(config.seed + 3)
  top_keys = list(sampled["mass"])[:config.predictive.top_k]
  top = [sampled["by_key"][k] for k in top_keys]
  masses = [sampled["mass"][k] for k in top_keys]
  kw = dict(num_samples=config.predictive.num_samples, num_fit=task.num_fit, num_points=task.num_points)
  mixture = report.predictive_scores(jax.random.fold_in(key, 0), evaluator, top, masses, **kw)
  top_rows = []
  for m, mass, scores in zip(top, masses, mixture["per_structure"]):
    top_rows.append({"mass": mass, **report.describe(evaluator, m), **scores})
  results = {
      "experiment": "model_smc", "task": task.name, "dataset": task.dataset, "citation": task.citation,
      "algorithm": config.algorithm, "proposal": config.proposal, "evidence": config.fit.evidence,
      "num_particles": config.smc.num_particles if config.algorithm == "tempered" else config.reference.num_particles,
      "states": list(task.states), "observed": list(task.observed_names),
      "rows": {"fit": task.num_fit, "heldout": task.num_points - task.num_fit,
               "times": np.asarray(task.times).tolist()},
      "library": list(evaluator.library.keys),
      "smc": {"iterations": sampled["iterations"], "final_beta": sampled["beta"],
              "log_normalizer": report.finite_or_text(sampled["log_normalizer"]), "proposals": sampled["proposals"],
              "fits": sampled["fits"], "wall_time_s": sampled["elapsed"], "rejections": sampled["rejections"],
              "top": top_rows, "mixture": {k: v for k, v in mixture.items() if k != "per_structure"},
              "diagnostics": sampled["diagnostics"]},
      "comparison": {},
  }
  results["comparison"]["ModelSMC (posterior mixture)"] = _pick(mixture)
  if top_rows:
    results["comparison"]["ModelSMC (top structure)"] = _pick(top_rows[0])
  if sampled.get("visited"):
    visited = sampled["visited"]["mass"]
    for row in top_rows:
      row["visited_mass"] = visited.get(row["key"], 0.0)
    v_keys = list(visited)[:config.predictive.top_k]
    v_structs = [st.from_key(k, evaluator.library) for k in v_keys]
    v_mix = report.predictive_scores(jax.random.fold_in(key, 2), evaluator, v_structs, [visited[k] for k in v_keys],
                                     **kw)
    results["visited"] = {
        "num_structures": sampled["visited"]["num_structures"],
        "top": [{"key": k, "mass": visited[k], **report.describe(evaluator, m), **sc}
                for k, m, sc in zip(v_keys, v_structs, v_mix["per_structure"])],
        "mixture": {k: v for k, v in v_mix.items() if k not in ("per_structure", "bands")},
    }
    results["comparison"]["ModelSMC (visited-set posterior)"] = _pick(v_mix)
  if hill is not None:
    h = report.predictive_scores(jax.random.fold_in(key, 1), evaluator, [hill["structure"]], [1.0], **kw)
    results["hill_climb"] = {**report.describe(evaluator, hill["structure"]), "proposals": hill["proposals"],
                             "accepted": hill["accepted"], "trace": hill["trace"], "rejections": hill["rejections"],
                             "wall_time_s": hill["wall_time_s"], **_pick(h), "median": h["bands"]["median"]}
    results["comparison"][f"hill climbing (N=1, {hill['proposals']} proposals)"] = _pick(h)
  sindy_median = None
  if "sindy" in config.baselines:
    t0 = time.perf_counter()
    y = np.asarray(task.data.y, np.float64)
    try:
      sf = sindy.fit(y, dt=task.spec.dt, num_fit=task.num_fit, num_points=task.num_points,
                     states=task.observed_names, threshold=config.sindy.threshold, degree=config.sindy.degree,
                     noise=task.spec.noise, noise_offset=task.spec.noise_offset)
      scores = report.sindy_scores(sf, y, task.num_fit, noise=task.spec.noise, noise_offset=task.spec.noise_offset,
                                   num_samples=config.predictive.num_samples, seed=config.seed)
      sindy_median = scores.pop("median")
      results["sindy"] = {"equations": sf.equations, "sigma": sf.sigma.tolist(), "num_terms": sf.num_terms,
                          "wall_time_s": time.perf_counter() - t0, **scores}
      results["comparison"]["PySINDy (STLSQ, degree-2 library)"] = _pick(scores)
    except ValueError as e:
      results["sindy"] = {"error": str(e)}
  if task.truth is not None:
    results["truth"] = _truth(task, evaluator, sampled)
  y = np.asarray(task.data.y, np.float64)
  report.make_figures(results, ctx.writer, y, np.asarray(task.times), task.time_label, task.observed_names,
                      sindy_median)
  return results


def _visited_posterior(config, evaluator) -> dict:
  """``p(m) Z(m)`` renormalised over every structure fitted so far, largest first.

  The sampler's particle frequencies carry Monte Carlo error (and can miss
  mixing between modes); since ``p(m) Z(m)`` is known for every visited
  structure, this is the exact posterior restricted to the visited set.
  """
  k_all = len(evaluator.library)
  keys, logs = [], []
  for k, rec in evaluator.cache.items():
    if math.isfinite(rec.log_evidence):
      m = st.from_key(k, evaluator.library)
      keys.append(k)
      logs.append(rec.log_evidence + st.log_prior(m, k_all, p_include=config.smc.p_include,
                                                  max_terms=config.smc.max_terms))
  logs = np.asarray(logs, np.float64)
  w = np.exp(logs - np.logaddexp.reduce(logs))
  order = np.argsort(-w)
  return {keys[i]: float(w[i]) for i in order}


def _pick(scores: dict) -> dict:
  return {k: scores[k] for k in ("heldout_lpd", "coverage50", "coverage90", "train_coverage50", "train_coverage90")}


def _truth(task, evaluator, sampled) -> dict:
  """Rank and mass of the true structure; coverage of its parameters."""
  m = tasks.truth_structure(task, evaluator.library)
  if m is None:
    return {"key": None, "rank": None, "mass": 0.0, "covered": 0, "num_params": 0, "note": "truth outside the library"}
  k = evaluator.key(m)
  ranking = list(sampled["mass"])
  rank = ranking.index(k) + 1 if k in ranking else None
  table = report.parameter_table(evaluator, m)
  # Match true parameters to fitted ones by the order of appearance.
  true_eqs, true_names = st.equations(m, evaluator.library)
  scratch = st.Library(evaluator.library.states)
  ordered = []
  for state in evaluator.library.states:
    tree = ex.parse(task.truth["equations"][state], states=scratch.states)
    terms = sorted(((ex.canonical_text(b), ex.params_of(b)) for _, b in ex.split_terms(tree)), key=lambda t: t[0])
    for _, names in terms:
      ordered += list(names)
  params = {}
  covered = 0
  for name, true_name in zip(true_names, ordered):
    row = table[name]
    truth = float(task.truth["params"][true_name])
    inside = float(row["lo90"]) <= truth <= float(row["hi90"])
    covered += int(inside)
    params[true_name] = {"true": truth, **row, "covered": inside}
  del true_eqs
  return {"key": k, "rank": rank, "mass": float(sampled["mass"].get(k, 0.0)), "covered": covered,
          "num_params": len(params), "params": params}


EXPERIMENT = Experiment(
    name="model_smc",
    get_config=smc_config.get_config,
    schema=schema,
    run=run,
    summary=report.format_table,
    markdown=report.markdown_table,
)
