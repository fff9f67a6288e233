"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from their original files.

The format of Yang, Cohen & Salakhutdinov (2016), "Revisiting semi-supervised
learning with graph embeddings", as used by Kipf & Welling (2017):
``ind.<name>.{x, y, tx, ty, allx, ally, graph}`` are pickles (scipy sparse
feature rows, one-hot label rows, a dict of adjacency lists) and
``ind.<name>.test.index`` lists the test nodes' ids, one per line. Rows of
``allx``/``ally`` are nodes ``0..len(allx)-1``; row ``i`` of ``tx``/``ty``
is node ``sorted(test.index)[i]``; CiteSeer's isolated test nodes (ids in the
test range without a row) get zero features and no label, as in Kipf & Welling.

No download happens here: put the files in a directory and call :func:`load`.
A truncated or inconsistent file fails with :class:`PlanetoidFormatError`
naming the file and the array. ``<name>`` is ``cora``, ``citeseer`` or
``pubmed`` for the published graphs, and any :data:`NAME` for a graph of
your own written by :func:`write`.
"""

from __future__ import annotations

import operator
import os
import pickle
import re
from typing import Mapping

import numpy as np
import scipy.sparse as sp

PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # a graph's name: the <name> of its ind.<name>.* files


class PlanetoidFormatError(ValueError):
  """A Planetoid file that is missing, truncated or inconsistent with the others."""


def name_problem(name: str) -> str | None:
  """Why ``name`` cannot name a graph's files (``None`` if it can): letters, digits, ``_`` and ``-``."""
  if not isinstance(name, str) or not NAME.fullmatch(name):
    return (f"graph name {name!r}: letters, digits, '_' and '-' only, starting with a letter or digit "
            "(it is the <name> of the ind.<name>.* files)")
  return None


def _path(directory: str, name: str, part: str) -> str:
  why = name_problem(name)
  if why:
    raise PlanetoidFormatError(why)
  return os.path.join(directory, f"ind.{name}.{part}")


def paths(directory: str, name: str) -> list[str]:
  """The files that :func:`load` reads: ``ind.<name>.<part>`` for each of ``PARTS``, then ``test.index``."""
  return [_path(directory, name, part) for part in (*PARTS, "test.index")]


def _read(directory: str, name: str, part: str):
  path = _path(directory, name, part)
  if not os.path.exists(path):
    raise PlanetoidFormatError(f"{path}: missing (array {part!r})")
  try:
    with open(path, "rb") as f:
      return pickle.load(f, encoding="latin1")
  except Exception as e:  # pickle raises many kinds on a truncated file
    raise PlanetoidFormatError(f"{path}: cannot read array {part!r} (truncated or not a pickle: {type(e).__name__}: {e})") from e


def _rows(directory, name, part, a) -> int:
  if not hasattr(a, "shape") or len(a.shape) != 2:
    raise PlanetoidFormatError(f"{_path(directory, name, part)}: array {part!r} is not a 2-D matrix")
  return a.shape[0]


def _dense(directory: str, name: str, part: str, a) -> np.ndarray:
  """Array ``part`` (SciPy sparse, as Planetoid's ``x``/``allx``/``tx``, or dense) as a finite float32 matrix.

  Raises:
    PlanetoidFormatError: naming the file and the array, for a non-numeric
      array or the first NaN or infinite entry (standardising would zero a
      feature's column; a label row would be read as unlabelled).
  """
  try:
    x = np.asarray(a.todense() if sp.issparse(a) else a, np.float32)
  except (TypeError, ValueError) as e:
    raise PlanetoidFormatError(f"{_path(directory, name, part)}: array {part!r} is not numeric ({e})") from e
  bad = np.argwhere(~np.isfinite(x))
  if len(bad):
    row, col = bad[0]
    raise PlanetoidFormatError(f"{_path(directory, name, part)}: array {part!r} has {len(bad)} NaN or infinite "
                               f"entries (first: row {row}, column {col}, value {x[row, col]})")
  return x


def _memory_bytes() -> int:
  """This machine's physical memory (0 where the platform does not say)."""
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (AttributeError, ValueError, OSError):
    return 0


