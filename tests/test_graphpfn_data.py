"""Graph data: karate club, Planetoid-format files (real format, corrupted variants), the TFDS prior builder."""

import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from datasets.graphs import karate
from datasets.graphs import planetoid
from datasets.graphs import prior_builder


def test_karate_club():
  d = karate.load()
  assert d["num_nodes"] == 34 and len(d["senders"]) == 78
  assert np.all(d["senders"] < d["receivers"]) and set(np.unique(d["y"])) == {0, 1}
  assert d["y"][0] == 0 and d["y"][33] == 1  # Mr. Hi and the officer


def _fixture(tmp_path, name="tiny"):
  rng = np.random.default_rng(0)
  n, d = 30, 5
  x = (rng.random((n, d)) < 0.3).astype(np.float32)
  y = rng.integers(0, 3, n)
  edges = [(i, (i + 1) % n) for i in range(n)] + [(0, 15), (3, 22)]
  s, r = np.array(edges).T
  test = np.arange(20, 30)
  directory = str(tmp_path / "planetoid")
  planetoid.write(directory, name, x=x, y=y, senders=s, receivers=r, num_train=6, test_index=test)
  return directory, x, y, edges


def test_planetoid_roundtrip_in_the_real_format(tmp_path):
  directory, x, y, edges = _fixture(tmp_path)
  with open(os.path.join(directory, "ind.tiny.allx"), "rb") as f:
    assert type(pickle.load(f)).__name__ == "csr_matrix"  # scipy sparse rows, as in the originals
  d = planetoid.load(directory, "tiny")
  assert d["num_nodes"] == 30
  np.testing.assert_array_equal(d["x"], x)
  np.testing.assert_array_equal(d["y"], y)
  assert len(d["senders"]) == len(edges)
  np.testing.assert_array_equal(d["test_index"], np.arange(20, 30))
  np.testing.assert_array_equal(d["train_index"], np.arange(6))


def _overwrite(directory, part, value):
  with open(os.path.join(directory, f"ind.tiny.{part}"), "wb") as f:
    pickle.dump(value, f, protocol=2)


def test_planetoid_bad_files_are_named(tmp_path):
  directory, *_ = _fixture(tmp_path)
  path = os.path.join(directory, "ind.tiny.graph")
  with open(path, "rb") as f:
    raw = f.read()
  with open(path, "wb") as f:
    f.write(raw[: len(raw) // 2])
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"ind\.tiny\.graph.*'graph'.*truncated"):
    planetoid.load(directory, "tiny")
  directory, *_ = _fixture(tmp_path / "b")
  _overwrite(directory, "graph", {0: [1, 57]})
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"ind\.tiny\.graph.*\(0, 57\) past the node count 30"):
    planetoid.load(directory, "tiny")
  directory, *_ = _fixture(tmp_path / "c")
  _overwrite(directory, "ally", np.zeros((3, 3), np.float32))
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"ind\.tiny\.ally.*'ally' has 3 rows but 'allx' has 20"):
    planetoid.load(directory, "tiny")
  directory, *_ = _fixture(tmp_path / "d")
  with open(os.path.join(directory, "ind.tiny.test.index"), "a") as f:
    f.write("7\n")
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"test\.index"):
    planetoid.load(directory, "tiny")
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"ind\.other\.x.*missing"):
    planetoid.load(directory, "other")
  directory, *_ = _fixture(tmp_path / "e")
  os.remove(os.path.join(directory, "ind.tiny.test.index"))
  os.mkdir(os.path.join(directory, "ind.tiny.test.index"))  # a directory where the file should be
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"test\.index: cannot read array 'test.index'"):
    planetoid.load(directory, "tiny")


