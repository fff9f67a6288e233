"""The TFDS builders leave nothing in the temporary directory when asked about an empty data_dir."""

import os
import tempfile

import pytest

from datasets.graphs import prior_builder
from datasets.images import builder as image_builder
from datasets.images import tfds_catalog
from datasets.offline_rl import builder as offline_builder

BUILDERS = {
    "images": lambda d: image_builder.builder(sorted(image_builder.DATASETS)[0], d),
    "offline_rl": lambda d: offline_builder.builder("hopper", "medium", d),
    "graphpfn_prior": prior_builder.builder,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_builder_over_an_unprepared_data_dir_leaves_no_temporary_directory(name, tmp_path, monkeypatch):
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch))
  b = BUILDERS[name](str(tmp_path / "data"))
  assert not b.is_prepared()
  assert os.listdir(scratch) == []  # TFDS's own DatasetInfo makes an empty tmp*tfds directory here


@pytest.mark.parametrize("name", sorted(tfds_catalog.CATALOG))
def test_a_catalog_dataset_missing_from_data_dir_leaves_no_temporary_directory(name, tmp_path, monkeypatch):
  """TFDS's own builders (full MNIST, CIFAR-10) are not constructed until their dataset_info.json is found."""
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch))
  data_dir = str(tmp_path / "data")
  assert not tfds_catalog.is_prepared(name, data_dir)
  with pytest.raises(tfds_catalog.CatalogError, match=f"{name!r} is not prepared in"):
    tfds_catalog.load(name, "train", data_dir)
  assert os.listdir(scratch) == []
