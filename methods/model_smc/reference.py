"""The reference implementation's evidence-weighted SMC, and N = 1 hill climbing.

**Evidence-weighted SMC** (ModelSMC's published scheme, for proposals whose
density is unknown, such as an LLM's). Each iteration: systematic resampling
with ``W_i ∝ exp(log Z(m_i) / T)`` when ``ESS/N < threshold``; propagation
``q(m'|m) = alpha delta(m' = m) + (1 - alpha) q_prop(m' | m, ancestors)``;
weighting ``log w_i = log Z(m'_i)``. There is no ``p(m) / q`` correction, so
the particles do not target ``p(m | x)``: at a fixed point the population is
weighted by ``Z(m)^(1/T)`` over whatever the proposal keeps offering -- a
search heuristic whose "posterior mass" is the proposal-dependent share of
``Z^(1/T)``, not a Bayesian posterior.

**Hill climbing** (the ``N = 1`` baseline): one structure; each proposal is
accepted iff it has a strictly larger ``log Z``. Proposals are drawn in
speculative batches from the current structure with per-index uniforms, and
the batch is cut at the first improvement, so the result equals the
one-at-a-time algorithm while fits stay batched.

Proposers are pluggable: ``propose(m, u, context) -> m'`` raising
:class:`ProposalRejected` (or :class:`methods.model_smc.llm.LLMError`) with a
reason; a rejected proposal leaves the particle unchanged and is counted.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from methods.common import hparams
from methods.common import smc_math
from methods.model_smc import llm as llm_lib
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.grammar import GrammarProposal
from methods.model_smc.smc import host_rng
from methods.model_smc.smc import posterior_mass


class ProposalRejected(RuntimeError):
  def __init__(self, kind: str, reason: str):
    self.kind, self.reason = kind, reason
    super().__init__(f"{kind}: {reason}")


# (current structure, uniform in [0, 1), context) -> proposed structure
Proposer = Callable[[st.Structure, float, dict], st.Structure]


def grammar_proposer(grammar: GrammarProposal) -> Proposer:
  """The grammar edit selected by ``u`` (context unused)."""
  return lambda m, u, context: grammar.sample(m, u)


def llm_proposer(proposer: llm_lib.LLMProposer) -> Proposer:
  """An LLM proposal for ``context["current"]`` and ``context["ancestors"]``."""
  return lambda m, u, context: proposer.propose(context["current"], context["ancestors"])[0]


@dataclasses.dataclass(frozen=True)
class ReferenceConfig(hparams.Hyperparameters):
  """Settings of the evidence-weighted scheme, the reference's defaults (config section ``reference``)."""

  num_particles: int = hparams.field(50, "Particles.", low=1)
  alpha: float = hparams.field(0.8, "Weight of the evidence in the particle scores.", low=0, high=1, high_open=True)
  temperature: float = hparams.field(1.0, "Temperature of the evidence weights.", low=0, low_open=True)
  iterations: int = hparams.field(15, "Iterations.", low=1)
  resample_threshold: float = hparams.field(0.5, "Resample when ESS < threshold * N.", low=0, high=1,
                                            low_open=True)
  ancestors: int = hparams.field(3, "Ancestors shown to the proposer.", low=0, high=3)


class ReferenceState(NamedTuple):
  particles: tuple[st.Structure, ...]
  log_evidence: np.ndarray  # [N]
  ancestry: tuple[tuple[int, ...], ...]  # per particle: indices into `history`, most recent first
  history: tuple[dict, ...]  # {"equations", "score"} of every ancestor referenced
  iteration: int
  proposals: int
  rejections: dict


class ReferenceInfo(NamedTuple):
  iteration: int
  ess: float
  resampled: bool
  proposals: int
  accepted: int
  rejections: dict
  unique: int
  best_log_evidence: float
  fits: int
  mass: dict


def _weights(log_z: np.ndarray, temperature: float) -> jax.Array:
  return smc_math.normalize(jnp.asarray(log_z / temperature, jnp.float32))


