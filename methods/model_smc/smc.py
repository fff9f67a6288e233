"""Tempered Sequential Monte Carlo over model structures.

Target (a reconstruction: the principled Bayesian form of ModelSMC's model discovery): the posterior over
structures ``pi(m) ∝ p(m) Z(m)``, ``Z(m) = ∫ p(x | theta, m) p(theta | m) dtheta``
estimated by :mod:`methods.model_smc.evidence`. The sampler moves through
``pi_beta(m) ∝ p(m) Z(m)^beta`` with ``0 = beta_0 < ... < beta_K = 1``
(Del Moral, Doucet and Jasra 2006; Chopin and Papaspiliopoulos 2020, ch. 17):

Its settings are three sections: the structure prior and grammar
(:class:`methods.model_smc.structure.PriorConfig`, shared with the
reference's scheme and hill climbing), the tempering (:class:`TemperingConfig`)
and the final phase at ``beta = 1`` (:class:`FinalConfig`).

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
     ``min(1, p(m') Z(m')^beta q(m | m') / (p(m) Z(m)^beta q(m' | m)))``
     (:mod:`methods.model_smc.moves`); with gradient-matching candidates
     ``C`` (:mod:`methods.model_smc.gradient_matching`, a reconstruction:
     fixed by the data before the run) the proposal is the mixture
     ``(1 - c - delta) q + c Uniform(C) + delta p`` with
     ``c = candidate_prob`` and ``delta = prior_prob`` (of the final phase).

3. at ``beta = 1`` (a reconstruction: the paper's sampler has no such phase;
   it lets the particles mix, so that their masses estimate ``p(m) Z(m)``
   over the visited structures rather than the last tempering step's draws):

   * ``local_search``: steepest ascent of ``log p(m) + log Z(m)`` over the
     full single-edit neighbourhood, from the run's best distinct particles
     and candidates;
     the ``num_elites`` best structures the run has seen (particles and
     searched neighbourhoods) become a fixed *elite set* ``E``;
   * rejuvenation sweeps at ``beta = 1`` until the acceptance-weighted move
     count (the sum over sweeps of the mean acceptance probability of moves
     that change the structure) reaches ``moves`` per particle, or
     ``max_sweeps`` sweeps. Their proposal is the mixture
     ``(1 - eps - delta) q(m' | m) + eps r(m') 1[m' in E] + delta p(m')`` with
     ``eps = elite_prob``, ``delta = prior_prob`` and ``r(m) ∝ p(m) Z(m)``
     over ``E`` (``elite_weights="posterior"``; a jump between two elites is
     then always accepted) or uniform: ``E`` is fixed before
     these sweeps and the mixture's density is exact, so the kernel stays
     invariant for ``p(m | x)``, and particles jump to the elites (an MH
     independence component restricted to ``E``; the prior component makes
     the jump's reverse possible from any structure, not only from an elite
     or a grammar neighbour of one).
   * the run's estimate of ``pi(m)`` (:func:`run_mass`) is the average over
     the second half of these sweeps, each Rao-Blackwellised over its
     proposals (the proposal gets the particle's weight times the
     acceptance probability, the current structure the rest).

Independent runs (``num_runs``, each with its own key, particles and elite
set) are pooled with equal weight per run (:func:`methods.model_smc.pooled.run_pooled`,
:func:`methods.model_smc.pooled.pooled_mass`); their spread is the multi-run check of mixing.

This module holds the tempering (:func:`init`, :func:`step`); the final
phase is :mod:`methods.model_smc.final` and a whole run, or several in
lockstep, :mod:`methods.model_smc.pooled`.

The structures are discrete Python objects, so this loop runs on the host.
Each step has a generator form (``*_gen``) that yields the structures whose
``log Z`` it needs: a driver answers them with one call to the evaluator
(:class:`methods.model_smc.evaluator.Evaluator`: cached structures are a
dictionary lookup, new ones are fitted together by one jitted, vmapped call),
for one run or for all runs at once. The weight algebra is the ``jnp`` code
of :mod:`methods.common.smc_math`. At ``beta = 1`` the weighted particles
estimate ``pi(m)`` and ``exp(log_normalizer)`` estimates ``sum_m p(m) Z(m)``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from methods.common import hparams
from methods.common import smc_math
from methods.model_smc import moves
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.grammar import GrammarProposal
from methods.model_smc.moves import host_rng  # noqa: F401  (re-exported)
from methods.model_smc.moves import mh_sweep  # noqa: F401  (re-exported)


@dataclasses.dataclass(frozen=True)
class TemperingConfig(hparams.Hyperparameters):
  """Tempered SMC from the prior to ``beta = 1`` (config section ``tempering``)."""

  num_particles: int = hparams.field(64, "N, the number of particles of each run.", low=2)
  num_runs: int = hparams.field(1, "Independent SMC runs, pooled with equal weight (their spread is reported).",
                                low=1)
  target_ess: float = hparams.field(0.5, "rho: each tempering step keeps ESS = rho N.", low=0, high=1,
                                    low_open=True, high_open=True)
  resample_threshold: float = hparams.field(0.5, "Resample when ESS < threshold * N.", low=0, high=1, low_open=True)
  mcmc_steps: int = hparams.field(2, "Metropolis-Hastings sweeps after each reweighting.", low=1)
  max_delta: float = hparams.field(
      1.0, "Cap on beta_t - beta_{t-1}: at least 1 / max_delta tempering steps explore at low beta.", low=0,
      high=1, low_open=True)
  max_iterations: int = hparams.field(60, "Safety cap on tempering steps.", low=1)
  candidates: int = hparams.field(
      0, "Gradient-matching candidate structures C (fixed by the data; 0: none): candidate_prob jumps while "
      "tempering, local-search starts and elite pool at beta = 1.", low=0)
  candidate_prob: float = hparams.field(
      0.0, "Probability that a tempering move proposes a uniform candidate (with the final phase's prior_prob "
      "fresh prior draws that make it reversible).", low=0, high=1, high_open=True)


@dataclasses.dataclass(frozen=True)
class FinalConfig(hparams.Hyperparameters):
  """The final phase at ``beta = 1``: local search, elite set, rejuvenation sweeps (config section ``final``)."""

  local_search: int = hparams.field(
      1, "Steepest-ascent searches of log p(m) Z(m) from this many best distinct particles.", low=0)
  local_search_steps: int = hparams.field(3, "Most ascent steps of each local search.", low=1)
  num_elites: int = hparams.field(8, "Size of the elite set E (best structures a run has seen at beta = 1).",
                                  low=0)
  elite_prob: float = hparams.field(0.2, "eps: probability that a final sweep proposes an elite.", low=0,
                                    high=1, high_open=True)
  elite_weights: str = hparams.field(
      "posterior", "Which elite: posterior (probability p(m) Z(m) / sum over E; a jump between elites is always "
      "accepted) or uniform.", choices=("posterior", "uniform"))
  moves: float = hparams.field(
      2.0, "Sweeps at beta = 1 until the acceptance-weighted move count per particle reaches this.", low=0)
  max_sweeps: int = hparams.field(10, "Cap on the sweeps at beta = 1.", low=0)
  prior_prob: float = hparams.field(
      0.0, "delta: probability that a jump sweep (elites, or candidates while tempering) proposes a fresh prior "
      "draw (a jump is then reversible from any structure).", low=0, high=1, high_open=True)

  def checks(self):
    if self.elite_prob > 0 and self.num_elites < 2:
      yield "num_elites", f"elite jumps (elite_prob={self.elite_prob}) need num_elites >= 2 (or elite_prob=0)"
    if self.elite_prob + self.prior_prob >= 1:
      yield "prior_prob", f"elite_prob + prior_prob = {self.elite_prob + self.prior_prob:g} leaves no grammar moves"
    if self.moves > 0 and self.max_sweeps < 1:
      yield "max_sweeps", f"moves={self.moves} needs max_sweeps >= 1 (or moves=0)"


def jump_problems(tempering: TemperingConfig, final: FinalConfig) -> list[tuple[str, str]]:
  """Problems of the two sections together, as ``(field of tempering, message)``.

  The tempering sweeps' candidate jumps share the final phase's prior draws,
  so ``candidate_prob + prior_prob`` must leave room for grammar moves.
  """
  if tempering.candidate_prob + final.prior_prob >= 1:
    return [("candidate_prob", "candidate_prob + the final phase's prior_prob must leave room for grammar moves")]
  return []


class SMCState(NamedTuple):
  """Host state of the sampler.

  Attributes:
    particles: ``N`` structures.
    log_weights: ``[N]`` float64 unnormalised log-weights.
    log_evidence: ``[N]`` float64 ``log Z`` of the particles.
    beta: current inverse temperature.
    log_normalizer: running estimate of ``log sum_m p(m) Z(m)^beta``.
    iteration: tempering steps done.
    proposals: structures proposed so far (the ``N`` initial draws and the
      local search's neighbourhoods included).
    elites: the elite set ``E`` once the local search at ``beta = 1`` is
      done (``None`` before).
    sweeps: final sweeps done at ``beta = 1``.
    moves: acceptance-weighted moves per particle of those sweeps.
    final_mass: one ``((structure, mass), ...)`` per final sweep,
      Rao-Blackwellised (each proposal gets ``W_i a_i``, its current
      structure ``W_i (1 - a_i)``); :func:`run_mass` averages the second
      half of the sweeps (the first half is burn-in).
  """

  particles: tuple[st.Structure, ...]
  log_weights: np.ndarray
  log_evidence: np.ndarray
  beta: float
  log_normalizer: float
  iteration: int
  proposals: int
  elites: Optional[tuple[st.Structure, ...]] = None
  sweeps: int = 0
  moves: float = 0.0
  final_mass: tuple[tuple[tuple[st.Structure, float], ...], ...] = ()


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
  run: int = 0  # the run of run_pooled
  phase: str = "temper"  # temper | search | final
  moves: float = 0.0  # acceptance-weighted moves per particle at beta = 1 so far


@functools.partial(jax.jit, static_argnames=("rho",))
def _temper(log_weights, log_evidence, beta, rho, max_delta):
  new_beta = smc_math.next_temperature(log_weights, log_evidence, beta, target_ess_fraction=rho)
  new_beta = jnp.minimum(new_beta, beta + max_delta)
  incr = smc_math.tempered_increments(log_evidence, new_beta - beta)
  log_ratio = smc_math.log_mean_weight(log_weights, incr)
  new_w = log_weights + incr
  return new_beta, incr, log_ratio, smc_math.ess(new_w), smc_math.normalize(new_w)


_systematic = jax.jit(smc_math.systematic_resample, static_argnames=("num_samples",))


def _by_key(pairs, key_fn: Callable) -> dict:
  """``{canonical key: summed mass}`` of ``(structure, mass)`` pairs with positive mass, largest first."""
  mass = collections.defaultdict(float)
  for m, v in pairs:
    if v > 0:  # a rejected proposal's zero share carries no mass
      mass[key_fn(m)] += float(v)
  return dict(sorted(mass.items(), key=lambda kv: -kv[1]))


def posterior_mass(particles, log_weights, key_fn: Callable) -> dict:
  """``{canonical key: sum of normalised weights}``, largest first."""
  w = np.asarray(smc_math.normalize(jnp.asarray(log_weights, jnp.float32)), np.float64)
  return _by_key(zip(particles, w), key_fn)


def run_mass(state: SMCState, key_fn: Callable) -> dict:
  """The run's estimate of ``pi(m)``, largest first.

  The average over the second half of the final sweeps at ``beta = 1``
  (each Rao-Blackwellised over its proposals; an MCMC time average), else
  the particles' weighted mass.
  """
  if not state.final_mass:
    return posterior_mass(state.particles, state.log_weights, key_fn)
  kept = [pair for sweep in state.final_mass[len(state.final_mass) // 2:] for pair in sweep]
  total = sum(v for _, v in kept)
  return _by_key(((m, v / total) for m, v in kept), key_fn)


class Step(NamedTuple):
  """What a sampler generator yields after each step (a list of structures it yields is a request for their
  ``log Z``; see :func:`methods.model_smc.moves.drive`)."""

  state: SMCState
  info: StepInfo


def init(key: jax.Array, evaluator: Evaluator, *, prior: st.PriorConfig, tempering: TemperingConfig) -> SMCState:
  """``N`` exact prior draws, their evidences and equal weights at ``beta = 0``."""
  return moves.drive(init_gen(key, evaluator, prior=prior, tempering=tempering), evaluator)


def init_gen(key: jax.Array, evaluator: Evaluator, *, prior: st.PriorConfig, tempering: TemperingConfig):
  """:func:`init` as a generator (yields the draws, receives their ``log Z``)."""
  rng = host_rng(key)
  n_bodies, n_states = len(evaluator.library), len(evaluator.library.states)
  n = tempering.num_particles
  particles = tuple(prior.sample(rng, n_bodies, n_states) for _ in range(n))
  log_z = np.asarray((yield list(particles)), np.float64)
  return SMCState(particles=particles, log_weights=np.zeros(n), log_evidence=log_z, beta=0.0, log_normalizer=0.0,
                  iteration=0, proposals=n)


def step(state: SMCState, key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal,
         candidates: tuple[st.Structure, ...] = (), *, prior: st.PriorConfig, tempering: TemperingConfig,
         final: FinalConfig) -> tuple[SMCState, StepInfo]:
  """One tempering step: reweight, (maybe) resample, rejuvenate (with candidate jumps if ``candidates``).

  The candidate jumps' mixture also proposes fresh prior draws with the
  final phase's ``prior_prob``.
  """
  return moves.drive(step_gen(state, key, evaluator, grammar, candidates, prior=prior, tempering=tempering,
                              final=final), evaluator)


def step_gen(state: SMCState, key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal,
             candidates: tuple[st.Structure, ...] = (), *, prior: st.PriorConfig, tempering: TemperingConfig,
             final: FinalConfig):
  """:func:`step` as a generator (yields each sweep's proposals, receives their ``log Z``)."""
  n = tempering.num_particles
  k_res, k_mh = jax.random.split(key)
  lw = jnp.asarray(state.log_weights, jnp.float32)
  lz = jnp.asarray(state.log_evidence, jnp.float32)
  new_beta, incr, log_ratio, ess, weights = _temper(lw, lz, jnp.float32(state.beta), tempering.target_ess,
                                                    jnp.float32(tempering.max_delta))
  new_beta = float(new_beta)
  if new_beta >= 1.0 - 1e-6:
    new_beta = 1.0
  log_w = state.log_weights + np.asarray(incr, np.float64)
  log_norm = state.log_normalizer + float(log_ratio)
  particles, log_z = state.particles, state.log_evidence
  resampled = bool(float(ess) < tempering.resample_threshold * n)
  if resampled:
    idx = np.asarray(_systematic(k_res, weights, num_samples=n))
    particles = tuple(particles[i] for i in idx)
    log_z = log_z[idx]
    log_w = np.zeros(n)
  accepted = 0
  for j in range(tempering.mcmc_steps):
    jumps = candidates if tempering.candidate_prob > 0 else ()
    particles, log_z, acc, _, _ = yield from moves.mh_sweep_gen(
        jax.random.fold_in(k_mh, j), particles, log_z, new_beta, evaluator, grammar, prior=prior, elites=jumps,
        eps=tempering.candidate_prob, delta=final.prior_prob)
    accepted += int(acc.sum())
  proposals = state.proposals + n * tempering.mcmc_steps
  new = state._replace(particles=particles, log_weights=log_w, log_evidence=log_z, beta=new_beta,
                       log_normalizer=log_norm, iteration=state.iteration + 1, proposals=proposals)
  info = StepInfo(
      iteration=new.iteration,
      beta=new_beta,
      ess=float(ess),
      resampled=resampled,
      acceptance=accepted / max(n * tempering.mcmc_steps, 1),
      unique=len({evaluator.key(m) for m in particles}),
      log_normalizer=log_norm,
      proposals=proposals,
      fits=evaluator.num_fits,
      mass=posterior_mass(particles, log_w, evaluator.key),
  )
  return new, info


