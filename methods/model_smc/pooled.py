"""Runs of the tempered SMC sampler: one (:func:`run`), or several independent ones pooled with equal weight.

Each run is :func:`run_gen` with its own key (run ``r > 0`` uses
``fold_in(key, 2^30 + r)``), its own particles and its own elite set; the
runs advance in lockstep and share batched fits (:func:`run_pooled`);
their spread is the multi-run check of mixing, and :func:`total_variation`
compares a particle mass with the visited-set posterior
(:func:`visited_posterior`: ``p(m) Z(m)`` renormalised over every structure
fitted so far).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable, Generator, NamedTuple, Optional, Sequence

import jax
import numpy as np

from methods.model_smc import final as final_lib
from methods.model_smc import smc
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.final import finished
from methods.model_smc.grammar import GrammarProposal
from methods.model_smc.smc import FinalConfig
from methods.model_smc.smc import run_mass
from methods.model_smc.smc import SMCState
from methods.model_smc.smc import StepInfo
from methods.model_smc.smc import TemperingConfig

_RUN_STREAM = 2**30  # run r > 0 of run_pooled uses fold_in(key, _RUN_STREAM + r)


class PooledState(NamedTuple):
  """Independent runs of :func:`run_pooled`, run ``r`` at index ``r`` (``None``: not started yet)."""

  runs: tuple[Optional[SMCState], ...]


def run_key(key: jax.Array, r: int) -> jax.Array:
  """The key of run ``r`` (run 0 is :func:`run` with ``key`` itself)."""
  return key if r == 0 else jax.random.fold_in(key, _RUN_STREAM + r)


def pooled_finished(state: PooledState, tempering: TemperingConfig, final: FinalConfig) -> bool:
  """Every one of the ``tempering.num_runs`` runs is :func:`methods.model_smc.final.finished`."""
  return (len(state.runs) == tempering.num_runs
          and all(s is not None and finished(s, final) for s in state.runs))


def run_gen(key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal, *, prior: st.PriorConfig,
            tempering: TemperingConfig, final: FinalConfig, state: Optional[SMCState] = None,
            candidates: tuple[st.Structure, ...] = ()) -> Generator:
  """One run of tempered SMC as a generator: yields structure lists (receives their ``log Z``) and
  :class:`methods.model_smc.smc.Step` after every step; returns the final state.

  Keys: initial draws ``fold_in(key, 0)``, tempering step ``t``
  ``fold_in(key, t)``, final sweep ``s`` ``fold_in(fold_in(key, 2^31 - 1), s)``,
  so a resumed run repeats an uninterrupted one.

  Raises:
    ValueError: ``tempering`` and ``final`` leave no room for grammar moves.
    RuntimeError: ``beta`` did not reach 1 within ``max_iterations``.
  """
  problems = smc.jump_problems(tempering, final)
  if problems:
    raise ValueError("; ".join(f"{name}: {msg}" for name, msg in problems))
  if state is None:
    state = yield from smc.init_gen(jax.random.fold_in(key, 0), evaluator, prior=prior, tempering=tempering)
  while state.beta < 1.0:
    if state.iteration >= tempering.max_iterations:
      raise RuntimeError(f"beta reached only {state.beta:.4g} after {tempering.max_iterations} tempering "
                         "steps; raise tempering.max_iterations or lower tempering.target_ess")
    state, info = yield from smc.step_gen(state, jax.random.fold_in(key, state.iteration + 1), evaluator, grammar,
                                          candidates, prior=prior, tempering=tempering, final=final)
    yield smc.Step(state, info)
  if state.elites is None:
    state, info = yield from final_lib.local_search_gen(state, evaluator, grammar, candidates, prior=prior,
                                                        final=final)
    yield smc.Step(state, info)
  final_key = jax.random.fold_in(key, final_lib.FINAL_STREAM)
  while not finished(state, final):
    state, info = yield from final_lib.final_sweep_gen(state, jax.random.fold_in(final_key, state.sweeps), evaluator,
                                                       grammar, prior=prior, final=final)
    yield smc.Step(state, info)
  return state


def run(key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal, *, prior: st.PriorConfig,
        tempering: TemperingConfig, final: FinalConfig, state: Optional[SMCState] = None,
        candidates: tuple[st.Structure, ...] = (),
        callback: Optional[Callable[[SMCState, StepInfo], None]] = None) -> SMCState:
  """Runs (or resumes) one tempered SMC run until ``beta = 1``, then the local search and final sweeps.

  Args:
    key: base key (see :func:`run_gen`).
    evaluator: evidence of structures.
    grammar: the exact-density proposal.
    prior: the structure prior.
    tempering: the tempering's settings (``num_runs`` is :func:`run_pooled`'s).
    final: the final phase's settings.
    state: a state to resume from (default: a fresh :func:`methods.model_smc.smc.init`).
    candidates: the gradient-matching candidates
      (:func:`methods.model_smc.gradient_matching.candidates`, fixed by
      the data; ``tempering.candidates`` of them).
    callback: called after every step with the new state and its info.
  """
  out = run_pooled(key, evaluator, grammar, prior=prior, tempering=dataclasses.replace(tempering, num_runs=1),
                   final=final,
                   state=None if state is None else PooledState((state,)), candidates=candidates,
                   callback=None if callback is None else lambda pooled, info: callback(pooled.runs[0], info))
  return out.runs[0]


def run_pooled(key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal, *, prior: st.PriorConfig,
               tempering: TemperingConfig, final: FinalConfig, state: Optional[PooledState] = None,
               callback: Optional[Callable[[PooledState, StepInfo], None]] = None,
               candidates: tuple[st.Structure, ...] = (), keys: Optional[Sequence[jax.Array]] = None
               ) -> PooledState:
  """``tempering.num_runs`` independent runs of :func:`run_gen`, in lockstep (resumable; one evaluator cache).

  The runs advance together: in each round every run goes on until it needs
  evidences, and the structures all runs are waiting for are fitted by one
  :meth:`Evaluator.evaluate` call (new ones in batches sharded over the
  devices), so the runs proceed in parallel over the devices. Each run's
  particles, weights and elite set depend on its own key only (and on the
  ``candidates``, fixed by the data): ``Z(m)`` is a deterministic function
  of ``m``, so the shared cache saves fits without coupling the runs, and a
  run's result is the same as when it runs alone. ``callback`` sees every
  step, in run order within a round.

  Args:
    keys: the runs' keys (default: :func:`run_key` of ``key``).
  """
  n = tempering.num_runs
  keys = list(keys) if keys is not None else [run_key(key, r) for r in range(n)]
  latest = list(state.runs) + [None] * (n - len(state.runs)) if state is not None else [None] * n
  active = {}
  for r in range(n):
    if latest[r] is not None and finished(latest[r], final):
      continue
    active[r] = run_gen(keys[r], evaluator, grammar, prior=prior, tempering=tempering, final=final,
                        state=latest[r], candidates=candidates)
  requests = {}

  def advance(r, reply):
    """Sends ``reply`` to run ``r`` and runs it to its next request for evidences (or its end)."""
    try:
      out = active[r].send(reply)
      while isinstance(out, smc.Step):
        latest[r] = out.state
        if callback is not None:
          callback(PooledState(tuple(latest)), out.info._replace(run=r))
        out = active[r].send(None)
      requests[r] = out
    except StopIteration as stop:
      latest[r] = stop.value
      del active[r]
      requests.pop(r, None)

  for r in sorted(active):
    advance(r, None)
  while requests:
    order = sorted(requests)
    wanted = [m for r in order for m in requests[r]]
    log_z = evaluator.evaluate(wanted) if wanted else np.zeros(0)
    start = 0
    for r in order:
      count = len(requests[r])
      advance(r, log_z[start:start + count])
      start += count
  return PooledState(tuple(latest))


def pooled_mass(runs, key_fn: Callable) -> dict:
  """Equal-weight average of the runs' :func:`run_mass`, largest first."""
  total = collections.defaultdict(float)
  for s in runs:
    for k, v in run_mass(s, key_fn).items():
      total[k] += v / len(runs)
  return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def pooled_log_normalizer(runs) -> float:
  """``log`` of the mean of the runs' normaliser estimates (each unbiased for ``sum_m p(m) Z(m)``)."""
  z = np.array([s.log_normalizer for s in runs], np.float64)
  return float(np.logaddexp.reduce(z) - math.log(len(z)))