def reference_init(key: jax.Array, evaluator: Evaluator, cfg: ReferenceConfig, *, prior: st.PriorConfig,
                   start: Optional[st.Structure] = None) -> ReferenceState:
  """``N`` draws from ``prior`` (or ``N`` copies of ``start``, as the reference does)."""
  rng = host_rng(key)
  lib = evaluator.library
  if start is None:
    particles = tuple(prior.sample(rng, len(lib), len(lib.states)) for _ in range(cfg.num_particles))
  else:
    particles = (start,) * cfg.num_particles
  log_z = evaluator.evaluate(particles)
  return ReferenceState(particles, log_z, ((),) * cfg.num_particles, (), 0,
                        cfg.num_particles if start is None else 1, {})


def _fit_each(evaluator: Evaluator, structures) -> list:
  """``log Z`` of each structure, ``None`` for one whose fit raised (the run goes on).

  A batch that raises is refitted one structure at a time, so that one
  structure the compiler or the integrator cannot handle is rejected alone.
  """
  try:
    return [float(z) for z in evaluator.evaluate(structures)]
  except Exception as e:  # pylint: disable=broad-except  (any failure of a proposal is a rejection)
    logging.getLogger(__name__).warning("a batch of %d fits raised %s: %s; fitting one at a time",
                                        len(structures), type(e).__name__, e)
  out = []
  for m in structures:
    try:
      out.append(float(evaluator.evaluate([m])[0]))
    except Exception as e:  # pylint: disable=broad-except
      logging.getLogger(__name__).warning("fitting a proposed structure raised %s: %s; rejected",
                                          type(e).__name__, e)
      out.append(None)
  return out


def reference_step(state: ReferenceState, key: jax.Array, evaluator: Evaluator, propose: Proposer,
                   cfg: ReferenceConfig) -> tuple[ReferenceState, ReferenceInfo]:
  """Resample (if needed), propagate, weight."""
  n = cfg.num_particles
  k_res, k_stay, k_prop = jax.random.split(key, 3)
  w = _weights(state.log_evidence, cfg.temperature)
  ess = float(1.0 / jnp.sum(w * w))
  particles, log_z, ancestry = state.particles, state.log_evidence, state.ancestry
  resampled = ess < cfg.resample_threshold * n
  if resampled:
    idx = np.asarray(smc_math.systematic_resample(k_res, w, n))
    particles = tuple(particles[i] for i in idx)
    log_z, ancestry = log_z[idx], tuple(ancestry[i] for i in idx)
  stay = np.asarray(jax.random.uniform(k_stay, (n,))) < cfg.alpha
  u = np.asarray(jax.random.uniform(k_prop, (n,)), np.float64)
  history = list(state.history)
  rejections = collections.Counter(state.rejections)
  new_particles, new_ancestry = list(particles), list(ancestry)
  proposals = accepted = 0
  for i, m in enumerate(particles):
    if stay[i]:
      continue
    proposals += 1
    context = {
        "current": llm_lib.describe(m, evaluator.library, log_z[i]),
        "ancestors": [history[j] for j in ancestry[i][:cfg.ancestors]],
    }
    try:
      m2 = propose(m, float(u[i]), context)
    except (ProposalRejected, llm_lib.LLMError) as e:
      rejections[e.kind] += 1
      logging.getLogger(__name__).warning("proposal for particle %d rejected (%s): %s", i, e.kind, e.reason)
      continue
    history.append(context["current"])
    new_particles[i] = m2
    new_ancestry[i] = ((len(history) - 1,) + ancestry[i])[:cfg.ancestors]
    accepted += 1
  fitted = _fit_each(evaluator, new_particles)
  for i, z in enumerate(fitted):
    if z is None:  # the proposal's fit raised: the particle stays where it was
      rejections["fit"] += 1
      if new_particles[i] is not particles[i]:
        accepted -= 1
      new_particles[i], new_ancestry[i], fitted[i] = particles[i], ancestry[i], float(log_z[i])
  new_z = np.asarray(fitted, np.float64)
  new = ReferenceState(tuple(new_particles), new_z, tuple(new_ancestry), tuple(history),
                       state.iteration + 1, state.proposals + proposals, dict(rejections))
  info = ReferenceInfo(new.iteration, ess, bool(resampled), new.proposals, accepted, dict(rejections),
                       len({evaluator.key(m) for m in new_particles}), float(np.max(new_z)), evaluator.num_fits,
                       posterior_mass(new_particles, new_z / cfg.temperature, evaluator.key))
  return new, info


