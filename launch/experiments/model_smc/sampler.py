"""Sampler orchestration of the ``model_smc`` experiment: run, checkpoint, resume.

Both samplers -- tempered SMC (:mod:`methods.model_smc.smc`) and the
reference's evidence-weighted scheme (:mod:`methods.model_smc.reference`) --
go through one callback: after every iteration it logs the diagnostics and
checkpoints the sampler's state, typed: the float arrays are a
:class:`SamplerArrays` (``-inf`` log-weights allowed) and the rest (particles,
counters) its JSON metadata, by the states' codec
(:mod:`methods.model_smc.codec`). The sampler's outcome is a
:class:`Sampled`, which the final checkpoint stores with
:meth:`Sampled.encode`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple, Optional

from absl import logging
import jax
import numpy as np

from launch import llm_client
from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import profile as profile_lib
from launch.runtime import Context
from methods.model_smc import codec
from methods.model_smc import gradient_matching as gm_lib
from methods.model_smc import llm as llm_lib
from methods.model_smc import pooled as pooled_lib
from methods.model_smc import reference
from methods.model_smc import smc
from methods.model_smc import structure as st


class SamplerArrays(NamedTuple):
  """The sampler's float arrays in a checkpoint (float64).

  ``LOG_WEIGHTS`` declares the leaves that may hold ``-inf`` (a weight of
  zero); the checkpointer still refuses NaN and ``+inf`` there.
  """

  log_weights: np.ndarray  # [N] unnormalised log-weights (zeros for the reference's scheme)
  log_evidence: np.ndarray  # [N] log Z of the particles
  beta: np.ndarray  # [] inverse temperature
  log_normalizer: np.ndarray  # [] running log sum_m p(m) Z(m)^beta

  LOG_WEIGHTS = ("log_weights", "log_evidence", "log_normalizer")

  @classmethod
  def make(cls, n, log_weights=None, log_evidence=None, beta=0.0, log_normalizer=0.0):
    """Arrays of shape ``n`` (an int, or ``(runs, N)``: then ``beta`` and ``log_normalizer`` are ``[runs]``)."""
    shape = (n,) if isinstance(n, int) else tuple(n)

    def arr(x, shp):
      return np.zeros(shp, np.float64) if x is None else np.broadcast_to(np.asarray(x, np.float64), shp).copy()
    return cls(arr(log_weights, shape), arr(log_evidence, shape), arr(beta, shape[:-1]),
               arr(log_normalizer, shape[:-1]))


class Sampled(NamedTuple):
  """What the structure sampler produced (the ``done`` checkpoint holds it)."""

  particles: tuple[st.Structure, ...]
  mass: dict  # structure key -> particle mass, largest first
  iterations: int
  beta: float
  log_normalizer: float  # NaN for the evidence-weighted scheme
  proposals: int
  diagnostics: list  # one dict per iteration
  elapsed: float  # seconds, resumed runs included
  rejections: dict  # reason -> count of rejected proposals
  fits: int  # the sampler's own fits (the baselines add theirs later)
  visited: Optional[dict] = None  # the visited-set posterior (tempered sampler)
  fitted: tuple = ()  # keys of every structure the sampler fitted (before the baselines)
  fit_health: Optional[dict] = None  # Evaluator.fit_health over the sampler's fits
  runs: tuple = ()  # per independent run (tempered sampler): mass, counters, normaliser
  mixing: Optional[dict] = None  # particle mass against the visited-set posterior (mixing_check)

  def structure(self, key: str, library: st.Library) -> st.Structure:
    """The structure of a key of ``mass``.

    Mass is carried by the final particles and, through the final sweeps'
    Rao-Blackwellised average, by structures that were only proposed (or
    were particles earlier); every one of them is rebuilt from its canonical
    key, so every structure that carries mass can be described and scored.
    """
    return st.from_key(key, library)

  def encode(self, library: st.Library) -> dict:
    out = self._asdict()
    out["particles"] = [codec.encode_structure(m, library) for m in self.particles]
    out["log_normalizer"] = self.log_normalizer if math.isfinite(self.log_normalizer) else "nan"
    return out

  @classmethod
  def decode(cls, obj: dict, library: st.Library) -> "Sampled":
    obj = dict(obj)
    obj["particles"] = tuple(codec.decode_structure(p, library) for p in obj["particles"])
    obj["log_normalizer"] = float(obj["log_normalizer"])
    obj["fitted"] = tuple(obj.get("fitted", ()))
    return cls(**obj)


class _Algorithm(NamedTuple):
  """What differs between the two samplers, for the one callback."""

  num_particles: int
  template: Callable[[], SamplerArrays]  # the checkpoint's arrays (shapes)
  run: Callable[[Any, Callable], Any]  # (state or None, callback) -> final state
  phases: tuple[str, ...]  # the phases each run goes through, in order
  num_runs: int
  phase_fraction: Callable[[Any, Any], float]  # (state, info) -> completed fraction of info's phase
  where: Callable[[Any, Any], str]  # (state, info) -> the position within the phase, for the progress line
  finished: Callable[[Any], bool]
  metrics: Callable[[Any], dict]  # info -> (diagnostics extras, logged scalars, progress fields)
  encode: Callable[[Any], tuple[SamplerArrays, dict]]
  decode: Callable[[SamplerArrays, dict], Any]


def _tempered(config, evaluator, grammar, key) -> _Algorithm:
  prior = smc_config.SECTIONS.build(config, st.PriorConfig)
  cfg = smc_config.SECTIONS.build(config, smc.TemperingConfig)
  final = smc_config.SECTIONS.build(config, smc.FinalConfig)
  lib = evaluator.library
  candidates = gm_lib.candidates(evaluator.model(), evaluator.data, num_rows=evaluator.cfg.fit_rows,
                                 max_terms=prior.max_terms, count=cfg.candidates)
  shape = (cfg.num_runs, cfg.num_particles)

  def metrics(info):
    logged = dict(run=info.run, beta=info.beta, ess=info.ess, resampled=int(info.resampled),
                  acceptance=info.acceptance, unique=info.unique, log_normalizer=info.log_normalizer,
                  proposals=info.proposals, fits=info.fits, top_mass=next(iter(info.mass.values())),
                  moves=info.moves)
    shown = {"ESS": f"{info.ess:.1f}", "acc": f"{info.acceptance:.2f}", "unique": info.unique}
    return {}, logged, shown

  def phase_fraction(pooled, info):
    if info.phase == "temper":
      return info.beta
    if info.phase == "search":
      return 1.0
    run = pooled.runs[info.run]
    by_moves = run.moves / final.moves if final.moves > 0 else 1.0
    by_sweeps = run.sweeps / final.max_sweeps if final.max_sweeps > 0 else 1.0
    return min(1.0, max(by_moves, by_sweeps))

  def where(pooled, info):  # the progress line's position within the phase
    if info.phase == "temper":
      return f"step {info.iteration}, beta {info.beta:.4f}"
    if info.phase == "search":
      return f"{final.local_search} searches done"
    run = pooled.runs[info.run]
    return f"sweep {run.sweeps}/{final.max_sweeps}, moves {run.moves:.2f}/{final.moves:g}"

  def encode(pooled):
    arrays = SamplerArrays.make(shape)
    runs = []
    for r, state in enumerate(pooled.runs):  # run r's arrays are row r; a run not started yet is null
      if state is None:
        runs.append(None)
        continue
      run_arrays, run_meta = codec.encode_smc(state, lib)
      for name, value in run_arrays.items():
        getattr(arrays, name)[r] = value
      runs.append(run_meta)
    return arrays, {"runs": runs}

  def decode(arrays, s):
    return pooled_lib.PooledState(tuple(
        None if d is None else codec.decode_smc({name: getattr(arrays, name)[r] for name in codec.SMC_ARRAYS}, d, lib)
        for r, d in enumerate(s["runs"])))

  return _Algorithm(
      num_particles=cfg.num_particles, template=lambda: SamplerArrays.make(shape),
      run=lambda state, cb: pooled_lib.run_pooled(key, evaluator, grammar, prior=prior, tempering=cfg, final=final,
                                                  state=state, callback=cb, candidates=candidates),
      phases=("temper", "search", "final"), num_runs=cfg.num_runs, phase_fraction=phase_fraction, where=where,
      finished=lambda pooled: pooled_lib.pooled_finished(pooled, cfg, final),
      metrics=metrics, encode=encode, decode=decode)


def _evidence_weighted(config, task, evaluator, grammar, key) -> _Algorithm:
  rcfg = smc_config.SECTIONS.build(config, reference.ReferenceConfig)
  prior = smc_config.SECTIONS.build(config, st.PriorConfig)
  lib = evaluator.library
  propose = proposer(config, task, evaluator, grammar)

  def metrics(info):
    extras = {"beta": 1.0, "acceptance": info.accepted / max(info.proposals, 1)}
    logged = dict(ess=info.ess, resampled=int(info.resampled), proposals=info.proposals, accepted=info.accepted,
                  unique=info.unique, best_log_evidence=info.best_log_evidence, fits=info.fits,
                  rejected=sum(info.rejections.values()))
    for kind, count in info.rejections.items():
      logging.info("proposals rejected so far (%s): %d", kind, count)
    return extras, logged, {"ESS": f"{info.ess:.1f}", "best": f"{info.best_log_evidence:.2f}"}

  def encode(state):
    arrays, meta = codec.encode_reference(state, lib)
    return SamplerArrays.make(rcfg.num_particles, None, arrays["log_evidence"]), meta

  def decode(arrays, s):
    return codec.decode_reference({"log_evidence": arrays.log_evidence}, s, lib)

  def run(state, cb):
    return reference.run_reference(key, evaluator, propose, rcfg, prior=prior, state=state, callback=cb)

  return _Algorithm(
      num_particles=rcfg.num_particles, template=lambda: SamplerArrays.make(rcfg.num_particles), run=run,
      phases=("iterate",), num_runs=1, phase_fraction=lambda state, info: state.iteration / rcfg.iterations,
      where=lambda state, info: f"iteration {state.iteration}/{rcfg.iterations}",
      finished=lambda state: state.iteration >= rcfg.iterations, metrics=metrics, encode=encode, decode=decode)


def algorithm(config, task, evaluator, grammar) -> _Algorithm:
  key = jax.random.key(config.seed)
  if config.algorithm == "tempered":
    return _tempered(config, evaluator, grammar, key)
  return _evidence_weighted(config, task, evaluator, grammar, key)


def _progress(task: str, alg: _Algorithm, state, info, shown: dict, fits: int, rate: float,
              eta: tuple) -> None:
  run = getattr(info, "run", 0)
  phase = getattr(info, "phase", alg.phases[0])
  extra = " ".join(f"{k} {v}" for k, v in shown.items())
  logging.info("[model_smc %s] run %d/%d %s: %s | %s | %d fits (%.1f fits/s) | %s", task, run + 1, alg.num_runs,
               phase, alg.where(state, info), extra, fits, rate, profile_lib.PhaseEta.text(*eta))


def run_sampler(config, ctx: Context, alg: _Algorithm, evaluator, meta: Optional[dict],
                arrays: Optional[SamplerArrays], profile: profile_lib.Profile) -> Sampled:
  """Runs (or resumes, from ``arrays`` and ``meta``) the structure sampler.

  Checkpoints are written at most every ``config.checkpoint_s`` seconds,
  at the end of every phase and at the end (a killed run repeats at most
  that much work, and ends with the same result). ``profile`` gets each
  step's time under its phase.
  """
  lib = evaluator.library
  diagnostics = list(meta["diagnostics"]) if meta else []
  elapsed0 = float(meta["elapsed"]) if meta else 0.0
  t0 = time.perf_counter()
  state = alg.decode(arrays, meta["sampler"]) if meta else None
  eta = profile_lib.PhaseEta(alg.num_runs, alg.phases)
  clock = {"mark": profile.mark(), "saved": None}

  def callback(state, info):
    extras, logged, shown = alg.metrics(info)
    d = info._asdict()
    d["mass"] = dict(list(d["mass"].items())[:config.predictive.top_k])
    d.update({k: v for k, v in extras.items() if k == "beta"})
    d["elapsed_s"] = elapsed0 + time.perf_counter() - t0
    d.update({k: v for k, v in extras.items() if k != "beta"})
    diagnostics.append(d)
    count = len(diagnostics)  # the checkpoint step: one per callback, across runs and phases
    ctx.writer.log(count, **logged)
    run, phase = getattr(info, "run", 0), getattr(info, "phase", alg.phases[0])
    fraction = alg.phase_fraction(state, info)
    elapsed = time.perf_counter() - t0
    _progress(config.task, alg, state, info, shown, info.fits, evaluator.num_fits / max(elapsed, 1e-9),
              eta.update(run, phase, fraction))
    now = time.perf_counter()
    due = (clock["saved"] is None or now - clock["saved"] >= config.checkpoint_s or fraction >= 1
           or alg.finished(state))
    saved = 0.0
    if due:
      state_arrays, sampler_meta = alg.encode(state)
      meta_out = {"stage": "sampler", "diagnostics": diagnostics, "elapsed": d["elapsed_s"],
                  "library": list(lib.keys), "evaluator": evaluator.state_dict(), "sampler": sampler_meta,
                  "profile": profile.as_dict()}
      ctx.save(count, state_arrays, meta_out, force=alg.finished(state))
      clock["saved"] = time.perf_counter()
      saved = clock["saved"] - now
    clock["mark"] = profile.add(phase, clock["mark"], checkpoint_seconds=saved)

  final = alg.run(state, callback)
  with profile.phase("averaging"):  # each run's Rao-Blackwellised average of its final sweeps, pooled
    return _sampled(config, evaluator, final, diagnostics, elapsed0 + time.perf_counter() - t0)


def _sampled(config, evaluator, final, diagnostics: list, elapsed: float) -> Sampled:
  """The :class:`Sampled` of a finished sampler state."""
  runs = ()
  if config.algorithm == "tempered":
    mass = pooled_lib.pooled_mass(final.runs, evaluator.key)
    beta = min(s.beta for s in final.runs)
    log_normalizer, rejections = pooled_lib.pooled_log_normalizer(final.runs), {}
    runs = tuple(run_summary(s, evaluator) for s in final.runs)
    particles = tuple(m for s in final.runs for m in s.particles)
    iterations = sum(s.iteration for s in final.runs)
    proposals = sum(s.proposals for s in final.runs)
  else:
    particles, iterations, proposals = final.particles, final.iteration, final.proposals
    temperature = smc_config.SECTIONS.build(config, reference.ReferenceConfig).temperature
    mass = smc.posterior_mass(final.particles, final.log_evidence / temperature, evaluator.key)
    beta, log_normalizer, rejections = 1.0, float("nan"), final.rejections
    counter = llm_lib.RejectionCounter(rejections)
    if counter.total:
      logging.log(logging.WARNING if counter.total >= final.proposals else logging.INFO, "[model_smc %s] %s",
                  config.task, counter.summary(final.proposals))
  health = evaluator.fit_health()
  logging.info("[model_smc %s] %d of %d restarts never finite; %d structures failed with every restart "
               "non-finite", config.task, health["nonfinite_restarts"], health["structures"] * health["restarts_per_fit"],
               health["failed_all_restarts_nonfinite"])
  return Sampled(particles=particles, mass=mass, iterations=iterations, beta=beta,
                 log_normalizer=log_normalizer, proposals=proposals, diagnostics=diagnostics,
                 elapsed=elapsed, rejections=rejections, fits=evaluator.num_fits,
                 fitted=tuple(evaluator.cache), fit_health=health, runs=runs)


def run_summary(state: smc.SMCState, evaluator) -> dict:
  """One run of the pooled sampler, for results.json (its whole particle mass: the TV needs it)."""
  mass = smc.run_mass(state, evaluator.key)
  return {"mass": mass, "iterations": state.iteration, "proposals": state.proposals, "final_sweeps": state.sweeps,
          "moves_per_particle": state.moves, "log_normalizer": state.log_normalizer,
          "num_elites": len(state.elites or ())}


# A mixing check passes when the pooled particle mass is within this total variation of the visited-set posterior
# (and every run has the same top structure): a reporting threshold, not a hyperparameter of the sampler.
TV_PASS = 0.1


def visited_summary(evaluator, prior: st.PriorConfig, visited: Optional[dict] = None) -> dict:
  """The visited-set posterior over every structure fitted so far (the baselines' included).

  ``visited``: ``pooled.visited_posterior(evaluator, prior)`` when the caller has it already.
  """
  v = pooled_lib.visited_posterior(evaluator, prior) if visited is None else visited
  return {"num_structures": len(v), "mass": dict(list(v.items())[:50]), "order": list(v)}


def mixing_check(evaluator, prior: st.PriorConfig, sampled: Sampled, hill: Optional[dict],
                 visited: Optional[dict] = None) -> dict:
  """Do the particles agree with ``p(m) Z(m)`` over the visited set, and the runs with each other?

  The visited set is every structure the evaluator fitted -- the sampler's
  and hill climbing's -- so a better structure that only hill climbing found
  counts against the sampler. Returns total variations (pooled and per run),
  each run's top structure and the pooled top's mass in each run, whether
  the runs agree, whether hill climbing's structure is in the sampler's own
  visited set, and ``passed`` (pooled TV < :data:`TV_PASS` and agreement). ``visited`` as in
  :func:`visited_summary`.
  """
  v = pooled_lib.visited_posterior(evaluator, prior) if visited is None else visited
  per_run = [r["mass"] for r in sampled.runs] or [sampled.mass]
  tops = [next(iter(m)) for m in per_run]
  top = next(iter(sampled.mass))
  top_masses = [float(m.get(top, 0.0)) for m in per_run]
  out = {
      "num_runs": len(per_run), "num_structures": len(v),
      "total_variation": pooled_lib.total_variation(sampled.mass, v),
      "total_variation_runs": [pooled_lib.total_variation(m, v) for m in per_run],
      "top_runs": tops, "agree": len(set(tops)) == 1, "top": top, "top_mass_runs": top_masses,
      "top_mass_spread": float(np.std(top_masses, ddof=1)) if len(top_masses) > 1 else 0.0,
      "visited_top": next(iter(v)), "visited_top_mass": float(next(iter(v.values()))), "threshold": TV_PASS,
      # Monte Carlo reference: n independent exact draws have E[TV] <= 0.5 sum_m sqrt(p(m) (1 - p(m)) / n).
      "total_variation_iid_bound": pooled_lib.iid_tv_bound(v, len(sampled.particles)),
  }
  out["passed"] = bool(out["total_variation"] < TV_PASS and out["agree"])
  if hill is not None:
    k_all = len(evaluator.library)
    h = hill["structure"]
    h_key = evaluator.key(h)
    best = max((evaluator.cache[k].log_evidence + prior.log_prior(st.from_key(k, evaluator.library), k_all)
                for k in sampled.fitted if k in evaluator.cache), default=-math.inf)
    h_joint = float(evaluator.record(h).log_evidence + prior.log_prior(h, k_all))
    out["hill_climb"] = {"key": h_key, "log_joint": h_joint, "sampler_best_log_joint": best,
                         "in_sampler_visited": h_key in set(sampled.fitted),
                         "sampler_found_better_or_equal": bool(best >= h_joint - 1e-9)}
  return out


def proposer(config, task, evaluator, grammar):
  """The structure proposer of ``config.proposal`` (the grammar, or an LLM)."""
  if config.proposal == "grammar":
    return reference.grammar_proposer(grammar)
  cfg = smc_config.SECTIONS.build(config, llm_client.LLMConfig)
  client = llm_client.ChatClient.from_config(cfg)
  return reference.llm_proposer(llm_lib.LLMProposer(client, evaluator.library, task.description,
                                                    max_params=cfg.max_params))
