"""Per-graph baselines, each fitted on one graph's training nodes and scored like the network.

GraphPFN (Eremeev et al., 2025, Sec. 5) compares its in-context
predictions with models trained on each dataset. Here every baseline is
fitted from scratch on each graph's ``train_mask`` nodes and returns
:class:`~methods.graphpfn.evaluation.Predictions` (class probabilities for
classification tasks, a value for regression tasks; both are computed and
:func:`~methods.graphpfn.evaluation.score` reads the one the task needs):

* ``"linear"``: multinomial logistic regression (classes) or ridge
  regression (values) on the features ``X``;
* ``"sgc"``: the same on ``[X, SX, ..., S^K X]``, ``S = D~^-1/2 (A + I) D~^-1/2``
  (SGC, Wu et al., 2019, propagates ``S^K X`` only; keeping every hop, as
  SIGN does, keeps the node's own features for heterophilous graphs);
* ``"gcn"``: a two-layer GCN (Kipf & Welling, 2017) trained with Adam,
  dropout and L2 on the first layer, full batch;
* ``"gbdt"``: scikit-learn's ``HistGradientBoosting`` on the features and
  the propagated features (host-side, one graph at a time).

The JAX baselines are written for one graph and ``jax.vmap``-ed over the
batch. Features are standardised with the training nodes' statistics; the
ridge solve uses conjugate gradients (matmuls only, so it also runs inside a
computation sharded over CPU devices).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from envs import graphs
from methods.graphpfn.batching import GraphBatch
from methods.graphpfn import rng
from methods.graphpfn.evaluation import Predictions
from methods.graphpfn.model_hparams import BaselineConfig
from methods.graphpfn.tasks import REGRESSION

BASELINES = ("linear", "sgc", "gcn", "gbdt")
_NEG = -1e9


def _graph(g: GraphBatch) -> graphs.Graph:
  return graphs.Graph(g.senders, g.receivers, g.edge_mask, g.node_mask)


def propagated(g: GraphBatch, hops: int) -> tuple[jax.Array, jax.Array]:
  """``([N, (K + 1) F], mask [(K + 1) F])``: ``[X, SX, ..., S^K X]`` of one graph and its used columns."""
  parts, h = [g.x], g.x
  for _ in range(hops):
    h = graphs.aggregate(_graph(g), h, "gcn")
    parts.append(h)
  return jnp.concatenate(parts, axis=1), jnp.tile(g.feature_mask, hops + 1)


def _standardise(z, zmask, train):
  w = train.astype(z.dtype)[:, None]
  count = jnp.maximum(jnp.sum(w), 1.0)
  m = jnp.sum(w * z, axis=0) / count
  s = jnp.sqrt(jnp.sum(w * (z - m[None, :]) ** 2, axis=0) / count)
  keep = zmask & (s > 1e-6)
  return jnp.where(keep[None, :], (z - m[None, :]) / jnp.maximum(s, 1e-6)[None, :], 0.0)


def _cg(a, b, iterations):
  """``a^-1 b`` for a symmetric positive-definite ``a [D, D]``, ``b [D]`` (conjugate gradients)."""

  def body(carry, _):
    x, r, p, rr = carry
    ap = a @ p
    alpha = rr / jnp.maximum(p @ ap, 1e-30)
    x, r = x + alpha * p, r - alpha * ap
    rr_new = r @ r
    return (x, r, r + (rr_new / jnp.maximum(rr, 1e-30)) * p, rr_new), None

  (x, _, _, _), _ = jax.lax.scan(body, (jnp.zeros_like(b), b, b, b @ b), None, length=iterations)
  return x


def _ridge(z, y, train, l2):
  """Ridge fit on the training rows (intercept: the training mean), predicted on every row: ``[N]``."""
  w = train.astype(z.dtype)
  ybar = jnp.sum(w * y) / jnp.maximum(jnp.sum(w), 1.0)
  zt = z * w[:, None]
  d = z.shape[1]
  coef = _cg(zt.T @ zt + l2 * jnp.eye(d), zt.T @ (w * (y - ybar)), iterations=2 * d + 10)
  return z @ coef + ybar


def _logistic(z, y, train, num_classes, cmax, hp: BaselineConfig):
  """Multinomial logistic regression (Adam on the L2-penalised mean cross-entropy): ``[N, C]`` probabilities."""
  w = train.astype(z.dtype)
  labels = jax.nn.one_hot(y.astype(jnp.int32), cmax)
  live = jnp.arange(cmax) < num_classes

  def loss(p):
    logits = jnp.where(live[None, :], z @ p["w"] + p["b"][None, :], _NEG)
    ce = -jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1)
    return jnp.sum(w * ce) / jnp.maximum(jnp.sum(w), 1.0) + 0.5 * hp.logistic_l2 * jnp.sum(p["w"] ** 2)

  opt = optax.adam(hp.logistic_lr)
  params = {"w": jnp.zeros((z.shape[1], cmax)), "b": jnp.zeros((cmax,))}

  def step(carry, _):
    p, s = carry
    updates, s = opt.update(jax.grad(loss)(p), s, p)
    return (optax.apply_updates(p, updates), s), None

  (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=hp.logistic_steps)
  logits = jnp.where(live[None, :], z @ params["w"] + params["b"][None, :], _NEG)
  return jax.nn.softmax(logits, axis=-1)


@functools.partial(jax.jit, static_argnames=("hops", "cmax", "hp"))
def _linear(batch: GraphBatch, *, hops: int, cmax: int, hp: BaselineConfig) -> Predictions:
  def one(g):
    z, zmask = propagated(g, hops) if hops else (g.x, g.feature_mask)
    z = _standardise(z, zmask, g.train_mask)
    return _logistic(z, g.y, g.train_mask, g.num_classes, cmax, hp), _ridge(z, g.y, g.train_mask, hp.ridge_l2)

  return Predictions(*jax.vmap(one)(batch))


def linear(batch: GraphBatch, *, hp: BaselineConfig, num_classes: int, hops: int = 0) -> Predictions:
  """Logistic (classes) and ridge (values) regression per graph on ``[X, SX, ..., S^hops X]``.

  Args:
    batch: padded graphs ``[B, ...]``.
    hp: the baselines' hyperparameters.
    num_classes: ``C`` of the returned probabilities (the network's ``num_classes``).
    hops: 0 for the ``"linear"`` baseline, ``hp.sgc_hops`` for ``"sgc"``.
  """
  return _linear(jax.tree.map(jnp.asarray, batch), hops=hops, cmax=num_classes, hp=hp)


def _glorot(u, shape):
  """Glorot-uniform weights from uniforms ``u`` in ``[0, 1)``."""
  return (2.0 * u - 1.0) * jnp.sqrt(6.0 / (shape[0] + shape[1]))


def _gcn_one(g: GraphBatch, key, cmax: int, hp: BaselineConfig):
  """Two-layer GCN ``S relu(S X W1) W2`` with ``C + 1`` outputs (class logits, standardised value).

  ``key`` draws the initial weights (``fold_in(key, 0)``) and step ``t``'s
  dropout masks (``fold_in(key, t + 1)``), each from one flat draw
  (:mod:`methods.graphpfn.rng`: fewer threefry kernels, a shorter compile).
  """
  x = _standardise(g.x, g.feature_mask, g.train_mask)
  graph = _graph(g)
  train = g.train_mask.astype(jnp.float32)
  count = jnp.maximum(jnp.sum(train), 1.0)
  ym = jnp.sum(train * g.y) / count
  ys = jnp.maximum(jnp.sqrt(jnp.sum(train * (g.y - ym) ** 2) / count), 1e-6)
  target = jnp.where(g.task == REGRESSION, (g.y - ym) / ys, 0.0)
  labels = jax.nn.one_hot(g.y.astype(jnp.int32), cmax) * (g.task != REGRESSION)
  live = jnp.arange(cmax) < g.num_classes
  n, f, hidden = x.shape[0], x.shape[1], hp.gcn_hidden
  u1, u2 = rng.uniforms(jax.random.fold_in(key, 0), (f, hidden), (hidden, cmax + 1))
  params = {"w1": _glorot(u1, (f, hidden)), "b1": jnp.zeros((hidden,)),
            "w2": _glorot(u2, (hidden, cmax + 1)), "b2": jnp.zeros((cmax + 1,))}
  keep = 1.0 - hp.gcn_dropout

  def apply(p, step=None):
    h = x
    if step is not None and hp.gcn_dropout > 0:
      d1, d2 = rng.uniforms(jax.random.fold_in(key, step + 1), (n, f), (n, hidden))
      h = jnp.where(d1 < keep, h / keep, 0.0)
    h = jax.nn.relu(graphs.aggregate(graph, h @ p["w1"], "gcn") + p["b1"][None, :])
    if step is not None and hp.gcn_dropout > 0:
      h = jnp.where(d2 < keep, h / keep, 0.0)
    out = graphs.aggregate(graph, h @ p["w2"], "gcn") + p["b2"][None, :]
    return jnp.where(live[None, :], out[:, :cmax], _NEG), out[:, cmax]

  def loss(p, step):
    logits, value = apply(p, step)
    ce = -jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1)
    se = jnp.where(g.task == REGRESSION, (value - target) ** 2, 0.0)
    return jnp.sum(train * (ce + se)) / count + 0.5 * hp.gcn_weight_decay * jnp.sum(p["w1"] ** 2)

  opt = optax.adam(hp.gcn_lr)

  def step(carry, t):
    p, s = carry
    updates, s = opt.update(jax.grad(loss)(p, t), s, p)
    return (optax.apply_updates(p, updates), s), None

  (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(hp.gcn_steps))
  logits, value = apply(params)
  return jax.nn.softmax(logits, axis=-1), value * ys + ym


@functools.partial(jax.jit, static_argnames=("cmax", "hp"))
def _gcn(batch: GraphBatch, key, *, cmax: int, hp: BaselineConfig) -> Predictions:
  keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(batch.task.shape[0]))
  return Predictions(*jax.vmap(lambda g, k: _gcn_one(g, k, cmax, hp))(batch, keys))


def gcn(batch: GraphBatch, key: jax.Array, *, hp: BaselineConfig, num_classes: int) -> Predictions:
  """A two-layer GCN trained per graph (``key``: graph ``i``'s initialisation and dropout use ``fold_in(key, i)``)."""
  return _gcn(jax.tree.map(jnp.asarray, batch), key, cmax=num_classes, hp=hp)


def gbdt(batch: GraphBatch, *, hp: BaselineConfig, num_classes: int, seed: int = 0) -> Predictions:
  """scikit-learn ``HistGradientBoosting`` per graph on ``[X, SX, ..., S^K X]`` (``K = hp.sgc_hops``), host-side."""
  # scikit-learn takes about a second to import; only this baseline needs it.
  from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor  # pylint: disable=g-import-not-at-top
  import threadpoolctl  # pylint: disable=g-import-not-at-top  (a scikit-learn dependency)

  with threadpoolctl.threadpool_limits(1):  # OpenMP threads on tiny fits spin: 60x slower on a busy 2-core machine
    return _gbdt(batch, hp, num_classes, seed, HistGradientBoostingClassifier, HistGradientBoostingRegressor)


@functools.partial(jax.jit, static_argnames=("hops",))
def _propagated_batch(batch: GraphBatch, *, hops: int):
  return jax.vmap(lambda g: propagated(g, hops))(batch)


def _gbdt(batch, hp, num_classes, seed, classifier, regressor) -> Predictions:
  """One fit per usable graph; a graph whose training nodes hold one class predicts that class."""
  z_all, zmask_all = jax.device_get(_propagated_batch(jax.tree.map(jnp.asarray, batch), hops=hp.sgc_hops))
  b, n = batch.y.shape
  probs, values = np.zeros((b, n, num_classes), np.float32), np.zeros((b, n), np.float32)
  common = dict(max_iter=hp.gbdt_max_iter, learning_rate=hp.gbdt_learning_rate, max_leaf_nodes=hp.gbdt_max_leaf_nodes,
                min_samples_leaf=hp.gbdt_min_samples_leaf, early_stopping=False, random_state=seed)
  for i in range(b):
    train = np.asarray(batch.train_mask[i])
    if batch.weight[i] <= 0 or not train.any():
      continue
    z = z_all[i][:, zmask_all[i]]
    y = np.asarray(batch.y[i])
    if int(batch.task[i]) == REGRESSION:
      values[i] = regressor(**common).fit(z[train], y[train]).predict(z)
      continue
    labels = y[train].astype(int)
    if np.unique(labels).size < 2:
      probs[i, :, labels[0]] = 1.0
      continue
    clf = classifier(**common).fit(z[train], labels)
    probs[i][:, clf.classes_] = clf.predict_proba(z)
  return Predictions(jnp.asarray(probs), jnp.asarray(values))


def run(name: str, batch: GraphBatch, key: jax.Array, *, hp: BaselineConfig, num_classes: int) -> Predictions:
  """The baseline ``name`` (one of :data:`BASELINES`) on ``batch`` (``key``: the GCN's initialisation and dropout)."""
  if name == "linear":
    return linear(batch, hp=hp, num_classes=num_classes)
  if name == "sgc":
    return linear(batch, hp=hp, num_classes=num_classes, hops=hp.sgc_hops)
  if name == "gcn":
    return gcn(batch, key, hp=hp, num_classes=num_classes)
  if name == "gbdt":
    return gbdt(batch, hp=hp, num_classes=num_classes)
  raise ValueError(f"unknown baseline {name!r}; allowed: {list(BASELINES)}")
