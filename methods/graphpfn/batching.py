"""Graphs with node tasks, padded to size buckets and stacked into a batch (host-side NumPy).

One graph is a dict, the layout of the ``graphpfn_prior`` TFDS examples
(``datasets/graphs/prior_builder.py``) and of
:func:`methods.graphpfn.statistics.host_sample`:

* ``x``: ``[n, f]`` node features, ``f <= num_features`` of the model;
* ``y``: ``[n]`` targets: a class id (``-1``: unknown) or a real value (NaN: unknown);
* ``train_mask``: ``[n]`` bool, the nodes whose labels the model is given (at least one);
* ``senders``/``receivers``: ``[e]`` node ids, each undirected edge once;
* ``task``: ``"regression"``, ``"binary"``, ``"multiclass"`` or their codes 0, 1, 2;
* optional: ``num_nodes`` (default ``len(x)``), ``num_classes`` (default: the
  largest label + 1), ``eval_mask`` (default: labelled nodes outside the
  training set), ``weight`` (default 1: a graph's weight in the loss and scores).

:func:`collate` pads every graph of a list to the smallest node and edge
bucket (:class:`~methods.graphpfn.model_hparams.BucketConfig`) that holds the
largest of them, features to the model's ``num_features`` and the list to
``batch_size`` graphs (empty graphs of weight 0), so a jitted step compiles
once per bucket pair. Malformed input raises :class:`BatchError` naming the
graph, the key and the offending index.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

import numpy as np

from methods.graphpfn.model_hparams import BucketConfig
from methods.graphpfn.tasks import BINARY, MULTICLASS, REGRESSION

TASK_IDS = {"regression": REGRESSION, "binary": BINARY, "multiclass": MULTICLASS}


class BatchError(ValueError):
  """A graph that is malformed or does not fit the model's sizes or the buckets."""


class GraphBatch(NamedTuple):
  """Padded graphs with node tasks (one graph: the same fields without the leading ``B``)."""

  x: np.ndarray  # [B, N, F] float32, 0 on padding rows and unused columns
  feature_mask: np.ndarray  # [B, F] bool: the graph's features (first f columns)
  y: np.ndarray  # [B, N] float32: class id or value (0 where unknown or padding)
  train_mask: np.ndarray  # [B, N] bool: labels given to the model (the context)
  eval_mask: np.ndarray  # [B, N] bool: nodes whose predictions are scored
  node_mask: np.ndarray  # [B, N] bool: real nodes (first n)
  senders: np.ndarray  # [B, E] int32
  receivers: np.ndarray  # [B, E] int32
  edge_mask: np.ndarray  # [B, E] bool: real edges (first e)
  task: np.ndarray  # [B] int32: REGRESSION, BINARY or MULTICLASS
  num_classes: np.ndarray  # [B] int32 (0 for regression)
  weight: np.ndarray  # [B] float32: 0 for a padding graph


def bucket(size: int, buckets: Sequence[int], what: str) -> int:
  """The smallest bucket ``>= size``; :class:`BatchError` naming ``what`` if the largest is too small."""
  for b in buckets:
    if size <= b:
      return int(b)
  raise BatchError(f"{what}: {size} is over the maximum {buckets[-1]} (the largest bucket)")


def _task_id(value, where: str) -> int:
  if isinstance(value, str):
    if value not in TASK_IDS:
      raise BatchError(f"{where}: unknown task {value!r} (key 'task'); allowed: {list(TASK_IDS)}")
    return TASK_IDS[value]
  a = np.asarray(value)
  if a.shape != () or a.dtype.kind not in "iuf" or not _whole(a):
    raise BatchError(f"{where}: unknown task {value!r} (key 'task'); allowed: {dict(TASK_IDS)}")
  v = int(a)
  if v not in TASK_IDS.values():
    raise BatchError(f"{where}: unknown task {v} (key 'task'); allowed: {dict(TASK_IDS)}")
  return v


