"""Metropolis-Hastings moves over structures, with exact proposal densities.

One sweep moves every particle once under ``pi_beta(m) ∝ p(m) Z(m)^beta``
with the grammar proposal ``q`` (:mod:`methods.model_smc.grammar`), or the
mixture ``(1 - eps - delta) q + eps r_E + delta p`` with a fixed set ``E``
(the elites at ``beta = 1``, drawn in proportion to ``p(m) Z(m)`` or
uniformly; the gradient-matching candidates while tempering, uniformly) and
fresh prior draws ``p``. ``E`` is fixed before the sweep and
the mixture's density enters the ratio exactly, so the kernel is invariant
for ``pi_beta`` (Tierney 1994, Ann. Statist. 22:1701, on mixtures of
Metropolis-Hastings proposals). The tempered sampler is
:mod:`methods.model_smc.smc`.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional

import jax
import numpy as np

from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.grammar import GrammarProposal


def host_rng(key: jax.Array) -> np.random.Generator:
  """A NumPy generator seeded from a JAX key (deterministic)."""
  return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())


def log_accept(beta, lz_new, lz_old, lp_new, lp_old, lq_rev, lq_fwd) -> float:
  if beta == 0.0:
    like = 0.0
  elif lz_new == -math.inf:
    return -math.inf
  elif lz_old == -math.inf:
    return math.inf
  else:
    like = beta * (lz_new - lz_old)
  return like + (lp_new - lp_old) + (lq_rev - lq_fwd)


def log_prior_fn(evaluator: Evaluator, prior: st.PriorConfig) -> Callable[[st.Structure], float]:
  """``log p(m)`` over ``evaluator``'s library (its size when called)."""
  return functools.partial(st.log_prior, num_bodies=len(evaluator.library), p_include=prior.p_include,
                           max_terms=prior.max_terms)


def log_q(grammar: GrammarProposal, to: st.Structure, frm: st.Structure, set_probs: dict, eps: float,
          delta: float = 0.0, log_prior_to: float = -math.inf) -> float:
  """``log q(to | frm)`` of the mixture ``(1 - eps - delta) q_grammar + eps r_E + delta p``.

  ``set_probs`` is ``r_E``: each structure of the fixed set ``E`` with its
  proposal probability.
  """
  lq = grammar.log_prob(to, frm)
  if (eps <= 0 or not set_probs) and delta <= 0:
    return lq
  q = ((1 - eps - delta) * (math.exp(lq) if lq > -math.inf else 0.0)
       + eps * set_probs.get(to, 0.0) + delta * math.exp(log_prior_to))
  return math.log(q) if q > 0 else -math.inf


def mh_sweep(key: jax.Array, particles, log_z, beta: float, evaluator: Evaluator,
             grammar: GrammarProposal, *, prior: st.PriorConfig, elites: tuple[st.Structure, ...] = (),
             eps: float = 0.0, delta: float = 0.0, elite_probs: Optional[np.ndarray] = None):
  """One Metropolis-Hastings move per particle, invariant for ``pi_beta``.

  Args:
    prior: the structure prior ``p`` (its draws and densities).
    elites: a fixed set ``E`` (the elites, or the gradient-matching
      candidates); with it the proposal is the mixture
      ``(1 - eps - delta) q + eps r_E + delta p``, whose density enters
      the ratio exactly.
    eps, delta: the mixture's weights (both 0 without ``E``).
    elite_probs: ``[|E|]`` the proposal probabilities ``r_E`` of the set's
      members (fixed before the sweep; default uniform). With ``r_E``
      proportional to ``p(m) Z(m)^beta`` a jump between two members is
      always accepted (an independence proposal from the target restricted
      to ``E``).

  Returns:
    ``(particles, log_z, accepted [N] bool, acceptance [N], proposed)``:
    the acceptance probability of each proposal that changes the structure
    (0 for the others) and the proposals.
  """
  n = len(particles)
  # Three split keys: fold_in(key, 1) would equal split(key)[1], i.e. reuse the acceptance uniforms.
  k_prop, k_acc, k_mix = jax.random.split(key, 3)
  u = np.asarray(jax.random.uniform(k_prop, (n,)), np.float64)
  log_v = np.log(np.asarray(jax.random.uniform(k_acc, (n,)), np.float64))
  eps = eps if elites else 0.0
  delta = delta if elites else 0.0
  if elites:
    r = np.full(len(elites), 1.0 / len(elites)) if elite_probs is None else np.asarray(elite_probs, np.float64)
    r = r / r.sum()
    set_probs = {}
    for m, p in zip(elites, r):
      set_probs[m] = set_probs.get(m, 0.0) + float(p)
    cdf = np.cumsum(r)
  else:
    set_probs, cdf = {}, np.zeros(0)
  if eps > 0 or delta > 0:
    u_mix = np.asarray(jax.random.uniform(k_mix, (n,)), np.float64)
    rng = host_rng(k_mix)
    k_all, n_states = len(evaluator.library), len(evaluator.library.states)
    proposed = []
    for m, ui, um in zip(particles, u, u_mix):
      if um < eps:
        proposed.append(elites[min(int(np.searchsorted(cdf, ui * cdf[-1], side="right")), len(elites) - 1)])
      elif um < eps + delta:
        proposed.append(st.sample_prior(rng, k_all, n_states, p_include=prior.p_include, max_terms=prior.max_terms))
      else:
        proposed.append(grammar.sample(m, ui))
  else:
    proposed = [grammar.sample(m, ui) for m, ui in zip(particles, u)]
  lz_prop = evaluator.evaluate(proposed)
  log_prior = log_prior_fn(evaluator, prior)
  out_p, out_z, accepted = list(particles), np.array(log_z, np.float64), np.zeros(n, bool)
  prob = np.zeros(n)
  for i, (m, m2) in enumerate(zip(particles, proposed)):
    if m2 == m:
      continue
    lp_new, lp_old = log_prior(m2), log_prior(m)
    log_a = log_accept(beta, lz_prop[i], log_z[i], lp_new, lp_old,
                       log_q(grammar, m, m2, set_probs, eps, delta, lp_old),
                       log_q(grammar, m2, m, set_probs, eps, delta, lp_new))
    prob[i] = math.exp(min(log_a, 0.0))
    if log_v[i] < log_a:
      out_p[i], out_z[i], accepted[i] = m2, lz_prop[i], True
  return tuple(out_p), out_z, accepted, prob, tuple(proposed)
