"""The user's own data: the CSV reader (``datasets.timeseries``), task=csv, its named errors before any fit,
and the NumPy entry point (``launch.experiments.model_smc.discover``)."""

import json
import os

import numpy as np
import pytest

from datasets import timeseries
from envs import ode_systems
from launch import config_schema
from launch import errors
from launch import runner
from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import discover
from launch.experiments.model_smc import tasks
from methods.model_smc import structure as st

GOOD = "time,position,velocity\n" + "".join(f"{0.5 * i:g},{np.cos(0.5 * i):.4f},{-np.sin(0.5 * i):.4f}\n"
                                            for i in range(12))


def _config(path, **overrides):
  config = smc_config.get_config("smoke,task=csv")
  config.data.path = str(path)
  config.num_fit = 9
  for key, value in overrides.items():
    node, parts = config, key.split(".")
    for p in parts[:-1]:
      node = node[p]
    node[parts[-1]] = value
  return config


def test_the_shipped_example_is_the_simulators_output(tmp_path):
  fresh = tmp_path / "oscillator.csv"
  discover.write_example(str(fresh))
  with open(discover.EXAMPLE) as f:
    assert f.read() == fresh.read_text()
  d = timeseries.read_csv(discover.EXAMPLE)
  assert d.states == ("position", "velocity") and d.y.shape == (24, 2) and d.dt == 0.5
  assert np.isnan(d.y[5, 0]) and np.isnan(d.y[11, 1]) and (d.y[np.isfinite(d.y)] < 0).any()


def test_reading_missing_cells_gaps_and_overrides(tmp_path):
  path = tmp_path / "d.csv"
  path.write_text("x,t,y,z\n1,0,NA,5\n2,1,,6\n3,3,4,7\n4,4,1,8\n5,5,2,9\n6,6,3,10\n")
  d = timeseries.read_csv(str(path), time_column="t", states=("z", "x"))
  assert d.states == ("z", "x") and d.time_name == "t" and d.y.shape == (7, 2)
  np.testing.assert_array_equal(d.times, np.arange(7))
  assert np.isnan(d.y[2]).all() and d.y[3, 1] == 3  # t = 2 is a missing row
  config = _config(path, **{"data.time_column": "t", "data.states": ("x", "y"), "data.latent": ("h",),
                            "data.latent_x0": (0.5,), "num_fit": 5, "prior.max_terms": 1,
                            "problem.init": "fixed", "library": ("a*x", "a*h")})
  runner.validate(config)
  task = tasks.build(config)
  assert task.states == ("x", "y", "h") and task.observed == (0, 1)
  np.testing.assert_allclose(np.asarray(task.data.x0_ref), [1.0, 4.0, 0.5])  # y's first value is at t = 3