def _array(example: Mapping, key: str, where: str, ndim: int, dtype) -> np.ndarray:
  if key not in example:
    raise BatchError(f"{where}: missing key {key!r}")
  a = np.asarray(example[key])
  if a.ndim != ndim:
    raise BatchError(f"{where}: key {key!r} has shape {a.shape}; expected {ndim} dimensions")
  if a.dtype.kind not in "biuf":
    raise BatchError(f"{where}: key {key!r} has dtype {a.dtype}; numbers are needed")
  want = np.dtype(dtype).kind
  if want == "b" and a.dtype.kind != "b" and (i := _first((a != 0) & (a != 1))) >= 0:
    raise BatchError(f"{where}: key {key!r} has the value {a[i].item()!r} at entry {i}; a mask holds booleans or 0 / 1")
  if want in "iu" and a.dtype.kind == "f" and (i := _first(~_whole(a))) >= 0:
    raise BatchError(f"{where}: key {key!r} has the value {a[i].item()!r} at entry {i}; node ids are whole numbers")
  return a.astype(dtype)


def _scalar(example: Mapping, key: str, where: str, default, whole: bool):
  """``example[key]`` (or ``default``) as an ``int`` if ``whole`` else a ``float``; finite and not negative."""
  value = example.get(key, default)
  a = np.asarray(value)
  if a.shape != () or a.dtype.kind not in "biuf" or not np.isfinite(a) or a < 0 or (whole and not _whole(a)):
    raise BatchError(f"{where}: key {key!r} is {value!r}; expected a {'whole ' if whole else ''}number >= 0")
  return int(a) if whole else float(a)


def _first(bad: np.ndarray) -> int:
  """The first index where ``bad [M]`` holds; -1 if none does."""
  hits = np.flatnonzero(bad)
  return int(hits[0]) if hits.size else -1


def _whole(a: np.ndarray) -> np.ndarray:
  """Whether each entry of the number array ``a`` is a finite whole number."""
  return np.isfinite(a) & (a == np.round(a))


def check_graph(example: Mapping, *, num_features: int, num_classes: int, index: int = 0) -> dict:
  """Validates one graph dict and returns its arrays normalised (see the module docstring).

  Raises:
    BatchError: naming ``graph {index}``, the key and the first offending node or edge.
  """
  where = f"graph {index}"
  x = _array(example, "x", where, 2, np.float32)
  n = _scalar(example, "num_nodes", where, x.shape[0], whole=True)
  if x.shape[0] != n:
    raise BatchError(f"{where}: key 'x' has {x.shape[0]} rows but num_nodes is {n}")
  if x.shape[1] > num_features:
    raise BatchError(f"{where}: key 'x' has {x.shape[1]} features, over the model's maximum num_features={num_features}")
  if (i := _first(~np.isfinite(x).all(1))) >= 0:
    raise BatchError(f"{where}: key 'x' has a non-finite value at row {i}")
  if "task" not in example:
    raise BatchError(f"{where}: missing key 'task'")
  task = _task_id(example["task"], where)
  y = _array(example, "y", where, 1, np.float64)
  train = _array(example, "train_mask", where, 1, bool)
  for key, a in (("y", y), ("train_mask", train)):
    if a.shape[0] != n:
      raise BatchError(f"{where}: key {key!r} has {a.shape[0]} entries but the graph has {n} nodes")
  if not train.any():
    raise BatchError(f"{where}: key 'train_mask' selects no training node")
  if task == REGRESSION:
    known, classes = np.isfinite(y), 0
  else:
    known = np.isfinite(y) & (y >= 0)
    if (i := _first(known & ~_whole(y))) >= 0:
      raise BatchError(f"{where}: key 'y' has a non-integer class id at node {i}")
    classes = _scalar(example, "num_classes", where, int(np.max(np.where(known, y, 0))) + 1, whole=True)
    classes = max(classes, 2)
    if task == BINARY and classes != 2:
      raise BatchError(f"{where}: a binary task has num_classes={classes}; expected 2")
    if classes > num_classes:
      raise BatchError(f"{where}: num_classes={classes} is over the model's maximum num_classes={num_classes}")
    if (i := _first(known & (y >= classes))) >= 0:
      raise BatchError(f"{where}: key 'y' has class {int(y[i])} >= num_classes={classes} at node {i}")
  if (i := _first(train & ~known)) >= 0:
    raise BatchError(f"{where}: key 'y' has no valid label at training node {i}")
  eval_mask = _array(example, "eval_mask", where, 1, bool) if "eval_mask" in example else known & ~train
  if eval_mask.shape != (n,):
    raise BatchError(f"{where}: key 'eval_mask' has {eval_mask.shape[0]} entries but the graph has {n} nodes")
  if (i := _first(eval_mask & ~known)) >= 0:
    raise BatchError(f"{where}: key 'eval_mask' selects node {i}, which has no valid label")
  senders = _array(example, "senders", where, 1, np.int64)
  receivers = _array(example, "receivers", where, 1, np.int64)
  if senders.shape != receivers.shape:
    raise BatchError(f"{where}: keys 'senders' and 'receivers' have {senders.shape[0]} and {receivers.shape[0]} entries")
  for key, a in (("senders", senders), ("receivers", receivers)):
    if (i := _first((a < 0) | (a >= n))) >= 0:
      raise BatchError(f"{where}: key {key!r} has node id {int(a[i])} outside [0, {n}) at edge {i}")
  return {"x": x, "y": np.where(known, y, 0.0).astype(np.float32), "train_mask": train, "eval_mask": eval_mask,
          "senders": senders.astype(np.int32), "receivers": receivers.astype(np.int32), "task": task,
          "num_classes": classes, "num_nodes": n, "weight": _scalar(example, "weight", where, 1.0, whole=False)}


