"""The ``graphpfn`` experiment: named config errors, a smoke run, the sharded step, NaN stop, SIGKILL + resume."""

import json
import os
import subprocess
import sys

import chex
import jax
import numpy as np
import pytest

from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import mesh as mesh_lib
from launch import runner
from launch.configs import graphpfn as gcfg
from launch.experiments.graphpfn import inference, model_report, pretrain
from methods.graphpfn import batching, evaluation, train as train_lib
from datasets.graphs import real_tasks


def _smoke(**overrides):
  config = gcfg.get_config("smoke")
  for k, v in overrides.items():
    *parents, leaf = k.split(".")
    target = config
    for p in parents:
      target = target[p]
    target[leaf] = v
  return config


@pytest.mark.parametrize("overrides, expected", [
    ({"attributes.n_features_max": 32}, "'attributes.n_features_max': 32 is more than model.num_features=24"),
    ({"structure.n_nodes_max": 4096}, "'buckets.node_buckets': the largest bucket 4096 cannot hold"),
    ({"attributes.tasks": ("ordinal",)}, "'attributes.tasks'"),
    ({"attributes.num_classes_max": 12}, "'attributes.num_classes_max': 12 is more than model.num_classes=10"),
    ({"compared": ("svm",)}, "'compared'"),
])
def test_bad_config_is_named_before_any_compute(overrides, expected):
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(_smoke(**overrides))
  assert expected in str(e.value)


def test_users_graph_over_the_maxima_is_named():
  """A graph of the user's with too many nodes or features, or an unknown task, gets a one-line named error."""
  hp = gcfg.hparams_of(gcfg.get_config("smoke"))
  task = real_tasks.karate_task()
  kw = dict(buckets=hp.buckets, num_features=hp.model.num_features, num_classes=hp.model.num_classes)
  big = task | {"x": np.zeros((5000, 4), np.float32), "y": np.zeros(5000, np.int32), "num_nodes": 5000,
                "train_mask": np.arange(5000) < 4, "eval_mask": np.arange(5000) >= 4}
  with pytest.raises(batching.BatchError, match="5000 is over the maximum 4096"):
    batching.collate([big], **kw)
  with pytest.raises(batching.BatchError, match="x"):
    batching.collate([task | {"x": np.zeros((34, 30), np.float32)}], **kw)
  with pytest.raises(batching.BatchError, match="unknown task 'ordinal'"):
    batching.collate([task | {"task": "ordinal"}], **kw)


def test_sharded_step_one_device_equals_eight():
  """The experiment's data-parallel step (batch sharded over the mesh) on 1 and 8 devices, within rounding."""
  hp = gcfg.hparams_of(gcfg.get_config("smoke"))
  # Eight karate-club splits stand in for a prior batch (no sampler to compile).
  batch = batching.collate([real_tasks.karate_task(seed=s) for s in range(8)], buckets=hp.buckets,
                           num_features=hp.model.num_features, num_classes=hp.model.num_classes)
  borders = jax.numpy.linspace(-3.0, 3.0, hp.model.num_bins + 1)
  out = []
  for n in (1, 8):
    mesh = mesh_lib.make_mesh(n)
    state = pretrain.initial_state(hp, 0, mesh, 2)
    new, m = pretrain.StepFn(hp, mesh)(state.train, batch, jax.device_put(borders, mesh_lib.replicated(mesh)))
    assert len(jax.tree.leaves(new.params)[0].sharding.device_set) == n
    out.append(jax.device_get((new.params, m.loss)))
  np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(out[0][0]), jax.tree.leaves(out[1][0])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # a whole smoke run (pretraining, both prior settings, the baselines): minutes under load
def test_smoke_run_trains_evaluates_and_reports(tmp_path):
  config = _smoke(**{"mesh.data": 8})
  res = runner.run(config, str(tmp_path / "run"))
  assert res["steps"] == 20 and res["resumed_from"] == 0
  assert res["traces"] == len(res["bucket_pairs"])  # one compilation per bucket pair, none after warm-up
  assert res["curve"]["steps"] == [10, 20] and res["curve"]["accuracy"][-1] is not None
  for key in ("held_out", "shifted"):
    block = res[key]
    assert set(block["methods"]) == {"graphpfn", "linear", "sgc", "gcn", "gbdt"}
    assert block["graphs"] == 16
  assert res["shifted"]["mean_nodes"] > res["held_out"]["mean_nodes"]
  assert res["karate"]["methods"]["graphpfn"]["accuracy"]["n"] == 4
  for text in (model_report.markdown_table(res), model_report.headline_table(res), model_report.format_table(res)):
    assert "graphpfn" in text.lower()
  assert os.path.exists(tmp_path / "run" / "curve.png")
  lines = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
  assert [x["step"] for x in lines] == list(range(1, 21)) and all(np.isfinite(x["loss"]) for x in lines)
  # The trained network predicts in context on a graph of the user's (here the karate club).
  step, state = inference.restore(str(tmp_path / "run"), config)
  assert step == 20 and pretrain.digest(state.train.params) == res["param_digest"]
  hp = gcfg.hparams_of(config)
  batch = batching.collate([real_tasks.karate_task()], buckets=hp.buckets, num_features=hp.model.num_features,
                           num_classes=hp.model.num_classes)
  pred = evaluation.predict(state.train.params, batch, state.borders, model_hp=hp.model)
  chex.assert_shape(pred.class_probs, (1, batch.x.shape[1], hp.model.num_classes))
  np.testing.assert_allclose(np.sum(pred.class_probs[0, :34], axis=-1), 1.0, rtol=1e-5)


@pytest.mark.slow  # samples and compiles the smoke run's first steps
def test_nan_stops_the_run_naming_the_step(tmp_path, monkeypatch):
  original = train_lib.train_step

  def poisoned(state, batch, borders, **kw):
    new, m = original(state, batch, borders, **kw)
    return new, m._replace(loss=jax.numpy.where(state.step >= 6, jax.numpy.nan, m.loss))

  monkeypatch.setattr(pretrain.train_lib, "train_step", poisoned)
  work = str(tmp_path / "run")
  with pytest.raises(ckpt_lib.NonFiniteError) as e:
    runner.run(_smoke(**{"mesh.data": 2}), work)
  assert "step 7" in str(e.value) and "metrics/loss" in str(e.value)
  assert "last good checkpoint (step 5) is kept" in str(e.value)


def _launch(work, env):
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/graphpfn.py:smoke", f"--workdir={work}",
         "--cpu_devices=2", "--config.compared=('linear',)", "--config.karate_splits=0", "--config.eval_graphs=8"]
  return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow  # three smoke runs in subprocesses: a few minutes of CPU
def test_sigkill_mid_run_resumes_bit_identical(tmp_path, python_env, kill_and_resume):
  # killed once step 5's checkpoint is sealed, mid-training
  a, b, _, lines, work = kill_and_resume(lambda work: _launch(work, python_env), tmp_path, 5, timeout=900)
  assert b["resumed_from"] >= 5
  assert a["param_digest"] == b["param_digest"]  # parameters bit for bit
  assert a["curve"] == b["curve"]
  for key in ("held_out", "shifted"):  # every score; eval_s is a wall-clock time
    assert {k: v for k, v in a[key].items() if k != "eval_s"} == {k: v for k, v in b[key].items() if k != "eval_s"}
  assert lines == list(range(1, 21))
