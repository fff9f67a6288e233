"""Bad configs on the command line: one line naming the problem, nothing run.

The messages are checked in this process, through the launcher's own parsing
(:func:`launch.main.config_from_args`) and validation; one subprocess run
checks the command line itself (exit code 2, one ``error:`` line, no
traceback, no results).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from datasets.graphs import planetoid
from datasets.graphs import prior_builder
from launch import config_schema
from launch import errors
from launch import main as launcher
from launch import metrics
from launch import registry
from launch import runner
from launch.experiments.graphpfn import prior


def _error_line(args) -> str:
  """The one line ``python -m launch.main`` prints for ``args`` (with exit code 2)."""
  try:
    config = launcher.config_from_args(args)
  except launcher.FlagsError as e:
    return f"error: {e}"
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  assert errors.exit_code(e.value) == 2
  return f"error: {errors.one_line(e.value)}"


@pytest.mark.parametrize("args, expected", [
    (("--config=launch/configs/varde_bai.py:smok",), "unknown preset 'smok'"),
    (("--config=launch/configs/nothere.py:smoke",), "no config file 'launch/configs/nothere.py'"),
    (("--config=launch/configs/varde_bai.py:smoke", '--config.budgets=("a",)'), "'budgets': element 0: 'a' is not a number"),
    (("--config=launch/configs/varde_bai.py:smoke", "--config.varde.var_floor=nan"), "'varde.var_floor': nan is not a finite"),
    (("--config=launch/configs/model_smc.py:smoke", "--config.tempering.target_ess=nan"),
     "'tempering.target_ess': nan is not a finite"),
    (("--config=launch/configs/reg.py:smoke", "--config.agent.discount=1.5"), "'agent.discount': 1.5 is out of range"),
    (("--config=launch/configs/reg.py:smoke", "--config.reg.regularizer=kl"), "'reg.regularizer': 'kl': ambiguity 'kappa'"),
    (("--config=launch/configs/reg.py:smoke", "--config.num_seed=3"), "num_seed"),
    (("--config=launch/configs/reg.py:smoke", "--config.seed=-1"), "'seed': -1 is out of range"),
    (("--config=launch/configs/reg.py:smoke", "--config.mesh.data=0"), "'mesh.data'"),
    (("--config=launch/configs/reg.py:smoke", "--config.mdp_file=x"), "unknown key 'mdp_file' of experiment 'reg'"),
    (("--config=launch/configs/reg.py:smoke", "--config.data.hdf5_fil=x"), "did you mean 'data.hdf5_file'"),
    (("--config=launch/configs/reg.py:smoke", "--config.hdf5_file=x"), "did you mean 'data.hdf5_file'"),
    (("--config=launch/configs/reg.py:smoke", "--config.num_seeds=1.5"), "'num_seeds' = '1.5'"),
    (("--config=launch/configs/reg.py:smoke", "--config.seed=99999999999999999999"), "'seed': 99999999999999999999"),
    (("--config=launch/configs/reg.py:smoke", "--config.num_updates=9999999999"), "overflows int32"),
    (("--config=launch/configs/reg.py:smoke", "--config.agent.actor_lr=1e39"), "overflows float32"),
    (("--config=launch/configs/reg.py:smoke", "--config.agent.actor_lr=1e-320"), "0.0 in float32"),
    # 0.5 and 0.5000001 would name the same models ("random50_s0"): one would overwrite the other.
    (("--config=launch/configs/flow_matching.py:smoke", "--config.reduction_fractions=(0.5, 0.5000001)"),
     "'reduction_fractions': (0.5, 0.5000001) name the same models (50, 50 %)"),
    # A repeated tuple key would otherwise run both values (the config flags append them).
    (("--config=launch/configs/varde_bai.py:smoke", "--config.budgets=(16,)", "--config.budgets=(8,)"),
     "--config.budgets is given 2 times: give each key once"),
    (("--config=launch/configs/varde_bai.py:smoke", "--config.num_seeds=2", "--config.num_seeds=3"),
     "--config.num_seeds is given 2 times"),
])
def test_bad_configs_are_named_in_one_line(args, expected, repo_root, monkeypatch):
  monkeypatch.chdir(repo_root)
  line = _error_line(args)
  assert "\n" not in line.split("\nPass --helpshort")[0] and expected in line, line


def test_the_command_line_prints_one_line_exits_2_and_runs_nothing(tmp_path, repo_root, python_env):
  workdir = tmp_path / "run"
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/reg.py:smoke",
         "--config.agent.discount=1.5", f"--workdir={workdir}"]
  out = subprocess.run(cmd, env=python_env, cwd=repo_root, capture_output=True, text=True, timeout=300)
  errors_printed = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 2, out.stderr[-2000:]
  assert len(errors_printed) == 1 and "'agent.discount': 1.5 is out of range" in errors_printed[0], out.stderr[-2000:]
  assert "Traceback" not in out.stderr
  assert not (workdir / "results.json").exists()


def test_cpu_devices_is_applied_before_a_config_whose_imports_start_jax(tmp_path, repo_root, python_env):
  """``--cpu_devices`` works with every config, even one whose imports run a JAX computation (blackjax's)."""
  workdir = tmp_path / "run"
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/model_smc_calibration.py:smoke",
         "--cpu_devices", "2", "--config.num_datasets=1", f"--workdir={workdir}"]
  out = subprocess.run(cmd, env=python_env, cwd=repo_root, capture_output=True, text=True, timeout=300)
  errors_printed = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 2, out.stderr[-2000:]
  assert len(errors_printed) == 1 and "num_datasets" in errors_printed[0], out.stderr[-2000:]
  assert "RuntimeError" not in out.stderr and "Traceback" not in out.stderr