def _empty() -> dict:
  return {"x": np.zeros((0, 0), np.float32), "y": np.zeros((0,), np.float32), "train_mask": np.zeros((0,), bool),
          "eval_mask": np.zeros((0,), bool), "senders": np.zeros((0,), np.int32), "receivers": np.zeros((0,), np.int32),
          "task": BINARY, "num_classes": 2, "num_nodes": 0, "weight": 0.0}


def _pad(g: dict, num_nodes: int, num_edges: int, num_features: int) -> GraphBatch:
  n, f, e = g["num_nodes"], g["x"].shape[1], g["senders"].shape[0]

  def rows(a, size, dtype):
    out = np.zeros((size,) + a.shape[1:], dtype)
    out[:a.shape[0]] = a
    return out

  x = np.zeros((num_nodes, num_features), np.float32)
  x[:n, :f] = g["x"]
  return GraphBatch(
      x=x, feature_mask=np.arange(num_features) < f, y=rows(g["y"], num_nodes, np.float32),
      train_mask=rows(g["train_mask"], num_nodes, bool), eval_mask=rows(g["eval_mask"], num_nodes, bool),
      node_mask=np.arange(num_nodes) < n, senders=rows(g["senders"], num_edges, np.int32),
      receivers=rows(g["receivers"], num_edges, np.int32), edge_mask=np.arange(num_edges) < e,
      task=np.int32(g["task"]), num_classes=np.int32(g["num_classes"]), weight=np.float32(g["weight"]))


def collate(examples: Sequence[Mapping], *, buckets: BucketConfig, num_features: int, num_classes: int,
            batch_size: int | None = None) -> GraphBatch:
  """Validates, pads and stacks graphs into one :class:`GraphBatch`.

  Args:
    examples: graph dicts (module docstring).
    buckets: node and edge buckets; the batch takes the smallest of each that
      holds its largest graph.
    num_features: the model's ``num_features`` (every batch is padded to it).
    num_classes: the model's ``num_classes`` (the most a task may have).
    batch_size: pad the batch with empty graphs of weight 0 up to this many
      (``None``: as many as ``examples``).

  Returns:
    A :class:`GraphBatch` of NumPy arrays, ``B = batch_size or len(examples)``.

  Raises:
    BatchError: a malformed graph, a graph over the largest bucket, more
      features or classes than the model has, more graphs than ``batch_size``.
  """
  graphs = [check_graph(ex, num_features=num_features, num_classes=num_classes, index=i) for i, ex in enumerate(examples)]
  size = len(graphs) if batch_size is None else batch_size
  if not graphs or len(graphs) > size:
    raise BatchError(f"{len(graphs)} graphs do not fit a batch of batch_size={size}")
  largest_n = int(np.argmax([g["num_nodes"] for g in graphs]))
  largest_e = int(np.argmax([g["senders"].shape[0] for g in graphs]))
  n = bucket(graphs[largest_n]["num_nodes"], buckets.node_buckets, f"graph {largest_n}: node count")
  e = bucket(graphs[largest_e]["senders"].shape[0], buckets.edge_buckets, f"graph {largest_e}: edge count")
  graphs += [_empty()] * (size - len(graphs))
  padded = [_pad(g, n, e, num_features) for g in graphs]
  return GraphBatch(*(np.stack(parts) for parts in zip(*padded)))
