"""Structures, their prior, the grammar proposal's exact density and the MH kernel."""

import math

import numpy as np
import pytest

from methods.model_smc import expr as ex
from methods.model_smc import grammar
from methods.model_smc import moves
from methods.model_smc import structure as st

STATES = ("x", "y")


def test_library_deduplicates_and_names_problems():
  lib = st.Library(STATES, ["a*x", "a*x*y", "b*x/y"])
  assert lib.keys == ["c0*x", "c0*x*y", "c0*x/y"]
  with pytest.raises(st.StructureError, match="duplicates"):
    st.Library(STATES, ["a*x", "x*k"])
  with pytest.raises(ex.UnsafeExpression):
    st.Library(STATES, ["a.x"])
  with pytest.raises(st.StructureError, match="reserved"):
    st.Library(("c0", "y"))
  # "change an operator" neighbours: * <-> / in the same place.
  assert lib.op_neighbors(1) == (2,) and lib.op_neighbors(2) == (1,)


def test_from_equations_keys_merging_and_errors():
  lib = st.Library(STATES, ["a*x", "a*x*y", "a*y"])
  m1 = st.from_equations({"x": "alpha*x - beta*x*y", "y": "delta*x*y - gamma*y"}, lib)
  m2 = st.from_equations({"y": "-g*y + d*y*x", "x": "-(b*y*x) + a*x"}, lib)
  assert m1 == m2 and len(lib) == 3
  assert st.key(m1, lib) == "dx/dt = +[c0*x] -[c0*x*y]; dy/dt = +[c0*x*y] -[c0*y]"
  # Terms sharing a parameter stay together (one body), so the model keeps its meaning.
  m3 = st.from_equations({"x": "r*x - r*x^2/K", "y": "0"}, lib)
  assert len(m3.terms[0]) == 1 and len(lib) == 4 and m3.terms[1] == ()
  with pytest.raises(st.StructureError, match="repeats"):
    st.from_equations({"x": "a*x + b*x", "y": "0"}, lib)
  with pytest.raises(st.StructureError, match="missing"):
    st.from_equations({"x": "a*x"}, lib)
  with pytest.raises(st.StructureError, match="parameters"):
    st.from_equations({"x": "a*x + b*y + c*x*y", "y": "d*y"}, lib, max_params=3)
  with pytest.raises(ex.UnsafeExpression):
    st.from_equations({"x": "__import__('os')", "y": "0"}, lib)
  texts, names = st.equations(m1, lib)
  assert texts == ["p1*x - p2*x*y", "p3*x*y - p4*y"] and names == ["p1", "p2", "p3", "p4"]


@pytest.mark.parametrize("k,s,max_terms,p", [(3, 2, 2, 0.3), (2, 2, 2, 0.5), (4, 1, 1, 0.2)])
def test_prior_is_normalised_over_the_truncated_space(k, s, max_terms, p):
  space = st.enumerate_space(k, s, max_terms)
  total = sum(math.exp(st.log_prior(m, k, p_include=p, max_terms=max_terms)) for m in space)
  assert total == pytest.approx(1.0, abs=1e-12)
  assert len(set(space)) == len(space)


def test_prior_sampler_matches_the_prior():
  k, s, max_terms, p, n = 3, 1, 2, 0.4, 20_000
  space = st.enumerate_space(k, s, max_terms)
  probs = np.array([math.exp(st.log_prior(m, k, p_include=p, max_terms=max_terms)) for m in space])
  rng = np.random.default_rng(0)
  index = {m: i for i, m in enumerate(space)}
  counts = np.zeros(len(space))
  for _ in range(n):
    counts[index[st.sample_prior(rng, k, s, p_include=p, max_terms=max_terms)]] += 1
  se = np.sqrt(probs * (1 - probs) / n)
  assert np.all(np.abs(counts / n - probs) <= 4 * se + 1e-9)


def _space_and_grammar(k=3, s=2, max_terms=2):
  bodies = ["a*x", "a*y", "a*x*y", "a*x/y"][:k]
  lib = st.Library(STATES, bodies)
  return st.enumerate_space(k, s, max_terms), lib, grammar.GrammarProposal(lib, max_terms=max_terms)


def test_grammar_density_is_normalised_and_reversible():
  space, _, g = _space_and_grammar()
  for m in space:
    out, probs = g.distribution(m)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert m not in out
    for m2 in out:
      assert g.log_prob(m, m2) > -math.inf, "every move needs its reverse"


def test_grammar_sampler_matches_its_density():
  _, lib, g = _space_and_grammar()
  m = st.from_equations({"x": "a*x - b*x*y", "y": "c*y"}, lib)
  out, probs = g.distribution(m)
  n = 20_000
  u = np.random.default_rng(1).random(n)
  index = {s: i for i, s in enumerate(out)}
  counts = np.bincount([index[g.sample(m, ui)] for ui in u], minlength=len(out))
  se = np.sqrt(probs * (1 - probs) / n)
  assert np.all(np.abs(counts / n - probs) <= 4 * se + 1e-9)


@pytest.mark.parametrize("beta", [0.0, 0.35, 1.0])
def test_metropolis_hastings_kernel_leaves_the_tempered_target_invariant(beta):
  """pi_beta P = pi_beta for the exact transition matrix of one MH move."""
  space, lib, g = _space_and_grammar()
  p_include, max_terms = 0.3, 2
  rng = np.random.default_rng(2)
  log_z = rng.normal(0, 3, len(space))
  log_z[5] = -math.inf  # a failed fit
  lp = np.array([st.log_prior(m, len(lib), p_include=p_include, max_terms=max_terms) for m in space])
  index = {m: i for i, m in enumerate(space)}
  n = len(space)
  trans = np.zeros((n, n))
  for i, m in enumerate(space):
    out, probs = g.distribution(m)
    for m2, q in zip(out, probs):
      j = index[m2]
      log_a = moves.log_accept(beta, log_z[j], log_z[i], lp[j], lp[i], g.log_prob(m, m2), g.log_prob(m2, m))  # pylint: disable=protected-access
      trans[i, j] = q * min(1.0, math.exp(min(log_a, 0.0))) if log_a > -math.inf else 0.0
    trans[i, i] = 1.0 - trans[i].sum()
  with np.errstate(invalid="ignore"):
    target = lp + (beta * np.where(np.isfinite(log_z), log_z, 0.0) if beta > 0 else 0.0)
  if beta > 0:
    target[~np.isfinite(log_z)] = -np.inf
  pi = np.exp(target - np.max(target))
  pi /= pi.sum()
  np.testing.assert_allclose(pi @ trans, pi, atol=1e-12)