def total_variation(p: dict, q: dict) -> float:
  """``0.5 sum_m |p(m) - q(m)|`` over the union of the keys (a missing key has mass 0)."""
  return 0.5 * math.fsum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))  # exact: any order


def visited_posterior(evaluator: Evaluator, prior: st.PriorConfig) -> dict:
  """``p(m) Z(m)`` renormalised over every structure fitted so far, largest first.

  The sampler's particle frequencies carry Monte Carlo error (and can miss
  mixing between modes); since ``p(m) Z(m)`` is known for every visited
  structure, this is the exact posterior restricted to the visited set. A
  failed fit (``log Z = -inf`` or NaN) is left out.
  """
  k_all = len(evaluator.library)
  keys, logs = [], []
  for k, rec in evaluator.cache.items():
    if math.isfinite(rec.log_evidence):
      m = st.from_key(k, evaluator.library)
      keys.append(k)
      logs.append(rec.log_evidence + st.log_prior(m, k_all, p_include=prior.p_include, max_terms=prior.max_terms))
  logs = np.asarray(logs, np.float64)
  w = np.exp(logs - np.logaddexp.reduce(logs))
  order = np.argsort(-w)
  return {keys[i]: float(w[i]) for i in order}


def iid_tv_bound(p: dict, n: int) -> float:
  """``0.5 sum_m sqrt(p(m) (1 - p(m)) / n)``: a bound on the expected TV of ``n`` independent draws from ``p``."""
  q = np.asarray(list(p.values()), np.float64)
  return float(0.5 * np.sqrt(q * (1 - q) / max(n, 1)).sum())
