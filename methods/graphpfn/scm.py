"""The GraphPFN attribute prior: a graph-aware structural causal model (SCM).

GraphPFN (Eremeev et al., 2025, arXiv:2509.21489), Sec. 3.2: the MLP-based
SCM prior of TabPFN / TabICL (Hollmann et al., 2023; Qu et al., 2025) with
semi-graph layers. Each layer is ``h = Linear(x)`` followed by
``out = where(mask, Conv(graph, h), h)``, ``mask ~ Bernoulli(graph_conv_ratio)``
per unit, ``Conv`` one of GCN, SAGE-mean/min/max or a single-head attention
layer with random weights. The network is ``Linear(in, H)`` then
``(L - 1) x [activation -> semi-graph layer -> Gaussian noise]``; X and y are
hidden units (causal) or X = causes and y = the output (non-causal).

Reconstruction details (not fixed by the paper): every per-graph size is
meta-sampled as ``clip(round(m * exp(0.3 z)), min, max)`` with
``m ~ U(min, max)``; units are standardised over the nodes after each layer
(so ``init_std`` sets how far into its non-linear range each activation is
driven and ``noise_std`` is relative to unit-variance units); SAGE-x is ``(h + agg_x(h)) / 2``;
the "mixed" sampling draws each cause column normal, uniform or discrete.

Departures from the reference's public generator (yandex-research/graphpfn:
``lib/graphpfn/prior/gnn_scm.py`` and ``utils.py``; its later ``layers.py``,
``base_scm.py``, ``structural.py`` and ``pretrain.toml``; no port of that
generator exists here, so these are read off its code, not measured):

1. Units standardised after every layer; the reference standardises each
   unit before its activation too, then scales and shifts it at random
   (``exp(2 z1) (x + z2)``, one pair per layer or per unit), which this
   project does not.
2. Weights ``N(0, init_std^2 / fan_in)`` with Bernoulli dropout
   ``U(0, dropout_max)``; the reference: ``N(0, init_std^2)`` without fan-in
   scaling, block-wise dropout (random diagonal blocks) or Bernoulli
   dropout ``0.9 Beta(b, k)``, ``b, k ~ U(0.1, 5)``, std divided by the
   square root of the keep probability, no dropout in the first layer.
3. No biases (the reference's layers are ``nn.Linear`` with biases).
4. GCN with self-loops, ``D~^-1/2 (A + I) D~^-1/2 h`` (the reference: the
   neighbours' sum weighted ``1 / sqrt(d_u d_v)``, no self-loop); SAGE-x
   ``(h + agg_x(h)) / 2`` (the reference: ``agg_x(h)``); the attention
   layer attends with random query/key weights over ``h`` itself (the
   reference: random query/key/value and output linear layers).
5. Noise of one std per layer (the reference: optionally per unit,
   ``|N(0, std^2)|``).
6. Meta-sampled sizes and scales as above (the reference: ``lower +
   round(truncated normal)`` with a log-uniform mean and a log-uniform
   relative spread for causes, layers, width, noise and init std).
7. One activation per layer always (the reference: per layer with
   probability 1/2, else one for all layers; a slightly different list);
   "fourier" is one random cosine (the reference's random function sums
   256 random sines with decaying weights and is drawn ten times as often
   as any other activation).
8. Laplacian eigenvectors as causes with probability 1/2 (the reference's
   pretraining: none); PageRank ``log(pr n)``, damping 0.85 (the reference:
   ``log(pr + 1e-6)``, damping ``U(0.6, 0.9)``).
9. Causes: uniform ``U(-1.7, 1.7)`` (the reference: ``U(0, 1)``); "mixed"
   draws normal, uniform or discrete columns (the reference: normal,
   multinomial, clipped Zipf or uniform with random mixing shares,
   optionally pre-sampled means and stds).
10. In causal mode the width is not raised to ``1 + 2 n_features`` (the
    reference does), so a graph can have fewer features than drawn.
11. Non-causal mode: ``y`` is a unit of the last hidden layer (the
    reference adds one output block).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from envs import graphs
from methods.graphpfn import rng
from methods.graphpfn.hparams import AttributeConfig


class AttributeParams(NamedTuple):
  """One graph's SCM and task hyperparameters (scalars, ``activation [L]``)."""

  num_causes: jax.Array  # int32
  num_layers: jax.Array  # int32
  hidden_dim: jax.Array  # int32
  init_std: jax.Array  # float32
  noise_std: jax.Array  # float32
  dropout: jax.Array  # float32
  is_causal: jax.Array  # bool
  y_is_effect: jax.Array  # bool
  in_clique: jax.Array  # bool
  sort_features: jax.Array  # bool
  sampling: jax.Array  # int32: index into hp.samplings
  conv_type: jax.Array  # int32: index into hp.conv_types
  graph_conv_ratio: jax.Array  # float32
  activation: jax.Array  # [L] int32: index into hp.activations per layer
  use_degree: jax.Array  # bool
  use_pagerank: jax.Array  # bool
  use_eigvecs: jax.Array  # bool
  task: jax.Array  # int32: index into hp.tasks
  n_features: jax.Array  # int32
  num_classes: jax.Array  # int32
  binary_quantile: jax.Array  # float32
  ordered: jax.Array  # bool
  reversed: jax.Array  # bool
  train_ratio: jax.Array  # float32


