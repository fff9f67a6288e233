"""Faults of the second hardening round: float32 overflow in data, data changed under a checkpoint,
tied or noiseless bandits, REG's score label, and tracebacks that had to become one-line errors.

Every trigger runs at smoke size. Each test checks the named error (the key, or
the file, the array and the index) or the defined behaviour, and, where a run
is involved, that nothing on disk was lost or mixed: a refused resume leaves
every byte of the workdir as it was, and a restart keeps the previous run,
byte for byte, under ``superseded/``. (ModelSMC's CSV and LLM faults have
their own tests.)
"""

import hashlib
import json
import logging
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datasets import npz_files
from datasets.offline_rl import d4rl
from envs import errors as env_errors
from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import errors
from launch import main as launcher
from launch import metrics
from launch import registry
from launch import runner
from launch import runtime
from launch.configs import reg as reg_config
from launch.configs import varde_bai as bai_config
from launch.configs import varde_bpi as bpi_config
from launch.experiments.reg import data as reg_data
from launch.experiments.reg import report as reg_report
from launch.experiments.varde import bpi_envs

import d4rl_rows
import npz_damage


def _tree(root: str) -> dict:
  """``{relative path: SHA-256}`` of every file under ``root``."""
  out = {}
  for d, _, files in os.walk(root):
    for f in files:
      path = os.path.join(d, f)
      with open(path, "rb") as fh:
        out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
  return out


def _one_line(e: BaseException) -> str:
  line = errors.one_line(e)
  assert "\n" not in line and isinstance(e, errors.user_error_types()), (type(e), line)
  return line


# ---------------------------------------------------------------- VarDE's MDP files


def _mdp_arrays(**override) -> dict:
  """A 3-state, 2-action MDP whose actions differ (nonzero regrets)."""
  p = np.zeros((3, 2, 3))
  p[:, 0, 0] = 1.0
  p[:, 1, 1], p[:, 1, 2] = 0.5, 0.5
  arrays = dict(P=p, reward_mean=np.array([[0.0, 0.5], [0.2, 0.1], [1.0, 0.0]]),
                reward_std=np.full((3, 2), 0.5), discount=np.float64(0.8))
  arrays.update(override)
  return arrays


def _npz(path, **override) -> str:
  np.savez(path, **_mdp_arrays(**override))
  return str(path)


def _bpi(path: str, **overrides):
  config = bpi_config.get_config("smoke,envs=file")
  config.mdp_file = path
  config.algorithms = ("varde", "uniform")
  config.budgets = (32, 64)
  config.runs_per_instance = 8
  config.mesh.data = 2
  for k, v in overrides.items():
    config[k] = v
  return config


@pytest.mark.parametrize("array, index", [("reward_mean", (1, 1)), ("reward_std", (2, 0)), ("P", (0, 1, 1))])
def test_npz_values_that_overflow_float32_name_the_file_array_and_index(tmp_path, array, index):
  """Finite in float64, ``inf`` in float32: before, 1e39 gave a regret of -5.06 or 100% wrong."""
  values = np.array(_mdp_arrays()[array], np.float64)
  values[index] = 1e39
  path = _npz(tmp_path / "big.npz", **{array: values})
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(_bpi(path))
  line = _one_line(e.value)
  assert f"'mdp_file': {path}: array '{array}' overflows float32" in line and f"index {index}: 1e+39" in line, line


def test_npz_rewards_too_large_for_float32_sums_are_refused(tmp_path):
  """Finite in float32 but its square is not: the variance sums of BPI would overflow."""
  path = _npz(tmp_path / "loud.npz", reward_std=np.full((3, 2), 1e30))
  with pytest.raises(config_schema.ConfigError, match="overflow the float32 sums") as e:
    runner.validate(_bpi(path))
  assert "rescale the rewards" in _one_line(e.value)


