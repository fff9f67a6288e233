"""Full MNIST / CIFAR-10 through the TFDS catalog builders, on small fixtures written here in their real format."""

import glob
import io
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from datasets.images import tfds_catalog
from launch import errors
from launch.configs import flow_matching as fm_config
from launch.experiments.flow_matching import training as fm_training


def _png(image: np.ndarray) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buf, format="PNG")
  return buf.getvalue()


def _write_fixture(name: str, data_dir: str, sizes: dict) -> dict:
  """Prepares ``name`` with its real catalog builder (array_record), from random images instead of the download.

  Pixel (0, 0, 0) of row ``i`` is ``i`` so rows can be matched after TFDS's shuffle.
  """
  shape = tfds_catalog.CATALOG[name][0]
  rng = np.random.default_rng(len(name))
  data = {}
  for split, n in sizes.items():
    images = rng.integers(0, 256, (n,) + shape).astype(np.uint8)
    images[:, 0, 0, 0] = np.arange(n)
    data[split] = (images, rng.integers(0, 10, n))

  def examples(images, labels):
    for i, (im, y) in enumerate(zip(images, labels)):
      ex = {"image": _png(im), "label": int(y)}
      if name == "cifar10":
        ex["id"] = f"train_{i:05d}"
      yield i, ex

  builder = tfds.builder(name, data_dir=data_dir, file_format="array_record")
  builder._split_generators = lambda dl_manager: {s: examples(*v) for s, v in data.items()}  # no download
  builder.download_and_prepare()
  return data


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_catalog_split_reads_back_exactly(tmp_path, name):
  data = _write_fixture(name, str(tmp_path), {"train": 12, "test": 5})
  assert tfds_catalog.is_prepared(name, str(tmp_path))
  for split, (want_x, want_y) in data.items():
    x, y = tfds_catalog.load(name, split, str(tmp_path))
    assert x.shape == (len(want_y),) + tfds_catalog.CATALOG[name][0] and x.dtype == np.float32
    assert y.dtype == np.int32
    order = np.argsort(np.round(x[:, 0, 0, 0] * 255).astype(int))
    np.testing.assert_array_equal(np.round(x[order] * 255).astype(np.uint8), want_x)
    np.testing.assert_array_equal(y[order], want_y)
  x, y = tfds_catalog.load(name, "train", str(tmp_path), limit=4)
  assert x.shape[0] == y.shape[0] == 4


def test_missing_unknown_and_corrupt_datasets_are_named(tmp_path):
  empty = str(tmp_path / "empty")
  with pytest.raises(tfds_catalog.CatalogError, match=r"'mnist' is not prepared in .*empty.*tfds build mnist"):
    tfds_catalog.load("mnist", "train", empty)
  with pytest.raises(tfds_catalog.CatalogError, match="unknown catalog image dataset 'svhn'"):
    tfds_catalog.load("svhn", "train", empty)
  data_dir = str(tmp_path / "data")
  _write_fixture("mnist", data_dir, {"train": 6, "test": 3})
  with pytest.raises(tfds_catalog.CatalogError, match="no split 'validation'"):
    tfds_catalog.load("mnist", "validation", data_dir)
  (path,) = glob.glob(os.path.join(data_dir, "mnist", "*", "mnist-train.array_record*"))
  with open(path, "wb") as f:
    f.write(b"not an array_record file")
  with pytest.raises(tfds_catalog.CatalogError, match="mnist-train.array_record"):
    tfds_catalog.load("mnist", "train", data_dir)
  os.remove(path)
  with pytest.raises(tfds_catalog.CatalogError, match="no array_record files for split 'train'"):
    tfds_catalog.load("mnist", "train", data_dir)


def _load_catalog(data_dir: str, max_images: int, num_classes: int = 10):
  config = fm_config.get_config("smoke,dataset=mnist")
  config.data_dir, config.max_images = data_dir, max_images
  config.flow.num_classes = config.features.num_classes = num_classes
  return fm_training.load_data(config, fm_config.hparams_of(config))


def test_catalog_class_checks_name_max_images_or_data_dir(tmp_path):
  """The npz file's class checks run on TFDS data too, before any training, naming the key that chose the rows."""
  data_dir = str(tmp_path / "data")
  _write_fixture("mnist", data_dir, {"train": 160, "test": 40})  # 14..27 images per class
  for k in (10, 7):  # 7: what the flow.num_classes error advised before, which ended in an empty feature-test split
    with pytest.raises(errors.DataError, match=r"^'max_images': dataset 'mnist' in data_dir .*data \(max_images = 3: "
                                               r"the first 3 images of each split\): labels: classes \[.*\] of 0..9 "
                                               r"have no image; raise max_images \(0 reads every image\)"):
      _load_catalog(data_dir, 3, k)
  with pytest.raises(errors.DataError, match=r"^'max_images': .*: classes \[.*\] have fewer than 10 images .*every "
                                             r"class needs 10 for the protocol's stratified split; raise max_images"):
    _load_catalog(data_dir, 40)
  data = _load_catalog(data_dir, 0)
  assert all(set(y.tolist()) == set(range(10)) for y in (data.gen_y, data.feat_y, data.test_y))
  small = str(tmp_path / "small")
  _write_fixture("mnist", small, {"train": 40, "test": 10})
  with pytest.raises(errors.DataError, match=r"^'data_dir': dataset 'mnist' in data_dir .*small: labels: classes "
                                             r"\[.*\] have fewer than 10 images .*too small; "
                                             r"prepare it with `tfds build mnist"):
    _load_catalog(small, 0)