def _meta_int(u, z, lo, hi):
  """``clip(round(m * exp(0.3 z)), lo, hi)`` with ``m ~ U(lo, hi)`` (meta-sampled size)."""
  return jnp.clip(jnp.round(rng.uniform(u, lo, hi) * jnp.exp(0.3 * z)), lo, hi).astype(jnp.int32)


def sample_params(key: jax.Array, hp: AttributeConfig) -> AttributeParams:
  """Meta-samples one graph's SCM and task hyperparameters from ``hp``."""
  k1, k2 = jax.random.split(key)
  u, u_act = rng.uniforms(k1, (24,), (hp.num_layers_max,))
  (z,) = rng.normals(k2, (3,))
  ratios = jnp.asarray(hp.graph_conv_ratios, jnp.float32)
  pick = lambda i, n: rng.randint(u[i], 0, n - 1)  # noqa: E731
  return AttributeParams(
      num_causes=_meta_int(u[0], z[0], hp.num_causes_min, hp.num_causes_max),
      num_layers=_meta_int(u[1], z[1], hp.num_layers_min, hp.num_layers_max),
      hidden_dim=_meta_int(u[2], z[2], hp.hidden_dim_min, hp.hidden_dim_max),
      init_std=rng.log_uniform(u[3], hp.init_std_min, hp.init_std_max),
      noise_std=rng.log_uniform(u[4], hp.noise_std_min, hp.noise_std_max),
      dropout=u[5] * hp.dropout_max,
      is_causal=u[6] < hp.causal_prob,
      y_is_effect=u[7] < hp.y_is_effect_prob,
      in_clique=u[8] < hp.in_clique_prob,
      sort_features=u[9] < hp.sort_features_prob,
      sampling=pick(10, len(hp.samplings)),
      conv_type=pick(11, len(hp.conv_types)),
      graph_conv_ratio=ratios[pick(12, len(hp.graph_conv_ratios))],
      activation=rng.randint(u_act, 0, len(hp.activations) - 1),
      use_degree=u[14] < hp.degree_input_prob,
      use_pagerank=u[15] < hp.pagerank_input_prob,
      use_eigvecs=u[16] < hp.eigvec_input_prob,
      task=pick(17, len(hp.tasks)),
      n_features=rng.randint(u[18], hp.n_features_min, hp.n_features_max),
      num_classes=rng.randint(u[19], hp.num_classes_min, hp.num_classes_max),
      binary_quantile=rng.uniform(u[20], hp.binary_quantile_min, hp.binary_quantile_max),
      ordered=u[21] < hp.ordered_prob,
      reversed=u[22] < hp.reversed_prob,
      train_ratio=rng.uniform(u[23], hp.train_ratio_min, hp.train_ratio_max),
  )


def _activation(name: str, x: jax.Array, freq: jax.Array, phase: jax.Array) -> jax.Array:
  fns = {
      "identity": lambda: x, "tanh": lambda: jnp.tanh(x), "relu": lambda: jax.nn.relu(x),
      "leaky_relu": lambda: jax.nn.leaky_relu(x, 0.1), "elu": lambda: jax.nn.elu(x),
      "sigmoid": lambda: jax.nn.sigmoid(x), "sin": lambda: jnp.sin(x), "abs": lambda: jnp.abs(x),
      "square": lambda: jnp.minimum(x * x, 1e6), "softplus": lambda: jax.nn.softplus(x),
      "gelu": lambda: jax.nn.gelu(x), "step": lambda: (x > 0).astype(x.dtype),
      "gaussian": lambda: jnp.exp(-x * x), "log_abs": lambda: jnp.log(jnp.abs(x) + 1e-3),
      "sqrt_abs": lambda: jnp.sqrt(jnp.abs(x)), "silu": lambda: jax.nn.silu(x),
      "relu6": lambda: jax.nn.relu6(x), "sign": lambda: jnp.sign(x),
      "fourier": lambda: jnp.cos(freq * x + phase),  # random Fourier features
  }
  return fns[name]()


