"""In-context evaluation of the ``graphpfn`` experiment: held-out prior graphs, a shifted prior, real graphs.

The protocol is fixed before any result is seen. Every predictor (the
pretrained network in one forward pass per graph, no gradient steps; the
per-graph baselines of :mod:`methods.graphpfn.baselines`, each fitted on the
graph's training nodes) is scored on the same graphs with the same
training/evaluation split: accuracy on classification graphs, ``R^2`` on
regression graphs, over the graph's ``eval_mask`` nodes. Intervals are
``mean +- 1.96 s.e.`` over graphs; the comparison with each baseline is the
paired per-graph difference (GraphPFN minus baseline) over the graphs usable
for both, with its own ``1.96 s.e.`` interval. Settings:

* ``held_out``: ``eval_graphs`` prior graphs from a key training never uses;
* ``shifted``: ``eval_graphs`` graphs of a shifted prior (``shift_nodes_factor``
  times larger graphs, ``offdiagonal_coef = shift_offdiagonal_coef``: weaker
  blocks); the measured edge label homophily of both settings is reported;
* ``karate``: Zachary's karate club, ``karate_splits`` random splits with
  ``karate_train_per_class`` training nodes per club (features from the
  structure alone, :func:`datasets.graphs.real_tasks.karate_task`);
* ``planetoid``: a Planetoid graph on disk (``planetoid_dir``), its public
  split, features reduced by PCA to ``model.num_features``.
"""

from __future__ import annotations

import logging
import math
import os

import jax
import numpy as np

from datasets.graphs import planetoid, real_tasks
from launch.configs import graphpfn as gcfg
from launch.experiments.graphpfn import pretrain
from methods.graphpfn import baselines as baselines_lib
from methods.graphpfn import evaluation
from methods.graphpfn.batching import BatchError, GraphBatch, collate
from methods.graphpfn.tasks import REGRESSION

MODEL = "graphpfn"
Z = 1.96


def _interval(v: np.ndarray) -> dict:
  """``{mean, ci, n}``: mean and 1.96 standard errors (``None`` where undefined)."""
  v = np.asarray(v, np.float64)
  if v.size == 0:
    return {"mean": None, "ci": None, "n": 0}
  se = float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
  return {"mean": float(np.mean(v)), "ci": Z * se if math.isfinite(se) else None, "n": int(v.size)}


def edge_homophily(batch: GraphBatch) -> np.ndarray:
  """``[B]`` share of real edges joining nodes of the same class (NaN for regression or edgeless graphs)."""
  out = np.full(batch.y.shape[0], np.nan)
  for i in range(batch.y.shape[0]):
    e = np.asarray(batch.edge_mask[i])
    if batch.weight[i] <= 0 or int(batch.task[i]) == REGRESSION or not e.any():
      continue
    y = np.asarray(batch.y[i])
    out[i] = float(np.mean(y[batch.senders[i][e]] == y[batch.receivers[i][e]]))
  return out


def score_all(params, borders, batches: list[GraphBatch], hp: gcfg.Hparams, key: jax.Array, graphs: int) -> dict:
  """Per-graph ``(score, task, usable)`` arrays of the network and every baseline on the first ``graphs`` graphs."""
  fn = evaluation.evaluate_fn(hp.model)
  parts: dict[str, list] = {MODEL: []} | {b: [] for b in hp.run.compared}
  for i, batch in enumerate(batches):
    parts[MODEL].append(jax.device_get(fn(params, batch, borders)))
    for name in hp.run.compared:
      pred = baselines_lib.run(name, batch, jax.random.fold_in(key, i), hp=hp.baselines,
                               num_classes=hp.model.num_classes)
      parts[name].append(jax.device_get(evaluation.score(pred, batch)))
  return {name: evaluation.Scores(*(np.concatenate([np.asarray(getattr(s, f)) for s in ss])[:graphs]
                                    for f in evaluation.Scores._fields)) for name, ss in parts.items()}


def compare(scores: dict) -> dict:
  """Each method's accuracy and ``R^2`` intervals, and the paired differences GraphPFN minus each baseline."""
  ref = scores[MODEL]
  methods, paired = {}, {}
  for name, s in scores.items():
    cls = s.usable & (s.task != REGRESSION)
    reg = s.usable & (s.task == REGRESSION)
    methods[name] = {"accuracy": _interval(s.score[cls]), "r2": _interval(s.score[reg])}
    if name == MODEL:
      continue
    both = ref.usable & s.usable
    paired[name] = {"accuracy": _interval((ref.score - s.score)[both & (s.task != REGRESSION)]),
                    "r2": _interval((ref.score - s.score)[both & (s.task == REGRESSION)])}
  return {"methods": methods, "paired": paired}


