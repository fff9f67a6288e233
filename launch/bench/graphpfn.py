"""GraphPFN structure prior: the jitted JAX sampler against the reference's algorithm in NumPy, same hyperparameters.

The peer is :mod:`launch.bench.graphpfn_oracle`: the reference's sampler
(multi-level degree-corrected SBMs plus preferential attachment) in plain
NumPy, vectorised over edges as a NumPy user would write it; it samples the
same distribution, and the two-sample tests (``tests/test_graphpfn_oracle.py``)
check that. Both sides draw graphs for the same per-graph hyperparameters,
drawn once by :func:`methods.graphpfn.structure.sample_params`; the peer
runs one graph at a time on one core.

Rates: graphs per second and output edges per second (each side's own
simple graphs; the same distribution, so similar counts), JAX compile time
excluded and reported, and the number of graphs after which the jitted
sampler has paid for its compilation, ``compile / (1 / peer rate - 1 /
our rate)``. The JAX side samples one graph per call, padded to the
config's maxima (one compilation) or to its size bucket (one compilation
per bucket), the graphs spread over the devices by expected work
(:func:`_per_graph`). Both samplers and the oracle are timed in alternating
rounds (``timing.timed_together``), each its best warm pass over the graphs.

Where the time goes (:func:`stages`): the same graphs, bucketed, one at a time
on one device, timed stage by stage (the SBM levels, the simplification, and
the rest: the largest component, the attachment and the renaming), the JAX
stages composed from the functions :func:`methods.graphpfn.structure.sample_graph`
calls, the oracle's read from a profile of its :func:`graphpfn_oracle.sample`.
Inside the SBM levels, the part before the slot loop
(:func:`methods.graphpfn.sbm.slot_plan`) is timed alone, and so are the slot
draws (the three threefry uniforms of each drawn slot, chunk by chunk as
:func:`methods.graphpfn.sbm.sbm_levels` draws them): they bound what any
sampler that draws its slots this way can reach.
"""

from __future__ import annotations

import cProfile
import functools
import math
import pstats
import time

import jax
import jax.numpy as jnp
import numpy as np

from envs import graphs as graph_ops
from launch import mesh as mesh_lib
from launch.bench import graphpfn_oracle
from launch.bench import timing
from methods import graphpfn
from methods.graphpfn import sbm
from methods.graphpfn import structure
from methods.graphpfn import structure_params

PEER = "NumPy port of the reference's sampler (launch/bench/graphpfn_oracle.py), same hyperparameters, one core"


def _bench_config(quick: bool) -> tuple[graphpfn.StructureConfig, int, int]:
  """``(config, JAX graphs, peer graphs)``."""
  if quick:
    hp = graphpfn.StructureConfig(n_nodes_min=64, n_nodes_max=256, low_degree_max=16.0, high_degree_min=16.0,
                                  high_degree_max=48.0, min_first_level_nodes=8, subgraphs_max=4, groups_max=6)
    return hp, 64, 64
  return graphpfn.StructureConfig(), 16, 16  # the paper's ranges: 1000-5000 nodes, degrees up to 500


def _schedule(costs: list[float], num_devices: int) -> list[int]:
  """Device of each graph: longest first, each to the device with the least work so far (LPT)."""
  load, where = [0.0] * num_devices, [0] * len(costs)
  for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
    where[i] = min(range(num_devices), key=load.__getitem__)
    load[where[i]] += costs[i]
  return where


def _per_graph(hp, keys, params, mesh, bucketed: bool):
  """``(call, buckets)``: ``call()`` samples every graph by its own call and returns their outputs.

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
  fns = {b: stage_fns(hp, *b)["whole"] for b in set(size)}
  args = [jax.device_put((keys[i], jax.tree.map(lambda x, i=i: x[i], params)), devices[where[i]]) for i in range(count)]
  jax.block_until_ready(args)
  return (lambda: [fns[size[i]](*args[i]) for i in range(count)]), len(fns)


def _jax_edges(out) -> np.ndarray:
  return np.asarray([int(o.graph.num_edges) for o in out])


def _peer(hp, params, graphs: int):
  """``call()``: the oracle's output edge counts on the first ``graphs`` hyperparameter sets, one after another."""
  host = jax.tree.map(np.asarray, params)
  sets = [{f: getattr(host, f)[i] for f in structure.StructureParams._fields} for i in range(graphs)]

  def call():
    rng = np.random.default_rng(0)
    return np.asarray([len(graphpfn_oracle.sample(p, hp, rng).senders) for p in sets])

  return call


