"""Full MNIST and CIFAR-10 through their TFDS catalog builders, when the user has prepared them.

Nothing is downloaded here. Prepare a dataset once, on a machine with network
access, in the array_record format, e.g.::

  tfds build mnist --data_dir=DATA --file_format=array_record
  tfds build cifar10 --data_dir=DATA --file_format=array_record

(or ``tfds.builder("mnist", data_dir=DATA, file_format="array_record")
.download_and_prepare()``), then copy ``DATA`` to the machine that trains.
:func:`load` reads a split with ``builder.as_data_source`` (no TensorFlow: the
PNG images are decoded by TFDS with Pillow) and returns float images in
[0, 1]. A dataset that is missing, prepared in another file format, or whose
files do not decode raises :class:`CatalogError` naming the dataset, the
directory and, where known, the file or the row.
"""

from __future__ import annotations

import glob
import os

import numpy as np

# name -> (image shape (H, W, channels), classes, TFDS splits)
CATALOG = {
    "mnist": ((28, 28, 1), 10, ("train", "test")),
    "cifar10": ((32, 32, 3), 10, ("train", "test")),
}
PREPARE_HINT = "prepare it with `tfds build {name} --data_dir={data_dir} --file_format=array_record`"
READ_CHUNK = 1024  # rows per __getitems__ call


class CatalogError(ValueError):
  """A catalog dataset is missing, in the wrong format or corrupt (the message names what and where)."""


def _has_info(name: str, data_dir: str) -> bool:
  """Whether ``data_dir`` holds the ``dataset_info.json`` of the builder's default version of ``name``.

  Asked before a builder is constructed: over a ``data_dir`` without it, TFDS's
  constructor makes an empty ``tmp*tfds`` directory in the system's
  temporary directory (to fetch metadata from its bucket) and never removes it.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  # heavy; only when reading

  if name not in CATALOG:
    raise CatalogError(f"unknown catalog image dataset {name!r}; allowed: {sorted(CATALOG)}")
  return os.path.exists(os.path.join(data_dir, name, str(tfds.builder_cls(name).VERSION), "dataset_info.json"))


def _builder(name: str, data_dir: str):
  """The catalog builder of ``name`` over ``data_dir`` (which :func:`_has_info` has found prepared)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  # heavy; only when reading

  try:
    return tfds.builder(name, data_dir=data_dir)
  except Exception as e:  # a malformed dataset_info.json surfaces here
    raise CatalogError(f"TFDS dataset {name!r} in {data_dir} cannot be opened ({type(e).__name__}: {e}); "
                       + PREPARE_HINT.format(name=name, data_dir=data_dir)) from e


def _prepared(name: str, data_dir: str):
  """The builder of ``name`` over ``data_dir`` if it is prepared there, else ``None``."""
  if not _has_info(name, data_dir):
    return None
  b = _builder(name, data_dir)
  return b if b.is_prepared() else None


def is_prepared(name: str, data_dir: str) -> bool:
  """Whether ``name`` has been prepared in ``data_dir``."""
  return _prepared(name, data_dir) is not None


def _source(name: str, split: str, data_dir: str):
  b = _prepared(name, data_dir)
  if b is None:
    raise CatalogError(f"TFDS dataset {name!r} is not prepared in {data_dir} (nothing is downloaded); "
                       + PREPARE_HINT.format(name=name, data_dir=data_dir))
  if split not in CATALOG[name][2]:
    raise CatalogError(f"TFDS dataset {name!r} has no split {split!r}; allowed: {list(CATALOG[name][2])}")
  files = sorted(glob.glob(os.path.join(str(b.data_path), f"{name}-{split}.array_record*")))
  if not files:
    raise CatalogError(f"TFDS dataset {name!r} in {b.data_path} has no array_record files for split {split!r} "
                       "(prepared in another file format?); " + PREPARE_HINT.format(name=name, data_dir=data_dir))
  try:
    return b.as_data_source(split), files
  except Exception as e:
    raise CatalogError(f"TFDS dataset {name!r}, split {split!r}: cannot open {files} "
                       f"({type(e).__name__}: {e})") from e


def load(name: str, split: str, data_dir: str, *, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """``(images float32 [N, H, W, C] in [0, 1], labels int32 [N])`` of a prepared catalog split.

  Args:
    name: ``"mnist"`` or ``"cifar10"``.
    split: ``"train"`` or ``"test"``.
    data_dir: the TFDS data directory the dataset was prepared in.
    limit: read only the first ``limit`` rows (``None``: all).

  Raises:
    CatalogError: unknown name or split, not prepared, not array_record, or
      a file / row that does not decode (named in the message).
  """
  source, files = _source(name, split, data_dir)
  shape, classes, _ = CATALOG[name]
  n = len(source) if limit is None else min(limit, len(source))
  images = np.empty((n,) + shape, np.float32)
  labels = np.empty((n,), np.int32)
  for start in range(0, n, READ_CHUNK):
    keys = list(range(start, min(n, start + READ_CHUNK)))
    try:
      rows = source.__getitems__(keys)
    except Exception as e:
      raise CatalogError(f"TFDS dataset {name!r}, split {split!r}: rows {keys[0]}..{keys[-1]} of {files} "
                         f"do not decode ({type(e).__name__}: {e})") from e
    for i, row in zip(keys, rows):
      img = np.asarray(row["image"])
      if img.shape != shape:
        raise CatalogError(f"TFDS dataset {name!r}, split {split!r}, row {i}: image has shape {img.shape}; "
                           f"expected {shape}")
      images[i] = img.astype(np.float32) / 255.0
      labels[i] = int(row["label"])
  if n and (labels.min() < 0 or labels.max() >= classes):
    raise CatalogError(f"TFDS dataset {name!r}, split {split!r}: labels outside [0, {classes})")
  return images, labels