def _check_size(directory: str, name: str, num_nodes: int, width: int, classes: int) -> None:
  """Refuses shapes whose dense float32 features and labels would not fit in half this machine's memory.

  A SciPy sparse matrix declares its shape apart from its entries, so a small file can declare billions of rows.
  """
  need, have = 4 * num_nodes * (width + classes), _memory_bytes()
  if have and need > have // 2:
    raise PlanetoidFormatError(
        f"{_path(directory, name, 'allx')}: arrays 'allx', 'tx' and 'test.index' make {num_nodes} nodes x {width} "
        f"feature and {classes} label columns, {need / 2 ** 30:.1f} GiB as dense float32, over half this machine's "
        f"memory ({have / 2 ** 30:.1f} GiB); check the shapes the matrices declare")


def _test_ids(path: str) -> np.ndarray:
  """The ids of ``ind.<name>.test.index``, one integer a line (int64)."""
  try:
    with open(path) as f:
      ids = [int(line) for line in f if line.strip()]
  except FileNotFoundError as e:
    raise PlanetoidFormatError(f"{path}: missing (array 'test.index')") from e
  except OSError as e:  # a directory, no permission, ...
    raise PlanetoidFormatError(f"{path}: cannot read array 'test.index' ({e.strerror or e})") from e
  except ValueError as e:
    raise PlanetoidFormatError(f"{path}: array 'test.index' has a line that is not an integer ({e})") from e
  big = [i for i in ids if abs(i) >= 2 ** 62]
  if big:
    raise PlanetoidFormatError(f"{path}: array 'test.index' has id {big[0]}, too large to be a node id")
  return np.array(ids, np.int64)


def _short(value) -> str:
  r = repr(value)
  return r if len(r) <= 60 else r[:57] + "..."


def _node_id(value) -> int | None:
  """``value`` as a node id, or ``None`` if it is not an integer (a string, ``2.5``, ``None``, a list, ...)."""
  if isinstance(value, (float, np.floating)):
    return int(value) if np.isfinite(value) and float(value).is_integer() else None
  try:
    return operator.index(value)
  except TypeError:
    return None


def _edges(path: str, graph, num_nodes: int) -> np.ndarray:
  """``[E, 2]`` int32 undirected edges ``u < v`` (sorted, no self-loops) of ``graph``, a dict of adjacency lists."""
  if not isinstance(graph, Mapping):
    raise PlanetoidFormatError(f"{path}: array 'graph' is not a dict of adjacency lists")
  edges = set()
  for key, nbrs in graph.items():
    u = _node_id(key)
    if u is None:
      raise PlanetoidFormatError(f"{path}: array 'graph' has node key {_short(key)}, which is not an integer node id")
    if (not isinstance(nbrs, (list, tuple, set, frozenset, np.ndarray))
        or isinstance(nbrs, np.ndarray) and nbrs.ndim == 0):
      raise PlanetoidFormatError(f"{path}: array 'graph' has entry {_short(nbrs)} ({type(nbrs).__name__}) at node "
                                 f"{u}; each entry is a list of neighbour ids")
    for nbr in nbrs:
      v = _node_id(nbr)
      if v is None:
        raise PlanetoidFormatError(f"{path}: array 'graph' has neighbour {_short(nbr)} at node {u}, which is not an "
                                   "integer node id")
      if u < 0 or v < 0:
        raise PlanetoidFormatError(f"{path}: array 'graph' has edge ({u}, {v}) with a negative node id")
      if u >= num_nodes or v >= num_nodes:
        raise PlanetoidFormatError(f"{path}: array 'graph' has edge ({u}, {v}) past the node count {num_nodes}")
      if u != v:
        edges.add((min(u, v), max(u, v)))
  return np.array(sorted(edges), np.int32).reshape(-1, 2)


