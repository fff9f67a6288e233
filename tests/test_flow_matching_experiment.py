"""The ``flow_matching`` experiment: presets and named config errors, a smoke run on a TFDS fixture, NaN + resume.

The smoke run reads the ``paper`` preset's data path (full MNIST through its
TFDS catalog builder) from a small array_record fixture written here from
MNIST-5k digits; nothing is downloaded.
"""

import io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from datasets.images import builder as image_builder
from launch import checkpoint as ckpt_lib
from launch import config_schema
from launch import errors
from launch import mesh as mesh_lib
from launch import runner
from launch.bench import flow_matching_sizes
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import evaluation as fm_eval
from launch.experiments.flow_matching import experiment as fm_exp
from launch.experiments.flow_matching import training as fm_training
from methods import flow_matching as fm

FIXTURE_SIZES = {"train": 500, "test": 100}  # MNIST-5k rows written as TFDS "mnist"


def _write_mnist_fixture(data_dir: str) -> None:
  """Prepares TFDS ``mnist`` (array_record) from the first 600 MNIST-5k digits (no download)."""
  x, y = image_builder.raw_arrays("mnist5k")
  order = np.random.default_rng(0).permutation(len(y))
  x, y = (np.round(x[order] * 255).astype(np.uint8), y[order])
  parts, start = {}, 0
  for split, n in FIXTURE_SIZES.items():
    parts[split] = (x[start:start + n], y[start:start + n])
    start += n

  def png(im):
    buf = io.BytesIO()
    Image.fromarray(im).save(buf, format="PNG")
    return buf.getvalue()

  def examples(images, labels):
    for i, (im, lab) in enumerate(zip(images, labels)):
      yield i, {"image": png(im), "label": int(lab)}

  builder = tfds.builder("mnist", data_dir=data_dir, file_format="array_record")
  builder._split_generators = lambda dl_manager: {s: examples(*v) for s, v in parts.items()}  # no download
  builder.download_and_prepare()


def _config(data_dir: str):
  config = fm_config.get_config("smoke,dataset=mnist")
  config.data_dir = data_dir
  config.mesh.data = 2
  config.flow_steps, config.chunk_steps = 40, 20  # two chunks per group: a resume point inside each
  return config


def test_presets_validate_and_errors_are_named():
  for arg in ("smoke", "cpu", "cpu,mini=1", "paper", "paper,dataset=cifar10"):
    runner.validate(fm_config.get_config(arg))
  cpu = fm_config.get_config("cpu")
  assert cpu.protocol.num_samples >= 2000 and cpu.seeds >= 3 and cpu.dataset == "mnist5k"
  paper = fm_config.get_config("paper")
  assert paper.protocol.num_samples >= 10_000 and paper.dataset == "mnist"
  config = fm_config.get_config("smoke")
  config.seeds = 1
  config.reduction_fractions = (1.0,)
  config.protocol.fid_margin = -0.1
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  for key in ("seeds", "reduction_fractions", "protocol.fid_margin"):
    assert f"'{key}'" in str(e.value), key
  config = fm_config.get_config("smoke")  # cross-field checks, once every value is in range
  config.flow_steps = 50
  config.chunk_steps = 40
  config.t_splits = (0.2, 0.5)
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  msg = str(e.value)
  assert "'flow_steps': 50 is not a multiple of chunk_steps=40" in msg and "'t_splits'" in msg
  assert "must contain 0" in msg
  config = fm_config.get_config("smoke")  # the protocol's cross-section checks
  config.sampler.solver = "dopri5"
  config.curve_samples = 10_000
  with pytest.raises(config_schema.ConfigError) as e:
    runner.validate(config)
  assert "'sampler.solver'" in str(e.value) and "'curve_samples'" in str(e.value)
  config = fm_config.get_config("smoke")
  config.large.widht = 3
  with pytest.raises(config_schema.ConfigError, match="unknown key 'large.widht'; did you mean 'width'"):
    runner.validate(config)


