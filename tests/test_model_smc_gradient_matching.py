"""ModelSMC gradient-matching candidates: exact recovery on noiseless features, the truth on simulated data."""

import numpy as np

import model_smc_problems as tp
from methods.model_smc import gradient_matching as gm
from methods.model_smc.model import StructuredModel


def _model(problem):
  return problem, StructuredModel(problem.library.bodies, problem.spec)


def test_best_subset_recovers_a_sparse_linear_combination():
  rng = np.random.default_rng(0)
  feats = rng.normal(size=(30, 5))
  deriv = 2.0 * feats[:, 0] - 3.0 * feats[:, 3] + 1e-3 * rng.normal(size=30)
  out = gm.equation_subsets(deriv, feats, np.ones(5, bool), max_terms=3)
  assert out[0][1] == ((0, 1), (3, -1))
  assert [score for score, _ in out] == sorted((score for score, _ in out), reverse=True)
  assert len({terms for _, terms in out}) == len(out)
  # An unusable body never enters.
  masked = gm.equation_subsets(deriv, feats, np.array([True, True, True, False, True]), max_terms=3)
  assert all(k != 3 for _, terms in masked for k, _ in terms)


def test_candidates_contain_the_true_structure_on_simulated_lotka_volterra():
  problem, model = _model(tp.lotka_volterra())
  max_terms = problem.prior.max_terms
  cands = gm.candidates(model, problem.data, num_rows=problem.num_fit, max_terms=max_terms, count=16)
  assert 0 < len(cands) <= 16 and len(set(cands)) == len(cands)
  assert problem.truth in cands[:4]
  assert all(max(len(eq) for eq in m.terms) <= max_terms for m in cands)


def test_no_candidates_without_every_state_observed():
  problem, model = _model(tp.flu())  # S is latent: no derivative to match
  assert gm.candidates(model, problem.data, num_rows=problem.num_fit, max_terms=2, count=8) == ()
  problem, model = _model(tp.pelts())
  assert gm.candidates(model, problem.data, num_rows=problem.num_fit, max_terms=3, count=0) == ()