STAGES = ("SBM levels", "simplification", "component, attachment, renaming")


@functools.lru_cache(maxsize=None)
def stage_fns(hp: graphpfn.StructureConfig, num_nodes: int, num_slots: int) -> dict:
  """Jitted stages of ``structure.sample_graph`` at one size bucket, from the functions it calls.

  ``levels(key, params) -> (edges, valid, used)``, ``simplify(edges, valid,
  used) -> graph``, ``component(graph, used) -> [N] bool`` (the largest
  component: the SBM core), ``plan(key, params)``, the part of the levels
  before their slot loop (``sbm.slot_plan``: the SBM draws, the layout, the
  tables), ``draws(key, used)``, the levels' slot uniforms alone (summed, so
  that they are computed), and ``whole(key, params)``, the sampler itself;
  ``levels`` and ``plan`` take the SBM key the sampler splits from ``key``.
  """
  variant = structure_params.variant_of(hp)
  size = sbm.slot_chunk(num_slots)

  def draws(key, used):
    """The uniforms of every chunk that holds drawn slots, as ``sbm.sbm_levels`` draws them."""
    sums = sbm.over_slot_chunks(lambda i: jnp.sum(sbm.slot_uniforms(key, i, size)), lambda i: jnp.float32(0.0),
                                num_slots, used)
    return jnp.sum(sums)

  def sbm_inputs(key, params):
    """``(SBM key, d1, d2)``: the key the sampler splits for its levels, and the levels' degrees."""
    _, d1, d2 = structure_params.level_degrees(params, hp, variant)
    return jax.random.split(key, 3)[0], d1, d2

  def plan(key, params):
    k, d1, d2 = sbm_inputs(key, params)
    return sbm.slot_plan(k, params, hp, num_nodes, d1, d2, variant)

  def levels(key, params):
    k, d1, d2 = sbm_inputs(key, params)
    lv = sbm.sbm_levels(k, params, hp, num_nodes, num_slots, d1, d2, variant)
    return (lv.senders.astype(jnp.int32), lv.receivers.astype(jnp.int32), lv.mask), lv.valid, \
        jnp.minimum(lv.drawn, num_slots)

  def simplify(edges, valid, used):
    return graph_ops.simplify(graph_ops.Graph(*edges, valid), used)

  def whole(key, params):
    return structure.sample_graph(key, params, hp, num_nodes=num_nodes, num_slots=num_slots)

  return dict(levels=jax.jit(levels), simplify=jax.jit(simplify), component=jax.jit(graph_ops.largest_component),
              plan=jax.jit(plan), draws=jax.jit(draws), whole=jax.jit(whole))


PARTS = ("component", "plan", "draws")  # the stage_fns timed alone, each inside a stage


def _jax_stages(hp, keys, params, count: int, repeats: int) -> tuple[np.ndarray, dict]:
  """``(seconds [len(STAGES)], {part: seconds} of the PARTS)`` over ``count`` bucketed graphs, one device.

  Compile excluded; the last stage is the whole sampler less the first two.
  """
  host = jax.tree.map(np.asarray, params)
  total, parts = np.zeros(len(STAGES)), np.zeros(len(PARTS))
  for i in range(count):
    f = stage_fns(hp, *structure.bucket_of(int(host.n_nodes[i]), float(host.avg_degree[i]), hp))
    key, p = keys[i], jax.tree.map(lambda x, i=i: x[i], params)
    edges, valid, used = jax.block_until_ready(f["levels"](key, p))
    g = jax.block_until_ready(f["simplify"](edges, valid, used))
    args = dict(levels=(key, p), simplify=(edges, valid, used), whole=(key, p), component=(g, used),
                plan=(key, p), draws=(key, used))
    names = ("levels", "simplify", "whole") + PARTS
    jax.block_until_ready([f[name](*args[name]) for name in names[2:]])
    best = dict.fromkeys(names, math.inf)
    for _ in range(repeats):
      for name in names:
        t0 = time.perf_counter()
        jax.block_until_ready(f[name](*args[name]))
        best[name] = min(best[name], time.perf_counter() - t0)
    total += [best["levels"], best["simplify"], max(best["whole"] - best["levels"] - best["simplify"], 0.0)]
    parts += [best[name] for name in PARTS]
  return total, dict(zip(PARTS, parts))


