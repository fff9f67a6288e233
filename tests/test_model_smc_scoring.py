"""The ``model_smc`` experiment's tasks, scoring and report: a new simulated system, intervals, mixing, rejections.

One new simulated system (a Duffing oscillator: a cubic term and a negative
initial position) is added in one place -- the table
``envs.ode_systems.SYSTEMS``, here by ``monkeypatch`` -- and runs as
``task=sim,system=duffing`` with no other edit.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import ode_systems
from launch import config_schema
from launch import mesh as mesh_lib
from launch import runner
from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import experiment as smc_exp
from launch.experiments.model_smc import report
from launch.experiments.model_smc import sampler
from launch.experiments.model_smc import scoring
from launch.experiments.model_smc import tasks
import model_smc_problems as tp
from methods.model_smc import grammar as grammar_lib
from methods.model_smc import pooled as pooled_lib
from methods.model_smc import reference
from methods.model_smc import smc
from methods.model_smc import structure as st


def _duffing(x, p):
  return jnp.stack([x[1], -p["k"] * x[0] - p["b"] * x[0] ** 3 - p["c"] * x[1]])


DUFFING = ode_systems.OdeSystem(
    name="duffing", states=("x", "v"), equations=("v", "-k*x - b*x^3 - c*v"),
    params={"k": 1.0, "b": 0.5, "c": 0.1}, x0=(-1.5, 0.5), dt=0.5, num_points=24, observed=(0, 1),
    noise="gaussian", noise_scale=0.05, rhs=_duffing, library=("a*x", "a*v", "a*x^3"))


@pytest.fixture()
def with_duffing(monkeypatch):
  monkeypatch.setitem(ode_systems.SYSTEMS, "duffing", DUFFING)  # the one place a system is added


@pytest.fixture(scope="module")
def duffing():
  """An evaluator of the Duffing task; ``state_bound`` 1e30 lets a blow-up overflow the likelihood."""
  with pytest.MonkeyPatch.context() as mp:
    mp.setitem(ode_systems.SYSTEMS, "duffing", DUFFING)
    config = smc_config.get_config("smoke,task=sim,system=duffing")
    config.fit.steps = 150
    config.fit.knockouts = 0  # a start with x^3 switched off would not blow up: every restart only jittered
    config.fit.knockout_prob = 0.0
    config.problem.state_bound = 1e30
    runner.validate(config)
    task = tasks.build(config)
  lib = st.Library(task.states, config.library)
  evaluator = smc_exp.make_evaluator(config, task, lib, mesh_lib.make_mesh())
  truth = tasks.truth_structure(task, lib)
  exploding = st.Structure.make([[(lib.keys.index("c0*x^3"), 1)], [(lib.keys.index("c0*x"), -1)]])
  evaluator.evaluate([truth, exploding])
  return config, task, evaluator, truth, exploding


def test_new_system_runs_from_one_table_entry(with_duffing):
  config = smc_config.get_config("smoke,task=sim,system=duffing")
  assert config.sim.system == "duffing" and config.problem.noise == "gaussian"
  assert config.library == DUFFING.library and config.num_fit == 18
  runner.validate(config)
  task = tasks.build(config)
  assert task.states == ("x", "v") and task.data.y.shape == (24, 2) and task.spec.init_scale == "real"
  assert task.truth["equations"]["x"] == "+(unit3*v)"  # a parameter-free term is the body a*v with a = 1
  with pytest.raises(ValueError, match="unknown system 'nope'.*duffing"):
    smc_config.get_config("smoke,task=sim,system=nope")


def test_negative_initial_state_is_recovered_with_init_fit(duffing):
  _, task, evaluator, truth, _ = duffing
  assert task.spec.init == "fit" and task.spec.init_scale == "real"
  table = report.parameter_table(evaluator, truth)
  for name, true in (("x0", -1.5), ("v0", 0.5)):
    row = table[name]
    assert row["interval"] == "laplace" and row["lo90"] < row["hi90"]
    assert row["lo90"] <= true <= row["hi90"], (name, row)
  assert table["x0"]["map"] < 0


def test_restarts_are_counted_and_an_all_nonfinite_fit_is_labelled(duffing):
  config, _, evaluator, truth, exploding = duffing
  good, bad = evaluator.record(truth), evaluator.record(exploding)
  assert good.status == "ok" and good.nonfinite_restarts == 0 and math.isfinite(good.log_evidence)
  assert bad.nonfinite_restarts == config.fit.restarts and bad.status == "all_restarts_nonfinite"
  health = evaluator.fit_health()
  assert health == {"structures": 2, "restarts_per_fit": 2, "nonfinite_restarts": 2,
                    "structures_with_nonfinite_restarts": 1, "failed_all_restarts_nonfinite": 1,
                    "failed_nonfinite_at_optimum": 0}
  assert "2 restarts never finite" in report.health_line(health)
  described = report.describe(evaluator, exploding)
  assert described["fit_status"] == "all_restarts_nonfinite"
  assert all(r["interval"] == "none" and "failed fit" in r["reason"] for r in described["params"].values())
  # Not a low evidence: the failed structure is left out of the visited-set posterior.
  prior = smc_config.SECTIONS.build(config, st.PriorConfig)
  assert list(pooled_lib.visited_posterior(evaluator, prior)) == [evaluator.key(truth)]
  # The checkpointed cache keeps the counts.
  state = evaluator.state_dict()
  evaluator.load_state_dict(state)
  assert evaluator.record(exploding).status == "all_restarts_nonfinite"


def _sampled(evaluator, particles, fitted):
  return sampler.Sampled(particles=tuple(particles), mass={evaluator.key(particles[0]): 1.0}, iterations=1,
                         beta=1.0, log_normalizer=0.0, proposals=1, diagnostics=[], elapsed=0.0, rejections={},
                         fits=len(fitted), visited={"num_structures": 1, "mass": {}, "order": list(fitted)},
                         fitted=tuple(fitted))


def test_an_indefinite_hessian_gives_no_interval_and_no_coverage(duffing):
  _, task, evaluator, truth, exploding = duffing
  k = evaluator.key(truth)
  sd, reason = report.posterior_sd(np.diag([1.0, -1e-3, 2.0]))
  assert sd is None and "not positive definite" in reason
  saved = evaluator.hessians[k]
  try:
    good = scoring.truth(task, evaluator, _sampled(evaluator, [truth], [k]))
    assert good["visited"] and good["rank"] == 1 and good["visited_rank"] == 1 and good["no_interval"] == 0
    h = np.array(saved, copy=True)
    i = evaluator.model().layout.slot_index[0][1, 0]
    h[i, i] = -abs(h[i, i])  # a saddle in one direction
    evaluator.hessians[k] = h
    table = report.parameter_table(evaluator, truth)
    assert all(r["interval"] == "none" and r["lo90"] is None for r in table.values())
    res = scoring.truth(task, evaluator, _sampled(evaluator, [exploding], [evaluator.key(exploding)]))
    assert res["covered"] == 0 and res["no_interval"] == res["num_params"] == 4
    assert res["visited"] is False and res["rank"] is None
    line = report.truth_line(res)
    assert "never visited" in line and "without an interval" in line and "not positive definite" in line
  finally:
    evaluator.hessians[k] = saved


def _check(config, words):
  with pytest.raises(config_schema.ConfigError) as info:
    runner.validate(config)
  assert words in str(info.value)


def test_noise_kind_mismatch_is_a_config_error(with_duffing):
  config = smc_config.get_config("smoke,task=sim,system=duffing")
  config.problem.noise = "lognormal"
  _check(config, "'problem.noise'")
  config.sim.allow_noise_mismatch = True
  runner.validate(config)
  lv = smc_config.get_config("smoke,task=lv_sim")
  lv.problem.noise = "gaussian"
  _check(lv, "simulated with lognormal noise")
  lv = smc_config.get_config("smoke,task=lv_sim")
  lv.sim.system = "sir"
  _check(lv, "task=sim,system=sir")
  sim = smc_config.get_config("smoke,task=sim")
  sim.sim.system = "nope"
  _check(sim, "unknown simulated system 'nope'")


def test_sim_noise_scale_zero_keeps_the_systems_own(with_duffing):
  config = smc_config.get_config("smoke,task=sim,system=duffing")
  assert config.sim.noise_scale == 0.0
  a = np.asarray(tasks.build(config).data.y)
  y, _ = ode_systems.simulate(jax.random.key(config.sim.data_seed), DUFFING)
  np.testing.assert_allclose(a, np.asarray(y), rtol=1e-6)
  assert smc_config.get_config("smoke,task=exact").sim.noise_scale == 0.3  # an explicit, logged override


def test_hill_climbing_structure_is_in_the_samplers_visited_set():
  problem = tp.oscillator()
  prior, evaluator = problem.prior, tp.evaluator(problem)
  g = grammar_lib.GrammarProposal(problem.library, max_terms=prior.max_terms)
  pooled = pooled_lib.run_pooled(jax.random.key(3), evaluator, g, prior=prior,
                                 tempering=smc.TemperingConfig(num_particles=24, num_runs=1, mcmc_steps=1),
                                 final=smc.FinalConfig(local_search=1))
  fitted = tuple(evaluator.cache)
  proposals = sum(s.proposals for s in pooled.runs)
  start = prior.sample(smc.host_rng(jax.random.key(1)), len(evaluator.library), len(evaluator.library.states))
  res = reference.hill_climb(jax.random.key(2), evaluator, reference.grammar_proposer(g), budget=proposals,
                             start=start, chunk=evaluator.batch_size)
  hill = {"structure": res.structure}
  sampled = sampler.Sampled(particles=pooled.runs[0].particles, mass=pooled_lib.pooled_mass(pooled.runs, evaluator.key),
                            iterations=0, beta=1.0, log_normalizer=0.0, proposals=proposals, diagnostics=[],
                            elapsed=0.0, rejections={}, fits=len(fitted), fitted=fitted,
                            runs=tuple(sampler.run_summary(s, evaluator) for s in pooled.runs))
  mx = sampler.mixing_check(evaluator, prior, sampled, hill)
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


def test_the_summary_reports_rejections_and_warns_when_all_were_rejected():
  results = {"proposal": "llm", "smc": {"proposals": 5, "rejections": {"json": 1, "unsafe": 2}},
             "hill_climb": {"proposals": 3, "rejections": {"unsafe": 3}}}
  lines = report.rejection_lines(results)
  assert lines[0] == "ModelSMC: 3 of 5 proposals were rejected (json: 1, unsafe: 2)"
  assert lines[1].startswith("hill climbing: 3 of 3 proposals were rejected (unsafe: 3); WARNING")
  assert report.rejection_lines({"proposal": "grammar", "smc": {"proposals": 5, "rejections": {}}}) == []