def test_a_bad_planetoid_dir_is_a_config_error_before_pretraining(tmp_path):
  """``planetoid_dir`` is read by the config checks: a missing or corrupt graph stops the run before any compute."""
  base = ["--config=launch/configs/graphpfn.py:smoke"]
  line = _error_line([*base, f"--config.planetoid_dir={tmp_path / 'none'}"])
  assert "'planetoid_dir'" in line and "is not a directory" in line, line
  rng = np.random.default_rng(0)
  planetoid.write(str(tmp_path / "g"), "cora", x=rng.random((10, 3)), y=np.arange(10) % 2, senders=np.arange(9),
                  receivers=np.arange(1, 10), num_train=4, test_index=np.arange(6, 10))
  os.remove(tmp_path / "g" / "ind.cora.graph")
  line = _error_line([*base, f"--config.planetoid_dir={tmp_path / 'g'}"])
  assert "'planetoid_dir'" in line and "ind.cora.graph: missing" in line, line
  planetoid.write(str(tmp_path / "k"), "cora", x=rng.random((24, 3)), y=np.arange(24) % 12, senders=np.arange(23),
                  receivers=np.arange(1, 24), num_train=12, test_index=np.arange(18, 24))
  line = _error_line([*base, f"--config.planetoid_dir={tmp_path / 'k'}"])
  assert "12 classes, more than model.num_classes=10" in line, line
  n = 5000  # more nodes than the smoke preset's largest bucket, 4096
  planetoid.write(str(tmp_path / "big"), "cora", x=rng.random((n, 3)), y=np.arange(n) % 2, senders=np.arange(n - 1),
                  receivers=np.arange(1, n), num_train=10, test_index=np.arange(n - 10, n))
  line = _error_line([*base, f"--config.planetoid_dir={tmp_path / 'big'}"])
  assert "does not fit the buckets" in line and "4096" in line, line