def run_reference(key: jax.Array, evaluator: Evaluator, propose: Proposer, cfg: ReferenceConfig, *,
                  prior: st.PriorConfig, start: Optional[st.Structure] = None,
                  state: Optional[ReferenceState] = None,
                  callback: Optional[Callable] = None) -> ReferenceState:
  """Runs (or resumes) ``cfg.iterations`` iterations; step ``t`` uses ``fold_in(key, t)``.

  The initial particles are draws from the structure ``prior`` (or copies of ``start``).
  """
  if state is None:
    state = reference_init(jax.random.fold_in(key, 0), evaluator, cfg, prior=prior, start=start)
  while state.iteration < cfg.iterations:
    state, info = reference_step(state, jax.random.fold_in(key, state.iteration + 1), evaluator, propose, cfg)
    if callback is not None:
      callback(state, info)
  return state


class HillClimb(NamedTuple):
  """Result of hill climbing.

  Attributes:
    structure: the final (best) structure.
    log_evidence: its ``log Z``.
    proposals: proposals used (the budget).
    accepted: improvements accepted.
    trace: ``(proposals used, best log Z)`` after each improvement.
    rejections: counts of failed proposals by kind.
  """

  structure: st.Structure
  log_evidence: float
  proposals: int
  accepted: int
  trace: tuple[tuple[int, float], ...]
  rejections: dict


def hill_climb(key: jax.Array, evaluator: Evaluator, propose: Proposer, *, budget: int,
               start: st.Structure, chunk: int = 1,
               callback: Optional[Callable[[int, int, float], None]] = None) -> HillClimb:
  """Greedy ``N = 1`` search with ``budget`` proposals (the first draw is ``start``).

  Args:
    key: proposal ``j`` uses uniform ``j`` of ``uniform(key, (budget,))``.
    evaluator: evidence of structures.
    propose: the proposer.
    budget: total proposals (``start`` counts as one).
    start: the initial structure.
    chunk: proposals drawn and fitted together (speculatively) from the
      current structure; the result does not depend on it. Use 1 for
      proposers with a cost per call (LLMs).
    callback: called after each chunk with ``(proposals used, budget, best log Z)`` (progress).
  """
  u = np.asarray(jax.random.uniform(key, (max(budget, 1),)), np.float64)
  current, score = start, float(evaluator.evaluate([start])[0])
  trace, rejections = [(1, score)], collections.Counter()
  used, accepted = 1, 0
  described = None  # the current structure's description for an LLM, made once per structure
  while used < budget:
    batch = []  # (index, structure or the kind of its failure)
    if described is None or described[0] is not current:
      described = (current, llm_lib.describe(current, evaluator.library, score))
    for j in range(used, min(used + chunk, budget)):
      context = {"current": described[1], "ancestors": []}
      try:
        batch.append((j, propose(current, float(u[j]), context)))
      except (ProposalRejected, llm_lib.LLMError) as e:
        logging.getLogger(__name__).warning("proposal %d rejected (%s): %s", j, e.kind, e.reason)
        batch.append((j, e.kind))
    valid = [m for _, m in batch if isinstance(m, st.Structure)]
    scores = iter(_fit_each(evaluator, valid)) if valid else iter(())
    for j, m in batch:
      used = j + 1
      if not isinstance(m, st.Structure):
        rejections[m] += 1
        continue
      s = next(scores)
      if s is None:  # its fit raised
        rejections["fit"] += 1
        continue
      if s > score:
        current, score = m, s
        accepted += 1
        trace.append((used, score))
        break
    if callback is not None:
      callback(used, budget, score)
  return HillClimb(current, score, used, accepted, tuple(trace), dict(rejections))
