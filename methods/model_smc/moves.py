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
from typing import Callable, Generator, Optional

import jax
import numpy as np

from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator
from methods.model_smc.grammar import GrammarProposal


def host_rng(key: jax.Array) -> np.random.Generator:
  """A NumPy generator seeded from a JAX key (deterministic)."""
  return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())


@functools.partial(jax.jit, static_argnames=("n",))
def _uniforms(key: jax.Array, n: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """One sweep's uniforms in one call: ``(u [n], v [n], u_mix [n])`` for the proposals, acceptances, mixture.

  Three split keys: ``fold_in(key, 1)`` would equal ``split(key)[1]``, i.e. reuse the acceptance uniforms.
  """
  k_prop, k_acc, k_mix = jax.random.split(key, 3)
  return jax.random.uniform(k_prop, (n,)), jax.random.uniform(k_acc, (n,)), jax.random.uniform(k_mix, (n,))


def log_accept_many(beta: float, lz_new, lz_old, lp_new, lp_old, lq_rev, lq_fwd) -> np.ndarray:
  """:func:`log_accept` of ``[n]`` arrays at once (float64; the same cases for ``-inf`` evidences)."""
  lz_new, lz_old = np.asarray(lz_new, np.float64), np.asarray(lz_old, np.float64)
  with np.errstate(invalid="ignore"):
    like = np.where(beta == 0.0, 0.0, beta * (lz_new - lz_old))
    rest = (np.asarray(lp_new) - np.asarray(lp_old)) + (np.asarray(lq_rev) - np.asarray(lq_fwd))
    out = like + rest
  if beta != 0.0:
    out = np.where(lz_old == -np.inf, np.inf, out)
    out = np.where(lz_new == -np.inf, -np.inf, out)
  return out


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
  return drive(mh_sweep_gen(key, particles, log_z, beta, evaluator, grammar, prior=prior, elites=elites, eps=eps,
                            delta=delta, elite_probs=elite_probs), evaluator)


def drive(gen: Generator, evaluator: Evaluator):
  """Runs a sampler generator to its return value, answering each list of structures it yields with ``log Z``."""
  try:
    request = next(gen)
    while True:
      request = gen.send(evaluator.evaluate(request))
  except StopIteration as stop:
    return stop.value


def mh_sweep_gen(key: jax.Array, particles, log_z, beta: float, evaluator: Evaluator, grammar: GrammarProposal, *,
                 prior: st.PriorConfig, elites: tuple[st.Structure, ...] = (), eps: float = 0.0,
                 delta: float = 0.0, elite_probs: Optional[np.ndarray] = None) -> Generator:
  """:func:`mh_sweep` as a generator: yields the proposals, receives their ``[N]`` ``log Z``.

  The structures' evidences are the only thing a sweep waits for, so a
  driver can answer the requests of several independent runs with one
  batched fit (:func:`methods.model_smc.pooled.run_pooled`); ``evaluator``
  supplies the library and the keys only. The sweep's uniforms are one
  jitted call; the acceptance of the ``N`` moves is one vectorised step.
  """
  n = len(particles)
  u, v, u_mix = (np.asarray(x, np.float64) for x in _uniforms(key, n))
  with np.errstate(divide="ignore"):
    log_v = np.log(v)
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
    rng = host_rng(jax.random.split(key, 3)[2])
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
  lz_prop = np.asarray((yield proposed), np.float64)
  log_prior = log_prior_fn(evaluator, prior)
  moved = np.array([m2 != m for m, m2 in zip(particles, proposed)])
  terms = np.zeros((4, n))  # log p(m'), log p(m), log q(m | m'), log q(m' | m) of the moves
  for i in np.flatnonzero(moved):
    m, m2 = particles[i], proposed[i]
    lp_new, lp_old = log_prior(m2), log_prior(m)
    terms[:, i] = (lp_new, lp_old, log_q(grammar, m, m2, set_probs, eps, delta, lp_old),
                   log_q(grammar, m2, m, set_probs, eps, delta, lp_new))
  log_z = np.asarray(log_z, np.float64)
  log_a = np.where(moved, log_accept_many(beta, lz_prop, log_z, *terms), -np.inf)
  prob = np.exp(np.minimum(log_a, 0.0))
  accepted = moved & (log_v < log_a)
  out_p = tuple(m2 if a else m for m, m2, a in zip(particles, proposed, accepted))
  return out_p, np.where(accepted, lz_prop, log_z), accepted, prob, tuple(proposed)