def test_tfds_dataset_without_data_dir_is_named():
  config = fm_config.get_config("paper")
  with pytest.raises(errors.DataError, match="'data_dir'.*tfds build mnist"):
    fm_training.load_data(config, fm_config.hparams_of(config))


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("tfds"))
  _write_mnist_fixture(d)
  return d


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, tfds_dir):
  """An uninterrupted run through ``launch.runner.run`` (also the reference of the resume test)."""
  work = str(tmp_path_factory.mktemp("fm") / "full")
  results = runner.run(_config(tfds_dir), work)
  return work, results


@pytest.mark.slow
def test_smoke_run_reports_the_protocol(smoke_run):
  work, res = smoke_run
  for fig in ("sample_grid", "t_split_curves", "data_reduction"):
    assert os.path.exists(os.path.join(work, f"{fig}.png"))
  sp = res["splits"]  # class-stratified 0.6 / 0.3 / 0.1 of the 600 fixture digits
  assert sum(sp.values()) == 600 and abs(sp["generative"] - 360) <= 20 and abs(sp["feature_test"] - 60) <= 20
  assert res["latent_shape"] == [7, 7, 4] and res["tokens"] == 49
  assert res["feature_test_accuracy"] > 0.3  # 180 training digits, 60 steps; chance is 0.1
  assert res["reconstruction_mse_held_out"]["n"] == 2 and res["fid_reconstructions"]["mean"] > 0
  for name in ("large", "large_alt", "small"):
    assert len(res["quality"][name]["fid"]["per_seed"]) == 2
  c2f = res["coarse_to_fine"]
  rows = {r["t_split"]: r for r in c2f["rows"]}
  assert rows[0.0]["fid_ratio"] == 1.0 and rows[0.0]["passes"] and rows[0.0]["speedup_flops"] == 1.0
  assert rows[1.0]["small_forwards"] == 8 and rows[1.0]["large_forwards"] == 0
  assert c2f["t_split"] in rows and rows[c2f["t_split"]]["passes"]
  if c2f["t_split"] == 0.0:  # the large model alone: identical samples, zero paired difference
    assert c2f["fid_test_minus_large"]["mean"] == 0.0
  assert [r["criterion"] for r in res["reduction"]] == ["all", "random", "loss"]
  assert res["reduction"][2]["rows"] == sp["generative"] // 2 and "fid_minus_random" in res["reduction"][2]
  assert all(r["steps_to_quality"] in (20, 40) for r in res["reduction"])
  pairs = [s["pair"] for s in res["stability"]]
  assert pairs[:2] == ["large vs other flow seed", "large vs small architecture"]
  other = res["stability"][0]  # another flow seed on the same autoencoder: far closer than a shuffled pairing
  assert other["cosine"]["mean"] > other["cosine_shuffled"]["mean"]
  assert other["psnr"]["mean"] > other["psnr_shuffled"]["mean"]
  cond = {(r["labels"], r["scale"]) for r in res["conditional"]}
  assert cond == {(c, w) for c in ("random", "loss", "all") for w in (0.0, 1.0)}
  assert res["costs"]["large"]["params"] > res["costs"]["small"]["params"]
  md = fm_exp.EXPERIMENT.to_markdown(res)
  assert "| t_split |" in md and "Comparable quality (fixed before the runs)" in md and "test accuracy" in md
  assert "large vs other flow seed" in fm_exp.EXPERIMENT.summary(res)
  steps = [json.loads(x)["step"] for x in open(os.path.join(work, "metrics.jsonl"))]
  assert steps == list(range(1, 10))  # auxiliary networks, then 4 groups x 2 chunks


@pytest.mark.slow
def test_nan_stops_naming_the_step_and_resume_is_bit_identical(tmp_path, tfds_dir, smoke_run, monkeypatch):
  original = fm_training.chunk_fn
  calls = {"n": 0}

  def poisoned(net, flow, num_steps, mesh, slices=1):
    fn = original(net, flow, num_steps, mesh, slices)

    def wrapped(states, data, labels, counts, keys):
      states, losses = fn(states, data, labels, counts, keys)
      calls["n"] += 1
      if calls["n"] == 2:
        losses = losses.at[0, 7].set(np.nan)
      return states, losses

    return wrapped

  monkeypatch.setattr(fm_training, "chunk_fn", poisoned)
  work = str(tmp_path / "run")
  with pytest.raises(ckpt_lib.NonFiniteError) as e:
    runner.run(_config(tfds_dir), work)
  msg = str(e.value)
  assert "loss of model large_s0 at training step 28" in msg and "last good checkpoint (step 2) is kept" in msg
  ck = ckpt_lib.Checkpointer(os.path.join(os.path.abspath(work), "checkpoints"))
  assert ck.all_steps() == [1, 2]
  ck.close()
  monkeypatch.setattr(fm_training, "chunk_fn", original)
  resumed = runner.run(_config(tfds_dir), work)  # resumes from step 2
  ref = smoke_run[1]
  assert resumed["param_digest"] == ref["param_digest"]  # every group's parameters, bit for bit
  assert resumed["quality"] == ref["quality"] and resumed["reduction"] == ref["reduction"]
  steps = [json.loads(x)["step"] for x in open(os.path.join(work, "metrics.jsonl"))]
  assert steps == list(range(1, 10))