def test_a_graph_of_your_own_is_read_under_its_own_name(tmp_path):
  """``planetoid_name`` is any file-safe name: a graph written as ``mine`` is read; a path is refused by name."""
  rng = np.random.default_rng(0)
  planetoid.write(str(tmp_path), "my-graph_2", x=rng.random((10, 3)), y=np.arange(10) % 2, senders=np.arange(9),
                  receivers=np.arange(1, 10), num_train=4, test_index=np.arange(6, 10))
  config = registry.get("graphpfn").get_config("smoke")
  config.planetoid_dir, config.planetoid_name = str(tmp_path), "my-graph_2"
  runner.validate(config)
  assert sorted(os.path.basename(p) for _, p in registry.get("graphpfn").input_files(config))[0] == "ind.my-graph_2.allx"
  for bad in ("../cora", "", "a b", ".hidden"):
    line = _error_line(["--config=launch/configs/graphpfn.py:smoke", f"--config.planetoid_dir={tmp_path}",
                        f"--config.planetoid_name={bad}"])
    assert "'planetoid_name'" in line and "letters, digits" in line, (bad, line)
  line = _error_line(["--config=launch/configs/graphpfn.py:smoke", "--config.planetoid_name=my-graph_2"])
  assert "'planetoid_name'" in line and "planetoid_dir, which is not set" in line, line  # not silently skipped
  with pytest.raises(planetoid.PlanetoidFormatError, match="letters, digits"):
    planetoid.write(str(tmp_path), "../x", x=rng.random((4, 3)), y=np.arange(4) % 2, senders=[0], receivers=[1],
                    num_train=2, test_index=[3])



def test_a_planetoid_graph_needs_features_and_two_classes_and_may_be_small(tmp_path):
  """A graph without a feature column or with one class is a config error; 20 nodes with 100 columns is a graph."""
  base = ["--config=launch/configs/graphpfn.py:smoke", "--config.planetoid_name=g"]
  rng = np.random.default_rng(0)
  n = 60
  graph = {"senders": np.arange(n - 1), "receivers": np.arange(1, n), "num_train": 10, "test_index": np.arange(45, n)}
  planetoid.write(str(tmp_path / "nofeat"), "g", x=np.zeros((n, 0)), y=np.arange(n) % 3, **graph)
  line = _error_line([*base, f"--config.planetoid_dir={tmp_path / 'nofeat'}"])
  assert "'planetoid_dir'" in line and "ind.g.x: array 'x' has 0 feature columns" in line, line
  planetoid.write(str(tmp_path / "one"), "g", x=rng.random((n, 5)), y=np.zeros(n, int), **graph)
  line = _error_line([*base, f"--config.planetoid_dir={tmp_path / 'one'}"])
  assert "'planetoid_dir'" in line and "ind.g.y/ally/ty: the graph has one class" in line, line
  assert "node classification needs at least 2" in line, line
  n = 20  # fewer nodes than the smoke model's num_features (24), more feature columns
  planetoid.write(str(tmp_path / "small"), "g", x=rng.random((n, 100)), y=np.arange(n) % 3, senders=np.arange(n - 1),
                  receivers=np.arange(1, n), num_train=6, test_index=np.arange(12, n))
  config = registry.get("graphpfn").get_config("smoke")
  config.planetoid_dir, config.planetoid_name = str(tmp_path / "small"), "g"
  runner.validate(config)


def test_the_command_line_names_an_unknown_key_with_its_closest_keys(tmp_path, repo_root, python_env):
  """With the launcher's other flags on the line (``--workdir``), an unknown key still gets the closest keys."""
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/reg.py:smoke", "--config.hdf5_file=x",
         f"--workdir={tmp_path / 'run'}", "--cpu_devices=2"]
  out = subprocess.run(cmd, env=python_env, cwd=repo_root, capture_output=True, text=True, timeout=300)
  assert out.returncode == 2, out.stderr[-2000:]
  assert "error: bad --config override: unknown key 'hdf5_file' of experiment 'reg'; did you mean 'data.hdf5_file'" \
      in out.stderr, out.stderr[-2000:]


