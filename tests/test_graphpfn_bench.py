"""The GraphPFN benchmark's stage profile measures the sampler itself, and both sides' stages add up."""

import chex
import jax
import numpy as np

from launch.bench import graphpfn as bench
from methods.graphpfn import StructureConfig
from methods.graphpfn import rng
from methods.graphpfn import structure

HP = StructureConfig(n_nodes_min=64, n_nodes_max=128, low_degree_max=16.0, high_degree_min=16.0,
                     high_degree_max=32.0, min_first_level_nodes=8, subgraphs_max=4, groups_max=6)


def _draws(count: int):
  params = jax.vmap(lambda k: structure.sample_params(k, HP))(jax.random.split(jax.random.key(1), count))
  return jax.random.split(jax.random.key(0), count), params


def test_stages_compose_to_the_sampler():
  """Levels, simplification and the largest component reproduce the sampler's core and SBM edges, key for key."""
  keys, params = _draws(4)
  host = jax.tree.map(np.asarray, params)
  for i in range(4):
    size = structure.bucket_of(int(host.n_nodes[i]), float(host.avg_degree[i]), HP)
    f = bench.stage_fns(HP, *size)
    p = jax.tree.map(lambda x, i=i: x[i], params)
    edges, valid, used = f["levels"](keys[i], p)
    g = f["simplify"](edges, valid, used)
    core = np.asarray(f["component"](g, used))
    whole = f["whole"](keys[i], p)
    chex.assert_shape(core, (size[0],))
    assert core.sum() + int(host.n_pa[i]) == int(np.asarray(whole.graph.node_mask).sum())
    sbm_edges = np.asarray(g.edge_mask) & core[np.asarray(g.senders)]
    assert sbm_edges.sum() == np.asarray(whole.graph.edge_mask)[:size[1]].sum()


def test_stage_rows_add_up_and_bound_the_ratio():
  keys, params = _draws(4)
  st = bench.stages(HP, keys, params, 4, repeats=1)
  for side in ("ours", "peer"):
    chex.assert_shape(st[side], (len(bench.STAGES),))
    assert np.all(st[side] >= 0) and st[side][:2].min() > 0, st
  np.testing.assert_allclose(st["peer"].sum(), st["peer_profiled"], rtol=1e-9)
  assert 0 < st["peer_attach"] <= st["peer"][2]
  assert 0 < st["ours_component"] and 0 < st["ours_draws"] and 0 < st["ours_plan"]
  rows = bench._stage_rows(st, 4, peer_s=2 * st["peer"].sum(), devices=2, edge_ratio=0.5)
  assert [r["ratio"] for r in rows] == [p / o if o > 0 else np.inf for p, o in zip(st["peer"], st["ours"])]
  bound = 2 * st["peer"].sum() * 2 / st["ours"][0]
  assert f"reach at most {bound:.1f}x in graphs/s and {bound / 2:.1f}x in edges/s" in rows[0]["notes"]
  floor = 2 * st["peer"].sum() * 2 / st["ours_draws"]
  assert f"takes {st['ours_plan']:.3g}s and the slot loop the other {st['ours'][0] - st['ours_plan']:.3g}s" \
         in rows[0]["notes"]
  assert f"{st['ours_draws']:.3g}s and each slot's searches and lookups the rest; with nothing but the slot " \
         f"draws, at most {floor:.1f}x in graphs/s and {floor / 2:.1f}x in edges/s" in rows[0]["notes"]


def test_a_stage_that_took_no_time_has_an_infinite_ratio():
  """At tiny sizes the sampler can take less than its first two stages: the last stage is then 0 s, ratio inf."""
  st = dict(ours=np.array([1.0, 1.0, 0.0]), peer=np.array([2.0, 3.0, 4.0]), ours_plan=0.5, ours_draws=0.25,
            ours_component=0.1, peer_profiled=9.0, peer_attach=1.0)
  rows = bench._stage_rows(st, 1, peer_s=8.0, devices=1, edge_ratio=1.0)
  assert [r["ratio"] for r in rows] == [2.0, 3.0, np.inf]


def test_draws_are_the_levels_uniforms():
  """The draws stage computes the uniforms of exactly the chunks that hold drawn slots, three per slot."""
  chunk = bench.sbm.SLOT_CHUNK
  f = bench.stage_fns(HP, 128, 2 * chunk)
  key = jax.random.key(3)
  sums = [float(rng.uniforms(jax.random.fold_in(key, i), (3, chunk))[0].sum()) for i in range(2)]
  for used, expected in ((0, 0.0), (1, sums[0]), (chunk, sums[0]), (chunk + 1, sums[0] + sums[1])):
    np.testing.assert_allclose(float(f["draws"](key, used)), expected, rtol=1e-5)


def test_the_plan_is_what_the_levels_start_from():
  """The plan stage's counts are the levels' own: the levels drew ``plan.drawn`` edges, ``plan.c1`` of them on level 1."""
  keys, params = _draws(2)
  host = jax.tree.map(np.asarray, params)
  for i in range(2):
    num_nodes, num_slots = structure.bucket_of(int(host.n_nodes[i]), float(host.avg_degree[i]), HP)
    f = bench.stage_fns(HP, num_nodes, num_slots)
    p = jax.tree.map(lambda x, i=i: x[i], params)
    plan = f["plan"](keys[i], p)
    _, _, used = f["levels"](keys[i], p)
    assert 0 < int(plan.c1) <= int(plan.drawn)
    assert int(used) == min(int(plan.drawn), num_slots)
