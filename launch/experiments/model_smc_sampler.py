"""Sampler orchestration of the ``model_smc`` experiment: run, checkpoint, resume.

Both samplers -- tempered SMC (:mod:`methods.model_smc.smc`) and the
reference's evidence-weighted scheme (:mod:`methods.model_smc.reference`) --
go through one callback: after every iteration it logs the diagnostics and
checkpoints the sampler's state, typed: the float arrays are a
:class:`SamplerArrays` (``-inf`` log-weights allowed) and the rest (particles,
counters) its JSON metadata. The sampler's outcome is a :class:`Sampled`,
which the final checkpoint stores with :meth:`Sampled.encode`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple, Optional

from absl import logging
import jax
import numpy as np

from launch import llm_client
from launch.runtime import Context
from methods.common import hparams
from methods.model_smc import expr as ex
from methods.model_smc import llm as llm_lib
from methods.model_smc import reference
from methods.model_smc import smc
from methods.model_smc import structure as st


def encode_structure(m: st.Structure, library: st.Library) -> list:
  """JSON form of a structure (bodies by canonical text)."""
  return [[[library.keys[k], s] for k, s in eq] for eq in m.terms]


def decode_structure(obj: list, library: st.Library) -> st.Structure:
  return st.Structure.make([[(library.add(ex.parse(b, states=library.states)), s) for b, s in eq] for eq in obj])


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
  def make(cls, n: int, log_weights=None, log_evidence=None, beta: float = 0.0, log_normalizer: float = 0.0):
    def arr(x):
      return np.zeros(n, np.float64) if x is None else np.asarray(x, np.float64)
    return cls(arr(log_weights), arr(log_evidence), np.float64(beta), np.float64(log_normalizer))


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

  def by_key(self, library: st.Library) -> dict:
    return {st.key(m, library): m for m in self.particles}

  def encode(self, library: st.Library) -> dict:
    out = self._asdict()
    out["particles"] = [encode_structure(m, library) for m in self.particles]
    out["log_normalizer"] = self.log_normalizer if math.isfinite(self.log_normalizer) else "nan"
    return out

  @classmethod
  def decode(cls, obj: dict, library: st.Library) -> "Sampled":
    obj = dict(obj)
    obj["particles"] = tuple(decode_structure(p, library) for p in obj["particles"])
    obj["log_normalizer"] = float(obj["log_normalizer"])
    obj["fitted"] = tuple(obj.get("fitted", ()))
    return cls(**obj)


class _Algorithm(NamedTuple):
  """What differs between the two samplers, for the one callback."""

  num_particles: int
  run: Callable[[Any, Callable], Any]  # (state or None, callback) -> final state
  fraction: Callable[[Any], float]  # progress in [0, 1]
  finished: Callable[[Any], bool]
  metrics: Callable[[Any], dict]  # info -> (diagnostics extras, logged scalars, progress fields)
  encode: Callable[[Any], tuple[SamplerArrays, dict]]
  decode: Callable[[SamplerArrays, dict], Any]


def _tempered(config, evaluator, grammar, key) -> _Algorithm:
  cfg = hparams.from_config(smc.SMCConfig, config.smc)
  lib = evaluator.library

  def metrics(info):
    logged = dict(beta=info.beta, ess=info.ess, resampled=int(info.resampled), acceptance=info.acceptance,
                  unique=info.unique, log_normalizer=info.log_normalizer, proposals=info.proposals, fits=info.fits,
                  top_mass=next(iter(info.mass.values())))
    shown = {"ESS": f"{info.ess:.1f}", "acc": f"{info.acceptance:.2f}", "unique": info.unique}
    return {}, logged, shown

  def encode(state):
    arrays = SamplerArrays.make(cfg.num_particles, state.log_weights, state.log_evidence, state.beta,
                                state.log_normalizer)
    return arrays, {"particles": [encode_structure(m, lib) for m in state.particles],
                    "iteration": state.iteration, "proposals": state.proposals}

  def decode(arrays, s):
    return smc.SMCState(tuple(decode_structure(p, lib) for p in s["particles"]),
                        np.array(arrays.log_weights, np.float64), np.array(arrays.log_evidence, np.float64),
                        float(arrays.beta), float(arrays.log_normalizer), int(s["iteration"]), int(s["proposals"]))

  return _Algorithm(
      num_particles=cfg.num_particles,
      run=lambda state, cb: smc.run(key, evaluator, grammar, cfg, state=state, callback=cb),
      fraction=lambda state: state.beta, finished=lambda state: state.beta >= 1.0,
      metrics=metrics, encode=encode, decode=decode)


def _evidence_weighted(config, task, evaluator, grammar, key) -> _Algorithm:
  rcfg = hparams.from_config(reference.ReferenceConfig, config.reference,
                             resample_threshold=config.smc.resample_threshold)
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
    arrays = SamplerArrays.make(rcfg.num_particles, None, state.log_evidence)
    return arrays, {"particles": [encode_structure(m, lib) for m in state.particles], "iteration": state.iteration,
                    "proposals": state.proposals, "ancestry": [list(a) for a in state.ancestry],
                    "history": list(state.history), "rejections": state.rejections}

  def decode(arrays, s):
    return reference.ReferenceState(
        tuple(decode_structure(p, lib) for p in s["particles"]), np.array(arrays.log_evidence, np.float64),
        tuple(tuple(a) for a in s["ancestry"]), tuple(s["history"]), int(s["iteration"]), int(s["proposals"]),
        dict(s["rejections"]))

  def run(state, cb):
    return reference.run_reference(key, evaluator, propose, rcfg, p_include=config.smc.p_include,
                                   max_terms=config.smc.max_terms, state=state, callback=cb)

  return _Algorithm(
      num_particles=rcfg.num_particles, run=run, fraction=lambda state: state.iteration / rcfg.iterations,
      finished=lambda state: state.iteration >= rcfg.iterations, metrics=metrics, encode=encode, decode=decode)


def algorithm(config, task, evaluator, grammar) -> _Algorithm:
  key = jax.random.key(config.seed)
  if config.algorithm == "tempered":
    return _tempered(config, evaluator, grammar, key)
  return _evidence_weighted(config, task, evaluator, grammar, key)


def _progress(task: str, t0: float, it: int, fraction: float, shown: dict, fits: int) -> None:
  elapsed = time.perf_counter() - t0
  eta = elapsed * (1 - fraction) / fraction if 0 < fraction < 1 else 0.0
  rate = fits / elapsed if elapsed > 0 else float("nan")
  extra = " ".join(f"{k} {v}" for k, v in shown.items())
  logging.info("[model_smc %s] iteration %d beta %.4f %s | %d fits (%.1f fits/s) ETA %s", task, it, fraction, extra,
               fits, rate, f"{eta:.0f}s" if fraction > 0 else "?")


def run_sampler(config, ctx: Context, alg: _Algorithm, evaluator, meta: Optional[dict],
                arrays: Optional[SamplerArrays]) -> Sampled:
  """Runs (or resumes, from ``arrays`` and ``meta``) the structure sampler."""
  lib = evaluator.library
  diagnostics = list(meta["diagnostics"]) if meta else []
  elapsed0 = float(meta["elapsed"]) if meta else 0.0
  t0 = time.perf_counter()
  state = alg.decode(arrays, meta["sampler"]) if meta else None

  def callback(state, info):
    extras, logged, shown = alg.metrics(info)
    d = info._asdict()
    d["mass"] = dict(list(d["mass"].items())[:config.predictive.top_k])
    d.update({k: v for k, v in extras.items() if k == "beta"})
    d["elapsed_s"] = elapsed0 + time.perf_counter() - t0
    d.update({k: v for k, v in extras.items() if k != "beta"})
    diagnostics.append(d)
    ctx.writer.log(state.iteration, **logged)
    _progress(config.task, t0, state.iteration, alg.fraction(state), shown, info.fits)
    state_arrays, sampler_meta = alg.encode(state)
    meta_out = {"stage": "sampler", "diagnostics": diagnostics, "elapsed": d["elapsed_s"], "library": list(lib.keys),
                "evaluator": evaluator.state_dict(), "sampler": sampler_meta}
    ctx.save(state.iteration, state_arrays, meta_out, force=alg.finished(state))

  final = alg.run(state, callback)
  if config.algorithm == "tempered":
    mass = smc.posterior_mass(final.particles, final.log_weights, evaluator.key)
    beta, log_normalizer, rejections = final.beta, final.log_normalizer, {}
  else:
    mass = smc.posterior_mass(final.particles, final.log_evidence / config.reference.temperature, evaluator.key)
    beta, log_normalizer, rejections = 1.0, float("nan"), final.rejections
    counter = llm_lib.RejectionCounter(rejections)
    if counter.total:
      logging.log(logging.WARNING if counter.total >= final.proposals else logging.INFO, "[model_smc %s] %s",
                  config.task, counter.summary(final.proposals))
  visited = None
  if config.algorithm == "tempered":  # before the baselines add their own structures to the cache
    v = visited_posterior(config, evaluator)
    visited = {"num_structures": len(v), "mass": dict(list(v.items())[:50]), "order": list(v)}
  health = evaluator.fit_health()
  logging.info("[model_smc %s] %d of %d restarts never finite; %d structures failed with every restart "
               "non-finite", config.task, health["nonfinite_restarts"], health["structures"] * health["restarts_per_fit"],
               health["failed_all_restarts_nonfinite"])
  return Sampled(particles=final.particles, mass=mass, iterations=final.iteration, beta=beta,
                 log_normalizer=log_normalizer, proposals=final.proposals, diagnostics=diagnostics,
                 elapsed=elapsed0 + time.perf_counter() - t0, rejections=rejections, fits=evaluator.num_fits,
                 visited=visited, fitted=tuple(evaluator.cache), fit_health=health)


def proposer(config, task, evaluator, grammar):
  """The structure proposer of ``config.proposal`` (the grammar, or an LLM)."""
  if config.proposal == "grammar":
    return reference.grammar_proposer(grammar)
  cfg = hparams.from_config(llm_client.LLMConfig, config.llm)
  client = llm_client.ChatClient.from_config(cfg)
  return reference.llm_proposer(llm_lib.LLMProposer(client, evaluator.library, task.description,
                                                    max_params=cfg.max_params))


def visited_posterior(config, evaluator) -> dict:
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
