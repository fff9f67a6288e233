"""A user's labelled images from an ``.npz`` file, checked before any training.

The file holds ``images`` ``[N, H, W]`` or ``[N, H, W, C]`` and ``labels``
``[N]`` (written with ``np.savez(path, images=..., labels=...)``); a
channels-first ``[N, C, H, W]`` array (at most :data:`MAX_CHANNELS` rows and
more channels) is refused with the transpose that fixes it. Images are
``uint8`` in 0..255 (divided by 255) or numbers already in [0, 1]; labels are
integers ``0 .. K-1`` with every class present. :func:`load` returns float32
images ``[N, H, W, C]`` in [0, 1] and int32 labels; every way the file can be
wrong is an :class:`ImageFileError` naming the file, the array and, for a bad
value, its index.
"""

from __future__ import annotations

import os

import numpy as np

from datasets import npz_files

ARRAYS = ("images", "labels")
MAX_CHANNELS = 4  # grey, grey + alpha, RGB, RGBA: an image [N, H, W, C] with H <= 4 < C is taken as channels-first
HOW = ("write it with np.savez(path, images=images, labels=labels): images [N, H, W] or [N, H, W, C], "
       "uint8 or in [0, 1]; labels [N] integers 0..K-1")


class ImageFileError(npz_files.NpzFileError):
  """A user's image file is malformed; the message names the file and the array."""


def check(images, labels, *, where: str = "", min_per_class: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """``(images float32 [N, H, W, C] in [0, 1], labels int32 [N])``, or an :class:`ImageFileError`.

  Args:
    images: ``[N, H, W]`` or ``[N, H, W, C]``, ``uint8`` or numbers in [0, 1].
    labels: ``[N]`` integers ``0 .. K-1``, every class present.
    where: what to name in errors (a file path).
    min_per_class: the fewest images a class may have.
  """
  pre = f"{where}: " if where else ""
  x, y = np.asarray(images), np.asarray(labels)
  if x.dtype.kind not in "biuf":
    raise ImageFileError(f"{pre}array 'images' has dtype {x.dtype}; numbers are needed")
  if x.ndim not in (3, 4):
    raise ImageFileError(f"{pre}array 'images' must have shape [N, H, W] or [N, H, W, C]; got {x.shape}")
  if x.ndim == 3:
    x = x[..., None]
  if 0 in x.shape:
    raise ImageFileError(f"{pre}array 'images' has shape {x.shape}: no images, or an empty side")
  if x.shape[1] <= MAX_CHANNELS < x.shape[3]:
    raise ImageFileError(f"{pre}array 'images' has shape {x.shape}: height {x.shape[1]} and {x.shape[3]} channels, "
                         f"which reads as channels-first [N, C, H, W]; images are [N, H, W, C] "
                         "(store np.moveaxis(images, 1, -1))")
  if x.dtype == np.uint8:
    x = x.astype(np.float32) / 255.0
  else:
    bad = ~((x >= 0) & (x <= 1))  # NaN fails both; compared in the file's dtype, without a float64 copy
    if bad.any():
      idx = tuple(int(i) for i in np.argwhere(bad)[0])
      raise ImageFileError(f"{pre}array 'images' has the value {float(x[idx])!r} at index {idx}; images of dtype "
                           f"{x.dtype} must lie in [0, 1] (store uint8 0..255, or divide by the maximum)")
    x = x.astype(np.float32)
  if y.dtype.kind not in "iu":
    raise ImageFileError(f"{pre}array 'labels' has dtype {y.dtype}; integer class ids 0..K-1 are needed")
  if y.shape != (x.shape[0],):
    raise ImageFileError(f"{pre}array 'labels' must have shape [N] = ({x.shape[0]},) like 'images'; got {y.shape}")
  if (y < 0).any():
    i = int(np.argmax(y < 0))
    raise ImageFileError(f"{pre}array 'labels' has the negative class {int(y[i])} at index {i}")
  if int(y.max()) >= len(y):  # classes 0..K-1 without gaps need K <= N; checked before counting K bins
    i = int(np.argmax(y))
    raise ImageFileError(f"{pre}array 'labels' has the class {int(y[i])} at index {i}, but {len(y)} images cannot "
                         f"number classes 0..{int(y[i])} without gaps; number the classes 0..K-1")
  problem = class_problem(y, min_per_class=min_per_class)
  if problem:
    gaps = "; number the classes 0..K-1 without gaps" if "no image" in problem else ""
    raise ImageFileError(f"{pre}array 'labels'{problem}{gaps}")
  return x, y.astype(np.int32)


def class_problem(labels, *, num_classes: int = 0, min_per_class: int = 1) -> str:
  """What keeps ``labels`` (non-negative ints) from classes ``0 .. K-1`` that a stratified split can use ("": none).

  A class with no image (``K``: ``num_classes`` if given, else the largest
  label + 1), a single class (the feature network of FID / KID is a
  classifier), or a class with fewer than ``min_per_class`` images. The text
  follows the array's name in an error (``"array 'labels'" + problem``).
  """
  counts = np.bincount(np.asarray(labels, np.int64), minlength=num_classes)
  missing = np.flatnonzero(counts == 0).tolist()
  if missing:
    return f": classes {missing[:10]} of 0..{len(counts) - 1} have no image"
  if len(counts) < 2:
    return " has one class; the feature network (FID / KID) is a classifier and needs at least two"
  few = np.flatnonzero(counts < min_per_class).tolist()
  if few:
    return (f": classes {few[:10]} have fewer than {min_per_class} images ({counts[few[:10]].tolist()}); every "
            f"class needs {min_per_class} for the protocol's stratified split")
  return ""


def load(path: str, *, min_per_class: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """The checked ``(images [N, H, W, C] float32 in [0, 1], labels [N] int32)`` of the file at ``path``."""
  path = os.path.expanduser(path)
  arrays = npz_files.read_arrays(path, ARRAYS, how=HOW, error=ImageFileError)
  return check(arrays["images"], arrays["labels"], where=path, min_per_class=min_per_class)