def load(directory: str, name: str) -> dict:
  """Reads ``ind.<name>.*`` from ``directory``.

  Returns:
    ``senders``/``receivers`` (int32, each undirected edge once, ``u < v``),
    ``num_nodes``, ``x`` (``[N, D]`` float32), ``y`` (``[N]`` int32, -1 for
    nodes without a label), ``train_index`` (the ``len(y)`` labelled training
    nodes), ``val_index`` (the next 500) and ``test_index`` (sorted).

  Raises:
    PlanetoidFormatError: naming the file and the array at fault.
  """
  arrays = {p: _read(directory, name, p) for p in PARTS}
  idx_path = _path(directory, name, "test.index")
  test = _test_ids(idx_path)
  rows = {p: _rows(directory, name, p, arrays[p]) for p in PARTS if p != "graph"}
  for feat, lab in (("x", "y"), ("allx", "ally"), ("tx", "ty")):
    if rows[feat] != rows[lab]:
      raise PlanetoidFormatError(
          f"{_path(directory, name, lab)}: array {lab!r} has {rows[lab]} rows but {feat!r} has {rows[feat]}")
  if rows["tx"] != len(test):
    raise PlanetoidFormatError(f"{idx_path}: array 'test.index' has {len(test)} ids but 'tx' has {rows['tx']} rows")
  width = {p: arrays[p].shape[1] for p in ("x", "allx", "tx")}
  if len(set(width.values())) != 1:
    raise PlanetoidFormatError(f"{_path(directory, name, 'tx')}: feature widths differ across x/allx/tx: {width}")
  classes = {p: arrays[p].shape[1] for p in ("y", "ally", "ty")}
  if len(set(classes.values())) != 1:
    raise PlanetoidFormatError(f"{_path(directory, name, 'ty')}: label widths differ across y/ally/ty: {classes}")
  n_all = rows["allx"]
  if len(test) and (test.min() < n_all or len(np.unique(test)) != len(test)):
    raise PlanetoidFormatError(f"{idx_path}: array 'test.index' must hold distinct ids >= len(allx)={n_all}")
  if rows["y"] > n_all:
    raise PlanetoidFormatError(f"{_path(directory, name, 'y')}: array 'y' has {rows['y']} rows, more than 'ally' ({n_all})")
  # Test ids past the rows are CiteSeer's isolated test nodes (15 of 1000 there): at most len(test) of them.
  limit = n_all + rows["tx"] + len(test)
  if len(test) and test.max() >= limit:
    raise PlanetoidFormatError(
        f"{idx_path}: array 'test.index' has id {int(test.max())}, past len(allx) + len(tx) + len(test.index) = "
        f"{limit} (ids without a row, isolated test nodes, pad the test range by at most the number of test ids)")
  num_nodes = max(n_all + rows["tx"], int(test.max()) + 1 if len(test) else 0)
  _check_size(directory, name, num_nodes, width["x"], classes["y"])
  x = np.zeros((num_nodes, width["x"]), np.float32)
  y = np.full((num_nodes,), -1, np.int32)
  x[:n_all] = _dense(directory, name, "allx", arrays["allx"])
  ally = _dense(directory, name, "ally", arrays["ally"])
  y[:n_all] = np.where(ally.sum(1) > 0, ally.argmax(1), -1)
  order = np.sort(test)
  x[order] = _dense(directory, name, "tx", arrays["tx"])  # row i of tx is node sorted(test)[i]
  ty = _dense(directory, name, "ty", arrays["ty"])
  y[order] = np.where(ty.sum(1) > 0, ty.argmax(1), -1)
  e = _edges(_path(directory, name, "graph"), arrays["graph"], num_nodes)
  return {"senders": e[:, 0], "receivers": e[:, 1], "num_nodes": num_nodes, "x": x, "y": y,
          "train_index": np.arange(rows["y"]), "val_index": np.arange(rows["y"], min(rows["y"] + 500, n_all)),
          "test_index": order}


def _integers(value, what: str) -> np.ndarray:
  """``value`` as a 1-D int64 array, or a ``ValueError`` naming ``what``."""
  a = np.asarray(value)
  if a.ndim != 1:
    raise ValueError(f"{what} must be 1-D; its shape is {a.shape}")
  if a.size and not np.issubdtype(a.dtype, np.integer):
    raise ValueError(f"{what} must hold integers; its dtype is {a.dtype} (cast it with .astype(int))")
  return a.astype(np.int64)


