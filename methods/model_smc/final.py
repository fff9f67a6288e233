"""The final phase of tempered SMC over structures, at ``beta = 1`` (a reconstruction).

The paper's sampler has no such phase; it lets the particles mix, so that
their masses estimate ``p(m) Z(m)`` over the visited structures rather than
the last tempering step's draws (:mod:`methods.model_smc.smc` describes the
whole sampler):

* :func:`local_search`: steepest ascent of ``log p(m) + log Z(m)`` over the
  full single-edit neighbourhood from the run's best distinct particles and
  the gradient-matching candidates; the ``num_elites`` best structures the
  run has seen become its fixed elite set ``E``;
* :func:`final_sweep`: a Metropolis-Hastings sweep at ``beta = 1`` with the
  mixture proposal ``(1 - eps - delta) q + eps r_E + delta p``
  (:mod:`methods.model_smc.moves`), Rao-Blackwellised over its proposals
  into ``SMCState.final_mass`` (the proposal gets the particle's weight
  times its acceptance probability, the current structure the rest);
* :func:`finished`: the acceptance-weighted move target (or the sweep cap)
  is reached.

Each step has a generator form (``*_gen``) that yields the structures whose
``log Z`` it needs and receives them, so that independent runs can share
batched fits (:func:`methods.model_smc.pooled.run_pooled`); the plain forms
answer the requests with the evaluator.
"""

from __future__ import annotations

import collections
import math

import jax
import jax.numpy as jnp
import numpy as np

from methods.common import smc_math
from methods.model_smc import moves
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.grammar import GrammarProposal
from methods.model_smc.smc import FinalConfig
from methods.model_smc.smc import posterior_mass
from methods.model_smc.smc import SMCState
from methods.model_smc.smc import StepInfo

FINAL_STREAM = 2**31 - 1  # fold_in data of the final sweeps' keys (tempering steps use 1, 2, ...)


def local_search(state: SMCState, evaluator: Evaluator, grammar: GrammarProposal,
                 candidates: tuple[st.Structure, ...] = (), *, prior: st.PriorConfig,
                 final: FinalConfig) -> tuple[SMCState, StepInfo]:
  """Steepest ascent from the best particles; fixes the elite set ``E``.

  From each of the ``final.local_search`` best distinct particles (by
  ``log p(m) + log Z(m)``), every single-edit neighbour is fitted and the
  search moves to the best one while it improves, for at most
  ``final.local_search_steps`` steps. ``E`` is the ``final.num_elites`` best
  structures among the particles and every searched neighbour (this run's
  own, so independent runs stay independent). The gradient-matching
  ``candidates`` (fixed by the data) join the particles as starts and
  elites. Particles and weights are unchanged.
  """
  return moves.drive(local_search_gen(state, evaluator, grammar, candidates, prior=prior, final=final), evaluator)


def local_search_gen(state: SMCState, evaluator: Evaluator, grammar: GrammarProposal,
                     candidates: tuple[st.Structure, ...] = (), *, prior: st.PriorConfig, final: FinalConfig):
  """:func:`local_search` as a generator (yields the candidates, then each neighbourhood)."""
  log_prior = moves.log_prior_fn(evaluator, prior)
  seen = {}  # key -> (structure, log p + log Z)
  pool = tuple(state.particles) + tuple(candidates)
  cand_z = np.asarray((yield list(candidates)), np.float64) if candidates else np.zeros(0)
  pool_z = np.concatenate([state.log_evidence, cand_z])
  for m, lz in zip(pool, pool_z):
    if math.isfinite(lz):
      seen.setdefault(evaluator.key(m), (m, log_prior(m) + float(lz)))
  starts = sorted(seen.values(), key=lambda v: -v[1])[:final.local_search]
  proposals = 0
  for m, score in starts:
    for _ in range(final.local_search_steps):
      nbrs = grammar.distribution(m)[0]
      if not nbrs:
        break
      proposals += len(nbrs)
      nbr_z = yield list(nbrs)
      joint = [log_prior(m2) + float(z) for m2, z in zip(nbrs, nbr_z)]
      for m2, j in zip(nbrs, joint):
        if math.isfinite(j):
          seen.setdefault(evaluator.key(m2), (m2, j))
      best = int(np.argmax(joint))
      if not joint[best] > score:
        break
      m, score = nbrs[best], joint[best]
  elites = tuple(m for m, _ in sorted(seen.values(), key=lambda v: -v[1])[:final.num_elites])
  new = state._replace(elites=elites, proposals=state.proposals + proposals)
  return new, _final_info(new, evaluator, "search", acceptance=0.0)


def _final_info(state: SMCState, evaluator: Evaluator, phase: str, acceptance: float) -> StepInfo:
  return StepInfo(
      iteration=state.iteration, beta=state.beta, ess=float(smc_math.ess(jnp.asarray(state.log_weights,
                                                                                     jnp.float32))),
      resampled=False, acceptance=acceptance, unique=len({evaluator.key(m) for m in state.particles}),
      log_normalizer=state.log_normalizer, proposals=state.proposals, fits=evaluator.num_fits,
      mass=posterior_mass(state.particles, state.log_weights, evaluator.key), phase=phase, moves=state.moves)


def final_sweep(state: SMCState, key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal, *,
                prior: st.PriorConfig, final: FinalConfig) -> tuple[SMCState, StepInfo]:
  """One rejuvenation sweep at ``beta = 1`` with the elite mixture proposal."""
  return moves.drive(final_sweep_gen(state, key, evaluator, grammar, prior=prior, final=final), evaluator)


def final_sweep_gen(state: SMCState, key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal, *,
                    prior: st.PriorConfig, final: FinalConfig):
  """:func:`final_sweep` as a generator (yields the elites, then the sweep's proposals)."""
  elites = state.elites or ()
  probs = None
  if elites and final.elite_weights == "posterior":
    log_prior = moves.log_prior_fn(evaluator, prior)
    joint = np.array([log_prior(m) for m in elites]) + np.asarray((yield list(elites)), np.float64)
    joint = np.where(np.isfinite(joint), joint, -np.inf)
    probs = np.exp(joint - joint.max()) if np.isfinite(joint.max()) else None
  particles, log_z, acc, prob, proposed = yield from moves.mh_sweep_gen(
      key, state.particles, state.log_evidence, 1.0, evaluator, grammar, prior=prior, elites=elites,
      eps=final.elite_prob, delta=final.prior_prob, elite_probs=probs)
  n = len(particles)
  w = np.asarray(smc_math.normalize(jnp.asarray(state.log_weights, jnp.float32)), np.float64)
  sweep_mass = collections.defaultdict(float)
  for m, m2, wi, a in zip(state.particles, proposed, w, prob):
    sweep_mass[m] += wi * (1.0 - a)
    sweep_mass[m2] += wi * a
  new = state._replace(particles=particles, log_evidence=log_z, sweeps=state.sweeps + 1,
                       moves=state.moves + float(prob.sum()) / n, proposals=state.proposals + n,
                       final_mass=state.final_mass + (tuple(sweep_mass.items()),))
  return new, _final_info(new, evaluator, "final", acceptance=float(acc.mean()))


def finished(state: SMCState, final: FinalConfig) -> bool:
  """``beta = 1``, the local search done and the final sweeps' target (or cap) reached."""
  return (state.beta >= 1.0 and state.elites is not None
          and (state.moves >= final.moves or state.sweeps >= final.max_sweeps))
