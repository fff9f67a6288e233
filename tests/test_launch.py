"""The launcher contract: config errors, run files, checkpoints, resume."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import mesh as mesh_lib
from launch import metrics
from launch import registry
from launch import runner
from launch import runtime
from launch.configs import common
from launch.configs import varde_bai as varde_config


def _small_config(**overrides):
  config = varde_config.get_config("smoke")
  config.algorithms = ("varde", "uniform", "successive_rejects")
  config.varde.taus = (0.1,)
  config.num_seeds, config.chunk_size = 96, 32
  config.budgets = (60, 90)
  for k, v in overrides.items():
    config[k] = v
  return config


# ----------------------------------------------------------------- configs


def _problems(config):
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  return str(e.value)


def test_every_registered_config_validates():
  for name in registry.NAMES:
    exp = registry.get(name)
    for preset in common.PRESETS:
      config = exp.get_config(preset)
      assert config.experiment == name
      runner.validate(config)


def test_misspelled_key_is_named_with_suggestion():
  config = _small_config()
  with config.unlocked():
    config.num_seed = 10
  msg = _problems(config)
  assert "unknown key 'num_seed'" in msg and "'num_seeds'" in msg


def test_wrong_type_and_impossible_values_are_named():
  config = _small_config()
  with config.unlocked():
    config.problem = "E7"
    config.varde.taus = (-0.1,)
    config.baselines.rate_scale = "hard"
  msg = _problems(config)
  assert "'problem'" in msg and "['E1', 'E2', 'E3', 'E4', 'custom']" in msg
  assert "'varde.taus'" in msg and "out of range" in msg
  assert "'baselines.rate_scale'" in msg and "hardness" in msg
  config = _small_config()
  config.num_seeds = 0
  assert "'num_seeds'" in _problems(config)


def test_infeasible_budget_and_unknown_reference_are_named():
  config = _small_config(budgets=(5,))
  assert "'budgets'" in _problems(config) and "T=5" in _problems(config)
  config = _small_config(reference="ocba")
  assert "'reference'" in _problems(config)


def test_unknown_preset_or_option_in_the_config_argument():
  with pytest.raises(ValueError, match="allowed presets"):
    varde_config.get_config("smok")
  with pytest.raises(ValueError, match="allowed options"):
    varde_config.get_config("cpu,probelm=E2")
  assert varde_config.get_config("smoke,problem=E3").problem == "E3"


def test_unregistered_experiment():
  config = _small_config()
  config.experiment = "nope"
  assert "not registered" in _problems(config)


# ------------------------------------------------------------- checkpoints


def test_describe_devices_names_the_backend_and_count():
  assert mesh_lib.describe_devices() == "8 CPU devices"  # conftest's 8 simulated CPU devices


def test_checkpoint_round_trip_of_a_sharded_pytree(tmp_path):
  mesh = mesh_lib.make_mesh()
  assert mesh.devices.size == 8
  sharding = mesh_lib.data_sharding(mesh)
  state = {
      "w": jax.device_put(jnp.arange(64.0).reshape(16, 4), sharding),
      "step": jax.device_put(jnp.asarray(7), mesh_lib.replicated(mesh)),
      "nested": [jax.device_put(jnp.ones((8,), jnp.int32), sharding)],
  }
  ckpt = ckpt_lib.Checkpointer(str(tmp_path / "ckpt"))
  assert ckpt.save(3, state, {"note": "x"})
  step, restored, meta = ckpt.restore(ckpt_lib.abstract_like(state))
  assert step == 3 and meta == {"note": "x"}
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert b.sharding == a.sharding
  ckpt.close()


def test_non_finite_state_is_never_saved(tmp_path):
  ckpt = ckpt_lib.Checkpointer(str(tmp_path / "ckpt"))
  good = {"params": {"w": jnp.ones(3)}, "count": jnp.asarray(1)}
  ckpt.save(1, good)
  bad = {"params": {"w": jnp.asarray([1.0, jnp.nan, 0.0])}, "count": jnp.asarray(2)}
  with pytest.raises(ckpt_lib.NonFiniteError, match=r"step 2 in params/w.*step 1\) is kept"):
    ckpt.save(2, bad)
  assert ckpt.all_steps() == [1]
  _, restored, _ = ckpt.restore(ckpt_lib.abstract_like(good))
  np.testing.assert_array_equal(restored["params"]["w"], np.ones(3))
  ckpt.close()


def test_corrupt_latest_checkpoint_falls_back_and_reports(tmp_path):
  ckpt = ckpt_lib.Checkpointer(str(tmp_path / "ckpt"), max_to_keep=3)
  for s in (1, 2):
    ckpt.save(s, {"x": np.full((4,), float(s))})
  for root, _, files in os.walk(tmp_path / "ckpt" / "2"):
    for f in files:
      with open(os.path.join(root, f), "wb") as fh:
        fh.write(b"garbage")
  step, restored, _ = ckpt.restore({"x": np.zeros(4)})
  assert step == 1 and np.all(restored["x"] == 1.0)
  assert os.path.isdir(tmp_path / "ckpt.corrupt" / "2")  # moved aside, not deleted
  assert ckpt.all_steps() == [1] and ckpt.latest_step() == 1
  with pytest.raises(ckpt_lib.CheckpointError, match="2"):
    ckpt.restore({"x": np.zeros(4)}, step=2)
  ckpt.close()
  empty = ckpt_lib.Checkpointer(str(tmp_path / "empty"))
  with pytest.raises(ckpt_lib.CheckpointError, match="no checkpoint"):
    empty.restore({"x": np.zeros(4)})
  empty.close()


# -------------------------------------------------------------------- runs


def test_run_writes_the_contract_files(tmp_path):
  workdir = str(tmp_path / "run")
  results = runner.run(_small_config(), workdir)
  for name in ("config.json", "metrics.jsonl", "results.json", "error_vs_budget.png", "allocation_shares.png"):
    assert os.path.exists(os.path.join(workdir, name)), name
  with open(os.path.join(workdir, "results.json")) as f:
    on_disk = json.load(f)
  assert on_disk["error"] == json.loads(json.dumps(results["error"]))
  lines = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in lines] == list(range(1, 7))  # 2 budgets x 3 chunks
  assert all("seeds_per_s" in r for r in lines)
  assert set(results["error"]) == {"varde_tau0.1", "uniform", "successive_rejects"}


class _Crash(RuntimeError):
  pass


def test_killed_run_resumes_to_the_same_results(tmp_path, monkeypatch):
  reference = runner.run(_small_config(), str(tmp_path / "whole"))
  workdir = str(tmp_path / "interrupted")
  real_save = runtime.Context.save

  def crashing_save(self, step, *args, **kwargs):
    if step == 4:
      raise _Crash("killed")
    return real_save(self, step, *args, **kwargs)

  monkeypatch.setattr(runtime.Context, "save", crashing_save)
  with pytest.raises(_Crash):
    runner.run(_small_config(), workdir)
  monkeypatch.setattr(runtime.Context, "save", real_save)
  resumed = runner.run(_small_config(), workdir)
  assert resumed["error"] == reference["error"]
  assert resumed["vs_reference"] == reference["vs_reference"]
  steps = [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))]
  assert steps == list(range(1, 7))  # the lost step 4 is rewritten once


def test_workdir_of_another_config_is_refused(tmp_path):
  workdir = str(tmp_path / "run")
  runner.run(_small_config(), workdir)
  with pytest.raises(config_schema.ConfigError, match="different config"):
    runner.run(_small_config(num_seeds=64), workdir)
  with open(os.path.join(workdir, "results.json")) as f:
    assert json.load(f)["num_seeds"] == 96  # untouched
