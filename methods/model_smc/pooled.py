"""Independent runs of the tempered SMC sampler, pooled with equal weight.

Each run is :func:`methods.model_smc.smc.run` with its own key (run ``r > 0``
uses ``fold_in(key, 2^30 + r)``), its own particles and its own elite set;
their spread is the multi-run check of mixing, and :func:`total_variation`
compares a particle mass with the visited-set posterior
(:func:`visited_posterior`: ``p(m) Z(m)`` renormalised over every structure
fitted so far).
"""

from __future__ import annotations

import collections
import math
from typing import Callable, NamedTuple, Optional

import jax
import numpy as np

from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.grammar import GrammarProposal
from methods.model_smc.smc import FinalConfig
from methods.model_smc.smc import finished
from methods.model_smc.smc import run
from methods.model_smc.smc import run_mass
from methods.model_smc.smc import SMCState
from methods.model_smc.smc import StepInfo
from methods.model_smc.smc import TemperingConfig

_RUN_STREAM = 2**30  # run r > 0 of run_pooled uses fold_in(key, _RUN_STREAM + r)


class PooledState(NamedTuple):
  """Independent runs of :func:`run_pooled`: the finished ones, then the one in progress."""

  runs: tuple[SMCState, ...]


def run_key(key: jax.Array, r: int) -> jax.Array:
  """The key of run ``r`` (run 0 is :func:`run` with ``key`` itself)."""
  return key if r == 0 else jax.random.fold_in(key, _RUN_STREAM + r)


def pooled_finished(state: PooledState, tempering: TemperingConfig, final: FinalConfig) -> bool:
  """Every one of the ``tempering.num_runs`` runs is :func:`methods.model_smc.smc.finished`."""
  return len(state.runs) == tempering.num_runs and finished(state.runs[-1], final)


def run_pooled(key: jax.Array, evaluator: Evaluator, grammar: GrammarProposal, *, prior: st.PriorConfig,
               tempering: TemperingConfig, final: FinalConfig, state: Optional[PooledState] = None,
               callback: Optional[Callable[[PooledState, StepInfo], None]] = None,
               candidates: tuple = ()) -> PooledState:
  """``tempering.num_runs`` independent runs of :func:`run` (resumable; one evaluator cache).

  The evaluator's cache is shared (``Z(m)`` is a deterministic function of
  ``m``), which saves fits but does not couple the runs: each run's
  particles, weights and elite set depend on its own key only (and on the
  ``candidates``, fixed by the data and the same for every run).
  """
  runs = list(state.runs) if state is not None else []
  for r in range(tempering.num_runs):
    if r < len(runs) and finished(runs[r], final):
      continue
    done = tuple(runs[:r])

    def cb(s, info, done=done, r=r):
      if callback is not None:
        callback(PooledState(done + (s,)), info._replace(run=r))

    runs[r:] = [run(run_key(key, r), evaluator, grammar, prior=prior, tempering=tempering, final=final,
                    state=runs[r] if r < len(runs) else None, callback=cb, candidates=candidates)]
  return PooledState(tuple(runs))


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
  return 0.5 * float(sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q)))


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