def _checked(x, y, senders, receivers, num_train: int, test_index):
  """:func:`write`'s arguments as arrays, each checked against the others (``ValueError`` naming the argument).

  Returns ``(x, y, senders, receivers, test, rest)``: ``rest`` the non-test node ids in order.
  """
  x = np.asarray(x, np.float32)
  y = _integers(y, "y")
  if x.ndim != 2 or x.shape[0] != y.shape[0]:
    raise ValueError(f"x must be [nodes, features] with one row per label of y ({y.shape[0]}); its shape is {x.shape}")
  if not np.isfinite(x).all():
    raise ValueError(f"x: node {int(np.flatnonzero(~np.isfinite(x).all(1))[0])} has a non-finite feature")
  if y.size and int(y.min()) < -1:
    raise ValueError(f"y: label {int(y.min())} (node {int(np.argmin(y))}); labels are 0..K-1, or -1 for unlabelled")
  if not (y >= 0).any():
    raise ValueError("y: no labelled node (every label is -1)")
  n = y.shape[0]
  senders, receivers = _integers(senders, "senders"), _integers(receivers, "receivers")
  if senders.shape != receivers.shape:
    raise ValueError(f"senders has {senders.size} edges but receivers has {receivers.size}")
  for what, ends in (("senders", senders), ("receivers", receivers)):
    if ends.size and (ends.min() < 0 or ends.max() >= n):
      bad = int(np.flatnonzero((ends < 0) | (ends >= n))[0])
      raise ValueError(f"{what}[{bad}] = {int(ends[bad])} is not a node id (0..{n - 1})")
  test = _integers(test_index, "test_index")
  if test.size and (test.min() < 0 or test.max() >= n or np.unique(test).size != test.size):
    raise ValueError(f"test_index must be distinct node ids in 0..{n - 1}")
  rest = np.setdiff1d(np.arange(n), test)
  if not 0 <= num_train <= rest.size:
    raise ValueError(f"num_train={num_train}: the training nodes 0..num_train-1 must not be test nodes "
                     f"({rest.size} nodes are not in test_index)")
  if test.size and rest.size and test.min() < rest.max():
    raise ValueError(f"test_index: test node {int(test.min())} precedes node {int(rest.max())}, which is not a test "
                     f"node; the Planetoid format puts the test nodes after all the others (renumber the nodes)")
  return x, y, senders, receivers, test, rest


def write(directory: str, name: str, *, x, y, senders, receivers, num_train: int, test_index) -> None:
  """Writes a graph in the Planetoid format (for fixtures and for converting your own data).

  Args:
    x: ``[N, D]`` features; y: ``[N]`` int labels; senders/receivers: edges.
    num_train: nodes ``0..num_train-1`` are ``x``/``y`` (the labelled training set).
    test_index: test node ids (all ``>=`` the last non-test node); the other
      nodes go to ``allx``/``ally`` in id order.

  A label of -1 is an unlabelled node: its one-hot row is all zeros, which
  :func:`load` reads back as -1 (as CiteSeer's unlabelled test nodes).

  Raises:
    ValueError: an argument that is not such a graph (named: a shape, a label
      below -1 or not an integer, no labelled node, an edge out of range,
      test nodes that overlap the training nodes or precede another node,
      a non-finite feature), or a ``name`` that is not a :data:`NAME`.
      Nothing is written then.
  """
  why = name_problem(name)
  if why:
    raise PlanetoidFormatError(why)
  x, y, senders, receivers, test, rest = _checked(x, y, senders, receivers, num_train, test_index)
  os.makedirs(directory, exist_ok=True)
  k = int(np.max(y)) + 1
  onehot = np.eye(k + 1, dtype=np.float32)[np.where(y >= 0, y, k)][:, :k]  # -1 -> an all-zero row
  adj = {}
  for u, v in zip(senders, receivers):
    adj.setdefault(int(u), []).append(int(v))
    adj.setdefault(int(v), []).append(int(u))
  parts = {
      "x": sp.csr_matrix(x[:num_train]), "y": onehot[:num_train],
      "allx": sp.csr_matrix(x[rest]), "ally": onehot[rest],
      "tx": sp.csr_matrix(x[np.sort(test)]), "ty": onehot[np.sort(test)], "graph": adj,
  }
  for part, value in parts.items():
    with open(_path(directory, name, part), "wb") as f:
      pickle.dump(value, f, protocol=2)
  rng = np.random.default_rng(0)
  with open(_path(directory, name, "test.index"), "w") as f:
    f.writelines(f"{i}\n" for i in rng.permutation(test))