def test_planetoid_bad_adjacency_entries_are_named(tmp_path):
  """An adjacency entry that is not a list, or a neighbour id that is not a node id, names the file, node and entry."""
  for i, (graph, expected) in enumerate([
      ({0: 5, 1: [2]}, r"ind\.tiny\.graph: array 'graph' has entry 5 \(int\) at node 0; each entry is a list"),
      ({0: ["a"]}, r"ind\.tiny\.graph: array 'graph' has neighbour 'a' at node 0, which is not an integer node id"),
      ({3: [2.5]}, r"ind\.tiny\.graph: array 'graph' has neighbour 2\.5 at node 3, which is not an integer"),
      ({"x": [1]}, r"ind\.tiny\.graph: array 'graph' has node key 'x', which is not an integer node id"),
      ({0: [-1]}, r"ind\.tiny\.graph: array 'graph' has edge \(0, -1\) with a negative node id"),
  ]):
    directory, *_ = _fixture(tmp_path / str(i))
    _overwrite(directory, "graph", graph)
    with pytest.raises(planetoid.PlanetoidFormatError, match=expected):
      planetoid.load(directory, "tiny")
  directory, *_ = _fixture(tmp_path / "ok")
  _overwrite(directory, "graph", {0: (1, 2.0), np.int64(3): np.array([4]), 5: {6}})  # tuples, arrays, sets are lists
  d = planetoid.load(directory, "tiny")
  np.testing.assert_array_equal(np.c_[d["senders"], d["receivers"]], [[0, 1], [0, 2], [3, 4], [5, 6]])


def test_planetoid_huge_test_id_is_refused_before_allocating(tmp_path):
  """A test id far past the rows would size the feature matrix (1e12 nodes: terabytes); it is refused by name."""
  directory, *_ = _fixture(tmp_path)
  with open(os.path.join(directory, "ind.tiny.test.index"), "w") as f:
    f.writelines(f"{i}\n" for i in [*range(20, 29), 10 ** 12])
  with pytest.raises(planetoid.PlanetoidFormatError,
                     match=r"ind\.tiny\.test\.index: array 'test.index' has id 1000000000000, past .* = 40"):
    planetoid.load(directory, "tiny")
  with open(os.path.join(directory, "ind.tiny.test.index"), "w") as f:
    f.writelines(f"{i}\n" for i in [*range(20, 29), 10 ** 30])  # past int64
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"test\.index: array 'test.index' has id 10+, too large"):
    planetoid.load(directory, "tiny")
  with open(os.path.join(directory, "ind.tiny.test.index"), "w") as f:
    f.writelines(f"{i}\n" for i in [*range(20, 29), 39])  # isolated test nodes (as CiteSeer's) pad the range
  d = planetoid.load(directory, "tiny")
  assert d["num_nodes"] == 40 and (d["y"][29:39] == -1).all() and not d["x"][29:39].any()


def test_planetoid_sparse_matrices_declaring_huge_shapes_are_refused_before_allocating(tmp_path):
  """A SciPy sparse matrix declares its shape apart from its entries: 1e8 rows x 1e4 columns (3.6 TiB dense) in a
  few bytes is refused by name before any allocation; sparse label rows are read as the one-hot rows they hold."""
  directory, x, y, _ = _fixture(tmp_path)
  rows, cols = 10 ** 8, 10 ** 4
  _overwrite(directory, "allx", sp.csr_matrix((rows, cols), dtype=np.float32))
  _overwrite(directory, "ally", sp.csr_matrix((rows, 3), dtype=np.float32))
  for part, shape in (("x", (6, cols)), ("tx", (10, cols))):
    _overwrite(directory, part, sp.csr_matrix(shape, dtype=np.float32))
  with open(os.path.join(directory, "ind.tiny.test.index"), "w") as f:
    f.writelines(f"{rows + i}\n" for i in range(10))
  with pytest.raises(planetoid.PlanetoidFormatError,
                     match=r"ind\.tiny\.allx: .* make 100000010 nodes x 10000 feature and 3 label columns, "
                           r"3726\.4 GiB as dense float32, over half this machine's memory"):
    planetoid.load(directory, "tiny")
  directory, *_ = _fixture(tmp_path / "sparse_labels")
  onehot = np.eye(3, dtype=np.float32)[y]
  _overwrite(directory, "ally", sp.csr_matrix(onehot[:20]))
  _overwrite(directory, "ty", sp.lil_matrix(onehot[20:]))
  np.testing.assert_array_equal(planetoid.load(directory, "tiny")["y"], y)
  _overwrite(directory, "ty", np.array([["a", "b", "c"]] * 10, object))
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"ind\.tiny\.ty: array 'ty' is not numeric"):
    planetoid.load(directory, "tiny")


