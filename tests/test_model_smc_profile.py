"""The run's profile (phases, fits, compiles) and the progress line's ETA per phase
(``launch.experiments.model_smc.profile``)."""

import jax
import jax.numpy as jnp
import pytest

from launch.experiments.model_smc import profile as profile_lib


class _Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_the_eta_comes_from_the_phase_own_rate_and_the_finished_phases(monkeypatch):
  clock = _Clock()
  monkeypatch.setattr(profile_lib.time, "perf_counter", clock)
  eta = profile_lib.PhaseEta(num_runs=2, phases=("temper", "final"))
  clock.now = 10.0
  assert eta.update(0, "temper", 0.5) == (10.0, None)  # 10 s for half the phase; no phase finished yet
  clock.now = 12.0  # the runs advance in lockstep: run 1 reports between run 0's steps
  assert eta.update(1, "temper", 0.4)[0] == pytest.approx(18.0)
  clock.now = 20.0
  assert eta.update(0, "temper", 1.0)[0] == 0.0
  clock.now = 50.0  # run 0's final phase starts at its last tempering step (t = 20)
  phase_eta, total = eta.update(0, "final", 0.25)
  assert phase_eta == pytest.approx(90.0)  # 30 s for a quarter: 90 s left, not 0
  assert total is None  # run 1's final phase: no run has finished one yet
  clock.now = 60.0
  phase_eta, total = eta.update(1, "temper", 0.8)  # run 1: 60 s for 80% of its tempering
  assert phase_eta == pytest.approx(15.0)
  assert total is None
  clock.now = 140.0
  assert eta.update(0, "final", 1.0) == (0.0, 15.0 + 120.0)  # run 1's last estimate, then a final phase
  clock.now = 150.0  # run 1 needs 150 * 0.1 / 0.9 of tempering, then a final phase like run 0's 120 s
  phase_eta, total = eta.update(1, "temper", 0.9)
  assert total == pytest.approx(150.0 / 9 + 120.0)
  assert profile_lib.PhaseEta.text(phase_eta, None) == "phase ETA 0:00:17, total ETA ?"


def test_compiles_are_counted_and_a_warm_call_compiles_nothing():
  profile_lib.compiles()  # starts the count

  @jax.jit
  def f(x):
    return jnp.sin(x) * 3.0 + 0.125

  before, _ = profile_lib.compiles()
  f(jnp.ones(7)).block_until_ready()
  after_first, _ = profile_lib.compiles()
  f(jnp.zeros(7)).block_until_ready()
  after_second, _ = profile_lib.compiles()
  assert after_first > before and after_second == after_first


def test_the_profile_splits_a_phase_into_fits_transfers_checkpoints_and_the_rest(monkeypatch):
  clock = _Clock()
  monkeypatch.setattr(profile_lib.time, "perf_counter", clock)

  class Evaluator:
    timing = {"fit_seconds": 0.0, "first_call_seconds": 0.0, "transfer_seconds": 0.0, "fit_calls": 0}
    num_fits = 0

  ev = Evaluator()
  profile = profile_lib.Profile(ev)
  mark = profile.mark()
  clock.now = 10.0
  ev.timing = {"fit_seconds": 4.0, "first_call_seconds": 3.0, "transfer_seconds": 0.5, "fit_calls": 2}
  ev.num_fits = 16
  profile.add("temper", mark, checkpoint_seconds=1.0)
  row = profile.as_dict()["temper"]
  assert row["seconds"] == 10.0 and row["fits"] == 16 and row["fit_calls"] == 2
  assert row["other_seconds"] == pytest.approx(10.0 - 4.0 - 3.0 - 0.5 - 1.0)
  assert profile.as_dict()["total"]["seconds"] == 10.0
