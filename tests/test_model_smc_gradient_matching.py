"""ModelSMC gradient-matching candidates: exact recovery on noiseless features, the truth on simulated data."""

import numpy as np

from launch.configs import model_smc as smc_config
from launch.experiments import model_smc_tasks as tasks
from methods.model_smc import gradient_matching as gm
from methods.model_smc import structure as st
from methods.model_smc.model import StructuredModel


def _model(arg):
  config = smc_config.get_config(arg)
  task = tasks.build(config)
  lib = st.Library(task.states, tasks.library_of(config, task.states))
  return config, task, lib, StructuredModel(lib.bodies, task.spec)


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
  config, task, lib, model = _model("cpu,task=lv_sim")
  cands = gm.candidates(model, task.data, num_rows=config.num_fit, max_terms=config.smc.max_terms, count=16)
  assert 0 < len(cands) <= 16 and len(set(cands)) == len(cands)
  assert tasks.truth_structure(task, lib) in cands[:4]
  assert all(max(len(eq) for eq in m.terms) <= config.smc.max_terms for m in cands)


def test_no_candidates_without_every_state_observed():
  config, task, _, model = _model("cpu,task=flu")  # S is latent: no derivative to match
  assert gm.candidates(model, task.data, num_rows=config.num_fit, max_terms=2, count=8) == ()
  config, task, _, model = _model("cpu,task=pelts")
  assert gm.candidates(model, task.data, num_rows=config.num_fit, max_terms=3, count=0) == ()