def test_a_discount_that_rounds_to_one_in_float32_is_refused(tmp_path):
  """Below 1 in float64, exactly 1 in float32: the values 1 / (1 - discount) would be infinite."""
  path = _npz(tmp_path / "patient.npz", discount=np.float64(1 - 1e-9))
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(_bpi(path))
  assert "array 'discount' 0.999999999 rounds to 1.0 in float32" in _one_line(e.value)


def _zero_actions(path):
  return _npz(path, P=np.zeros((3, 0, 3)), reward_mean=np.zeros((3, 0)), reward_std=np.zeros((3, 0)))


def _strings(path):
  return _npz(path, reward_mean=np.array([["a", "b"]] * 3))


def _objects(path):
  np.savez(path, **_mdp_arrays(reward_std=np.array([[{}, None]] * 3, dtype=object)), allow_pickle=True)
  return str(path)


def _text(path):
  path.write_text("P,reward_mean\n1,2\n")
  return str(path)


def _npy(path):
  np.save(path, np.zeros(3))
  return str(path)


def _directory(path):
  path.mkdir()
  return str(path)


def _corrupt_deflate(path):
  return npz_damage.corrupt_compressed(path, _mdp_arrays(), "P")


def _negative_p(path):
  p = _mdp_arrays()["P"]
  p[2, 1, 1], p[2, 1, 2] = -0.25, 1.25
  return _npz(path, P=p)


def _float16_p(path):
  return _npz(path, P=np.full((3, 2, 3), 1.0 / 3.0, np.float16))