def _mean_std(h, valid):
  w = valid.astype(h.dtype)[:, None]
  count = jnp.maximum(jnp.sum(w), 1.0)
  mean = jnp.sum(w * h, axis=0, keepdims=True) / count
  var = jnp.sum(w * (h - mean) ** 2, axis=0, keepdims=True) / count
  return mean, jnp.sqrt(var)  # [1, D] each


def standardize(h: jax.Array, valid: jax.Array) -> jax.Array:
  """Columns of ``h [N, D]`` to zero mean and unit variance over the valid nodes (0 on padding)."""
  mean, std = _mean_std(h, valid)
  return jnp.where(valid[:, None], (h - mean) / jnp.maximum(std, 1e-6), 0.0)


def _causes(key, p: AttributeParams, hp: AttributeConfig, valid):
  """Root causes ``[N, C]`` (masked to the active columns) from the graph's sampling kind."""
  n, c = valid.shape[0], hp.max_causes
  k1, k2 = jax.random.split(key)
  (normal,) = rng.normals(k1, (n, c))
  u, u_levels, u_discrete, u_kind = rng.uniforms(k2, (n, c), (1, c), (n, c), (1, c))
  uniform = rng.uniform(u, -1.7, 1.7)
  levels = rng.randint(u_levels, 2, 5)
  discrete = jnp.floor(u_discrete * levels) - (levels - 1) / 2
  kind = rng.randint(u_kind, 0, 2)
  mixed = jnp.where(kind == 0, normal, jnp.where(kind == 1, uniform, discrete))
  names = hp.samplings
  choice = jnp.asarray([names.index(s) if s in names else -1 for s in ("normal", "mixed", "uniform")])
  x = jnp.where(p.sampling == choice[0], normal, jnp.where(p.sampling == choice[1], mixed, uniform))
  active = jnp.where(p.is_causal, p.num_causes, p.n_features)
  return jnp.where(valid[:, None] & (jnp.arange(c) < active)[None, :], x, 0.0)


def structural_inputs(key, graph: graphs.Graph, p: AttributeParams, hp: AttributeConfig):
  """Degree, PageRank and Laplacian eigenvectors ``[N, 2 + k]``, zeroed where not drawn."""
  valid = graph.node_mask
  deg = jnp.log1p(graphs.degree(graph))
  pr = jnp.log(graphs.pagerank(graph) * jnp.maximum(graph.num_nodes, 1) + 1e-12)
  eig = graphs.laplacian_eigenvectors(graph, key, hp.num_eigvecs)
  s = standardize(jnp.concatenate([deg[:, None], pr[:, None], eig], axis=1), valid)
  use = jnp.concatenate([p.use_degree[None], p.use_pagerank[None], jnp.repeat(p.use_eigvecs, hp.num_eigvecs)])
  return jnp.where(use[None, :], s, 0.0)


def _convolutions(wq, wk, graph, h, hp: AttributeConfig):
  """Every configured convolution of ``h``: ``[len(conv_types), N, H]``."""
  out = []
  for name in hp.conv_types:
    if name == "gcn":
      out.append(graphs.aggregate(graph, h, "gcn"))
    elif name.startswith("sage-"):
      out.append(0.5 * (h + graphs.aggregate(graph, h, name[5:])))
    else:
      d = h.shape[1]
      out.append(graphs.attention(graph, h, wq / jnp.sqrt(d), wk / jnp.sqrt(d)))
  return jnp.stack(out)


class SCMOutput(NamedTuple):
  units: jax.Array  # [N, L * H]: every layer's units (layer-major)
  unit_mask: jax.Array  # [L * H] bool: units of active layers and widths
  last_layer: jax.Array  # [L * H] bool: units of the last active layer
  causes: jax.Array  # [N, C]


