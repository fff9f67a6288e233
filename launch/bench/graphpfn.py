"""GraphPFN structure prior: the jitted JAX sampler against the same sampler in networkx.

Both sides draw graphs with the same per-graph hyperparameters (node and PA
counts, target degree, level split, subgraphs, groups, density kinds), drawn
once by :func:`methods.graphpfn.structure.sample_params`. The peer is what
the reference does in Python: ``networkx.stochastic_block_model`` for each
first-level subgraph and for the global second level (block probabilities
``scale * P_rs`` so that the expected edge count is the same target; networkx
has no degree correction, so node weights are uniform there), the largest
connected component, then a per-node Barabasi-Albert loop (targets drawn
from the endpoint list), simple graph, shuffled ids. Rate: graphs per second,
JAX compile time excluded and reported. The JAX side samples one graph per
call (padded to the maxima, or to its size bucket), the graphs spread over
the devices (:func:`_per_graph`).
"""

from __future__ import annotations

import time

import jax
import networkx as nx
import numpy as np

from launch import mesh as mesh_lib
from launch.bench import timing
from methods import graphpfn
from methods.graphpfn import structure


def _densities(rng, b, uniform, coef):
  u = np.triu(rng.random((b, b)), 1)
  u = u + u.T
  d = np.ones(b) if uniform else rng.random(b)
  p = coef * u * (1.0 if uniform else np.sqrt(np.outer(d, d)))
  np.fill_diagonal(p, d)
  return p


def _sbm(rng, sizes, density, target):
  sizes = [int(s) for s in sizes if s > 0]
  b = len(sizes)
  density = density[:b, :b]
  n = np.asarray(sizes, float)
  lam = density * np.outer(n, n)
  np.fill_diagonal(lam, np.diag(density) * n * (n - 1) / 2)
  total = np.triu(lam).sum()
  prob = np.clip(density * target / max(total, 1e-12), 0, 1)
  return nx.stochastic_block_model(sizes, prob.tolist(), seed=int(rng.integers(2**31)), sparse=True)


def networkx_graph(p: dict, hp: graphpfn.StructureConfig, rng: np.random.Generator) -> nx.Graph:
  """One graph of the structure prior with hyperparameters ``p`` (host scalars), in networkx."""
  n_sbm = p["n_nodes"] - p["n_pa"]
  total = p["n_nodes"] * p["avg_degree"] / 2
  pa_edges = p["n_pa"] * (1 + hp.pa_max_degree) / 2
  sbm = max(total - pa_edges, n_sbm / 2)
  m1, m2 = p["first_level_ratio"] * sbm, (1 - p["first_level_ratio"]) * sbm
  k = p["n_subgraphs"]
  spare = n_sbm - k * hp.min_first_level_nodes
  sub_sizes = hp.min_first_level_nodes + np.diff(np.concatenate([[0], np.round(np.cumsum(rng.dirichlet(np.ones(k))) * spare)])).astype(int)
  g = nx.Graph()
  offset = 0
  for size in sub_sizes:
    groups = rng.multinomial(size, rng.dirichlet(np.ones(p["n_groups1"])))
    dens = _densities(rng, p["n_groups1"], p["uniform_density1"], hp.offdiagonal_coef)
    h = _sbm(rng, groups, dens, m1 * size / n_sbm)
    g.add_nodes_from(range(offset, offset + size))
    g.add_edges_from((u + offset, v + offset) for u, v in h.edges())
    offset += size
  groups = rng.multinomial(n_sbm, rng.dirichlet(np.ones(p["n_groups2"])))
  h = _sbm(rng, groups, _densities(rng, p["n_groups2"], p["uniform_density2"], hp.offdiagonal_coef), m2)
  perm = rng.permutation(n_sbm)
  g.add_edges_from((int(perm[u]), int(perm[v])) for u, v in h.edges())
  g = g.subgraph(max(nx.connected_components(g), key=len)).copy()
  ends = [x for e in g.edges() for x in e] or [next(iter(g.nodes()))]
  for t in range(p["n_pa"]):  # Barabasi-Albert: targets proportional to degree
    new = n_sbm + t
    for target in {ends[int(rng.integers(len(ends)))] for _ in range(int(rng.integers(1, hp.pa_max_degree + 1)))}:
      g.add_edge(new, target)
      ends += [new, target]
  g.remove_edges_from(nx.selfloop_edges(g))
  order = rng.permutation(g.number_of_nodes())
  return nx.relabel_nodes(g, dict(zip(g.nodes(), order.tolist())))


def _bench_config(quick: bool) -> tuple[graphpfn.StructureConfig, int, int]:
  if quick:
    hp = graphpfn.StructureConfig(n_nodes_min=64, n_nodes_max=256, low_degree_max=16.0, high_degree_min=16.0,
                                  high_degree_max=48.0, min_first_level_nodes=8, subgraphs_max=4, groups_max=6)
    return hp, 64, 16
  return graphpfn.StructureConfig(), 16, 8  # the paper's ranges: 1000-5000 nodes, degrees up to 500


