"""Mixing of the tempered SMC over structures: the final phase at beta = 1 and pooled runs.

On the damped oscillator's 81-structure space every structure is fitted, so
the visited-set posterior is the exact ``p(m | x)``: the pooled, rejuvenated
particles must match it within the Monte Carlo error of their number. The
SMC's own local search must reach what N = 1 hill climbing reaches, and the
new keys are validated like the others.
"""

import math
import os

import jax
import numpy as np
import pytest

from launch import config_schema
from launch import mesh as mesh_lib
from launch import runner
from launch.configs import model_smc as smc_config
from launch.experiments import model_smc as smc_exp
from launch.experiments import model_smc_report as report
from launch.experiments import model_smc_sampler as sampler
from launch.experiments import model_smc_tasks as tasks
from methods.model_smc import gradient_matching as gm_lib
from methods.model_smc import grammar as grammar_lib
from methods.model_smc import pooled as pooled_lib
from methods.model_smc import reference
from methods.model_smc import smc
from methods.model_smc import structure as st


def test_total_variation_on_a_hand_example():
  p = {"a": 0.5, "b": 0.5}
  q = {"a": 0.25, "c": 0.75}
  assert pooled_lib.total_variation(p, q) == pytest.approx(0.5 * (0.25 + 0.5 + 0.75))
  assert pooled_lib.total_variation(p, dict(p)) == 0.0
  assert pooled_lib.total_variation({"a": 1.0}, {"b": 1.0}) == 1.0


def _exact(fit_all: bool):
  config = smc_config.get_config("smoke,task=exact")
  task = tasks.build(config)
  lib = st.Library(task.states, config.library)
  evaluator = smc_exp.make_evaluator(config, task, lib, mesh_lib.make_mesh(1))
  g = grammar_lib.GrammarProposal(lib, max_terms=config.smc.max_terms)
  space = st.enumerate_space(len(lib), len(lib.states), config.smc.max_terms)
  if fit_all:
    evaluator.evaluate(space)
  return config, evaluator, g, space


@pytest.fixture(scope="module")
def exact_space():
  return _exact(fit_all=True)


def test_pooled_rejuvenated_mass_matches_the_visited_posterior(exact_space):
  config, evaluator, g, space = exact_space
  exact = sampler.visited_posterior(config, evaluator)  # every structure is visited: the exact posterior
  assert len(exact) == len(space) and max(exact.values()) < 0.95
  cfg = smc.SMCConfig(num_particles=50, num_runs=4, mcmc_steps=1, p_include=config.smc.p_include,
                      max_terms=config.smc.max_terms, final_moves=2.0, elite_prob=0.2, local_search=2,
                      candidates=8, candidate_prob=0.1, prior_prob=0.1)
  cands = gm_lib.candidates(evaluator.model(), evaluator.data, num_rows=evaluator.cfg.fit_rows,
                            max_terms=cfg.max_terms, count=cfg.candidates)
  assert 0 < len(cands) <= cfg.candidates
  pooled = pooled_lib.run_pooled(jax.random.key(7), evaluator, g, cfg, candidates=cands)
  assert len(pooled.runs) == 4 and all(smc.finished(s, cfg) for s in pooled.runs)
  assert all(s.elites and s.moves > 0 for s in pooled.runs)
  mass = pooled_lib.pooled_mass(pooled.runs, evaluator.key)
  assert sum(mass.values()) == pytest.approx(1.0)
  # n independent draws from p have E[TV] <= 0.5 sum_m sqrt(p(m) (1 - p(m)) / n); the runs' particles are
  # correlated (resampling), so allow three times the bound for n = runs x particles.
  p = np.array(list(exact.values()))
  bound = 0.5 * np.sqrt(p * (1 - p) / (cfg.num_runs * cfg.num_particles)).sum()
  assert pooled_lib.total_variation(mass, exact) < 3 * bound, (pooled_lib.total_variation(mass, exact), bound)
  assert next(iter(mass)) == next(iter(exact))
  # Run 0 of the pooled sampler is the single run with the same key.
  single = smc.run(jax.random.key(7), evaluator, g, cfg, candidates=cands)
  assert smc.run_mass(single, evaluator.key) == smc.run_mass(pooled.runs[0], evaluator.key)


def test_run_mass_averages_the_second_half_of_the_final_sweeps(exact_space):
  _, evaluator, _, space = exact_space
  a, b, c = space[:3]
  state = smc.SMCState((a, a), np.zeros(2), np.zeros(2), 1.0, 0.0, 1, 2)
  assert smc.run_mass(state, evaluator.key) == {evaluator.key(a): 1.0}
  state = state._replace(final_mass=(((c, 1.0),), ((a, 0.5), (b, 0.5)), ((a, 0.25), (b, 0.75))))
  mass = smc.run_mass(state, evaluator.key)  # sweeps 2 and 3 of 3 (the first is burn-in)
  assert mass == pytest.approx({evaluator.key(b): 0.625, evaluator.key(a): 0.375})


def test_final_sweeps_with_elites_leave_the_posterior_invariant(exact_space):
  """Exact draws from p(m | x), then final sweeps with a fixed elite set: the frequencies stay put."""
  config, evaluator, g, space = exact_space
  exact = sampler.visited_posterior(config, evaluator)
  keys = list(exact)
  p = np.array([exact[k] for k in keys])
  n = 3000
  rng = np.random.default_rng(0)
  particles = tuple(st.from_key(keys[i], evaluator.library) for i in rng.choice(len(keys), n, p=p))
  elites = tuple(st.from_key(k, evaluator.library) for k in keys[:6])
  cfg = smc.SMCConfig(num_particles=n, p_include=config.smc.p_include, max_terms=config.smc.max_terms,
                      elite_prob=0.3, prior_prob=0.2)
  state = smc.SMCState(particles, np.zeros(n), evaluator.evaluate(particles), 1.0, 0.0, 1, n, elites)
  for s in range(3):
    state, _ = smc.final_sweep(state, jax.random.key(s), evaluator, g, cfg)
  freq = smc.posterior_mass(state.particles, state.log_weights, evaluator.key)
  bound = 0.5 * np.sqrt(p * (1 - p) / n).sum()
  assert pooled_lib.total_variation(freq, exact) < 3 * bound, (pooled_lib.total_variation(freq, exact), bound)
  assert state.moves > 0.05


