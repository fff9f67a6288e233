"""In-context prediction and scoring: one forward pass per graph, no gradient steps.

A PFN predicts a new graph's held-out nodes from its training nodes'
labels in one forward pass (Mueller et al., 2022; GraphPFN Sec. 5). Every
predictor here (the network and the per-graph baselines of
:mod:`methods.graphpfn.baselines`) returns :class:`Predictions`;
:func:`score` turns them into each graph's accuracy (classification) or
``R^2`` (regression) on its ``eval_mask`` nodes, and :func:`summarise` into
means with standard errors over graphs. :func:`learning_curve` scores
parameters saved at several pretraining steps on the same held-out graphs.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from methods.graphpfn import model as model_lib
from methods.graphpfn import riemann
from methods.graphpfn.batching import GraphBatch
from methods.graphpfn.model_hparams import ModelConfig
from methods.graphpfn.tasks import REGRESSION


class Predictions(NamedTuple):
  """Per-node predictions of a batch of graphs."""

  class_probs: jax.Array  # [B, N, C] class probabilities (0 beyond a task's num_classes)
  mean: jax.Array  # [B, N] predicted value of a regression target (original units)


class Scores(NamedTuple):
  """Per-graph scores."""

  score: jax.Array  # [B] eval-node accuracy (classification) or R^2 (regression)
  task: jax.Array  # [B] int32
  usable: jax.Array  # [B] bool: weight > 0, >= 1 eval node (>= 2 with distinct targets for R^2)


class Summary(NamedTuple):
  """Means and standard errors of the usable graphs' scores (host floats; NaN where there are none)."""

  accuracy: float
  accuracy_se: float
  num_classification: int
  r2: float
  r2_se: float
  num_regression: int


class LearningCurve(NamedTuple):
  """Held-out scores against pretraining steps (``S`` saved parameter sets)."""

  steps: np.ndarray  # [S] int
  accuracy: np.ndarray  # [S] mean held-out accuracy over classification graphs
  accuracy_se: np.ndarray  # [S]
  r2: np.ndarray  # [S] mean held-out R^2 over regression graphs
  r2_se: np.ndarray  # [S]


def predict(params, batch: GraphBatch, borders: jax.Array, *, model_hp: ModelConfig) -> Predictions:
  """The network's in-context predictions: class probabilities and the bar distribution's mean."""
  out = model_lib.forward(params, batch, config=model_hp)
  z = riemann.mean(out.bin_logits, borders)
  return Predictions(jax.nn.softmax(out.class_logits, axis=-1), z * out.y_std[:, None] + out.y_mean[:, None])


def quantiles(params, batch: GraphBatch, borders: jax.Array, qs: Sequence[float], *, model_hp: ModelConfig) -> jax.Array:
  """``[len(qs), B, N]`` predictive quantiles of regression targets (original units)."""
  out = model_lib.forward(params, batch, config=model_hp)
  return jnp.stack([riemann.quantile(out.bin_logits, q, borders) * out.y_std[:, None] + out.y_mean[:, None] for q in qs])


def score(pred: Predictions, batch: GraphBatch) -> Scores:
  """Eval-node accuracy (classification) or ``R^2 = 1 - SSE / SST`` about the eval nodes' mean (regression)."""
  ev = jnp.asarray(batch.eval_mask).astype(jnp.float32)
  y = jnp.asarray(batch.y)
  count = jnp.sum(ev, axis=1)
  hit = (jnp.argmax(pred.class_probs, axis=-1) == y.astype(jnp.int32)).astype(jnp.float32)
  acc = jnp.sum(hit * ev, axis=1) / jnp.maximum(count, 1.0)
  ybar = jnp.sum(y * ev, axis=1) / jnp.maximum(count, 1.0)
  sst = jnp.sum(ev * (y - ybar[:, None]) ** 2, axis=1)
  sse = jnp.sum(ev * (y - pred.mean) ** 2, axis=1)
  reg = jnp.asarray(batch.task) == REGRESSION
  r2 = 1.0 - sse / jnp.maximum(sst, 1e-12)
  usable = (jnp.asarray(batch.weight) > 0) & (count >= 1) & (~reg | ((count >= 2) & (sst > 1e-12)))
  return Scores(jnp.where(reg, r2, acc), jnp.asarray(batch.task), usable)


def evaluate(params, batch: GraphBatch, borders: jax.Array, *, model_hp: ModelConfig) -> Scores:
  """:func:`score` of :func:`predict` (one forward pass; jit it with ``model_hp`` bound)."""
  return score(predict(params, batch, borders, model_hp=model_hp), batch)


@functools.lru_cache(maxsize=None)
def evaluate_fn(model_hp: ModelConfig):
  """:func:`evaluate` jitted with ``model_hp`` bound (cached: one compilation per model and bucket pair)."""
  return jax.jit(functools.partial(evaluate, model_hp=model_hp))


def _mean_se(v: np.ndarray) -> tuple[float, float]:
  if v.size == 0:
    return math.nan, math.nan
  return float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan


def summarise(scores: Sequence[Scores] | Scores) -> Summary:
  """Mean and standard error of the usable graphs' accuracy and ``R^2`` over one or several :class:`Scores`."""
  parts = [scores] if isinstance(scores, Scores) else list(scores)
  s = np.concatenate([np.asarray(p.score) for p in parts])
  task = np.concatenate([np.asarray(p.task) for p in parts])
  use = np.concatenate([np.asarray(p.usable) for p in parts])
  cls, reg = s[use & (task != REGRESSION)], s[use & (task == REGRESSION)]
  return Summary(*_mean_se(cls), int(cls.size), *_mean_se(reg), int(reg.size))


def learning_curve(checkpoints: Sequence[tuple[int, object]], batches: Sequence[GraphBatch], borders: jax.Array, *,
                   model_hp: ModelConfig) -> LearningCurve:
  """Held-out in-context scores of parameters saved at several pretraining steps.

  Args:
    checkpoints: ``(step, params)`` pairs, e.g. restored from the run's checkpoints.
    batches: the held-out graphs (the same for every step).
    borders: the Riemann borders the network was trained with.
    model_hp: the network.

  Returns:
    A :class:`LearningCurve` (steps in the order given).
  """
  fn = evaluate_fn(model_hp)
  rows = [summarise([fn(params, b, borders) for b in batches]) for _, params in checkpoints]
  return LearningCurve(np.asarray([s for s, _ in checkpoints]), *(np.asarray([getattr(r, f) for r in rows])
                                                                   for f in ("accuracy", "accuracy_se", "r2", "r2_se")))