def test_an_unquoted_tuple_of_strings_gets_the_quoting_that_works():
  line = "invalid config: 'algorithms': element 0: '(varde,uniform)' is not allowed"
  argv = ["launch.main", "--config=launch/configs/varde_bai.py:smoke", "--config.algorithms=(varde,uniform)"]
  assert launcher._quote_hint(argv, line) == (  # pylint: disable=protected-access
      " (to pass a tuple of strings, quote each one: --config.algorithms='(\"varde\",\"uniform\")')")
  one = ["launch.main", "--config.systems=(sir)"]
  assert launcher._quote_hint(one, "'systems': ...").endswith("--config.systems='(\"sir\",)')")  # pylint: disable=protected-access
  quoted = ["launch.main", '--config.algorithms=("varde","uniform")']
  assert launcher._quote_hint(quoted, line) == ""  # pylint: disable=protected-access
  assert launcher._quote_hint(argv, "invalid config: 'budgets': ...") == ""  # pylint: disable=protected-access
  numbers = ["launch.main", "--config.means=(nan,0.4)"]
  line = "invalid config: 'means': element 0: '(nan,0.4)' has type str; expected float"
  hint = launcher._quote_hint(numbers, line)  # pylint: disable=protected-access
  assert hint == " (--config.means=(nan,0.4) is not a tuple of numbers: 'nan' is not a number literal)"


def test_a_data_dir_prepared_with_other_settings_is_refused_before_compute(tmp_path):
  """graphpfn_prior reuses a prepared ``data_dir`` only if it holds this config's samples (seed, count, prior)."""
  n = 5
  example = {"senders": np.arange(n - 1), "receivers": np.arange(1, n), "x": np.zeros((n, 2)), "y": np.zeros(n),
             "train_mask": np.arange(n) < 2, "task": 1, "num_classes": 2}
  data = tmp_path / "data"
  prior_builder.stage(str(data / "staged"), 0, [(0, example)])
  prior_builder.prepare(str(data), str(data / "staged"))
  base = ["--config=launch/configs/graphpfn_prior.py:smoke", f"--config.data_dir={data}"]
  line = _error_line(base)
  assert f"'data_dir': '{data}' holds prepared graphpfn_prior examples but no readable" in line, line
  config = launcher.config_from_args(base)
  metrics.write_json_atomic(str(data / prior.SETTINGS_FILE), prior.tfds_settings(config))
  runner.validate(config)  # the same settings: reused
  line = _error_line([*base, "--config.seed=7"])
  assert "prepared with another seed (0, not 7)" in line, line
  line = _error_line([*base, "--config.structure.groups_max=3"])
  assert "prepared with another prior_digest" in line, line


def test_a_data_dir_of_other_files_is_not_written_into(tmp_path):
  """An unprepared ``data_dir`` holding entries no build writes (the user's files) is refused; a file too."""
  mine = tmp_path / "mine"
  for name in ("notes.txt", "a", "b", "c", "d", "e"):
    (mine / "sub").mkdir(parents=True, exist_ok=True)
    (mine / name).write_text("x")
  base = ["--config=launch/configs/graphpfn_prior.py:smoke"]
  line = _error_line([*base, f"--config.data_dir={mine}"])
  assert (f"'data_dir': '{mine}' holds no prepared graphpfn_prior examples but other entries ('a', 'b', 'c', 'd', "
          "'e' and 2 more), among which the examples would be written: choose a new or empty data_dir") in line, line
  line = _error_line([*base, f"--config.data_dir={mine / 'notes.txt'}"])
  assert "notes.txt' is a file, not a directory" in line, line
  build = tmp_path / "build"  # what a killed build leaves is resumed, not refused
  for name in prior.BUILD_ENTRIES:
    (build / name).mkdir(parents=True)
  runner.validate(launcher.config_from_args([*base, f"--config.data_dir={build}"]))
  runner.validate(launcher.config_from_args([*base, f"--config.data_dir={tmp_path / 'new'}"]))
