"""Node tasks of the GraphPFN prior: targets, feature post-processing, the train split.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 3.2, following
TabICL's post-processing (Qu et al., 2025): regression, binary (threshold at
a quantile ``q ~ U(0.01, 0.99)``) or multiclass (2-10 classes at random
quantiles, ordered with probability 0.2, then reversed with probability
0.5, otherwise labels shuffled); 20% of feature columns become categorical
(rank-based bins with shuffled codes), outliers are clipped at 4 sigma, columns
standardised and permuted; a random share ``U(0.05, 0.5)`` of the nodes is the
training set; columns constant on the training nodes are dropped.

:func:`sample` draws one complete prior sample (structure, attributes, task)
from one key; it is jittable and ``jax.vmap``-able over keys.

Departures from the reference's pretraining config (``pretrain.toml``,
``postprocessing``): categorical columns get at most ``categories_max``
(10) categories (the reference: up to 256); the training nodes are a
random ``round(train_ratio * n)`` of the nodes the graph kept (the
reference: the first ``round(train_ratio * n_target)`` of the shuffled
nodes, ``n_target`` the drawn node count before the largest component).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from envs import graphs
from methods.graphpfn import rng
from methods.graphpfn import scm
from methods.graphpfn import structure
from methods.graphpfn.hparams import TASKS, AttributeConfig, StructureConfig

REGRESSION, BINARY, MULTICLASS = range(3)


class Sample(NamedTuple):
  """One prior sample: an attributed graph with a node task."""

  graph: graphs.Graph
  x: jax.Array  # [N, F] float32 features (0 on padding rows and dropped columns)
  feature_mask: jax.Array  # [F] bool: kept columns (first)
  y: jax.Array  # [N] float32: standardised value or class id
  train_mask: jax.Array  # [N] bool
  task: jax.Array  # [] int32: REGRESSION, BINARY or MULTICLASS
  num_classes: jax.Array  # [] int32 (0 for regression)
  block1: jax.Array  # [N] int32
  block2: jax.Array  # [N] int32
  is_pa: jax.Array  # [N] bool
  ok: jax.Array  # [] bool: >= 1 feature and, for classification, >= 2 classes among training nodes
  structure: structure.StructureParams
  attributes: scm.AttributeParams


def _masked_quantile(v, valid, q):
  n = jnp.maximum(jnp.sum(valid), 1)
  s = jnp.sort(jnp.where(valid, v, jnp.inf))
  i = jnp.clip(jnp.floor(q * (n - 1)).astype(jnp.int32), 0, n - 1)
  return s[i]


def _rank(v, valid):
  """Integer rank of each valid entry among the valid ones (ties broken by position)."""
  order = jnp.argsort(jnp.where(valid, v, jnp.inf))
  return jnp.zeros(v.shape, jnp.int32).at[order].set(jnp.arange(v.shape[0], dtype=jnp.int32))


def _rank_fraction(v, valid):
  """Rank of each valid entry in ``[0, 1)``."""
  return _rank(v, valid) / jnp.maximum(jnp.sum(valid), 1)


def make_target(key, y_raw, valid, p: scm.AttributeParams, hp: AttributeConfig):
  """``(y [N], task, num_classes)`` from the raw target values."""
  kinds = jnp.asarray([TASKS.index(t) for t in hp.tasks])
  task = kinds[p.task]
  u_q, u_shuffle = rng.uniforms(key, (hp.num_classes_max - 1,), (hp.num_classes_max,))
  reg = scm.standardize(y_raw[:, None], valid)[:, 0]
  binary = (y_raw > _masked_quantile(y_raw, valid, p.binary_quantile)).astype(jnp.float32)
  cmax = hp.num_classes_max
  qs = jnp.sort(jnp.where(jnp.arange(cmax - 1) < p.num_classes - 1, u_q, 2.0))
  bounds = jax.vmap(lambda q: _masked_quantile(y_raw, valid, q))(jnp.minimum(qs, 1.0))
  bounds = jnp.where(qs <= 1.0, bounds, jnp.inf)
  cls = jnp.sum(y_raw[:, None] > bounds[None, :], axis=1)
  shuffle = jnp.argsort(jnp.where(jnp.arange(cmax) < p.num_classes, u_shuffle, 2.0 + jnp.arange(cmax)))
  cls = jnp.where(p.ordered, jnp.where(p.reversed, p.num_classes - 1 - cls, cls), shuffle[cls])
  y = jnp.select([task == REGRESSION, task == BINARY], [reg, binary], cls.astype(jnp.float32))
  num_classes = jnp.select([task == REGRESSION, task == BINARY], [0, 2], p.num_classes)
  return jnp.where(valid, y, 0.0), task.astype(jnp.int32), num_classes.astype(jnp.int32)


def postprocess(key, x, feature_mask, valid, train, p: scm.AttributeParams, hp: AttributeConfig):
  """Categorical columns, 4-sigma clipping, standardisation, permutation, constant-column removal.

  Returns:
    ``(x [N, F], feature_mask [F])``, kept columns first.
  """
  f = x.shape[1]
  u_cat, u_k, u_codes, u_perm = rng.uniforms(key, (f,), (f,), (f, hp.categories_max), (f,))
  categorical = u_cat < hp.categorical_prob
  cats = rng.randint(u_k, 2, hp.categories_max)
  ranks = jax.vmap(_rank_fraction, in_axes=(1, None), out_axes=1)(x, valid)
  bins = jnp.minimum(jnp.floor(ranks * cats[None, :]), cats[None, :] - 1).astype(jnp.int32)
  slots = jnp.arange(hp.categories_max)[None, :]
  codes = jnp.argsort(jnp.where(slots < cats[:, None], u_codes, 2.0 + slots), axis=1)
  coded = jnp.take_along_axis(codes, bins.T, axis=1).T.astype(x.dtype)
  x = jnp.where(categorical[None, :], coded, x)
  mean, std = scm._mean_std(x, valid)  # pylint: disable=protected-access
  x = jnp.clip(x, mean - hp.outlier_sigma * std, mean + hp.outlier_sigma * std)
  x = scm.standardize(x, valid)
  perm = jnp.argsort(jnp.where(feature_mask, u_perm, 2.0 + jnp.arange(f)))
  perm = jnp.where(p.sort_features, jnp.arange(f), perm)
  x, feature_mask = x[:, perm], feature_mask[perm]
  _, train_std = scm._mean_std(x, train)  # pylint: disable=protected-access
  keep = feature_mask & (train_std[0] > 1e-6)
  order = jnp.argsort(~keep, stable=True)
  x, keep = x[:, order], keep[order]
  return jnp.where(keep[None, :] & valid[:, None], x, 0.0), keep


def train_split(key, valid, ratio):
  """A random ``round(ratio * n)`` (>= 1) of the valid nodes, independent of node ids."""
  n = jnp.sum(valid)
  k = jnp.maximum(jnp.round(ratio * n), 1)
  return valid & (_rank(rng.uniforms(key, valid.shape)[0], valid) < k)


def attributes(key, st: structure.StructureSample, hp: AttributeConfig) -> Sample:
  """Node features, target and split for a sampled graph."""
  k = jax.random.split(key, 5)
  p = scm.sample_params(k[0], hp)
  valid = st.graph.node_mask
  out = scm.forward(k[1], st.graph, p, hp)
  x, fmask, y_raw = scm.select(k[2], out, p, hp)
  train = train_split(k[3], valid, p.train_ratio)
  y, task, num_classes = make_target(k[4], y_raw, valid, p, hp)
  x, fmask = postprocess(jax.random.fold_in(k[4], 1), x, fmask, valid, train, p, hp)
  present = jnp.zeros((hp.num_classes_max,), bool).at[y.astype(jnp.int32)].max(train)
  ok = jnp.any(fmask) & ((task == REGRESSION) | (jnp.sum(present) >= 2))
  return Sample(st.graph, x, fmask, y, train, task, num_classes, st.block1, st.block2, st.is_pa, ok, st.params, p)


def sample(key: jax.Array, structure_hp: StructureConfig, attribute_hp: AttributeConfig) -> Sample:
  """One prior sample from one key (jittable; ``jax.vmap`` it over keys for a batch)."""
  k1, k2 = jax.random.split(key)
  return attributes(k2, structure.sample(k1, structure_hp), attribute_hp)


def permute_nodes(s: Sample, order: jax.Array) -> Sample:
  """Renames nodes so that new node ``j`` is old node ``order[j]``: X, y, split, labels and edges together.

  ``order`` must list the valid nodes first (a permutation of ``[N]``).
  """
  n = order.shape[0]
  new_id = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
  g = graphs.relabel(s.graph, new_id, s.graph.node_mask[order])
  return s._replace(graph=g, x=s.x[order], y=s.y[order], train_mask=s.train_mask[order],
                    block1=s.block1[order], block2=s.block2[order], is_pa=s.is_pa[order])
