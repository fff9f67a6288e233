"""ModelSMC numerics: signed initial states, bounded RK4 stages, honest intervals, config checks.

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
from launch.experiments import model_smc as smc_exp
from launch.experiments import model_smc_report as report
from launch.experiments import model_smc_sampler as sampler
from launch.experiments import model_smc_scoring as scoring
from launch.experiments import model_smc_tasks as tasks
from methods.common import hparams
from methods.model_smc import model as mdl
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


def test_lognormal_noise_keeps_the_log_scale():
  spec = mdl.ProblemSpec(states=("x",), observed=(0,), noise="lognormal")
  assert spec.init_scale == "log"
  assert mdl.ProblemSpec(states=("x",), observed=(0,), noise="gaussian").init_scale == "real"
  with pytest.raises(hparams.HparamError, match="init_space"):
    mdl.ProblemSpec(states=("x",), observed=(0,), noise="lognormal", init_space="real")


def test_rk4_stages_stay_finite_where_clipping_after_the_step_gave_nan():
  # Van der Pol with an x^2*y term: from (5, 5) the state overflows inside a step.
  def rhs(x, t):
    del t
    return jnp.stack([x[1], (1.0 - x[0] ** 2) * x[1] - x[0]])

  x0 = jnp.array([5.0, 5.0])
  z = ode_systems.rk4_solve(rhs, x0, num_points=5, dt=0.5, substeps=2, bound=1e4)
  assert np.all(np.isfinite(np.asarray(z)))
  h, x = 0.25, x0  # the previous scheme: clip only after a full step
  for _ in range(8):
    k1 = rhs(x, 0.0)
    k2 = rhs(x + 0.5 * h * k1, 0.0)
    k3 = rhs(x + 0.5 * h * k2, 0.0)
    k4 = rhs(x + h * k3, 0.0)
    x = jnp.clip(x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), -1e4, 1e4)
  assert not np.any(np.isfinite(np.asarray(x)))
  # Inside the bound the solution is the plain RK4 one.
  ok = ode_systems.rk4_solve(lambda x, t: -x, jnp.array([1.0]), num_points=3, dt=1.0, substeps=10, bound=1e4)
  np.testing.assert_allclose(np.asarray(ok)[:, 0], np.exp(-np.arange(3.0)), rtol=1e-5)


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
  assert list(sampler.visited_posterior(config, evaluator)) == [evaluator.key(truth)]
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