def _peer_stages(hp, params, count: int) -> tuple[np.ndarray, float, float]:
  """``(seconds [len(STAGES)], profiled total, of which the attachment)`` of the oracle on ``count`` graphs.

  Read from ``cProfile``'s cumulative times of the oracle's own functions
  (``_levels``, ``_simple``, ``_attach``, ``sample``). Profiling adds a cost
  to every Python call, so the rows give the profiled total beside the
  unprofiled one.
  """
  prof = cProfile.Profile()
  prof.runcall(_peer(hp, params, count))
  cum = {name: ct for (path, _, name), (_, _, _, ct, _) in pstats.Stats(prof).stats.items()
         if path.endswith("graphpfn_oracle.py")}
  total = cum["sample"]
  return np.asarray([cum["_levels"], cum["_simple"], total - cum["_levels"] - cum["_simple"]]), total, cum["_attach"]


def stages(hp, keys, params, count: int, repeats: int = 2) -> dict:
  """Per-stage seconds of both sides on the first ``count`` graphs.

  Returns ``{"ours", "peer": [len(STAGES)], "ours_component": JAX's largest
  component (in the last stage), "ours_plan": the SBM levels before their
  slot loop, "ours_draws": the levels' slot draws alone (both in the first),
  "peer_profiled": the oracle's profiled total, "peer_attach": its attachment
  (in the last stage)}``.
  """
  peer, profiled, attach = _peer_stages(hp, params, count)
  ours, parts = _jax_stages(hp, keys, params, count, repeats)
  return dict(ours=ours, **{f"ours_{k}": v for k, v in parts.items()}, peer=peer, peer_profiled=profiled,
              peer_attach=attach)


def _stage_rows(st: dict, count: int, peer_s: float, devices: int, edge_ratio: float) -> list[dict]:
  """One row per stage (seconds, ratio = oracle / JAX) and the overall ratio's bound from the SBM levels alone.

  ``peer_s``: the oracle's unprofiled seconds on the same graphs;
  ``edge_ratio``: JAX's mean output edges over the oracle's (edges/s = graphs/s
  times edges per graph).
  """
  def most(seconds):
    """The bucketed ratio if the JAX side took only ``seconds`` on these graphs, split evenly over the devices."""
    bound = peer_s / (seconds / devices)
    return f"at most {bound:.1f}x in graphs/s and {bound * edge_ratio:.1f}x in edges/s"

  levels, plan, draws = st["ours"][0], st["ours_plan"], st["ours_draws"]
  rows = []
  for j, name in enumerate(STAGES):
    note = (f"one device, compile excluded, best of 2; oracle stages from a profile of its own functions (profiled "
            f"total {st['peer_profiled']:.2f}s against {peer_s:.2f}s unprofiled)")
    if j == 0:
      note += (f"; with every other stage free and the graphs split evenly over {devices} devices, the bucketed "
               f"ratio could reach {most(levels)}; of the levels, the part before the slot loop (the SBM draws, "
               f"the layout and the tables) takes {plan:.3g}s and the slot loop the other {levels - plan:.3g}s, "
               f"of which the slot draws alone (three threefry uniforms per slot) {draws:.3g}s and each slot's "
               f"searches and lookups the rest; with nothing but the slot draws, {most(draws)}")
    if j == len(STAGES) - 1:
      note += (f"; of which JAX's largest component {st['ours_component']:.3g}s and the oracle's attachment (a "
               f"Python loop over the new nodes) {st['peer_attach']:.3g}s")
    ours, peer = float(st["ours"][j]), float(st["peer"][j])
    rows.append(dict(benchmark=f"GraphPFN structure prior, where the time goes: {name} ({count} graphs bucketed, "
                               f"seconds; ratio = oracle / JAX)", unit="s", ours=ours, peer=peer,
                     ratio=peer / ours if ours > 0 else math.inf, peer_name=PEER, notes=note))
  return rows


