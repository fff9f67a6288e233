"""A user's own labelled images (``dataset=npz``): the loader, its named errors, and a whole run on unseen shapes.

The end-to-end case is one the presets never see: 16x16 RGB images of three
classes (the presets are 28x28 grey digits of ten), written here.
"""

import os
import subprocess
import sys

from matplotlib import pyplot as plt
import numpy as np
import pytest

from datasets import npz_files
from datasets.images import npz_images
from datasets.images import splits
from launch import config_schema
from launch import errors
from launch import runner
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import report as fm_report
from launch.experiments.flow_matching import training as fm_training

import npz_damage

CLASSES, PER_CLASS, SIDE = 3, 40, 16


def _images(rng, n_per_class=PER_CLASS, side=SIDE, classes=CLASSES):
  """``uint8 [N, side, side, 3]`` with a bright band whose row and colour give the class, and noise."""
  y = np.repeat(np.arange(classes), n_per_class)
  x = rng.integers(0, 40, size=(len(y), side, side, 3)).astype(np.uint8)
  for i, c in enumerate(y):
    x[i, 2 + 4 * c:6 + 4 * c, :, c % 3] = 200 + rng.integers(0, 55)
  return x, y


def _load(config):
  return fm_training.load_data(config, fm_config.hparams_of(config))


def _config(path: str, **overrides):
  config = fm_config.get_config("smoke,dataset=npz")
  config.data_file = path
  config.flow.num_classes = config.features.num_classes = CLASSES
  for key, value in overrides.items():
    section, name = key.split(".") if "." in key else (None, key)
    (config[section] if section else config)[name] = value
  return config


def test_images_are_read_as_float_channels_last(tmp_path):
  rng = np.random.default_rng(0)
  x, y = _images(rng)
  grey = str(tmp_path / "grey.npz")
  np.savez(grey, images=x[..., 0], labels=y.astype(np.int64), extra=np.zeros(3))
  gx, gy = npz_images.load(grey)
  assert gx.shape == (len(y), SIDE, SIDE, 1) and gx.dtype == np.float32 and gy.dtype == np.int32
  np.testing.assert_array_equal(gx[..., 0], x[..., 0] / np.float32(255))
  np.testing.assert_array_equal(gy, y)
  rgb = str(tmp_path / "rgb.npz")
  np.savez(rgb, images=x / 255.0, labels=y.astype(np.uint8))  # floats already in [0, 1] are kept
  fx, _ = npz_images.load(rgb)
  np.testing.assert_allclose(fx, x / 255.0, rtol=1e-6)


def _write_bad(tmp_path, case: str) -> str:
  rng = np.random.default_rng(1)
  x, y = _images(rng)
  path = str(tmp_path / f"{case}.npz")
  arrays = {"images": x, "labels": y}
  if case == "above_one":
    arrays["images"] = x.astype(np.float32)
  elif case == "nan":
    f = x / 255.0
    f[3, 1, 2, 0] = np.nan
    arrays["images"] = f
  elif case == "rank":
    arrays["images"] = x.reshape(len(y), -1)
  elif case == "strings":
    arrays["images"] = np.array(["a", "b"])
  elif case in ("channels_first", "rgb_channels_first"):  # [N, C, H, W], as PyTorch stores images
    arrays["images"] = np.moveaxis(x if case.startswith("rgb") else x[..., :1], -1, 1)
  elif case == "float_labels":
    arrays["labels"] = y.astype(np.float32)
  elif case == "label_length":
    arrays["labels"] = y[:-1]
  elif case == "negative":
    arrays["labels"] = y - 1
  elif case == "gap":
    arrays["labels"] = np.where(y == 1, 2, y)
  elif case == "huge_label":  # one id far past N: refused before counting 2**40 classes
    arrays["labels"] = y.astype(np.int64)
    arrays["labels"][5] = 2**40
  elif case == "one_class":
    arrays["labels"] = np.zeros_like(y)
  elif case == "few":
    arrays["labels"] = np.where(np.arange(len(y)) < 5, 2, np.where(y == 2, 0, y))
  elif case == "missing":
    arrays = {"pictures": x, "labels": y}
  elif case == "object":
    np.savez(path, images=np.empty(2, dtype=object), labels=y)
    return path
  if case == "npy":
    path = str(tmp_path / "images.npy")
    np.save(path, x)
  elif case == "text":
    with open(path, "w") as f:
      f.write("images,labels\n")
  elif case == "truncated":
    np.savez(path, **arrays)
    with open(path, "rb") as f:
      head = f.read(200)
    with open(path, "wb") as f:
      f.write(head)
  elif case == "corrupt_deflate":
    npz_damage.corrupt_compressed(path, arrays, "images")
  elif case == "directory":
    os.makedirs(path)
  elif case == "absent":
    path = str(tmp_path / "absent.npz")
  else:
    np.savez(path, **arrays)
  return path


