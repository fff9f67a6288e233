"""The GraphPFN network: a prior-data fitted network over node tokens with attention over graph edges.

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 4: the LimiX tabular
foundation model (a PFN: rows are nodes, the training rows carry their
labels, every row attends to the training rows) with an attention-based
neighbourhood aggregation module and an MLP added after each of its layers,
each a residual branch with a layer norm and a zero-initialised output. This
is the smallest real version of it, trained from scratch on the prior
(a reconstruction where the paper builds on a pretrained LimiX):

* Node tokens, one per node (TabPFN v1-style; LimiX has one token per cell
  and attention across features, which is not reproduced): a per-feature
  linear embedding ``sum_j x_j w_j + b`` over the graph's ``f`` used features
  (unused columns are zero and masked), rescaled by ``(F_max / f)^(1/2)``
  (``feature_scaling="sqrt"``, which keeps the token's variance independent
  of ``f`` under random weights; TabPFN v1's ``"linear"`` ``F_max / f`` is an
  option), plus an embedded label on training nodes only (a learned class
  embedding, or a linear embedding of the training-standardised value).
* ``num_layers`` pre-norm residual layers ``h += Branch(LayerNorm(h))`` of
  (1) row attention in the PFN manner: every node's query attends to the
  training nodes' keys only, so test nodes never attend to each other
  (Mueller et al., 2022, Fig. 2); (2) neighbourhood attention over the
  graph's edges, both directions, with a softmax over each node's
  neighbours (a segment softmax, so padded edge lists work under ``jit``;
  the reference's ``u_dot_v`` + ``edge_softmax`` + ``u_mul_e_sum``);
  (3) a GELU MLP of width ``mlp_ratio * d``.
* Heads after a final layer norm: class logits (``C_max``, masked to the
  task's ``num_classes``) and the logits of the Riemann bar distribution
  (:mod:`methods.graphpfn.riemann`) of the training-standardised target.

Regression targets are standardised with the training nodes' mean and
standard deviation (the only labels a real graph has); :class:`Outputs`
carries both so predictions map back to the original units.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from methods.graphpfn.batching import GraphBatch
from methods.graphpfn.model_hparams import ModelConfig
from methods.graphpfn.tasks import REGRESSION

NEG = -1e9  # logit of a masked entry (finite: an all-masked softmax stays NaN-free)


class Outputs(NamedTuple):
  """Per-node outputs of one graph (a batch: a leading ``B`` on every field)."""

  class_logits: jax.Array  # [N, C] float32; NEG beyond the task's num_classes
  bin_logits: jax.Array  # [N, K] float32: the bar distribution of the standardised target
  y_mean: jax.Array  # [] training nodes' target mean (0 for classification)
  y_std: jax.Array  # [] training nodes' target std (1 for classification)


def standardise_targets(y: jax.Array, train_mask: jax.Array, task: jax.Array):
  """``(z [N], mean [], std [])``: regression targets standardised by the training nodes; classes unchanged.

  The std has a floor of 1e-6 (a constant training target gives ``z = 0``).
  """
  w = train_mask.astype(jnp.float32)
  count = jnp.maximum(jnp.sum(w), 1.0)
  m = jnp.sum(w * y) / count
  s = jnp.sqrt(jnp.sum(w * (y - m) ** 2) / count)
  s = jnp.maximum(s, 1e-6)
  reg = task == REGRESSION
  m, s = jnp.where(reg, m, 0.0), jnp.where(reg, s, 1.0)
  return (y - m) / s, m, s


def _dense(features, zero, name=None):
  init = nn.initializers.zeros if zero else nn.initializers.lecun_normal()
  return nn.Dense(features, kernel_init=init, name=name)


class RowAttention(nn.Module):
  """PFN attention over rows: every node attends to the training nodes (``[N, D] -> [N, D]``).

  Dense over ``[H, N, N]`` logits with the non-training keys masked: memory
  ``O(H N^2)`` per layer and graph (about 400 MB per layer for the paper's
  5000-node graphs with 4 heads in float32; ``ModelConfig.remat`` keeps one
  layer's worth alive in the backward pass). A graph with no training node
  gets 0.
  """

  heads: int
  zero_init: bool = True

  @nn.compact
  def __call__(self, h: jax.Array, key_mask: jax.Array) -> jax.Array:
    n, d = h.shape
    dh = d // self.heads
    q, k, v = (nn.DenseGeneral((self.heads, dh), name=name)(h) for name in ("query", "key", "value"))
    logits = jnp.einsum("nhc,mhc->hnm", q, k) / math.sqrt(dh)
    logits = jnp.where(key_mask[None, None, :], logits, NEG)
    w = jax.nn.softmax(logits, axis=-1) * jnp.any(key_mask).astype(h.dtype)
    out = jnp.einsum("hnm,mhc->nhc", w, v).reshape(n, d)
    return _dense(d, self.zero_init, "out")(out)


class NeighbourAttention(nn.Module):
  """Multi-head attention over each node's neighbours: a softmax per receiving node over its edges.

  GraphPFN's graph attention module (Sec. 4): ``a_ij = softmax_{j in N(i)}(q_i . k_j / sqrt(d_h))``,
  ``out_i = W_o sum_j a_ij v_j``. A node without neighbours gets 0 (its residual keeps it).
  """

  heads: int
  zero_init: bool = True

  @nn.compact
  def __call__(self, h: jax.Array, src: jax.Array, dst: jax.Array, mask: jax.Array) -> jax.Array:
    n, d = h.shape
    dh = d // self.heads
    q, k, v = (nn.DenseGeneral((self.heads, dh), name=name)(h) for name in ("query", "key", "value"))
    score = jnp.sum(q[dst] * k[src], axis=-1) / math.sqrt(dh)  # [E2, H]
    score = jnp.where(mask[:, None], score, NEG)
    top = jax.lax.stop_gradient(jax.ops.segment_max(score, dst, num_segments=n))
    w = jnp.where(mask[:, None], jnp.exp(score - top[dst]), 0.0)
    z = jax.ops.segment_sum(w, dst, num_segments=n)
    out = jax.ops.segment_sum(w[:, :, None] * v[src], dst, num_segments=n)
    out = out / jnp.maximum(z, 1e-30)[:, :, None]
    return _dense(d, self.zero_init, "out")(out.reshape(n, d))


class Layer(nn.Module):
  """``h += RowAttention(LN h); h += NeighbourAttention(LN h); h += MLP(LN h)``."""

  config: ModelConfig

  @nn.compact
  def __call__(self, h, train_mask, src, dst, edge_mask):
    c = self.config
    h = h + RowAttention(c.heads, c.zero_init, name="rows")(nn.LayerNorm(name="ln_rows")(h), train_mask)
    h = h + NeighbourAttention(c.heads, c.zero_init, name="graph")(nn.LayerNorm(name="ln_graph")(h), src, dst, edge_mask)
    m = nn.gelu(nn.Dense(c.mlp_ratio * c.width, name="mlp_in")(nn.LayerNorm(name="ln_mlp")(h)))
    return h + _dense(c.width, c.zero_init, "mlp_out")(m)


def directed_edges(g: GraphBatch, self_loops: bool):
  """Both directions of each edge of one graph: ``(src [2E (+N)], dst, mask)``; self-loops appended if asked."""
  src = jnp.concatenate([g.senders, g.receivers])
  dst = jnp.concatenate([g.receivers, g.senders])
  mask = jnp.concatenate([g.edge_mask, g.edge_mask])
  if self_loops:
    ids = jnp.arange(g.node_mask.shape[0], dtype=src.dtype)
    src, dst, mask = (jnp.concatenate([a, b]) for a, b in ((src, ids), (dst, ids), (mask, g.node_mask)))
  return src, dst, mask


class GraphPFN(nn.Module):
  """One graph (a :class:`GraphBatch` without its batch axis) to :class:`Outputs`."""

  config: ModelConfig

  @nn.compact
  def __call__(self, g: GraphBatch) -> Outputs:
    c = self.config
    fmask = g.feature_mask.astype(jnp.float32)
    used = jnp.maximum(jnp.sum(fmask), 1.0)
    scale = {"sqrt": jnp.sqrt(c.num_features / used), "linear": c.num_features / used, "none": 1.0}[c.feature_scaling]
    h = nn.Dense(c.width, name="features")(g.x * fmask[None, :] * scale)
    z, y_mean, y_std = standardise_targets(g.y, g.train_mask, g.task)
    cls = nn.Embed(c.num_classes, c.width, name="class_label")(jnp.clip(g.y.astype(jnp.int32), 0, c.num_classes - 1))
    reg = nn.Dense(c.width, name="value_label")(z[:, None])
    label = jnp.where(g.task == REGRESSION, reg, cls)
    h = h + jnp.where(g.train_mask[:, None], label, 0.0)
    src, dst, emask = directed_edges(g, c.self_loops)
    layer = nn.remat(Layer) if c.remat else Layer
    for i in range(c.num_layers):
      h = layer(c, name=f"layer_{i}")(h, g.train_mask, src, dst, emask)
    h = nn.LayerNorm(name="ln_out")(h)
    logits = nn.Dense(c.num_classes, name="class_head")(h)
    logits = jnp.where((jnp.arange(c.num_classes) < g.num_classes)[None, :], logits, NEG)
    return Outputs(logits, nn.Dense(c.num_bins, name="bin_head")(h), y_mean, y_std)


def _example(config: ModelConfig) -> GraphBatch:
  n, e = 4, 4
  return GraphBatch(
      x=jnp.zeros((n, config.num_features)), feature_mask=jnp.ones((config.num_features,), bool),
      y=jnp.zeros((n,)), train_mask=jnp.arange(n) < 2, eval_mask=jnp.arange(n) >= 2, node_mask=jnp.ones((n,), bool),
      senders=jnp.zeros((e,), jnp.int32), receivers=jnp.ones((e,), jnp.int32), edge_mask=jnp.ones((e,), bool),
      task=jnp.int32(2), num_classes=jnp.int32(2), weight=jnp.float32(1.0))


def init_params(key: jax.Array, *, config: ModelConfig):
  """Parameters of :class:`GraphPFN` (``key``: the initialisation); their shapes do not depend on graph sizes."""
  return GraphPFN(config).init(key, _example(config))["params"]


def forward(params, batch: GraphBatch, *, config: ModelConfig) -> Outputs:
  """:class:`GraphPFN` on every graph of ``batch`` (``jax.vmap`` over its leading axis): :class:`Outputs` ``[B, ...]``."""
  model = GraphPFN(config)
  return jax.vmap(lambda g: model.apply({"params": params}, g))(batch)
