"""Tempered Sequential Monte Carlo over model structures.

Target (a reconstruction: the principled Bayesian form of ModelSMC's model discovery): the posterior over
structures ``pi(m) ∝ p(m) Z(m)``, ``Z(m) = ∫ p(x | theta, m) p(theta | m) dtheta``
estimated by :mod:`methods.model_smc.evidence`. The sampler moves through
``pi_beta(m) ∝ p(m) Z(m)^beta`` with ``0 = beta_0 < ... < beta_K = 1``
(Del Moral, Doucet and Jasra 2006; Chopin and Papaspiliopoulos 2020, ch. 17):

1. ``init``: ``N`` exact draws from the structure prior ``p(m)``, equal weights.
2. each ``step``:

   * ``beta_t`` by bisection so that the ESS of the reweighted particles is
     ``rho N`` (or 1 if the ESS stays above that), at most ``max_delta``
     above ``beta_{t-1}``;
   * incremental log-weight ``(beta_t - beta_{t-1}) log Z(m_i)``; the log
     normaliser estimate grows by ``log sum_i W_i exp(increment_i)``;
   * systematic resampling when ``ESS < threshold * N``;
   * ``mcmc_steps`` Metropolis-Hastings sweeps at ``beta_t`` with the grammar
     proposal ``q`` and acceptance
     ``min(1, p(m') Z(m')^beta q(m | m') / (p(m) Z(m)^beta q(m' | m)))``.

The structures are discrete Python objects, so this loop runs on the host;
each sweep's new structures are fitted together by one jitted, vmapped call
(:class:`methods.model_smc.evaluator.Evaluator`), and the weight algebra is
the ``jnp`` code of :mod:`methods.common.smc_math`. At ``beta = 1`` the
weighted particles estimate ``pi(m)`` and ``exp(log_normalizer)`` estimates
``sum_m p(m) Z(m)``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from methods.common import hparams
from methods.common import smc_math
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.grammar import GrammarProposal


@dataclasses.dataclass(frozen=True)
class SMCConfig(hparams.Hyperparameters):
  """Static settings of tempered SMC over structures (config section ``smc``)."""

  num_particles: int = hparams.field(64, "N, the number of particles.", low=2)
  target_ess: float = hparams.field(0.5, "rho: each tempering step keeps ESS = rho N.", low=0, high=1,
                                    low_open=True, high_open=True)
  resample_threshold: float = hparams.field(0.5, "Resample when ESS < threshold * N.", low=0, high=1, low_open=True)
  mcmc_steps: int = hparams.field(2, "Metropolis-Hastings sweeps after each reweighting.", low=1)
  max_delta: float = hparams.field(
      1.0, "Cap on beta_t - beta_{t-1}: at least 1 / max_delta tempering steps explore at low beta.", low=0,
      high=1, low_open=True)
  max_iterations: int = hparams.field(60, "Safety cap on tempering steps.", low=1)
  p_include: float = hparams.field(0.25, "Prior probability that a body is in an equation.", low=0, high=1,
                                   low_open=True, high_open=True)
  max_terms: int = hparams.field(3, "Most terms per equation.", low=1)
  move_probs: tuple[float, ...] = hparams.field(
      (0.3, 0.3, 0.2, 0.2), "Probabilities of the grammar's moves: add, remove, replace, operator.", low=0)

  def checks(self):
    if len(self.move_probs) != 4 or sum(self.move_probs) <= 0:
      yield "move_probs", "four non-negative probabilities (add, remove, replace, operator) with a positive sum"


class SMCState(NamedTuple):
  """Host state of the sampler.

  Attributes:
    particles: ``N`` structures.
    log_weights: ``[N]`` float64 unnormalised log-weights.
    log_evidence: ``[N]`` float64 ``log Z`` of the particles.
    beta: current inverse temperature.
    log_normalizer: running estimate of ``log sum_m p(m) Z(m)^beta``.
    iteration: tempering steps done.
    proposals: structures proposed so far (the ``N`` initial draws included).
  """

  particles: tuple[st.Structure, ...]
  log_weights: np.ndarray
  log_evidence: np.ndarray
  beta: float
  log_normalizer: float
  iteration: int
  proposals: int


class StepInfo(NamedTuple):
  """Diagnostics of one tempering step."""

  iteration: int
  beta: float
  ess: float
  resampled: bool
  acceptance: float
  unique: int
  log_normalizer: float
  proposals: int
  fits: int
  mass: dict


@functools.partial(jax.jit, static_argnames=("rho",))
def _temper(log_weights, log_evidence, beta, rho, max_delta):
  new_beta = smc_math.next_temperature(log_weights, log_evidence, beta, target_ess_fraction=rho)
  new_beta = jnp.minimum(new_beta, beta + max_delta)
  incr = smc_math.tempered_increments(log_evidence, new_beta - beta)
  log_ratio = smc_math.log_mean_weight(log_weights, incr)
  new_w = log_weights + incr
  return new_beta, incr, log_ratio, smc_math.ess(new_w), smc_math.normalize(new_w)


_systematic = jax.jit(smc_math.systematic_resample, static_argnames=("num_samples",))


def host_rng(key: jax.Array) -> np.random.Generator:
  """A NumPy generator seeded from a JAX key (deterministic)."""
  return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())


def posterior_mass(particles, log_weights, key_fn: Callable) -> dict:
  """``{canonical key: sum of normalised weights}``, largest first."""
  w = np.asarray(smc_math.normalize(jnp.asarray(log_weights, jnp.float32)), np.float64)
  mass = collections.defaultdict(float)
  for m, wi in zip(particles, w):
    mass[key_fn(m)] += float(wi)
  return dict(sorted(mass.items(), key=lambda kv: -kv[1]))


def init(key: jax.Array, evaluator: Evaluator, cfg: SMCConfig) -> SMCState:
  """``N`` exact prior draws, their evidences and equal weights at ``beta = 0``."""
  rng = host_rng(key)
  n_bodies, n_states = len(evaluator.library), len(evaluator.library.states)
  particles = tuple(st.sample_prior(rng, n_bodies, n_states, p_include=cfg.p_include,
                                    max_terms=cfg.max_terms) for _ in range(cfg.num_particles))
  log_z = evaluator.evaluate(particles)
  return SMCState(particles, np.zeros(cfg.num_particles), log_z, 0.0, 0.0, 0, cfg.num_particles)


def _log_accept(beta, lz_new, lz_old, lp_new, lp_old, lq_rev, lq_fwd) -> float:
  if beta == 0.0:
    like = 0.0
  elif lz_new == -math.inf:
    return -math.inf
  elif lz_old == -math.inf:
    return math.inf
  else:
    like = beta * (lz_new - lz_old)
  return like + (lp_new - lp_old) + (lq_rev - lq_fwd)


def mh_sweep(key: jax.Array, particles, log_z, beta: float, evaluator: Evaluator,
             grammar: GrammarProposal, cfg: SMCConfig):
  """One Metropolis-Hastings move per particle, invariant for ``pi_beta``.

  Returns:
    ``(particles, log_z, accepted [N] bool)``.
  """
  n = len(particles)
  k_prop, k_acc = jax.random.split(key)
  u = np.asarray(jax.random.uniform(k_prop, (n,)), np.float64)
  log_v = np.log(np.asarray(jax.random.uniform(k_acc, (n,)), np.float64))
  proposed = [grammar.sample(m, ui) for m, ui in zip(particles, u)]
  lz_prop = evaluator.evaluate(proposed)
  k_all = len(evaluator.library)
  prior = functools.partial(st.log_prior, num_bodies=k_all, p_include=cfg.p_include, max_terms=cfg.max_terms)
  out_p, out_z, accepted = list(particles), np.array(log_z, np.float64), np.zeros(n, bool)
  for i, (m, m2) in enumerate(zip(particles, proposed)):
    if m2 == m:
      continue
    log_a = _log_accept(beta, lz_prop[i], log_z[i], prior(m2), prior(m),
                        grammar.log_prob(m, m2), grammar.log_prob(m2, m))
    if log_v[i] < log_a:
      out_p[i], out_z[i], accepted[i] = m2, lz_prop[i], True
  return tuple(out_p), out_z, accepted


def step(state: SMCState, key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal,
         cfg: SMCConfig) -> tuple[SMCState, StepInfo]:
  """One tempering step: reweight, (maybe) resample, rejuvenate."""
  n = cfg.num_particles
  k_res, k_mh = jax.random.split(key)
  lw = jnp.asarray(state.log_weights, jnp.float32)
  lz = jnp.asarray(state.log_evidence, jnp.float32)
  new_beta, incr, log_ratio, ess, weights = _temper(lw, lz, jnp.float32(state.beta), cfg.target_ess,
                                                    jnp.float32(cfg.max_delta))
  new_beta = float(new_beta)
  if new_beta >= 1.0 - 1e-6:
    new_beta = 1.0
  log_w = state.log_weights + np.asarray(incr, np.float64)
  log_norm = state.log_normalizer + float(log_ratio)
  particles, log_z = state.particles, state.log_evidence
  resampled = bool(float(ess) < cfg.resample_threshold * n)
  if resampled:
    idx = np.asarray(_systematic(k_res, weights, num_samples=n))
    particles = tuple(particles[i] for i in idx)
    log_z = log_z[idx]
    log_w = np.zeros(n)
  accepted = 0
  for j in range(cfg.mcmc_steps):
    particles, log_z, acc = mh_sweep(jax.random.fold_in(k_mh, j), particles, log_z, new_beta,
                                     evaluator, grammar, cfg)
    accepted += int(acc.sum())
  proposals = state.proposals + n * cfg.mcmc_steps
  new = SMCState(particles, log_w, log_z, new_beta, log_norm, state.iteration + 1, proposals)
  info = StepInfo(
      iteration=new.iteration,
      beta=new_beta,
      ess=float(ess),
      resampled=resampled,
      acceptance=accepted / max(n * cfg.mcmc_steps, 1),
      unique=len({evaluator.key(m) for m in particles}),
      log_normalizer=log_norm,
      proposals=proposals,
      fits=evaluator.num_fits,
      mass=posterior_mass(particles, log_w, evaluator.key),
  )
  return new, info


def run(key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal, cfg: SMCConfig, *,
        state: Optional[SMCState] = None,
        callback: Optional[Callable[[SMCState, StepInfo], None]] = None) -> SMCState:
  """Runs (or resumes) tempered SMC until ``beta = 1``.

  Args:
    key: base key; initial draws use ``fold_in(key, 0)``, step ``t`` uses
      ``fold_in(key, t)``, so a resumed run repeats an uninterrupted one.
    evaluator: evidence of structures.
    grammar: the exact-density proposal.
    cfg: settings.
    state: a state to resume from (default: a fresh :func:`init`).
    callback: called after every step with the new state and its info.

  Raises:
    RuntimeError: ``beta`` did not reach 1 within ``max_iterations``.
  """
  if state is None:
    state = init(jax.random.fold_in(key, 0), evaluator, cfg)
  while state.beta < 1.0:
    if state.iteration >= cfg.max_iterations:
      raise RuntimeError(f"beta reached only {state.beta:.4g} after {cfg.max_iterations} tempering "
                         "steps; raise smc.max_iterations or lower smc.target_ess")
    state, info = step(state, jax.random.fold_in(key, state.iteration + 1), evaluator, grammar, cfg)
    if callback is not None:
      callback(state, info)
  return state