@pytest.mark.parametrize("case, match", [
    ("above_one", r"array 'images' has the value \d+\.0 at index \(\d+, \d+, \d+, \d+\); images of dtype float32 "
                  r"must lie in \[0, 1\]"),
    ("nan", r"array 'images' has the value nan at index \(3, 1, 2, 0\)"),
    ("rank", r"array 'images' must have shape \[N, H, W\] or \[N, H, W, C\]; got \(120, 768\)"),
    ("strings", r"array 'images' has dtype <U1; numbers are needed"),
    ("channels_first", r"array 'images' has shape \(120, 1, 16, 16\): height 1 and 16 channels, which reads as "
                       r"channels-first \[N, C, H, W\]; images are \[N, H, W, C\] \(store np.moveaxis\(images, 1, -1\)\)"),
    ("rgb_channels_first", r"has shape \(120, 3, 16, 16\): height 3 and 16 channels, which reads as channels-first"),
    ("float_labels", r"array 'labels' has dtype float32; integer class ids"),
    ("label_length", r"array 'labels' must have shape \[N\] = \(120,\) like 'images'; got \(119,\)"),
    ("negative", r"array 'labels' has the negative class -1 at index 0"),
    ("gap", r"array 'labels': classes \[1\] of 0..2 have no image"),
    ("huge_label", r"array 'labels' has the class 1099511627776 at index 5, but 120 images cannot number classes"),
    ("one_class", r"array 'labels' has one class"),
    ("few", r"array 'labels': classes \[2\] have fewer than 10 images \(\[5\]\)"),
    ("missing", r"missing arrays \['images'\]; found \['labels', 'pictures'\]"),
    ("object", r"array 'images' holds Python objects"),
    ("npy", r"holds a single array \(an .npy file\)"),
    ("text", r"is not an .npz archive"),
    ("truncated", r"is not (a readable )?an? \.npz archive"),
    ("corrupt_deflate", r"array 'images' cannot be read \(error: Error -3 while decompressing data"),
    ("directory", r"is a directory"),
    ("absent", r"absent.npz cannot be read \(No such file or directory\)"),
])
def test_bad_files_are_named_before_training(tmp_path, case, match):
  path = _write_bad(tmp_path, case)
  with pytest.raises(errors.DataError, match=match) as e:  # the launcher prints it in one line
    _load(_config(path))
  assert str(e.value).startswith("'data_file': ") and path in str(e.value)
  assert isinstance(e.value.__cause__, npz_images.ImageFileError)
  assert isinstance(e.value.__cause__, npz_files.NpzFileError) and isinstance(e.value.__cause__, ValueError)
  if case in ("missing", "npy", "text", "directory", "absent"):
    assert "np.savez(path, images=images, labels=labels)" in str(e.value)  # how to write a good one