def _schedule(costs: list[float], num_devices: int) -> list[int]:
  """Device of each graph: longest first, each to the device with the least work so far (LPT)."""
  load, where = [0.0] * num_devices, [0] * len(costs)
  for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
    where[i] = min(range(num_devices), key=load.__getitem__)
    load[where[i]] += costs[i]
  return where


def _per_graph(hp, keys, params, mesh, bucketed: bool):
  """Warm seconds, compile seconds, compiled sizes and edge counts of sampling every graph by its own call.

  Each graph is one call of a jitted sampler on one device: padded to the
  config's maxima (one compilation) or to its size bucket's (one per
  bucket). One graph at a time, the sampler sorts and labels only the slots
  its edges fill (``envs.graphs.on_prefix``) and skips the slot chunks past
  them. The graphs are spread over the mesh's devices by expected work
  (longest first) and dispatched asynchronously, so the devices work at
  once without padding a batch to the device count.
  """
  host = jax.tree.map(np.asarray, params)
  devices = list(mesh.devices.flat)
  count = len(host.n_nodes)
  target = [float(host.n_nodes[i] * host.avg_degree[i] / 2) for i in range(count)]
  size = [structure.bucket_of(int(host.n_nodes[i]), float(host.avg_degree[i]), hp) if bucketed
          else (hp.n_nodes_max, hp.sbm_edge_slots) for i in range(count)]
  where = _schedule([min(m, e) + e / 8 + 16 * n for m, (n, e) in zip(target, size)], len(devices))
  fns = {b: jax.jit(lambda k, p, n=b[0], e=b[1]: structure.sample_graph(k, p, hp, num_nodes=n, num_slots=e))
         for b in set(size)}
  args = [jax.device_put((keys[i], jax.tree.map(lambda x, i=i: x[i], params)), devices[where[i]]) for i in range(count)]
  jax.block_until_ready(args)
  out, cold, warm = timing.timed(lambda: [fns[size[i]](*args[i]) for i in range(count)])
  edges = np.asarray([int(o.graph.num_edges) for o in out])
  return warm, cold - warm, len(fns), edges


def run(quick: bool) -> list[dict]:
  hp, batch, peer_graphs = _bench_config(quick)
  mesh = mesh_lib.make_mesh()
  batch = mesh_lib.padded_size(batch, mesh)
  keys = jax.random.split(jax.random.key(0), batch)
  params = jax.jit(jax.vmap(lambda k: structure.sample_params(k, hp)))(jax.random.split(jax.random.key(1), batch))
  rng = np.random.default_rng(0)
  host = jax.tree.map(np.asarray, params)
  t0 = time.perf_counter()
  peer_edges = []
  for i in range(peer_graphs):
    p = {f: getattr(host, f)[i].item() for f in structure.StructureParams._fields}
    peer_edges.append(networkx_graph(p, hp, rng).number_of_edges())
  peer = peer_graphs / (time.perf_counter() - t0)
  size = "n 64-256, degree <= 48" if quick else "paper ranges: n 1000-5000, degree <= 500"
  common = dict(unit="graphs/s", peer=peer, peer_name="networkx SBMs + Python BA loop, same hyperparameters")
  seconds, compile_s, _, edges = _per_graph(hp, keys, params, mesh, bucketed=False)
  ours = batch / seconds
  print(f"graphpfn structure: JAX {ours:.2f} graphs/s padded to the maxima ({batch} graphs), networkx {peer:.2f} graphs/s",
        flush=True)
  note = (f"{mesh_lib.describe_devices()}; mean edges of the first {peer_graphs} graphs {edges[:peer_graphs].mean():,.0f} "
          f"(JAX) vs {np.mean(peer_edges):,.0f} (networkx: no degree correction, so fewer parallel edges merge)")
  how = "one call per graph, graphs spread over the devices by size"
  rows = [dict(common, benchmark=f"GraphPFN structure prior ({size}), {batch} graphs padded to the maxima",
               ours=ours, ratio=ours / peer, notes=f"{note}; one compiled size, {how}; compile {compile_s:.1f}s excluded")]
  if not quick:
    seconds, compile_s, count, _ = _per_graph(hp, keys, params, mesh, bucketed=True)
    print(f"graphpfn structure: JAX {batch / seconds:.2f} graphs/s in {count} size buckets", flush=True)
    rows.append(dict(common, benchmark=f"GraphPFN structure prior ({size}), {batch} graphs in size buckets",
                     ours=batch / seconds, ratio=batch / seconds / peer,
                     notes=f"{note}; {count} buckets (powers of two), {how}; compile {compile_s:.1f}s excluded"))
  return rows
