"""The ``flow_matching`` experiment: named config errors, a smoke run, NaN handling, SIGKILL + resume."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from datasets import images as image_data
from datasets.images import builder as image_builder
from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import runner
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import experiment as fm_exp
from launch.experiments.flow_matching import training as fm_training

TINY = {"train_steps": 200, "chunk_steps": 100, "reduction_seeds": 0, "stability_fractions": (0.5,),
        "t_split_sweep": (0.0, 0.7, 1.0), "sampler.steps": 10}


def _config(tmp_path, **overrides):
  config = fm_config.get_config("smoke")
  config.data_dir = str(tmp_path / "data")
  config.mesh.data = 2
  for k, v in {**TINY, **overrides}.items():
    node = config
    *path, last = k.split(".")
    for p in path:
      node = node[p]
    node[last] = v
  return config


def test_config_errors_are_named():
  for preset in ("smoke", "cpu", "paper"):
    runner.validate(fm_config.get_config(preset))
  runner.validate(fm_config.get_config("cpu,dataset=mnist5k"))
  config = fm_config.get_config("smoke")
  config.stability_fractions = (0.5, 1.5)
  config.reduction_fractions = (0.0,)
  config.t_split_sweep = (0.5, 1.2)
  config.sampler.t_split = -0.1
  config.train_steps = 0
  config.sampler.steps = 0
  config.sampler.solver = "rk4"
  config.coarse_t_max = 0.0
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  msg = str(e.value)
  assert "'sampler.solver': 'rk4' is not allowed" in msg and "dopri5" in msg
  for key in ("stability_fractions", "reduction_fractions", "t_split_sweep", "sampler.t_split", "train_steps",
              "sampler.steps", "coarse_t_max"):
    assert f"'{key}'" in msg, key
  config = fm_config.get_config("smoke")
  config.train_steps = 250
  config.coarse_steps = 150
  config.large.heads = 5
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  assert "'train_steps': 250 is not a multiple of chunk_steps=100" in str(e.value)
  assert "'coarse_steps': 150 is not a multiple" in str(e.value)
  assert "'large.heads'" in str(e.value)
  config = fm_config.get_config("smoke")
  config.large.widht = 3
  with pytest.raises(config_schema.ConfigError, match="unknown key 'large.widht'; did you mean 'width'"):
    runner.validate(config)


def test_tfds_builder_split_is_fixed_and_shuffled(tmp_path):
  image_data.prepare("digits", str(tmp_path))
  x, y = image_data.load("digits", "train", str(tmp_path))
  xt, yt = image_data.load("digits", "test", str(tmp_path))
  assert x.shape == (1438, 8, 8) and xt.shape == (359, 8, 8) and x.dtype == np.float32
  assert 0 <= x.min() and x.max() <= 1 and sorted(set(y)) == list(range(10))
  raw, labels = image_builder.raw_arrays("digits")
  idx = image_builder.split_indices(len(labels))
  np.testing.assert_array_equal(x, raw[idx["train"]])
  np.testing.assert_array_equal(yt, labels[idx["test"]])
  with pytest.raises(FileNotFoundError, match="not prepared"):
    image_data.load("mnist5k", "train", str(tmp_path / "none"))


def _launch(work, data_dir, env):
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/flow_matching.py:smoke", f"--workdir={work}",
         "--cpu_devices=2", f"--config.data_dir={data_dir}", "--config.train_steps=200",
         "--config.chunk_steps=50", "--config.reduction_seeds=0", "--config.t_split_sweep=(0.0,0.7,1.0)",
         "--config.sampler.steps=10", "--config.timing_repeats=1", "--config.bootstrap=50"]
  return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, repo_root):
  """An uninterrupted launcher run (also the reference of the SIGKILL test)."""
  tmp = tmp_path_factory.mktemp("fm")
  env = dict(os.environ, PYTHONPATH=repo_root + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
  env.pop("XLA_FLAGS", None)
  work = str(tmp / "full")
  proc = _launch(work, str(tmp / "data"), env)
  out, _ = proc.communicate(timeout=900)
  assert proc.returncode == 0, out
  with open(os.path.join(work, "results.json")) as f:
    return work, json.load(f)


def test_smoke_run_results_stability_and_endpoints(smoke_run):
  work, res = smoke_run
  for fig in ("sample_grid", "t_split_curves"):
    assert os.path.exists(os.path.join(work, f"{fig}.png"))
  assert res["classifier_accuracy"] > 0.9
  q = res["quality"]
  assert q["real_heldout"]["fid"] < q["large_s0"]["fid"]
  # Two independently trained models (different seeds) are far more similar under identical noise
  # than under a shuffled pairing (the chance level).
  s = res["stability"]["large_s0 vs large_s1"]
  assert s["cosine"] > s["cosine_shuffled"] + 0.1
  assert s["nn_match"] > 0.5 > 0.05 > s["nn_match_shuffled"]
  assert s["latent_rel_l2"] < 0.5 * s["latent_rel_l2_shuffled"] and s["psnr"] > s["psnr_shuffled"] + 5
  c2f = {r["t_split"]: r for r in res["coarse_to_fine"]}
  assert c2f[0.0]["stability_to_large"]["pixel_mse"] == 0.0 and c2f[0.0]["fid"] == q["large_s0"]["fid"]
  assert c2f[1.0]["fid"] == q["coarse"]["fid"] and c2f[1.0]["small_steps"] == 10
  assert c2f[1.0]["nfe_small"] == 10 and c2f[1.0]["nfe_large"] == 0 and c2f[0.7]["nfe_small"] == 7
  assert 1.0 < c2f[0.7]["speedup_flops"] < c2f[1.0]["speedup_flops"]
  choice = res["c2f_choice"]  # the comparable-quality rule picks a split no later than coarse_t_max
  assert choice["fid_se"] > 0 and choice["threshold"] == choice["fid_large"] + 2 * choice["fid_se"]
  assert c2f[0.0]["comparable"] and choice["t_split"] in (0.0, 0.7)
  assert c2f[choice["t_split"]]["comparable"] and choice["t_split"] <= res["coarse_t_max"]
  assert len(res["param_digest"]["large"]) == 64
  text = fm_exp.EXPERIMENT.summary(res)
  assert "large_s0 vs large_s1" in text and "t_split" in text
  md = fm_exp.EXPERIMENT.to_markdown(res)
  assert "| t_split |" in md and "classifier test accuracy" in md and "Comparable quality: FID <=" in md
  lines = [json.loads(x) for x in open(os.path.join(work, "metrics.jsonl"))]
  assert [r["step"] for r in lines] == list(range(1, 12))  # auxiliary networks, 4 + 4 + 2 chunks


def test_nan_loss_stops_the_run_naming_the_step(tmp_path, monkeypatch):
  original = fm_training.chunk_fn
  calls = {"n": 0}

  def poisoned(net, flow, num_steps, mesh):
    fn = original(net, flow, num_steps, mesh)

    def wrapped(states, data, labels, counts, keys):
      states, losses = fn(states, data, labels, counts, keys)
      calls["n"] += 1
      if calls["n"] == 2:
        losses = losses.at[0, 37].set(np.nan)
      return states, losses

    return wrapped

  monkeypatch.setattr(fm_training, "chunk_fn", poisoned)
  work = str(tmp_path / "run")
  with pytest.raises(ckpt_lib.NonFiniteError) as e:
    runner.run(_config(tmp_path, **{"classifier.steps": 10, "autoencoder.steps": 10, "large.width": 32,
                                    "large.depth": 1}), work)  # only the stop is tested: small and short
  msg = str(e.value)
  assert "loss of model large_s0 at training step 138" in msg and "last good checkpoint (step 2) is kept" in msg
  ck = ckpt_lib.Checkpointer(os.path.join(os.path.abspath(work), "checkpoints"))
  assert ck.all_steps() == [1, 2]
  ck.close()


def test_sigkill_mid_run_resumes_bit_identical(tmp_path, python_env, smoke_run):
  data_dir = str(tmp_path / "data")
  work = str(tmp_path / "killed")
  proc = _launch(work, data_dir, python_env)
  ckdir = os.path.join(work, "checkpoints")
  deadline = time.time() + 600
  while time.time() < deadline:  # kill once the large group is mid-training
    steps = [int(d) for d in os.listdir(ckdir) if d.isdigit()] if os.path.isdir(ckdir) else []
    if steps and max(steps) >= 3:
      break
    assert proc.poll() is None, proc.stdout.read()
    time.sleep(0.05)
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL
  assert not os.path.exists(os.path.join(work, "results.json"))
  resumed = _launch(work, data_dir, python_env)
  out, _ = resumed.communicate(timeout=600)
  assert resumed.returncode == 0, out
  a = smoke_run[1]
  b = json.load(open(os.path.join(work, "results.json")))
  assert a["param_digest"] == b["param_digest"]  # parameters bit for bit, every group
  assert a["quality"] == b["quality"] and a["reduction"] == b["reduction"]
  lines = [json.loads(x)["step"] for x in open(os.path.join(work, "metrics.jsonl"))]
  assert lines == list(range(1, 12))  # the rewound metrics were rewritten once each