def forward(key: jax.Array, graph: graphs.Graph, p: AttributeParams, hp: AttributeConfig) -> SCMOutput:
  """Runs the random semi-graph SCM on ``graph`` (GraphPFN Sec. 3.2)."""
  n, hd, lmax = graph.node_mask.shape[0], hp.hidden_dim_max, hp.num_layers_max
  valid = graph.node_mask
  ks = jax.random.split(key, 3 + lmax)  # ks[4:]: layers 1..L-1
  causes = _causes(ks[0], p, hp, valid)
  inputs = jnp.concatenate([causes, structural_inputs(ks[1], graph, p, hp)], axis=1)
  unit_on = jnp.arange(hd) < p.hidden_dim
  n_in = jnp.sum(jnp.any(inputs != 0, axis=0)).astype(jnp.float32)

  def linear(k, x, fan_in):
    k1, k2 = jax.random.split(k)
    (w,) = rng.normals(k1, (x.shape[1], hd))
    (keep,) = rng.uniforms(k2, w.shape)
    w, keep = p.init_std * w / jnp.sqrt(jnp.maximum(fan_in, 1.0)), keep >= p.dropout
    return x @ (jnp.where(keep, w, 0.0) / (1 - p.dropout))

  def settle(h):  # units standardised over the nodes; padding rows and inactive units zeroed
    return jnp.where(unit_on[None, :], standardize(h, valid), 0.0)

  h = settle(linear(ks[2], inputs, n_in))

  def layer_fn(h, inp):
    layer, kl = inp
    k = jax.random.split(kl, 3)
    freq, wq, wk, noise = rng.normals(k[0], (1, hd), (hd, hd), (hd, hd), (n, hd))
    phase, u_graph = rng.uniforms(k[1], (1, hd), (1, hd))
    freq, phase = 2.0 * freq, 2 * jnp.pi * phase
    branches = [lambda x, a=a: _activation(a, x, freq, phase) for a in hp.activations]
    a = jax.lax.switch(p.activation[layer], branches, h)
    z = linear(k[2], a, p.hidden_dim.astype(jnp.float32))
    convs = _convolutions(wq, wk, graph, z, hp)
    z = jnp.where(u_graph < p.graph_conv_ratio, convs[p.conv_type], z)
    z = z + p.noise_std * noise
    on = layer < p.num_layers
    h = jnp.where(on, settle(z), h)
    return h, jnp.where(on, h, 0.0)

  _, rest = jax.lax.scan(layer_fn, h, (jnp.arange(1, lmax), ks[4:]))
  layers = [h] + [rest[i] for i in range(lmax - 1)]
  units = jnp.concatenate(layers, axis=1)
  layer_of = jnp.repeat(jnp.arange(lmax), hd)
  unit_mask = (layer_of < p.num_layers) & jnp.tile(unit_on, lmax)
  return SCMOutput(units, unit_mask, unit_mask & (layer_of == p.num_layers - 1), causes)


def _random_index(u, mask):
  """A uniformly random index where ``mask`` (0 when none), from uniforms ``u``."""
  return jnp.argmax(jnp.where(mask, u, -1.0))


def select(key: jax.Array, out: SCMOutput, p: AttributeParams, hp: AttributeConfig):
  """Chooses X and the target's raw values (GraphPFN Sec. 3.2).

  Causal: y is a random unit (of the last layer when ``y_is_effect``), X are
  ``n_features`` other units (consecutive ones when ``in_clique``).
  Non-causal: X are the causes, y a unit of the last layer.

  Returns:
    ``(x [N, F], feature_mask [F], y_raw [N])``.
  """
  f = hp.n_features_max
  u_y, u_start, u_x = rng.uniforms(key, out.unit_mask.shape, (), out.unit_mask.shape)
  y_pool = jnp.where(p.is_causal & ~p.y_is_effect, out.unit_mask, out.last_layer)
  y_idx = _random_index(u_y, y_pool)
  y_raw = out.units[:, y_idx]
  cand = out.unit_mask & (jnp.arange(out.unit_mask.shape[0]) != y_idx)
  rank = jnp.cumsum(cand) - 1
  count = jnp.maximum(jnp.sum(cand), 1)
  start = rng.randint(u_start, 0, count - 1)
  clique = -((rank - start) % count).astype(jnp.float32)
  score = jnp.where(p.in_clique, clique, u_x)
  score = jnp.where(cand, score, -jnp.inf)
  _, idx = jax.lax.top_k(score, min(f, score.shape[0]))
  if idx.shape[0] < f:
    idx = jnp.concatenate([idx, jnp.zeros((f - idx.shape[0],), idx.dtype)])
  n_units = jnp.minimum(jnp.sum(cand), p.n_features)
  chosen = jnp.arange(f) < n_units
  in_order = idx[jnp.argsort(jnp.where(chosen, idx, score.shape[0] + jnp.arange(f)))]
  idx = jnp.where(p.sort_features, in_order, idx)
  causal_x = out.units[:, idx]
  causal_mask = jnp.arange(f) < n_units
  plain_x = out.causes[:, :f] if out.causes.shape[1] >= f else jnp.pad(out.causes, ((0, 0), (0, f - out.causes.shape[1])))
  plain_mask = jnp.arange(f) < p.n_features
  x = jnp.where(p.is_causal, causal_x, plain_x)
  mask = jnp.where(p.is_causal, causal_mask, plain_mask)
  return jnp.where(mask[None, :], x, 0.0), mask, y_raw