def test_planetoid_nan_features_and_labels_are_named(tmp_path):
  """A NaN feature or label is refused, naming file, row and column.

  Standardising would have zeroed a feature's column; a label row holding NaN
  would have been read as unlabelled.
  """
  directory, x, *_ = _fixture(tmp_path)
  allx = x[:20].copy()
  allx[4, 2] = np.nan
  _overwrite(directory, "allx", sp.csr_matrix(allx))
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"ind\.tiny\.allx.*1 NaN or infinite.*row 4, column 2"):
    planetoid.load(directory, "tiny")
  directory, *_ = _fixture(tmp_path / "labels")
  ty = np.eye(3)[np.zeros(10, int)]
  ty[7, 1] = np.inf
  _overwrite(directory, "ty", ty)
  with pytest.raises(planetoid.PlanetoidFormatError, match=r"ind\.tiny\.ty.*1 NaN or infinite.*row 7, column 1"):
    planetoid.load(directory, "tiny")


def test_planetoid_write_keeps_unlabelled_nodes_unlabelled(tmp_path):
  """Label -1 is written as an all-zero one-hot row and read back as -1 (not as the last class)."""
  rng = np.random.default_rng(1)
  n = 12
  y = rng.integers(0, 3, n)
  y[[2, 9]] = -1
  s, r = np.arange(n - 1), np.arange(1, n)
  directory = str(tmp_path / "g")
  planetoid.write(directory, "tiny", x=rng.random((n, 4)), y=y, senders=s, receivers=r, num_train=4,
                  test_index=np.arange(8, n))
  np.testing.assert_array_equal(planetoid.load(directory, "tiny")["y"], y)
  with pytest.raises(ValueError, match=r"label -2 \(node 5\)"):
    planetoid.write(directory, "bad", x=np.zeros((n, 4)), y=np.where(np.arange(n) == 5, -2, 0), senders=s,
                    receivers=r, num_train=4, test_index=np.arange(8, n))


@pytest.mark.parametrize("change, match", [
    ({"receivers": np.arange(1, 5)}, "senders has 11 edges but receivers has 4"),
    ({"senders": np.r_[np.arange(10), 12]}, r"senders\[10\] = 12 is not a node id \(0..11\)"),
    ({"receivers": np.r_[np.arange(1, 11), -1]}, r"receivers\[10\] = -1 is not a node id"),
    ({"y": np.arange(12) % 3 + 0.0}, "y must hold integers; its dtype is float64"),
    ({"x": np.zeros((11, 4))}, r"x must be \[nodes, features\] with one row per label of y \(12\)"),
    ({"x": np.where(np.arange(48).reshape(12, 4) == 9, np.nan, 0.0)}, "x: node 2 has a non-finite feature"),
    ({"num_train": 9}, "num_train=9: the training nodes 0..num_train-1 must not be test nodes"),
    ({"test_index": np.arange(2, 6)}, "test_index: test node 2 precedes node 11"),
    ({"test_index": np.array([8, 8, 9])}, "test_index must be distinct node ids in 0..11"),
    ({"senders": np.arange(11.0)}, "senders must hold integers"),
])
def test_planetoid_write_names_a_bad_argument_and_writes_nothing(tmp_path, change, match):
  """Each argument of ``planetoid.write`` is checked against the others before a file is written."""
  n = 12
  args = {"x": np.zeros((n, 4)), "y": np.arange(n) % 3, "senders": np.arange(n - 1), "receivers": np.arange(1, n),
          "num_train": 4, "test_index": np.arange(8, n)} | change
  with pytest.raises(ValueError, match=match):
    planetoid.write(str(tmp_path / "g"), "g", **args)
  assert not (tmp_path / "g").exists()


def test_prior_builder_writes_and_reads_back(tmp_path):
  rng = np.random.default_rng(0)
  examples = []
  for i in range(3):
    n = 5 + i
    examples.append((i, {"senders": np.arange(n - 1), "receivers": np.arange(1, n), "x": rng.normal(size=(n, 2 + i)),
                         "y": rng.integers(0, 2, n), "train_mask": rng.random(n) < 0.5, "task": 1, "num_classes": 2}))
  manual, data = str(tmp_path / "staged"), str(tmp_path / "data")
  prior_builder.stage(manual, 0, examples[:2])
  prior_builder.stage(manual, 1, examples[2:])
  prior_builder.prepare(data, manual)
  source = prior_builder.data_source(data)
  assert len(source) == 3
  for i, ex in examples:
    got = source[i]
    np.testing.assert_allclose(got["x"], ex["x"].astype(np.float32))
    np.testing.assert_array_equal(got["senders"], ex["senders"])
    assert int(got["task"]) == 1
  with pytest.raises(FileNotFoundError, match="not prepared"):
    prior_builder.data_source(str(tmp_path / "empty"))
