"""Building this project's TFDS datasets from local files, quietly.

Every dataset here is built from files already on the machine (a wheel's data,
staged shards, a user's file): nothing is downloaded. TFDS's
``download_and_prepare`` nevertheless prints "Downloading and preparing
dataset ... to <data_dir>" on stdout; :func:`prepare` sends those lines to the
log instead, so that a notebook's stored output or a launcher's table holds
no machine path and no misleading word.
"""

from __future__ import annotations

import contextlib
import io

from absl import logging
import tensorflow_datasets as tfds


class LocalInfo(tfds.core.DatasetInfo):
  """The ``DatasetInfo`` of a dataset built here from local files.

  Over a ``data_dir`` that holds no prepared copy, TFDS's builder constructor
  calls :meth:`initialize_from_bucket`, which makes an empty
  ``tempfile.mkdtemp("tfds")`` directory to fetch metadata from TFDS's
  bucket and never removes it (the bucket holds nothing of these datasets,
  and is never read here). It does nothing here.
  """

  def initialize_from_bucket(self) -> None:
    return None


def prepare(builder: tfds.core.DatasetBuilder, manual_dir: str | None = None) -> tfds.core.DatasetBuilder:
  """Runs ``builder.download_and_prepare`` (from ``manual_dir`` if given); TFDS's messages go to the log."""
  config = tfds.download.DownloadConfig(manual_dir=manual_dir) if manual_dir else None
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    builder.download_and_prepare(download_config=config)
  for line in out.getvalue().splitlines():
    if line.strip():
      logging.info("tfds: %s", line.strip())
  return builder