def test_hill_climbing_structure_is_in_the_samplers_visited_set():
  config, evaluator, g, _ = _exact(fit_all=False)
  cfg = smc.SMCConfig(num_particles=24, num_runs=1, mcmc_steps=1, p_include=config.smc.p_include,
                      max_terms=config.smc.max_terms, local_search=1)
  pooled = pooled_lib.run_pooled(jax.random.key(3), evaluator, g, cfg)
  fitted = tuple(evaluator.cache)
  proposals = sum(s.proposals for s in pooled.runs)
  start = st.sample_prior(smc.host_rng(jax.random.key(1)), len(evaluator.library), len(evaluator.library.states),
                          p_include=cfg.p_include, max_terms=cfg.max_terms)
  res = reference.hill_climb(jax.random.key(2), evaluator, reference.grammar_proposer(g), budget=proposals,
                             start=start, chunk=evaluator.batch_size)
  hill = {"structure": res.structure}
  sampled = sampler.Sampled(particles=pooled.runs[0].particles, mass=pooled_lib.pooled_mass(pooled.runs, evaluator.key),
                            iterations=0, beta=1.0, log_normalizer=0.0, proposals=proposals, diagnostics=[],
                            elapsed=0.0, rejections={}, fits=len(fitted), fitted=fitted,
                            runs=tuple(sampler.run_summary(s, evaluator) for s in pooled.runs))
  mx = sampler.mixing_check(config, evaluator, sampled, hill)
  h = mx["hill_climb"]
  assert h["sampler_found_better_or_equal"], h
  if h["log_joint"] >= h["sampler_best_log_joint"] - 1e-9:
    assert h["in_sampler_visited"], h
  assert set(mx) >= {"total_variation", "total_variation_runs", "top_runs", "agree", "passed"}
  assert math.isfinite(mx["total_variation"]) and len(mx["total_variation_runs"]) == 1


def test_mixing_line_says_pass_or_fail():
  mx = {"num_runs": 5, "num_structures": 100, "total_variation": 0.04, "total_variation_runs": [0.05] * 5,
        "top_runs": ["a"] * 5, "agree": True, "top": "a", "top_mass_runs": [0.5] * 5, "top_mass_spread": 0.0,
        "threshold": 0.1, "passed": True}
  assert report.mixing_line(mx).startswith("mixing PASS")
  bad = dict(mx, top_runs=["a", "b", "a", "a", "a"], agree=False, passed=False)
  line = report.mixing_line(bad)
  assert line.startswith("mixing FAIL") and "disagree" in line
  assert report.mixing_line(dict(mx, total_variation=0.2, passed=False)).startswith("mixing FAIL")


@pytest.mark.parametrize("overrides,words", [
    ({"smc.num_runs": 0}, "'smc.num_runs'"),
    ({"smc.elite_prob": 1.0}, "'smc.elite_prob'"),
    ({"smc.num_elites": 1}, "num_elites"),
    ({"smc.final_moves": -1.0}, "'smc.final_moves'"),
    ({"smc.final_max_sweeps": 0}, "final_max_sweeps"),
    ({"smc.local_search_steps": 0}, "'smc.local_search_steps'"),
    ({"smc.prior_prob": 0.9}, "prior_prob"),
])
def test_bad_mixing_keys_fail_before_compute(overrides, words, tmp_path):
  config = smc_config.get_config("smoke,task=pelts")
  for key, value in overrides.items():
    section, name = key.split(".")
    config[section][name] = value
  with pytest.raises(config_schema.ConfigError) as info:
    runner.run(config, str(tmp_path / "w"))
  assert words in str(info.value)
  assert not os.path.exists(tmp_path / "w")


def test_posterior_weighted_elite_jumps_are_always_accepted(exact_space):
  config, evaluator, g, _ = exact_space
  exact = sampler.visited_posterior(config, evaluator)
  elites = tuple(st.from_key(k, evaluator.library) for k in list(exact)[:5])
  cfg = smc.SMCConfig(num_particles=40, p_include=config.smc.p_include, max_terms=config.smc.max_terms,
                      elite_prob=0.9, prior_prob=0.05, elite_weights="posterior")
  particles = (elites[2],) * 40
  state = smc.SMCState(particles, np.zeros(40), evaluator.evaluate(particles), 1.0, 0.0, 1, 40, elites)
  new, _ = smc.final_sweep(state, jax.random.key(0), evaluator, g, cfg)
  (sweep,) = new.final_mass
  jumped = [m for m, _ in sweep if m in elites and m != elites[2]]
  assert jumped, "some particles proposed another elite"
  # Rao-Blackwellised mass of a proposed elite is W * a with a = 1: every elite jump was accepted.
  targets = {m for m in new.particles if m in elites and m != elites[2]}
  assert targets == set(jumped)
  uniform = cfg.__class__(**{**cfg.__dict__, "elite_weights": "uniform"})
  _, _, _, prob, proposed = smc.mh_sweep(jax.random.key(0), particles, state.log_evidence, 1.0, evaluator, g,
                                         uniform, elites=elites)
  assert any(p < 1 for p, m in zip(prob, proposed) if m in elites and m != elites[2])