@pytest.mark.parametrize("images", [np.zeros((120, SIDE, SIDE), np.uint8), np.full((120, SIDE, SIDE, 3), 0.5)])
def test_images_with_no_variation_are_refused_before_training(tmp_path, images):
  """Every pixel of every image equal: refused naming data_file (was a ZeroDivisionError in KID during training)."""
  path = str(tmp_path / "const.npz")
  np.savez(path, images=images, labels=np.arange(len(images)) % CLASSES)
  with pytest.raises(errors.DataError, match=r"^'data_file': data_file .*const.npz: every pixel of every image is "
                                             rf"{images.flat[0] / (255 if images.dtype == np.uint8 else 1):g} "
                                             r"\(no variation\); .*FID / KID are not defined"):
    _load(_config(path))


def test_config_keys_and_shapes_against_the_networks(tmp_path):
  config = fm_config.get_config("smoke,dataset=npz")
  with pytest.raises(config_schema.ConfigError, match="'data_file': dataset=npz reads the images from data_file"):
    runner.validate(config)
  config = fm_config.get_config("smoke")
  config.data_file = "mine.npz"
  with pytest.raises(config_schema.ConfigError, match="'data_file': is read only with dataset=npz; dataset is "
                                                      "'mnist5k'"):
    runner.validate(config)
  for key, value in (("data_dir", "DATA"), ("max_images", 100)):  # TFDS-only keys are not silently ignored
    config = fm_config.get_config("smoke,dataset=npz")
    config.data_file = "mine.npz"
    config[key] = value
    with pytest.raises(config_schema.ConfigError, match=f"'{key}': applies to the TFDS catalog sets "
                                                        r"\('mnist', 'cifar10'\); dataset 'npz' is read whole"):
      runner.validate(config)
  rng = np.random.default_rng(2)
  x, y = _images(rng)
  path = str(tmp_path / "mine.npz")
  np.savez(path, images=x, labels=y)
  runner.validate(_config(path))
  with pytest.raises(errors.DataError, match=r"'flow.num_classes': data_file .*mine.npz has 3 classes but "
                                       r"flow.num_classes = 10; set --config.flow.num_classes=3 "
                                       r"--config.features.num_classes=3"):
    _load(_config(path, **{"flow.num_classes": 10}))
  with pytest.raises(errors.DataError, match="'features.num_classes': .* has 3 classes but features.num_classes = 4"):
    _load(_config(path, **{"features.num_classes": 4}))
  with pytest.raises(errors.DataError, match="'large.patch': .*the 4x4 latent grid is not divisible by large.patch = 3"):
    _load(_config(path, **{"large.patch": 3}))
  odd = str(tmp_path / "odd.npz")
  np.savez(odd, images=x[:, :14, :14], labels=y)
  with pytest.raises(errors.DataError, match=r"'autoencoder.downsample': .*image side 14x14 is not divisible by "
                                       r"2\^downsample = 4; crop or pad"):
    _load(_config(odd))
  data = _load(_config(odd, **{"autoencoder.downsample": 1}))  # 7x7 latents
  assert data.gen_x.shape[1:] == (14, 14, 3)


def test_a_fraction_too_small_for_the_classes_is_refused_and_every_fraction_names_its_models(tmp_path):
  """A subset of fewer rows (or labels) than classes is refused, naming the key and the smallest good fraction."""
  rng = np.random.default_rng(3)
  x, y = _images(rng)
  path = str(tmp_path / "mine.npz")
  np.savez(path, images=x, labels=y)  # 72 generative rows of 3 classes: a subset needs round(72 f) >= 3
  with pytest.raises(errors.DataError, match=r"'reduction_fractions': 0.02 of the 72-row generative split keeps 1 "
                                             r"row, fewer than its 3 classes; give a fraction of at least 0.0417"):
    _load(_config(path, reduction_fractions=(0.5, 0.02)))
  with pytest.raises(errors.DataError, match=r"'labelled_fraction': 0.03 of the 72-row generative split keeps 2 "
                                             r"labels, fewer than its 3 classes"):
    _load(_config(path, labelled_fraction=0.03, conditional=True))
  _load(_config(path, labelled_fraction=0.03, conditional=False))  # no conditional flows: no labelled subset
  _load(_config(path, reduction_fractions=(0.0417,)))  # the fraction the message gives keeps 3 rows
  names = [m.name for g in fm_training.groups_of(fm_config.hparams_of(
      _config(path, reduction_fractions=(0.5, 0.001))).run) if g.name == "reduction" for m in g.members]
  assert "random50_s0" in names and "random0.1_s0" in names, names  # 0.001 is not named "0"


