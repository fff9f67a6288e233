"""Exact-posterior check: SMC structure frequencies against brute-force p(m | x).

The damped-oscillator task has 2 states and 2 bodies: 81 structures, all
fitted by brute force. ``p(m | x) ∝ p(m) Z(m)`` is then exact for the very
``Z`` the sampler uses, so independent SMC runs must reproduce it within
Monte Carlo error, and their normaliser estimates must agree with
``log sum_m p(m) Z(m)``.
"""

import math

import chex
import jax
import numpy as np
import pytest

import model_smc_problems as tp
from methods.model_smc import evidence as ev
from methods.model_smc import fit as fit_lib
from methods.model_smc import grammar
from methods.model_smc import pooled as pooled_lib
from methods.model_smc import smc
from methods.model_smc import structure as st
from methods.model_smc.evaluator import Evaluator


@pytest.fixture(scope="module")
def exact_setup():
  problem = tp.oscillator()
  lib = problem.library
  evaluator = tp.evaluator(problem)
  space = st.enumerate_space(len(lib), len(lib.states), problem.prior.max_terms)
  log_z = evaluator.evaluate(space)
  return problem, lib, evaluator, space, log_z


@pytest.mark.slow
def test_smc_frequencies_match_brute_force(exact_setup):
  problem, lib, evaluator, space, log_z = exact_setup
  prior = problem.prior
  lp = np.array([prior.log_prior(m, len(lib)) for m in space])
  joint = lp + log_z
  log_norm = float(np.logaddexp.reduce(joint))
  exact = np.exp(joint - log_norm)
  assert exact.max() < 0.95, "the check needs a posterior spread over several structures"
  fits_before = evaluator.num_fits
  g = grammar.GrammarProposal(lib, max_terms=prior.max_terms)
  tempering = smc.TemperingConfig(num_particles=100, mcmc_steps=2)
  index = {evaluator.key(m): i for i, m in enumerate(space)}
  reps = 16
  freqs, norms, betas = np.zeros((reps, len(space))), np.zeros(reps), []
  for r in range(reps):
    final = pooled_lib.run(jax.random.key(100 + r), evaluator, g, prior=prior, tempering=tempering, final=smc.FinalConfig())
    betas.append(final.beta)
    for k, v in smc.run_mass(final, evaluator.key).items():
      freqs[r, index[k]] = v
    norms[r] = final.log_normalizer
  assert evaluator.num_fits == fits_before, "every structure was already fitted"
  assert all(b == 1.0 for b in betas)
  mean, se = freqs.mean(0), freqs.std(0, ddof=1) / math.sqrt(reps)
  relevant = exact > 0.01
  z = (mean - exact) / np.maximum(se, 1e-4)
  # 16 runs: the t-distribution with 15 d.o.f. puts |t| > 4.5 at ~4e-4 per structure.
  assert np.all(np.abs(z[relevant]) < 4.5), list(zip(exact[relevant], mean[relevant], se[relevant]))
  assert 0.5 * np.abs(mean - exact).sum() < 0.05
  norm_se = norms.std(ddof=1) / math.sqrt(reps)
  assert abs(norms.mean() - log_norm) < 4.5 * norm_se + 0.02, (norms.mean(), log_norm, norm_se)


def test_fit_evidence_is_the_laplace_of_the_log_joint(exact_setup):
  """The batched fit's Laplace value equals evidence.laplace at its optimum."""
  problem, lib, evaluator, space, log_z = exact_setup
  model = evaluator.model()
  cfg = evaluator.cfg

  @jax.jit
  def laplace_value(phi, signs):
    mask = model.layout.active_mask(signs)
    log_joint = lambda p: (model.log_likelihood(p, signs, problem.data, lo=0, hi=cfg.num_fit)  # noqa: E731
                           + model.log_prior(p, signs, problem.data))
    return ev.laplace(log_joint, phi, mask).log_evidence

  checked = 0
  for i in np.argsort(-log_z)[:3]:
    m = space[i]
    rec = evaluator.record(m)
    value = laplace_value(np.asarray(rec.phi, np.float32), m.signs(len(lib)))
    np.testing.assert_allclose(float(value), rec.log_evidence, rtol=1e-4, atol=5e-3)
    checked += 1
  assert checked == 3


def test_batched_fit_compiles_once(exact_setup, monkeypatch):
  """New batches of structures reuse one compiled fit (no retracing)."""
  problem, lib, _, space, _ = exact_setup
  chex.clear_trace_counter()
  monkeypatch.setattr(fit_lib, "fit_structure", chex.assert_max_traces(fit_lib.fit_structure, n=1))
  spec_cfg = fit_lib.FitConfig(num_fit=problem.num_fit, evidence="bic", restarts=1, steps=5, newton_steps=0)
  evaluator = Evaluator(lib, problem.spec, spec_cfg, problem.data, batch_size=8)
  out = evaluator.evaluate(space[:30])
  chex.assert_shape(out, (30,))
  assert evaluator.num_batches == 4 and evaluator.num_fits == 30
  again = evaluator.evaluate(space[:30])
  np.testing.assert_array_equal(out, again)
  assert evaluator.num_batches == 4
