"""Padded graphs in JAX: fixed-size sender/receiver arrays with masks, segment-sum aggregations.

A :class:`Graph` holds at most ``N`` nodes and ``E`` undirected edges; each
edge is stored once (``senders[e] < receivers[e]`` after :func:`simplify`) and
aggregations use both directions. Padding nodes and edges are masked out, so
every function here is jittable and ``jax.vmap``-able over a batch of graphs
of different sizes (the layout of jraph's ``GraphsTuple``, one graph per row).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
from jax import custom_batching
import jax.numpy as jnp


class Graph(NamedTuple):
  """An undirected graph padded to ``N`` nodes and ``E`` edges."""

  senders: jax.Array  # [E] int32
  receivers: jax.Array  # [E] int32
  edge_mask: jax.Array  # [E] bool
  node_mask: jax.Array  # [N] bool

  @property
  def num_nodes(self) -> jax.Array:
    return jnp.sum(self.node_mask, axis=-1)

  @property
  def num_edges(self) -> jax.Array:
    return jnp.sum(self.edge_mask, axis=-1)


def _directed(graph: Graph):
  """Both directions of every edge: ``(src [2E], dst [2E], mask [2E])``."""
  src = jnp.concatenate([graph.senders, graph.receivers])
  dst = jnp.concatenate([graph.receivers, graph.senders])
  mask = jnp.concatenate([graph.edge_mask, graph.edge_mask])
  return src, dst, mask


def degree(graph: Graph) -> jax.Array:
  """Node degrees ``[N]`` (float32; padding nodes have degree 0)."""
  n = graph.node_mask.shape[-1]
  _, dst, mask = _directed(graph)
  return jax.ops.segment_sum(mask.astype(jnp.float32), dst, num_segments=n)


def aggregate(graph: Graph, h: jax.Array, kind: str) -> jax.Array:
  """Neighbourhood aggregation of node features ``h [N, D]``.

  Args:
    graph: the graph.
    h: node features.
    kind: ``"sum"``, ``"mean"``, ``"min"``, ``"max"`` over neighbours (nodes
      without neighbours get 0), or ``"gcn"``: the symmetric normalisation
      with self-loops of Kipf & Welling (2017), ``D~^-1/2 (A + I) D~^-1/2 h``.

  Returns:
    ``[N, D]`` aggregated features.
  """
  n = graph.node_mask.shape[-1]
  src, dst, mask = _directed(graph)
  m = mask[:, None]
  if kind in ("sum", "mean", "gcn"):
    deg = degree(graph)
    if kind == "gcn":
      inv = jax.lax.rsqrt(deg + 1.0)
      msg = jnp.where(m, h[src] * inv[src][:, None], 0.0)
      return inv[:, None] * (jax.ops.segment_sum(msg, dst, num_segments=n) + inv[:, None] * h)
    s = jax.ops.segment_sum(jnp.where(m, h[src], 0.0), dst, num_segments=n)
    return s if kind == "sum" else s / jnp.maximum(deg, 1.0)[:, None]
  if kind in ("min", "max"):
    fill = jnp.inf if kind == "min" else -jnp.inf
    op = jax.ops.segment_min if kind == "min" else jax.ops.segment_max
    out = op(jnp.where(m, h[src], fill), dst, num_segments=n)
    return jnp.where(jnp.isfinite(out), out, 0.0)
  raise ValueError(f"unknown aggregation {kind!r}")


def attention(graph: Graph, h: jax.Array, wq: jax.Array, wk: jax.Array) -> jax.Array:
  """Single-head dot-product attention over each node's neighbours and itself.

  Args:
    graph: the graph.
    h: ``[N, D]`` node features (also the values).
    wq, wk: ``[D, D]`` query and key projections.

  Returns:
    ``[N, D]``: ``sum_j softmax_j(q_i . k_j / sqrt(D)) h_j`` over ``j`` in
    ``N(i) + {i}`` (graph transformer layer with random weights).
  """
  n, d = h.shape
  src, dst, mask = _directed(graph)
  loops = jnp.arange(n, dtype=src.dtype)
  src = jnp.concatenate([src, loops])
  dst = jnp.concatenate([dst, loops])
  mask = jnp.concatenate([mask, graph.node_mask])
  q, k = h @ wq, h @ wk
  score = jnp.sum(q[dst] * k[src], axis=-1) / jnp.sqrt(jnp.float32(d))
  score = jnp.where(mask, score, -jnp.inf)
  top = jax.ops.segment_max(score, dst, num_segments=n)
  w = jnp.where(mask, jnp.exp(score - top[dst]), 0.0)
  z = jax.ops.segment_sum(w, dst, num_segments=n)
  out = jax.ops.segment_sum(w[:, None] * h[src], dst, num_segments=n)
  return out / jnp.maximum(z, 1e-30)[:, None]


def components(graph: Graph, max_rounds: int = 64) -> jax.Array:
  """Connected-component labels ``[N]``: the smallest node id of each component.

  Hooking with full shortcutting (Shiloach & Vishkin, 1982, in its simplest
  form): every round, each edge whose ends carry different labels hooks the
  larger label (a root) under the smaller one (a scatter-min over the
  edges, each stored once), then pointer jumping runs until every node
  points at its root. A parent is always smaller than its child, so a root
  is the smallest id of its tree; every component with a crossing edge
  merges with another, so the number of rounds is at most about
  ``log2 N`` plus the round that finds no crossing edge (a while loop,
  capped at ``max_rounds``).
  """
  n = graph.node_mask.shape[-1]
  s, r, mask = graph.senders, graph.receivers, graph.edge_mask

  def compress(label):
    return jax.lax.while_loop(lambda p: jnp.any(p[p] != p), lambda p: p[p], label)

  def body(carry):
    label, _, i = carry
    ls, lr = label[s], label[r]
    cross = mask & (ls != lr)
    hooked = label.at[jnp.where(cross, jnp.maximum(ls, lr), n)].min(jnp.minimum(ls, lr), mode="drop")
    return compress(hooked), jnp.any(cross), i + 1

  label0 = jnp.arange(n, dtype=jnp.int32)
  label, _, _ = jax.lax.while_loop(
      lambda c: c[1] & (c[2] < max_rounds), body, (label0, jnp.bool_(True), jnp.int32(0))
  )
  return label


def largest_component(graph: Graph, count: jax.Array | None = None) -> jax.Array:
  """``[N]`` bool: the nodes of the largest connected component (ties: smallest id).

  With ``count``, the edges at slots ``>= count`` must be masked: components
  are labelled from the first ``count`` slots (:func:`on_prefix`).
  """
  n = graph.node_mask.shape[-1]
  if count is None:
    label = components(graph)
  else:
    label = on_prefix(lambda e, node_mask: components(Graph(*e, node_mask)), count,
                      (graph.senders, graph.receivers, graph.edge_mask), graph.node_mask,
                      prefix_sizes(graph.senders.shape[0], finest=4, smallest=graph.senders.shape[0] // 16))
  size = jax.ops.segment_sum(graph.node_mask.astype(jnp.int32), label, num_segments=n)
  return graph.node_mask & (label == jnp.argmax(size))


def prefix_sizes(total: int, finest: int = 8, smallest: int = 1024) -> tuple[int, ...]:
  """Static lengths for :func:`on_prefix`: ``total``, its halvings down to ``smallest``, and
  ``total * j / finest`` above half."""
  sizes, k = {total}, total
  while k > smallest:
    k = -(-k // 2)
    sizes.add(k)
  sizes |= {-(-total * j // finest) for j in range(finest // 2, finest)}
  return tuple(sorted(sizes))


def on_prefix(fn: Callable[[Any, Any], Any], count: jax.Array, arrays: Any, rest: Any,
              sizes: tuple[int, ...]) -> Any:
  """``fn(arrays, rest)`` when only the first ``count`` entries of every array of ``arrays`` matter.

  One graph at a time (under ``jit`` or ``lax.map``), ``fn`` runs on the
  first ``k`` entries (leading axis; ``rest`` whole), ``k`` the smallest of
  the static ``sizes`` that holds ``count`` (a ``lax.switch``), so its cost
  follows the graph's own edge count rather than the padded one. ``fn`` must give the same result for
  every such ``k`` and outputs of one shape. Under ``jax.vmap`` (where a
  switch would run every branch) it runs once on the whole arrays.
  """
  sizes = tuple(sorted(set(sizes)))
  total = jax.tree.leaves(arrays)[0].shape[0]
  if sizes[-1] != total:
    raise ValueError(f"on_prefix: the largest size {sizes[-1]} is not the arrays' length {total}")

  @custom_batching.custom_vmap
  def call(count, arrays, rest):
    branches = [lambda a, r, k=k: fn(jax.tree.map(lambda x: x[:k], a), r) for k in sizes]
    i = jnp.minimum(jnp.searchsorted(jnp.asarray(sizes), count, side="left"), len(sizes) - 1)
    return jax.lax.switch(i, branches, arrays, rest)

  @call.def_vmap
  def _batched(axis_size, in_batched, count, arrays, rest):
    del axis_size, count
    if not any(jax.tree.leaves(in_batched[1:])):
      out = fn(arrays, rest)
      return out, jax.tree.map(lambda _: False, out)
    axes = jax.tree.map(lambda b: 0 if b else None, in_batched[1:])
    out = jax.vmap(fn, in_axes=axes)(arrays, rest)
    return out, jax.tree.map(lambda _: True, out)

  return call(count, arrays, rest)


def simplify(graph: Graph, count: jax.Array | None = None) -> Graph:
  """Drops self-loops, parallel edges and edges touching masked nodes.

  Each kept edge is stored once as ``(min, max)``, sorted by ``u * N + v``;
  masked-out slots get ids 0. One sort of the int32 keys themselves (the ids
  are decoded from the sorted keys; sorting a permutation alongside would be
  several times slower on CPUs), so ``N**2 < 2**31`` is needed. With
  ``count``, the edges at slots ``>= count`` must be masked: only the first
  slots that hold them are read and sorted (:func:`on_prefix`), with the
  same result.
  """
  n = graph.node_mask.shape[-1]
  none = jnp.iinfo(jnp.int32).max
  total = graph.senders.shape[0]

  def run(edges, node_mask):
    senders, receivers, edge_mask = edges
    u, v = jnp.minimum(senders, receivers), jnp.maximum(senders, receivers)
    ok = edge_mask & (u != v) & node_mask[u] & node_mask[v]
    key = jax.lax.sort(jnp.where(ok, u * n + v, none))
    ok = key != none
    first = jnp.concatenate([jnp.ones((1,), bool), key[1:] != key[:-1]])
    pad = lambda x: jnp.pad(x, (0, total - x.shape[0]))  # noqa: E731
    return pad(jnp.where(ok, key // n, 0)), pad(jnp.where(ok, key % n, 0)), pad(ok & first)

  edges = (graph.senders, graph.receivers, graph.edge_mask)
  if count is None:
    out = run(edges, graph.node_mask)
  else:
    out = on_prefix(run, count, edges, graph.node_mask, prefix_sizes(total))
  return Graph(*out, graph.node_mask)


def relabel(graph: Graph, new_id: jax.Array, node_mask: jax.Array) -> Graph:
  """The same graph with node ``i`` renamed ``new_id[i]`` (edges stored as ``(min, max)``)."""
  s, r = new_id[graph.senders], new_id[graph.receivers]
  return Graph(jnp.minimum(s, r), jnp.maximum(s, r), graph.edge_mask, node_mask)


def compacting_permutation(key: jax.Array, node_mask: jax.Array):
  """A random order of the valid nodes, first, then the padding.

  Returns:
    ``(order [N], new_id [N])``: ``order[j]`` is the old id of new node
    ``j``; ``new_id`` is its inverse. Uniform over the valid nodes' orders.
  """
  n = node_mask.shape[-1]
  score = jnp.where(node_mask, jax.random.uniform(key, (n,)), 2.0 + jnp.arange(n) / n)
  order = jnp.argsort(score)
  new_id = jnp.zeros((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
  return order, new_id


def pagerank(graph: Graph, damping: float = 0.85, iterations: int = 30) -> jax.Array:
  """PageRank ``[N]`` by power iteration (dangling nodes teleport uniformly)."""
  n = graph.node_mask.shape[-1]
  valid = graph.node_mask.astype(jnp.float32)
  count = jnp.maximum(jnp.sum(valid), 1.0)
  deg = degree(graph)
  src, dst, mask = _directed(graph)

  def step(p, _):
    share = jnp.where(deg > 0, p / jnp.maximum(deg, 1.0), 0.0)
    flow = jax.ops.segment_sum(jnp.where(mask, share[src], 0.0), dst, num_segments=n)
    dangling = jnp.sum(jnp.where(deg > 0, 0.0, p))
    return valid * ((1 - damping) / count + damping * (flow + dangling / count)), None

  p, _ = jax.lax.scan(step, valid / count, None, length=iterations)
  return p


def _orthonormalize(q: jax.Array) -> jax.Array:
  """Modified Gram-Schmidt on the columns of ``q [N, k]`` (matmuls only: no LAPACK call, which can
  hang when a computation is sharded over CPU devices in jaxlib 0.10.2)."""
  cols = []
  for j in range(q.shape[1]):
    v = q[:, j]
    for c in cols:
      v = v - jnp.dot(c, v) * c
    cols.append(v / jnp.maximum(jnp.linalg.norm(v), 1e-12))
  return jnp.stack(cols, axis=1)


def laplacian_eigenvectors(graph: Graph, key: jax.Array, k: int, iterations: int = 40) -> jax.Array:
  """Approximate eigenvectors ``[N, k]`` of the normalised Laplacian's smallest non-trivial eigenvalues.

  Subspace iteration (Gram-Schmidt) on ``(I + D^-1/2 A D^-1/2) / 2`` (same
  eigenvectors, order reversed, spectrum in ``[0, 1]``), deflating the trivial
  eigenvector ``sqrt(d)``; each column is scaled to unit variance over the
  valid nodes. An approximation: ``iterations`` controls its accuracy.
  """
  n = graph.node_mask.shape[-1]
  valid = graph.node_mask.astype(jnp.float32)[:, None]
  deg = degree(graph)
  inv = jnp.where(deg > 0, jax.lax.rsqrt(jnp.maximum(deg, 1.0)), 0.0)[:, None]
  trivial = jnp.sqrt(deg)[:, None]
  trivial = trivial / jnp.maximum(jnp.linalg.norm(trivial), 1e-12)

  def op(x):
    x = x - trivial * (trivial.T @ x)
    y = 0.5 * (x + inv * aggregate(graph, inv * x, "sum"))
    return valid * (y - trivial * (trivial.T @ y))

  def step(q, _):
    return _orthonormalize(op(q)), None

  q0 = valid * jax.random.normal(key, (n, k))
  q, _ = jax.lax.scan(step, _orthonormalize(q0), None, length=iterations)
  count = jnp.maximum(jnp.sum(valid), 1.0)
  return q * jnp.sqrt(count)
