"""Mixing of the tempered SMC over structures: the final phase at beta = 1 and pooled runs.

On the damped oscillator's 81-structure space every structure is fitted, so
the visited-set posterior is the exact ``p(m | x)``: the pooled, rejuvenated
particles must match it within the Monte Carlo error of their number.
"""

import jax
import numpy as np
import pytest

import model_smc_problems as tp
from methods.model_smc import final as final_lib
from methods.model_smc import gradient_matching as gm_lib
from methods.model_smc import grammar as grammar_lib
from methods.model_smc import pooled as pooled_lib
from methods.model_smc import smc
from methods.model_smc import structure as st


def test_total_variation_on_a_hand_example():
  p = {"a": 0.5, "b": 0.5}
  q = {"a": 0.25, "c": 0.75}
  assert pooled_lib.total_variation(p, q) == pytest.approx(0.5 * (0.25 + 0.5 + 0.75))
  assert pooled_lib.total_variation(p, dict(p)) == 0.0
  assert pooled_lib.total_variation({"a": 1.0}, {"b": 1.0}) == 1.0


@pytest.fixture(scope="module")
def exact_space():
  """The oscillator's whole space fitted: the visited-set posterior is the exact one."""
  problem = tp.oscillator()
  lib = problem.library
  evaluator = tp.evaluator(problem)
  g = grammar_lib.GrammarProposal(lib, max_terms=problem.prior.max_terms)
  space = st.enumerate_space(len(lib), len(lib.states), problem.prior.max_terms)
  evaluator.evaluate(space)
  return problem.prior, evaluator, g, space


def test_pooled_rejuvenated_mass_matches_the_visited_posterior(exact_space):
  prior, evaluator, g, space = exact_space
  exact = pooled_lib.visited_posterior(evaluator, prior)  # every structure is visited: the exact posterior
  assert len(exact) == len(space) and max(exact.values()) < 0.95
  tempering = smc.TemperingConfig(num_particles=50, num_runs=4, mcmc_steps=1, candidates=8, candidate_prob=0.1)
  final = smc.FinalConfig(moves=2.0, elite_prob=0.2, local_search=2, prior_prob=0.1)
  cands = gm_lib.candidates(evaluator.model(), evaluator.data, num_rows=evaluator.cfg.fit_rows,
                            max_terms=prior.max_terms, count=tempering.candidates)
  assert 0 < len(cands) <= tempering.candidates
  pooled = pooled_lib.run_pooled(jax.random.key(7), evaluator, g, prior=prior, tempering=tempering, final=final,
                                 candidates=cands)
  assert len(pooled.runs) == 4 and all(final_lib.finished(s, final) for s in pooled.runs)
  assert all(s.elites and s.moves > 0 for s in pooled.runs)
  mass = pooled_lib.pooled_mass(pooled.runs, evaluator.key)
  assert sum(mass.values()) == pytest.approx(1.0)
  # n independent draws from p have E[TV] <= 0.5 sum_m sqrt(p(m) (1 - p(m)) / n); the runs' particles are
  # correlated (resampling), so allow three times the bound for n = runs x particles.
  p = np.array(list(exact.values()))
  bound = 0.5 * np.sqrt(p * (1 - p) / (tempering.num_runs * tempering.num_particles)).sum()
  assert pooled_lib.total_variation(mass, exact) < 3 * bound, (pooled_lib.total_variation(mass, exact), bound)
  assert next(iter(mass)) == next(iter(exact))
  # Run 0 of the pooled sampler is the single run with the same key.
  single = pooled_lib.run(jax.random.key(7), evaluator, g, prior=prior, tempering=tempering, final=final,
                   candidates=cands)
  assert smc.run_mass(single, evaluator.key) == smc.run_mass(pooled.runs[0], evaluator.key)


def test_run_mass_averages_the_second_half_of_the_final_sweeps(exact_space):
  _, evaluator, _, space = exact_space
  a, b, c = space[:3]
  state = smc.SMCState(particles=(a, a), log_weights=np.zeros(2), log_evidence=np.zeros(2), beta=1.0,
                       log_normalizer=0.0, iteration=1, proposals=2)
  assert smc.run_mass(state, evaluator.key) == {evaluator.key(a): 1.0}
  state = state._replace(final_mass=(((c, 1.0),), ((a, 0.5), (b, 0.5)), ((a, 0.25), (b, 0.75))))
  mass = smc.run_mass(state, evaluator.key)  # sweeps 2 and 3 of 3 (the first is burn-in)
  assert mass == pytest.approx({evaluator.key(b): 0.625, evaluator.key(a): 0.375})


def test_final_sweeps_with_elites_leave_the_posterior_invariant(exact_space):
  """Exact draws from p(m | x), then final sweeps with a fixed elite set: the frequencies stay put."""
  prior, evaluator, g, space = exact_space
  exact = pooled_lib.visited_posterior(evaluator, prior)
  keys = list(exact)
  p = np.array([exact[k] for k in keys])
  n = 3000
  rng = np.random.default_rng(0)
  particles = tuple(st.from_key(keys[i], evaluator.library) for i in rng.choice(len(keys), n, p=p))
  elites = tuple(st.from_key(k, evaluator.library) for k in keys[:6])
  final = smc.FinalConfig(elite_prob=0.3, prior_prob=0.2)
  state = smc.SMCState(particles=particles, log_weights=np.zeros(n), log_evidence=evaluator.evaluate(particles),
                       beta=1.0, log_normalizer=0.0, iteration=1, proposals=n, elites=elites)
  for s in range(3):
    state, _ = final_lib.final_sweep(state, jax.random.key(s), evaluator, g, prior=prior, final=final)
  freq = smc.posterior_mass(state.particles, state.log_weights, evaluator.key)
  bound = 0.5 * np.sqrt(p * (1 - p) / n).sum()
  assert pooled_lib.total_variation(freq, exact) < 3 * bound, (pooled_lib.total_variation(freq, exact), bound)
  assert state.moves > 0.05


def test_posterior_weighted_elite_jumps_are_always_accepted(exact_space):
  prior, evaluator, g, _ = exact_space
  exact = pooled_lib.visited_posterior(evaluator, prior)
  elites = tuple(st.from_key(k, evaluator.library) for k in list(exact)[:5])
  final = smc.FinalConfig(elite_prob=0.9, prior_prob=0.05, elite_weights="posterior")
  particles = (elites[2],) * 40
  state = smc.SMCState(particles=particles, log_weights=np.zeros(40), log_evidence=evaluator.evaluate(particles),
                       beta=1.0, log_normalizer=0.0, iteration=1, proposals=40, elites=elites)
  new, _ = final_lib.final_sweep(state, jax.random.key(0), evaluator, g, prior=prior, final=final)
  (sweep,) = new.final_mass
  jumped = [m for m, _ in sweep if m in elites and m != elites[2]]
  assert jumped, "some particles proposed another elite"
  # Rao-Blackwellised mass of a proposed elite is W * a with a = 1: every elite jump was accepted.
  targets = {m for m in new.particles if m in elites and m != elites[2]}
  assert targets == set(jumped)
  _, _, _, prob, proposed = smc.mh_sweep(jax.random.key(0), particles, state.log_evidence, 1.0, evaluator, g,
                                         prior=prior, elites=elites, eps=final.elite_prob, delta=final.prior_prob)
  assert any(p < 1 for p, m in zip(prob, proposed) if m in elites and m != elites[2])