@pytest.mark.parametrize("text,overrides,key,words", [
    (None, {}, "data.path", "does not exist"),
    (GOOD, {"data.states": ("positon",)}, "data.states", "did you mean 'position'"),
    (GOOD, {"data.time_column": "tme"}, "data.time_column", "its columns are ['time', 'position', 'velocity']"),
    (GOOD.replace("0.8776", "abc"), {}, "data.path", "line 3, column 'position': 'abc' is not a number"),
    (GOOD.replace("\n1,", "\n0.5,"), {}, "data.path", "time 0.5 repeats the previous time"),
    (GOOD.replace("\n1.5,", "\n0.7,"), {}, "data.path", "time 0.7 is earlier than the previous time 1"),
    (GOOD.replace("\n2,", "\n2.2,"), {}, "data.path", "not on a regular grid"),
    ("time,position,velocity\n" + "".join(f"{i},{i},\n" for i in range(12)), {}, "data.path",
     "column 'velocity' has no observations"),
    (GOOD, {"num_fit": 4}, "num_fit", "fewer than the 10 parameters"),
    (GOOD, {"num_fit": 12}, "num_fit", "12 grid rows"),
    (GOOD, {"data.latent": ("h",)}, "data.latent_x0", "0 values for the 1 latent states"),
    (GOOD, {"problem.noise": "lognormal"}, "problem.noise", "must be positive"),
    (GOOD, {"library_extra": ("a*position^velocity",)}, "library[6]", "exponent must be"),
    # A cell finite in float64 but not in float32 (the fit's precision) is an error, not a missing value.
    (GOOD.replace("0.8776", "1e308"), {}, "data.path", "line 3, column 'position': '1e308' is not finite in float32"),
    (GOOD.replace("-0.4794", "-4e38"), {}, "data.path", "column 'velocity': '-4e38' is not finite in float32"),
    # Times that imply a huge grid: the 0, 1e-9, 1, 1e4, and a typo 5e6 for 5.5.
    ("t,x\n0,1\n1e-9,2\n1,3\n1e4,4\n", {"num_fit": 3}, "data.path",
     "the times imply 10,000,000,000,001 grid points (step 1e-09, the smallest step, between line 2 and line 3); "
     "line 4 (t 1) is grid point 1,000,000,001"),
    (GOOD.replace("\n5.5,", "\n5e6,"), {}, "data.path", "line 13 (time 5e+06) is grid point 10,000,001, beyond "
     "the bound of 5,000 (data.max_grid_points"),
    # Values past the bound the integrated states are clipped to: no structure could follow them.
    (GOOD.replace("0.8776", "-2.5e4"), {}, "problem.state_bound",
     "column 'position' reaches 2.5e+04, but every integrated state is clipped to +-10000"),
    # A column named like the default library's parameter would leave every default body without one.
    (GOOD.replace("position", "a"), {}, "library[0]",
     "'a' (and 5 more bodies) has no parameter, every name in it is a state of ['a', 'velocity']: the state 'a'"),
    (GOOD, {"library_extra": ("position",)}, "library[6]", "'position' has no parameter"),
    # A misspelt state would be a parameter: named like a state, or a second parameter of a state-free body.
    (GOOD, {"library_extra": ("a*positon^2",)}, "library[6]",
     "'a*positon^2': the parameter 'positon' is named like the state 'position' (a name that is not a state of "
     "['position', 'velocity'] is a parameter): did you mean 'position'?"),
    (GOOD, {"library_extra": ("a*z",)}, "library[6]", "'a*z': no state of ['position', 'velocity'] and the "
     "parameters ['a', 'z']: a constant needs one parameter"),
    # A file without a header row, and one too short to fit 3 rows and hold one out.
    (GOOD.split("\n", 1)[1], {}, "data.path", "line 1: the first row holds numbers ['0', '1.0000', '-0.0000'], not "
     "column names; the file needs a header row naming the time column and the states (e.g. t,x1,x2)"),
    ("t,x\n0,1\n1,2\n2,3\n", {"num_fit": 3}, "data.path", "has 3 grid rows; a fit needs at least 4 (3 fitted and "
     "1 held out)"),
    # State names: a Python keyword, a latent state the language reserves, a repeated or time column.
    (GOOD.replace("velocity", "lambda"), {}, "data.path", "column 'lambda' cannot name a state"),
    (GOOD, {"data.latent": ("exp",), "data.latent_x0": (1.0,)}, "data.latent", "'exp' must be a new state name"),
    (GOOD, {"data.latent": ("t",), "data.latent_x0": (1.0,)}, "data.latent", "'t' must be a new state name"),
    (GOOD, {"data.latent": ("lambda",), "data.latent_x0": (1.0,)}, "data.latent", "'lambda' must be a new state"),
    (GOOD, {"data.states": ("position", "position")}, "data.states", "'position' is listed 2 times"),
    (GOOD, {"data.states": ("time", "position")}, "data.states", "the state 'time' is the time column"),
    (GOOD, {"data.latent": ("h",), "data.latent_x0": (2e4,)}, "problem.state_bound",
     "latent initial state 'h' reaches 2e+04, but every integrated state is clipped to +-10000"),
])
def test_bad_files_fail_before_any_fit_naming_the_problem(tmp_path, text, overrides, key, words):
  path = tmp_path / "data.csv"
  if text is not None:
    path.write_text(text)
  with pytest.raises(config_schema.ConfigError) as info:
    runner.run(_config(path, **overrides), str(tmp_path / "w"))
  assert f"'{key}'" in str(info.value) and words in str(info.value), str(info.value)
  assert not os.path.exists(tmp_path / "w")