def _truncated(path):
  _npz(path)
  data = path.read_bytes()
  path.write_bytes(data[: len(data) // 2])
  return str(path)


@pytest.mark.parametrize("make, words", [
    (_zero_actions, "array 'P' has shape (3, 0, 3): an MDP needs at least one state and one action"),
    (_strings, "array 'reward_mean' has dtype <U1; numbers are needed"),
    (_objects, "array 'reward_std' holds Python objects (dtype object)"),
    (_text, "is not an .npz archive (not a zip file of arrays)"),
    (_npy, "holds a single array (an .npy file)"),
    (_directory, "is a directory, not an .npz file"),
    (_truncated, ".npz"),
    (_corrupt_deflate, "array 'P' cannot be read (error: Error -3 while decompressing data"),
    (_negative_p, "array 'P' has 1 negative entry; the first at index (2, 1, 1): -0.25"),
    (_float16_p, "it is stored as float16, whose rounding (about 1e-3) exceeds that: store it as float32"),
])
def test_unusable_npz_files_are_one_line_errors_naming_the_key_and_file(tmp_path, make, words):
  path = make(tmp_path / ("mdp.npy" if make is _npy else "mdp.npz"))
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(_bpi(path))
  line = _one_line(e.value)
  assert line.startswith(f"invalid config: 'mdp_file': {path}") and words in line, line
  with pytest.raises(env_errors.MDPFileError, match=re.escape(path)) as e:  # read inside a run: one line too
    bpi_envs.load_mdp_file(path)
  assert words in str(e.value)
  assert e.value.__cause__ is None or isinstance(e.value.__cause__, npz_files.NpzFileError)


def test_a_missing_file_does_not_lock_the_workdir(tmp_path):
  workdir = str(tmp_path / "run")
  with pytest.raises(config_schema.ConfigError, match="does not exist"):
    runner.run(_bpi(str(tmp_path / "absent.npz")), workdir)
  assert not os.path.exists(os.path.join(workdir, "config.json"))


def test_a_killed_run_without_checkpoints_keeps_its_workdir(tmp_path, monkeypatch):
  """Its metrics lines are all that is left of it: another config is refused and changes nothing."""
  config = _custom((0.5, 0.4), (1.0, 1.0), std_mode="fixed")
  config.checkpoint.enabled = False
  workdir = str(tmp_path / "run")
  log = metrics.Writer.log

  def log_then_die(self, step, **scalars):
    log(self, step, **scalars)
    raise _Killed(step)

  with monkeypatch.context() as m:
    m.setattr(metrics.Writer, "log", log_then_die)
    with pytest.raises(_Killed):
      runner.run(config, workdir)
  killed = _tree(workdir)
  assert os.path.getsize(os.path.join(workdir, "metrics.jsonl")) > 0
  config.seed += 1
  with pytest.raises(config_schema.ConfigError, match="different config"):
    runner.run(config, workdir)
  assert _tree(workdir) == killed


class _Killed(Exception):
  """Stands for a kill right after a checkpoint was written."""


def _kill_after_first_save(monkeypatch):
  save = runtime.Context.save

  def save_then_die(self, step, state, metadata=None, *, force=False):
    saved = save(self, step, state, metadata, force=force)
    if saved:
      raise _Killed(step)
    return saved

  monkeypatch.setattr(runtime.Context, "save", save_then_die)


def test_data_changed_after_a_kill_is_refused_and_a_restart_keeps_the_old_run(tmp_path, monkeypatch, caplog):
  """An edited .npz never resumes a run and mixes old and new data (silently, rc 0)."""
  path = _npz(tmp_path / "mdp.npz")
  workdir = str(tmp_path / "run")
  with monkeypatch.context() as m:
    _kill_after_first_save(m)
    with pytest.raises(_Killed):
      runner.run(_bpi(path), workdir)
  killed = _tree(workdir)
  assert "checkpoints/1/checksum.json" in killed
  with open(os.path.join(workdir, "checkpoints", "1", "checksum.json")) as f:
    assert json.load(f)["inputs"] == {path: ckpt_lib.file_digest(path)}

  _npz(path, reward_mean=np.array([[0.0, 0.9], [0.2, 0.1], [1.0, 0.0]]))  # the user edits the file
  with pytest.raises(ckpt_lib.InputsChangedError) as e:
    runner.run(_bpi(path), workdir)
  line = _one_line(e.value)
  assert f"input file {path} changed since checkpoint step 1" in line and "--on_input_change=restart" in line
  assert _tree(workdir) == killed  # refused: not one byte changed

  with caplog.at_level(logging.WARNING):
    new = runner.run(_bpi(path), workdir, on_input_change="restart")
  assert any("moved, unmodified, to" in r.getMessage() for r in caplog.records)
  old = _tree(os.path.join(workdir, "superseded", "1"))
  assert {k: v for k, v in old.items() if k != "superseded.json"} == killed  # the old run, byte for byte
  with open(os.path.join(workdir, "superseded", "1", "superseded.json")) as f:
    assert json.load(f) == {"changed_inputs": [path]}
  fresh = runner.run(_bpi(path), str(tmp_path / "fresh"))  # nothing of the old data mixed in
  assert new["regret"] == fresh["regret"]
  with open(os.path.join(workdir, "provenance.json")) as f:
    made = json.load(f)
  assert made["inputs"] == {path: ckpt_lib.file_digest(path)}
  assert made["machine"]["devices"] == jax.device_count() and made["machine"]["host_cores"] >= 1

  _npz(path)  # the old file back: the checkpoints are the new run's now, so this is a change too
  with pytest.raises(ckpt_lib.InputsChangedError):
    runner.run(_bpi(path), workdir)


def test_every_experiment_that_reads_a_user_file_declares_it(tmp_path):
  """The files whose digests a checkpoint records: the user's own, named by their config keys; none otherwise."""
  declared = {}
  for name in registry.NAMES:
    experiment = registry.get(name)
    declared[name] = experiment.input_files(experiment.get_config("smoke"))
  assert declared == {name: [] for name in registry.NAMES}  # the presets generate or ship their data
  bpi = _bpi(str(tmp_path / "mdp.npz"))
  assert registry.get("varde_bpi").input_files(bpi) == [("mdp_file", str(tmp_path / "mdp.npz"))]
  reg = _reg(tmp_path, str(tmp_path / "robot.hdf5"))
  assert registry.get("reg").input_files(reg) == [("data.hdf5_file", str(tmp_path / "robot.hdf5"))]
  reg.data.hdf5_file, reg.data.d4rl_dir = "", str(tmp_path)
  reg.data.d4rl_datasets = ("hopper-medium-v2",)
  assert registry.get("reg").input_files(reg) == [("data.d4rl_dir", str(tmp_path / "hopper-medium-v2.hdf5"))]
  smc = registry.get("model_smc")
  config = smc.get_config("smoke,task=csv")
  config.data.path = str(tmp_path / "counts.csv")
  assert smc.input_files(config) == [("data.path", str(tmp_path / "counts.csv"))]
  fm = registry.get("flow_matching")
  config = fm.get_config("smoke,dataset=npz")
  config.data_file = str(tmp_path / "digits.npz")
  assert fm.input_files(config) == [("data_file", str(tmp_path / "digits.npz"))]
  gp = registry.get("graphpfn")
  config = gp.get_config("smoke")
  config.planetoid_dir, config.planetoid_name = str(tmp_path), "citeseer"
  assert gp.input_files(config) == [("planetoid_dir", str(tmp_path / f"ind.citeseer.{part}"))
                                    for part in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")]


# ---------------------------------------------------------------- VarDE's bandits


def _custom(means, stds, **overrides):
  config = bai_config.get_config("smoke,problem=custom")
  config.means, config.stds, config.budgets = means, stds, (60,)
  config.algorithms = ("varde", "uniform")
  config.varde.taus = (0.1,)
  config.num_seeds = config.chunk_size = 64
  config.mesh.data = 2
  for k, v in overrides.items():
    config[k] = v
  return config


def test_tied_best_means_and_all_zero_stds_are_named_errors():
  """Named errors, not about 50% "error" for every algorithm without a word, then a NaN stop in the Neyman shares."""
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(_custom((0.5, 0.5), (0.0, 0.0)))
  line = _one_line(e.value)
  assert "'means': arms [0, 1] tie for the best mean 0.5" in line and "'stds': every std is 0" in line, line
  with pytest.raises(config_schema.ConfigError, match=r"tie for the best mean"):  # equal once rounded to float32
    runner.validate(_custom((0.5, 0.5 + 1e-9, 0.1), (1.0, 1.0, 1.0)))


@pytest.mark.parametrize("means, stds, key, words", [
    ((1e39, 0.5), (1.0, 1.0), "means", "element 0: 1e+39 overflows float32"),
    ((0.5, 0.4), (1e20, 1.0), "stds", "overflow the float32 sum of 60 squared rewards"),
    ((3e38, 0.4), (), "means", "overflow the float32 sum"),
])
def test_bandit_values_that_overflow_in_float32_are_named(means, stds, key, words):
  config = _custom(means, stds, std_mode="fixed")
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  line = _one_line(e.value)
  assert f"'{key}'" in line and words in line, line


def test_a_zero_std_arm_is_deterministic_and_the_run_finite(tmp_path):
  """Some stds 0 is allowed: that arm pays its mean exactly; its Neyman share is 0."""
  res = runner.run(_custom((0.5, 0.4, 0.3), (0.0, 1.0, 0.5), std_mode="fixed"), str(tmp_path / "run"))
  for name in res["algorithms"]:
    assert 0.0 <= res["error"][name]["60"]["p"] <= 1.0 and res["error"][name]["60"]["runs"] == 64
  shares = np.asarray(res["neyman_shares"]["60"]["varde_tau0.1"])
  assert np.all(np.isfinite(shares)) and shares[0] == 0.0 and abs(shares.sum() - 1.0) < 1e-5


# ---------------------------------------------------------------- REG's D4RL files


def _reg(tmp_path, path, task="none"):
  config = reg_config.get_config("smoke")
  config.algorithms = ("bc",)
  config.num_seeds, config.num_updates, config.updates_per_chunk, config.eval_every = 2, 100, 50, 2
  config.data.source = "d4rl_hdf5"
  config.data.hdf5_file, config.data.hdf5_task = path, task
  config.data.data_dir = str(tmp_path / "data")
  config.mesh.data = 2
  return config


@pytest.mark.parametrize("key, index", [("rewards", (7,)), ("observations", (3, 1)), ("actions", (0, 0))])
def test_d4rl_values_that_overflow_float32_name_the_file_array_and_index(tmp_path, key, index):
  rows = d4rl_rows.rows()
  rows[key] = rows[key].astype(np.float64)
  rows[key][index] = -1e39
  path = d4rl_rows.write(tmp_path / "big.hdf5", rows)
  with pytest.raises(d4rl.D4RLFormatError) as e:
    reg_data.load(_reg(tmp_path, path), "big", str(tmp_path))
  line = _one_line(e.value)
  assert f"{path}: '{key}' at index {index} holds -1e+39, which overflows float32" in line, line


def test_d4rl_rewards_stored_as_strings_are_a_named_error(tmp_path):
  rows = d4rl_rows.rows()
  rows["rewards"] = np.array([str(r).encode() for r in rows["rewards"]])
  path = d4rl_rows.write(tmp_path / "text.hdf5", rows)
  with pytest.raises(d4rl.D4RLFormatError) as e:
    reg_data.load(_reg(tmp_path, path), "text", str(tmp_path))
  assert f"{path}: 'rewards' has dtype |S" in _one_line(e.value) and "(strings)" in str(e.value)


def test_reg_any_dimensions_a_corrected_path_and_a_changed_file(tmp_path):
  """A missing file, then the corrected path in the same workdir (it ran nothing, so it locks nothing);
  a file with dimensions no environment has trains and reports offline metrics; then the file changes."""
  workdir = str(tmp_path / "run")
  with pytest.raises(d4rl.D4RLFileNotFoundError) as e:
    runner.run(_reg(tmp_path, str(tmp_path / "typo.hdf5")), workdir)
  assert "--config.data.hdf5_file" in _one_line(e.value)
  path = d4rl_rows.write(tmp_path / "robot.hdf5", d4rl_rows.rows(obs_dim=5, act_dim=2))
  res = runner.run(_reg(tmp_path, path), workdir)
  assert res["datasets"] == [] and res["offline_datasets"] == ["robot"]
  assert res["dataset_info"]["robot"]["score"] == "none" and res["dataset_info"]["robot"]["obs_dim"] == 5
  loss = res["offline"]["robot"]["bc"]["actor_loss"]
  assert len(loss["per_seed"]) == 2 and np.all(np.isfinite(loss["per_seed"]))
  summary = reg_report.format_table(res)
  assert "no environment" in summary and "no policy was evaluated" in summary and "normalised" not in summary
  assert "actor_loss" in reg_report.headline_table(res) and not os.path.exists(os.path.join(workdir, "learning_curves.png"))
  assert runner.run(_reg(tmp_path, path), workdir)["offline"] == res["offline"]  # resumes from the final step
  with pytest.raises(d4rl.D4RLDimensionError, match="--config.data.hdf5_task=none"):
    reg_data.load(_reg(tmp_path, path, "hopper"), "robot", str(tmp_path))

  before = _tree(workdir)
  d4rl_rows.write(path, d4rl_rows.rows(obs_dim=5, act_dim=2, seed=1))
  with pytest.raises(ckpt_lib.InputsChangedError, match=f"input file {path} changed"):
    runner.run(_reg(tmp_path, path), workdir)
  assert _tree(workdir) == before


def test_reg_summary_says_raw_return_without_reference_returns(tmp_path):
  """Raw returns are never labelled "normalised score"."""
  path = d4rl_rows.write(tmp_path / "mine.hdf5", d4rl_rows.rows(obs_dim=11, act_dim=3))
  config = _reg(tmp_path, path, "hopper")
  data = reg_data.load(config, "mine", str(tmp_path))
  units, evals = [("mine", "bc")], reg_exp_evals(config)
  tally = {"scores": np.full((1, len(evals), 2), 1234.5, np.float32), "digest": np.zeros((1, 8), np.uint32)}
  res = reg_report.summarize(config, units, evals, tally, {"mine": data})
  for text in (reg_report.format_table(res), reg_report.markdown_table(res), reg_report.headline_table(res)):
    assert "raw return" in text.lower() and "normalised" not in text.lower(), text
  config.data.hdf5_random_return, config.data.hdf5_expert_return = -20.0, 3000.0
  res = reg_report.summarize(config, units, evals, tally, {"mine": reg_data.load(config, "mine", str(tmp_path))})
  assert reg_report.format_table(res).startswith("normalised score")
  units = [("mine", "bc"), ("mine", "iql")]  # raw returns wider than the default column stay apart
  tally = {"scores": np.asarray([[[123456789.5, 123456789.0]], [[-98765432.5, -98765431.0]]], np.float32),
           "digest": np.zeros((2, 8), np.uint32)}
  config.algorithms = ("bc", "iql")
  res = reg_report.summarize(config, units, evals[-1:], tally, {"mine": data})
  row = next(line for line in reg_report.format_table(res).splitlines() if line.startswith("mine"))
  assert len(re.split(r"\s{2,}", row.strip())) == 3, row


def reg_exp_evals(config):
  c = config.num_updates // config.updates_per_chunk
  return [i for i in range(1, c + 1) if i % config.eval_every == 0 or i == c]


# ---------------------------------------------------------------- the launcher


@pytest.mark.parametrize("args, expected", [
    (("--config=launch/configs/varde_bai.py:smoke,problem=custom", "--config.means=(0.5,0.4)", "--config.budgets=(150.5,)"),
     "'budgets'"),
    (("--config=launch/configs/varde_bpi.py:smoke", "--config.budgets=(150.5,)"), "'budgets'"),
    (("--config=launch/configs/varde_mcts.py:smoke", "--config.budgets=(150.5,)"), "'budgets'"),
    (("--config=launch/configs/varde_bai.py:smoke", "--config.varde.var_floor=1e39"), "overflows float32"),
    (("--config=launch/configs/reg.py:smoke", "--config.seed=99999999999999999999"), "'seed': 99999999999999999999"),
    (("--config=launch/configs/varde_bpi.py:smoke", "--config.mdp_fil=x.npz"), "did you mean 'mdp_file'"),
])
def test_command_line_faults_are_one_line(args, expected, repo_root, monkeypatch):
  monkeypatch.chdir(repo_root)
  try:
    config = launcher.config_from_args(args)
  except launcher.FlagsError as e:
    line = str(e)
  else:
    with pytest.raises(config_schema.ConfigError) as e:
      runner.validate(config)
    line = _one_line(e.value)
  assert "\n" not in line and expected in line, line


def test_no_orbax_traceback_follows_a_one_line_error(tmp_path, repo_root, python_env):
  """orbax removes unfinished saves' temporary folders in a thread; an error right after the checkpoints
  were opened must not leave it running into interpreter exit, which prints a 40-line traceback."""
  directory = tmp_path / "run" / "checkpoints"
  with ckpt_lib.Checkpointer(str(directory), config_hash="ab" * 32) as ck:
    ck.save(1, {"x": jnp.zeros(3)})
  for i in range(40):  # what kills in the middle of saves leave behind
    (directory / f"{100 + i}.orbax-checkpoint-tmp-{i}").mkdir()
    (directory / f"{100 + i}.orbax-checkpoint-tmp-{i}" / "part").write_bytes(b"x" * 100)
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/varde_bai.py:smoke",
         f"--workdir={tmp_path / 'run'}"]
  out = subprocess.run(cmd, env=python_env, cwd=repo_root, capture_output=True, text=True, timeout=300)
  lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 1 and len(lines) == 1 and "different config" in lines[0], out.stderr[-3000:]
  assert "Traceback" not in out.stderr and "cannot schedule new futures" not in out.stderr, out.stderr[-3000:]
  assert os.path.isdir(directory / "1")