def break_even(compile_s: float, ours: float, peer: float) -> float:
  """Graphs after which compiling and sampling at ``ours`` graphs/s beats sampling at ``peer`` graphs/s."""
  gain = 1.0 / peer - 1.0 / ours
  return compile_s / gain if gain > 0 else math.inf


def _rows(label, seconds, compile_s, edges, peer_s, peer_edges, how):
  g, pg = len(edges) / seconds, len(peer_edges) / peer_s
  e, pe = edges.sum() / seconds, peer_edges.sum() / peer_s
  even = break_even(compile_s, g, pg)
  paid = f"paid back after {even:,.0f} graphs" if math.isfinite(even) else "never paid back"
  note = f"{how}; mean edges {edges.mean():,.0f} (JAX) vs {peer_edges.mean():,.0f} (oracle)"
  common = dict(peer_name=PEER, notes=f"{note}; compile {compile_s:.1f}s excluded, {paid}")
  return [dict(common, benchmark=f"{label}, graphs/s", unit="graphs/s", ours=g, peer=pg, ratio=g / pg),
          dict(common, benchmark=f"{label}, edges/s", unit="edges/s", ours=e, peer=pe, ratio=e / pe)]


def run(quick: bool) -> list[dict]:
  hp, batch, peer_graphs = _bench_config(quick)
  mesh = mesh_lib.make_mesh()
  batch = mesh_lib.padded_size(batch, mesh)
  keys = jax.random.split(jax.random.key(0), batch)
  params = jax.jit(jax.vmap(lambda k: structure.sample_params(k, hp)))(jax.random.split(jax.random.key(1), batch))
  size = "n 64-256, degree <= 48" if quick else "paper ranges: n 1000-5000, degree <= 500"
  how = f"{mesh_lib.describe_devices()}; one call per graph, graphs spread over the devices by size"
  # Both samplers and the oracle are timed in alternating rounds, each its best warm pass.
  padded, _ = _per_graph(hp, keys, params, mesh, bucketed=False)
  calls = [(padded, ()), (_peer(hp, params, min(peer_graphs, batch)), ())]
  if not quick:  # the bucketed sampler is timed at full size only
    bucketed, count = _per_graph(hp, keys, params, mesh, bucketed=True)
    calls.append((bucketed, ()))
  ours, peer, *rest = timing.timed_together(calls)
  edges, peer_edges, peer_s = _jax_edges(ours.output), peer.output, peer.warm
  print(f"graphpfn structure: JAX {batch / ours.warm:.2f} graphs/s padded, oracle "
        f"{len(peer_edges) / peer_s:.2f} graphs/s; mean edges {edges.mean():,.0f} (JAX) vs "
        f"{peer_edges.mean():,.0f} (oracle)", flush=True)

  rows = _rows(f"GraphPFN structure prior ({size}), {batch} graphs padded to the maxima (one compilation)",
               ours.warm, ours.compile_seconds, edges, peer_s, peer_edges, how)
  if not quick:  # the bucketed sampler draws other graphs for the same keys (other slot counts): its own edges
    (bucket,) = rest
    edges = _jax_edges(bucket.output)
    print(f"graphpfn structure: JAX {batch / bucket.warm:.2f} graphs/s in {count} size buckets", flush=True)
    rows += _rows(f"GraphPFN structure prior ({size}), {batch} graphs in {count} size buckets (powers of two)",
                  bucket.warm, bucket.compile_seconds, edges, peer_s, peer_edges, how)
    graphs = min(peer_graphs, batch)
    rows += _stage_rows(stages(hp, keys, params, graphs), graphs, peer_s, len(mesh.devices.flat),
                        edges.mean() / peer_edges.mean())
  return rows