@pytest.mark.parametrize("devices", [1, 3, 8])
def test_noises_split_over_the_mesh_pad_and_gather_back(devices):
  """13 noises on 1, 3 and 8 devices: padded to a multiple of the mesh, split over it, and the first 13 come back."""
  mesh = mesh_lib.make_mesh(devices)
  x = np.random.default_rng(0).normal(size=(13, 7, 7, 4)).astype(np.float32)
  placed = fm_eval.split(x, mesh)
  assert placed.shape == (mesh_lib.padded_size(13, mesh), 7, 7, 4)
  assert len(placed.sharding.device_set) == devices
  np.testing.assert_array_equal(fm_eval.gather(placed * 2.0, 13), 2.0 * x)
  m = np.arange(1, 4, dtype=np.float32)[None, :, None, None, None]
  stacked = placed[:, None] * m  # [N, members, ...], as the training-curve sampler returns
  np.testing.assert_array_equal(fm_eval.gather(stacked, 13), x[:, None] * m)


@pytest.mark.parametrize("devices,batch", [(1, 4), (3, 2), (3, 0), (8, 5)])
def test_sampling_in_slices_on_the_mesh_equals_one_batch(devices, batch):
  """13 noises through ``on_mesh`` (a share per device, ``batch`` rows at a time) give the samples of one call."""
  mesh = mesh_lib.make_mesh(devices)
  hp = fm_config.hparams_of(fm_config.get_config("smoke"))
  params = fm.core.init(jax.random.key(0), (7, 7, 4), net=hp.large, flow=hp.flow).params
  params = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(jax.random.key(1), p.shape), params)  # non-zero output
  x = np.random.default_rng(0).normal(size=(13, 7, 7, 4)).astype(np.float32)
  fn = fm_eval.c2f_fn(hp.large, hp.large, hp.flow, 4, "euler", mesh, batch)
  rep = jax.device_put((params, jnp.float32(0.5)), mesh_lib.replicated(mesh))
  got = fm_eval.gather(fn(rep[0], rep[0], rep[1], fm_eval.split(x, mesh)), 13)
  _, apply = fm.core.make_velocity(hp.large, hp.flow)
  want = fm.samplers.sample(lambda z, t: apply(params, z, t), jnp.asarray(x), num_steps=4, solver="euler")
  np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-5)
  assert np.abs(np.asarray(want) - x).max() > 1e-2  # the network moved the samples
  stacked = jax.tree.map(lambda p: jnp.stack([p, 0.5 * p]), params)
  fn = fm_eval._stacked_fn(hp.large, hp.flow, 4, "euler", mesh, batch)
  got = fm_eval.gather(fn(jax.device_put(stacked, mesh_lib.replicated(mesh)), fm_eval.split(x, mesh)), 13)
  assert got.shape == (13, 2, 7, 7, 4)
  np.testing.assert_allclose(got[:, 0], np.asarray(want), rtol=1e-4, atol=1e-5)
  half = jax.tree.map(lambda p: 0.5 * p, params)
  want = fm.samplers.sample(lambda z, t: apply(half, z, t), jnp.asarray(x), num_steps=4, solver="euler")
  np.testing.assert_allclose(got[:, 1], np.asarray(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("devices,member_batch,want", [(1, 2, (3, 2)), (2, 2, (3, 2)), (2, 3, (2, 4)), (1, 0, (1, 5))])
def test_a_group_trains_in_member_slices_as_in_one_vmap(devices, member_batch, want):
  """5 members in ``member_batch`` slices (padded to the mesh) end with the parameters of one vmap of all."""
  mesh = mesh_lib.make_mesh(devices)
  config = fm_config.get_config("smoke")
  config.member_batch = member_batch
  hp = fm_config.hparams_of(config)
  group = fm_training.Group("g", "large", False, tuple(fm_training.Member(f"m{i}", 0, i, 1.0, "") for i in range(5)))
  slices, size = fm_training.slices_of(hp.run, group, mesh)
  assert (slices, size) == want and size % devices == 0
  p = slices * size
  keys = jax.random.split(jax.random.key(3), p)
  rng = np.random.default_rng(0)
  sh = mesh_lib.data_sharding(mesh)
  data = jax.device_put(rng.normal(size=(p, 32, 7, 7, 4)).astype(np.float32), sh)
  labels = jax.device_put(rng.integers(0, 10, size=(p, 32)).astype(np.int32), sh)
  counts = jax.device_put(np.full(p, 32, np.int32), sh)
  states = fm_training.init_states(hp, group, (7, 7, 4), jax.device_put(keys, sh), mesh)
  outs = [fm_training.chunk_fn(hp.large, hp.flow, 3, mesh, n)(states, data, labels, counts, jax.device_put(keys, sh))
          for n in (1, slices)]
  # Two programs agree within float rounding. Adam moves a weight by about the learning rate whatever the
  # gradient's size, so a weight whose gradient is near zero can move the other way: allow that in a few.
  np.testing.assert_allclose(np.asarray(outs[1][1]), np.asarray(outs[0][1]), rtol=1e-4)  # every member's losses
  step = 2 * hp.flow.learning_rate * 3
  for a, b in zip(jax.tree.leaves(outs[0][0].params), jax.tree.leaves(outs[1][0].params)):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, atol=step)
    assert np.mean(np.isclose(a, b, rtol=1e-4, atol=1e-6)) > 0.98
  # ... and members differ by more than that, so a member trained in another's place would fail above.
  w = np.concatenate([np.asarray(x).reshape(p, -1) for x in jax.tree.leaves(outs[0][0].params)], axis=1)
  assert np.abs(w[0] - w[1]).max() > step


def test_the_sizes_script_projects_the_paper_preset_with_its_networks_and_counts():
  """``flow_matching_sizes --preset=paper`` takes the paper preset's networks and counts from its config."""
  p = flow_matching_sizes.paper_preset()
  hp = fm_config.hparams_of(fm_config.get_config("paper"))
  assert (p.large, p.small, p.ae, p.feat) == (hp.large, hp.small, hp.autoencoder, hp.features)
  assert (p.flow_batch, p.flow_steps, p.sampler_steps, p.num_samples) == (256, 100_000, 60, 10_000)
  assert (p.seeds, p.reduction_models, p.cfg_models, p.cfg_scales, p.t_splits) == (3, 8, 5, 3, 4)
  groups = fm_training.groups_of(hp.run)
  assert sum(len(g.members) for g in groups if g.arch == "large") == p.seeds * (2 + p.reduction_models + p.cfg_models)
  mesh = mesh_lib.make_mesh(1)
  assert [fm_training.slices_of(hp.run, g, mesh) for g in groups] == [(1, 6), (1, 3), (4, 6), (3, 5)]
  unit = flow_matching_sizes.budget(p, dict.fromkeys(("autoencoder", "feature net", "large", "small"), 1.0),
                                    {"large": 0.0, "small": 0.0})
  assert unit["large-model trainings"] == 45 * 100_000 and unit["small-model trainings"] == 3 * 100_000


def test_member_slices_bound_a_chunks_memory():
  """XLA's memory analysis of one chunk: the reduction group in slices of one member holds less than all at once."""
  rows = flow_matching_sizes.training_memory("smoke", 64, member_batch=1, groups=("reduction",))
  assert {r["group"] for r in rows} == {"reduction"}
  red = {r["member_batch"]: r for r in rows}
  assert (red[0]["slices"], red[1]["slices"]) == (1, 4) and red[1]["slice"] == 1
  assert red[1]["temp_gib"] < 0.6 * red[0]["temp_gib"]