def test_write_csv_reads_back_exactly_and_refuses_a_shape_that_is_not_t_by_states(tmp_path):
  """Unix timestamps a minute apart and values of full precision survive the file; a bad shape is named."""
  rng = np.random.default_rng(0)
  t = 1.7e9 + 60.0 * np.arange(6)  # {:g} wrote each as 1.7e+09
  x = rng.normal(size=(6, 2)) * 10.0 ** rng.integers(-8, 8, size=(6, 2))
  x[2, 1] = np.nan
  path = str(tmp_path / "exact.csv")
  timeseries.write_csv(path, t, x, ("u", "v"))
  d = timeseries.read_csv(path)
  np.testing.assert_array_equal(d.times, t)
  np.testing.assert_array_equal(d.y, x)  # NaN in the same cell
  timeseries.write_csv(path, t, x[:, 0], ("u",))  # [T] for one state
  np.testing.assert_array_equal(timeseries.read_csv(path).y[:, 0], x[:, 0])
  for bad_x, bad_t, states in ((x.T, t, ("u", "v")), (x, t[:5], ("u", "v")), (x, t, ("u",)), (x, t[:, None], ("u", "v"))):
    with pytest.raises(ValueError, match=r"write_csv needs x \[T, S\]"):
      timeseries.write_csv(str(tmp_path / "bad.csv"), bad_t, bad_x, states)
  assert not os.path.exists(tmp_path / "bad.csv")


def test_data_keys_of_a_file_are_refused_without_task_csv(tmp_path):
  """``data.path`` (and the other keys describing the user's file) are read only by task=csv: never ignored."""
  for key, value in (("path", "mine.csv"), ("states", ("x",)), ("time_column", "t")):
    config = smc_config.get_config("smoke,task=pelts")
    config.data[key] = value
    with pytest.raises(config_schema.ConfigError, match=rf"'data.{key}': is read only with task=csv; task is "
                                                         r"'pelts' \(give --config.task=csv\)"):
      runner.validate(config)


def test_a_byte_order_mark_is_dropped_and_a_directory_is_named(tmp_path):
  path = tmp_path / "excel.csv"
  path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())  # Excel's "CSV UTF-8"
  d = timeseries.read_csv(str(path), time_column="time")
  assert d.time_name == "time" and d.states == ("position", "velocity")
  runner.validate(_config(path, **{"data.time_column": "time"}))
  with pytest.raises(config_schema.ConfigError, match="'data.path': .* is a directory, not a file"):
    runner.validate(_config(tmp_path))


def test_the_grid_bound_is_a_config_key(tmp_path):
  path = tmp_path / "gaps.csv"
  path.write_text("t,x\n0,1\n1,2\n2,3\n40,4\n")
  with pytest.raises(timeseries.CsvError, match="41 grid points"):
    timeseries.read_csv(str(path), max_grid_points=40)
  assert timeseries.read_csv(str(path), max_grid_points=41).y.shape == (41, 1)
  config = _config(path, **{"data.max_grid_points": 40, "num_fit": 3})
  with pytest.raises(config_schema.ConfigError, match="'data.path'.*beyond the bound of 40"):
    runner.validate(config)


def test_entry_point_on_numpy_arrays(tmp_path):
  d = timeseries.read_csv(discover.EXAMPLE)
  results = discover.discover(d.y, d.times, states=("x", "v"), workdir=str(tmp_path / "run"),
                              extra_terms=("a*x^3",),
                              overrides={"library": ("a*x", "a*v"), "tempering.num_particles": 8, "fit.steps": 40,
                                         "predictive.num_samples": 32, "baselines": ("sindy",)})
  with open(tmp_path / "run" / "results.json") as f:
    on_disk = json.load(f)
  assert on_disk["task"] == "csv" and on_disk["init_scale"] == "real" and on_disk["rows"]["fit"] == 18
  assert on_disk["library"] == ["c0*x", "c0*v", "c0*x^3"] and on_disk["fit_health"]["structures"] > 0
  assert any(k.startswith("PySINDy") for k in on_disk["comparison"])  # missing cells interpolated for SINDy
  assert results["smc"]["final_beta"] == 1.0