def test_the_launcher_names_a_bad_file_in_one_line(tmp_path, repo_root, python_env):
  path = _write_bad(tmp_path, "gap")
  cmd = [sys.executable, "-m", "launch.main", "--config=launch/configs/flow_matching.py:smoke,dataset=npz",
         f"--config.data_file={path}", "--config.flow.num_classes=3", "--config.features.num_classes=3",
         f"--workdir={tmp_path / 'run'}"]
  out = subprocess.run(cmd, env=python_env, cwd=repo_root, capture_output=True, text=True, timeout=300)
  lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  assert out.returncode == 1 and len(lines) == 1, out.stderr[-3000:]
  assert lines[0].startswith("error: 'data_file': ") and "classes [1] of 0..2 have no image" in lines[0]
  assert "Traceback" not in out.stderr, out.stderr[-3000:]


def test_min_per_class_gives_every_part_each_class():
  need = splits.min_per_class()
  assert need == 10  # the smallest protocol part is 10%
  for n in range(need, need + 25):
    y = np.repeat(np.arange(4), n)
    parts = splits.stratified_split(y)
    assert all(set(y[idx]) == set(range(4)) for idx in parts.values()), n
  y = np.repeat(np.arange(4), 2)  # fewer rows than parts: some part misses every class
  assert any(set(y[idx]) != set(range(4)) for idx in splits.stratified_split(y).values())


@pytest.mark.slow
def test_a_user_file_of_unseen_shapes_runs_every_stage(tmp_path):
  rng = np.random.default_rng(3)
  x, y = _images(rng)
  path = str(tmp_path / "mine.npz")
  np.savez(path, images=x, labels=y)
  config = _config(path, flow_steps=20, chunk_steps=20)
  res = runner.run(config, str(tmp_path / "run"))
  assert sum(res["splits"].values()) == CLASSES * PER_CLASS
  assert res["latent_shape"] == [SIDE // 4, SIDE // 4, config.autoencoder.latent_channels]
  assert res["tokens"] == (SIDE // 4) ** 2
  assert res["feature_test_accuracy"] > 1.0 / CLASSES  # the class is a bright band: far above chance
  assert np.isfinite(res["quality"]["large"]["fid"]["mean"])
  assert {r["labels"] for r in res["conditional"]} == {"random", "loss", "all"}
  assert all(0.0 <= r["accuracy"]["mean"] <= 1.0 for r in res["conditional"])


def test_a_home_relative_path_is_expanded(tmp_path, monkeypatch):
  x, y = _images(np.random.default_rng(2))
  np.savez(tmp_path / "mine.npz", images=x, labels=y)
  monkeypatch.setenv("HOME", str(tmp_path))
  fx, fy = npz_images.load("~/mine.npz")
  np.testing.assert_array_equal(fy, y)
  assert fx.shape == x.shape


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5])
def test_figures_show_images_of_any_channel_count(channels):
  image = np.random.default_rng(0).uniform(size=(8, 8, channels)).astype(np.float32)
  shown = fm_report.displayed(image)
  assert shown.shape == ((8, 8, channels) if channels in (3, 4) else (8, 8))
  fig, ax = plt.subplots()
  ax.imshow(shown, cmap="gray_r", vmin=0, vmax=1)  # raised "Invalid shape" for 2 and 5 channels before
  fig.canvas.draw()
  plt.close(fig)