def prior_setting(params, borders, hp: gcfg.Hparams, seed: int, *, shifted: bool) -> dict:
  """The ``held_out`` or ``shifted`` setting's comparison and its graphs' sizes and homophily."""
  batches = pretrain.held_out_batches(hp, seed, hp.run.eval_graphs, shifted=shifted)
  scores = score_all(params, borders, batches, hp, pretrain.key_of(seed, pretrain.BASELINES), hp.run.eval_graphs)
  g = hp.run.eval_graphs
  nodes = np.concatenate([np.sum(b.node_mask, axis=1) for b in batches])[:g]
  homophily = np.concatenate([edge_homophily(b) for b in batches])[:g]
  weight = np.concatenate([b.weight for b in batches])[:g]
  h = homophily[np.isfinite(homophily)]
  return compare(scores) | {
      "graphs": g, "usable": int(np.sum(weight > 0)), "mean_nodes": float(np.mean(nodes[weight > 0])),
      "edge_homophily": _interval(h), "structure": {
          "n_nodes": [hp.shifted().n_nodes_min, hp.shifted().n_nodes_max] if shifted else
                     [hp.structure.n_nodes_min, hp.structure.n_nodes_max],
          "offdiagonal_coef": hp.shifted().offdiagonal_coef if shifted else hp.structure.offdiagonal_coef}}


def _real(params, borders, tasks: list[dict], hp: gcfg.Hparams, seed: int) -> dict:
  batch = collate(tasks, buckets=hp.buckets, num_features=hp.model.num_features, num_classes=hp.model.num_classes)
  scores = score_all(params, borders, [batch], hp, pretrain.key_of(seed, pretrain.BASELINES), len(tasks))
  return compare(scores)


def karate(params, borders, hp: gcfg.Hparams, seed: int) -> dict | None:
  """The karate club over ``karate_splits`` random splits (split ``s`` drawn with NumPy seed ``s``)."""
  if hp.run.karate_splits == 0:
    return None
  tasks = [real_tasks.karate_task(train_per_class=hp.run.karate_train_per_class, seed=s)
           for s in range(hp.run.karate_splits)]
  return _real(params, borders, tasks, hp, seed) | {"splits": hp.run.karate_splits,
                                                    "train_per_class": hp.run.karate_train_per_class}


def planetoid_task(hp: gcfg.Hparams) -> dict | None:
  """The Planetoid graph in ``planetoid_dir`` as a node task (public split), or ``None`` without a directory.

  Raises:
    ValueError: naming the file at fault (``planetoid.PlanetoidFormatError``),
      a graph without a feature column or with one class among its labels,
      or the graph's mismatch with the model (more classes than
      ``model.num_classes``, no labelled context or evaluation node, more
      nodes or edges than the largest bucket).
  """
  directory = os.path.expanduser(hp.run.planetoid_dir)
  if not directory:
    return None
  if not os.path.isdir(directory):
    raise planetoid.PlanetoidFormatError(f"{directory!r} is not a directory")
  name = hp.run.planetoid_name
  data = planetoid.load(directory, name)
  if data["x"].shape[1] == 0:
    raise ValueError(f"{name} in {directory!r}: ind.{name}.x: array 'x' has 0 feature columns; a graph needs at "
                     "least one feature column")
  labels = np.unique(data["y"][data["y"] >= 0])
  if labels.size == 1:  # none at all is "no labelled training node" below
    raise ValueError(f"{name} in {directory!r}: ind.{name}.y/ally/ty: the graph has one class (arrays 'y', 'ally', "
                     f"'ty': every label is {int(labels[0])}); node classification needs at least 2")
  task = real_tasks.planetoid_task(data, num_features=hp.model.num_features)
  if task["num_classes"] > hp.model.num_classes:
    raise ValueError(f"{name} in {directory!r}: {task['num_classes']} classes, more than "
                     f"model.num_classes={hp.model.num_classes}")
  for mask, what in (("train_mask", "training (context)"), ("eval_mask", "test")):
    if not task[mask].any():
      raise ValueError(f"{name} in {directory!r}: no labelled {what} node")
  try:
    collate([task], buckets=hp.buckets, num_features=hp.model.num_features, num_classes=hp.model.num_classes)
  except BatchError as e:
    raise ValueError(f"{name} in {directory!r} does not fit the buckets (buckets.node_buckets, "
                     f"buckets.edge_buckets): {e}") from e
  return task


def planetoid_graph(params, borders, hp: gcfg.Hparams, seed: int) -> dict | None:
  """The Planetoid graph in ``planetoid_dir`` (public split, one score per method), if a directory is given."""
  task = planetoid_task(hp)
  if task is None:
    return None
  logging.info("[graphpfn] %s: %d nodes, %d edges, %d classes", hp.run.planetoid_name, task["num_nodes"],
               len(task["senders"]), task["num_classes"])
  return _real(params, borders, [task], hp, seed) | {"name": hp.run.planetoid_name, "num_nodes": task["num_nodes"]}