@pytest.mark.parametrize("x, t, states, match", [
    (np.zeros((15, 2)), np.arange(20.0), None, "x has 15 rows but t has 20 times"),
    (np.zeros((2, 20)), np.arange(20.0), None, r"x looks transposed: pass x.T, of shape \(20, 2\)"),
    (np.zeros((20, 2)), np.arange(20.0), ("a", "b", "c"), "states names 3 columns"),
    (np.zeros((20, 2, 1)), np.arange(20.0), None, r"x must be \[times, states\]"),
    (np.zeros((20, 2)), np.zeros((20, 1)), None, "t must be 1-D"),
    (np.zeros((20, 2)), np.r_[np.arange(19.0), np.inf], None, r"t\[19\] is not finite"),
    (np.where(np.arange(40).reshape(20, 2) == 7, np.inf, 0.0), np.arange(20.0), ("p", "q"),
     r"x\[3, 1\] \(state 'q'\) is inf: not finite \(NaN marks a missing observation\)"),
])
def test_entry_point_names_badly_shaped_or_infinite_arrays(x, t, states, match, tmp_path):
  with pytest.raises(ValueError, match=match):
    discover.discover(x, t, states=states, workdir=str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()  # refused before anything is written


def _sim_config(**sim):
  config = smc_config.get_config("smoke,task=sim")
  config.sim.equations = ("x = v", "v' = -k*x - b*x^3 - c*v")
  config.sim.params = ("k=1", "b=0.5", "c=0.1")
  config.sim.x0 = (-1.5, 0.5)
  config.sim.dt = 0.5
  config.sim.num_points = 24
  config.sim.noise_scale = 0.05
  config.problem.noise = "gaussian"
  config.num_fit = 18
  config.library_extra = ("a*x^3",)
  for key, value in sim.items():
    config.sim[key] = value
  return config


def test_a_system_from_text_equations():
  config = _sim_config()
  runner.validate(config)
  task = tasks.build(config)
  system = tasks.system_of(config)
  assert task.states == ("x", "v") and system.params == {"k": 1.0, "b": 0.5, "c": 0.1}
  x = np.array([0.3, -0.2])
  np.testing.assert_allclose(np.asarray(system.rhs(x, system.params)), [-0.2, -0.3 - 0.5 * 0.027 + 0.02], rtol=1e-5)
  z = np.asarray(ode_systems.solve(system))
  assert z.shape == (24, 2) and np.all(np.isfinite(z)) and z[0, 0] == -1.5
  lib = st.Library(task.states, tasks.library_of(config, task.states))
  truth = tasks.truth_structure(task, lib)
  assert truth is not None and len(lib) == 7  # the default library of (x, v) plus a*x^3
  for sim, words in [({"params": ("k=1", "b=0.5")}, "uses ['c'] without a value"),
                     ({"equations": ("x = v", "v = __import__('os')")}, "'sim.equations'"),
                     ({"equations": ("x = v*t", "v = -x")}, "uses t"),
                     ({"x0": (1.0,)}, "'sim.x0'"), ({"noise_scale": 0.0}, "'sim.noise_scale'")]:
    with pytest.raises(config_schema.ConfigError, match=words.replace("[", r"\[").replace("(", r"\(")):
      runner.validate(_sim_config(**sim))
  lv = _sim_config()
  lv.task = "lv_sim"
  with pytest.raises(config_schema.ConfigError, match="task=sim"):
    runner.validate(lv)


def test_a_keyword_state_in_text_equations_is_named():
  config = _sim_config(equations=("lambda = -k*lambda",), params=("k=1",), x0=(1.0,))
  with pytest.raises(config_schema.ConfigError, match="'sim.equations': .*invalid state name 'lambda'"):
    runner.validate(config)


def test_simulated_data_past_the_state_bound_are_refused_before_any_fit():
  config = _sim_config(equations=("x = -k*x",), params=("k=1",), x0=(1e30,))
  with pytest.raises(config_schema.ConfigError, match=r"'problem.state_bound': sim.x0: initial state 'x' reaches "
                     r"1e\+30.*--config.problem.state_bound=1e\+31"):
    runner.validate(config)
  grows = _sim_config(equations=("x = k*x",), params=("k=1",), x0=(1.0,))  # e^11.5 = 9.9e4 at the last row
  runner.validate(grows)
  with pytest.raises(errors.DataError, match=r"'problem.state_bound': the 'sim' task's data: state 'x' reaches "
                     r"9\.\d+e\+04.*state_bound=1e\+06"):
    tasks.build(grows)
