"""GraphPFN prior: determinism, ranges, edge targets, simple connected graphs, permutations, shapes, bad configs;
the sampler's parts (guided inverse CDF, SBM slot rates, vectorised preferential attachment) against references."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from envs import graphs
from launch.configs import graphpfn_prior as prior_config
from methods import graphpfn
from methods.common import hparams
from methods.graphpfn import rng
from methods.graphpfn import structure

B = 32  # the smoke preset's batch size: one compilation shared with the experiment test


@functools.lru_cache(maxsize=None)
def _hps():
  return prior_config.hparams_of(prior_config.get_config("smoke"))


@functools.lru_cache(maxsize=None)
def _batch(seed=0):
  sh, ah = _hps()
  return jax.block_until_ready(graphpfn.batch_fn(sh, ah)(jax.random.split(jax.random.key(seed), B)))


def _nx(s, i):
  g = s.graph
  m = np.asarray(g.edge_mask[i])
  n = int(g.num_nodes[i])
  out = nx.MultiGraph()
  out.add_nodes_from(range(n))
  out.add_edges_from(zip(np.asarray(g.senders[i])[m].tolist(), np.asarray(g.receivers[i])[m].tolist()))
  return out, n


def test_shapes_and_determinism():
  sh, ah = _hps()
  s = _batch()
  n, f = sh.n_nodes_max, ah.n_features_max
  chex.assert_shape(s.x, (B, n, f))
  chex.assert_shape([s.y, s.train_mask, s.block1, s.graph.node_mask], (B, n))
  chex.assert_shape([s.graph.senders, s.graph.receivers, s.graph.edge_mask], (B, sh.sbm_edge_slots + sh.pa_edge_slots))
  chex.assert_shape(s.feature_mask, (B, f))
  again = graphpfn.batch_fn(sh, ah)(jax.random.split(jax.random.key(0), B))
  chex.assert_trees_all_equal(s, again)
  # A graph does not depend on the batch it is sampled in.
  # One graph per call (the sampler's prefix paths) gives the vmapped batch's graphs.
  one = jax.jit(lambda k: graphpfn.sample(k, sh, ah))
  for i in (3, 10, 17, 24):
    g = one(jax.random.split(jax.random.key(0), B)[i]).graph
    chex.assert_trees_all_equal(g, jax.tree.map(lambda x, i=i: x[i], s.graph))
  assert np.all(np.isfinite(np.asarray(s.x))) and np.all(np.isfinite(np.asarray(s.y)))
  assert np.mean(np.asarray(s.ok)) > 0.8


def test_simple_connected_graphs_with_masks():
  s = _batch()
  for i in range(B):
    g, n = _nx(s, i)
    assert n >= 1 and np.all(np.asarray(s.graph.node_mask[i])[:n]) and not np.any(np.asarray(s.graph.node_mask[i])[n:])
    assert nx.number_of_selfloops(g) == 0
    assert g.number_of_edges() == nx.Graph(g).number_of_edges()  # no parallel edges
    assert nx.is_connected(g)
    x = np.asarray(s.x[i])
    assert not np.any(x[n:]) and not np.any(x[:, ~np.asarray(s.feature_mask[i])])


def test_sampled_hyperparameters_inside_ranges():
  sh, ah = _hps()
  s = _batch()
  p, a = jax.tree.map(np.asarray, s.structure), jax.tree.map(np.asarray, s.attributes)
  assert np.all((p.n_nodes >= sh.n_nodes_min) & (p.n_nodes <= sh.n_nodes_max))
  assert np.all((p.avg_degree >= sh.low_degree_min) & (p.avg_degree <= sh.high_degree_max))
  assert np.all((p.n_pa >= 0) & (p.n_pa <= sh.pa_ratio_max * p.n_nodes))
  assert np.all((p.n_groups1 >= sh.groups_min) & (p.n_groups1 <= sh.groups_max))
  assert np.all((p.first_level_ratio >= sh.first_level_ratio_min) & (p.first_level_ratio <= sh.first_level_ratio_max))
  for f in ("num_causes", "num_layers", "hidden_dim", "init_std", "noise_std", "n_features", "train_ratio"):
    v = getattr(a, f)
    assert np.all((v >= getattr(ah, f + "_min") * (1 - 1e-6)) & (v <= getattr(ah, f + "_max") * (1 + 1e-6))), f
  allowed = np.asarray(ah.graph_conv_ratios)
  assert all(np.min(np.abs(allowed - r)) < 1e-6 for r in np.unique(a.graph_conv_ratio))
  assert np.all(np.asarray(s.graph.num_nodes) <= p.n_nodes)
  ratio = np.asarray(s.train_mask).sum(1) / np.asarray(s.graph.num_nodes)
  assert np.all(np.abs(ratio - a.train_ratio) <= 1.0 / np.asarray(s.graph.num_nodes) + 1e-6)


def test_edge_targets_met_in_expectation():
  """SBM edges drawn ~ Poisson(target): mean of (drawn - target) / sqrt(target) is 0 within 4 s.e."""
  sh, _ = _hps()
  keys = jax.random.split(jax.random.key(5), 64)
  fn = jax.jit(jax.vmap(lambda k: structure.sample(k, sh)))
  out = fn(keys)
  m1, m2, _ = jax.vmap(lambda p: structure.edge_targets(p, sh))(out.params)
  target = np.asarray(m1 + m2)
  z = (np.asarray(out.sbm_edges) - target) / np.sqrt(target)
  assert abs(z.mean()) < 4 / np.sqrt(len(z)), z.mean()
  # Sparse graphs keep their degree: simplification removes few edges when n >> degree.
  deg = np.asarray(2 * out.graph.num_edges / out.graph.num_nodes)
  sparse = np.asarray(out.params.avg_degree) < 4
  assert sparse.sum() > 5
  assert np.median(deg[sparse] / np.asarray(out.params.avg_degree)[sparse]) > 0.6


def test_split_uncorrelated_with_node_id():
  s = _batch()
  corr = []
  for i in range(B):
    n = int(s.graph.num_nodes[i])
    t = np.asarray(s.train_mask[i])[:n].astype(float)
    if 0 < t.sum() < n:
      corr.append(np.corrcoef(np.arange(n), t)[0, 1] * np.sqrt(n))  # ~ N(0, 1) if unrelated
  assert abs(np.mean(corr)) < 4 / np.sqrt(len(corr))


def test_node_permutation_moves_x_y_and_graph_together():
  s = jax.tree.map(lambda x: x[0], _batch())
  n = int(s.graph.num_nodes)
  order = np.concatenate([np.random.default_rng(0).permutation(n), np.arange(n, s.x.shape[0])])
  p = graphpfn.permute_nodes(s, jnp.asarray(order))
  before = np.asarray(graphs.aggregate(s.graph, jnp.concatenate([s.x, s.y[:, None]], 1), "sum"))
  after = np.asarray(graphs.aggregate(p.graph, jnp.concatenate([p.x, p.y[:, None]], 1), "sum"))
  np.testing.assert_allclose(after, before[order], atol=1e-4)
  np.testing.assert_array_equal(np.asarray(p.train_mask), np.asarray(s.train_mask)[order])
  np.testing.assert_array_equal(np.asarray(graphs.degree(p.graph)), np.asarray(graphs.degree(s.graph))[order])


@pytest.mark.parametrize("changes, key", [
    (dict(n_nodes_min=300, n_nodes_max=200), "n_nodes_min"),
    (dict(n_nodes_min=64, high_degree_max=80.0), "high_degree_max"),
    (dict(first_level_ratio_min=-0.1), "first_level_ratio_min"),
    (dict(pa_ratio_max=-0.2), "pa_ratio_max"),
    (dict(n_nodes_min=100, min_first_level_nodes=64), "min_first_level_nodes"),
])
def test_impossible_structure_ranges_are_named(changes, key):
  with pytest.raises(hparams.HparamError, match=key):
    dataclasses.replace(structure.StructureConfig(n_nodes_min=1000), **changes)


def test_config_errors_name_the_key():
  from launch import config_schema, runner
  for preset in ("smoke", "cpu", "paper"):
    runner.validate(prior_config.get_config(preset))
  config = prior_config.get_config("smoke")
  config.structure.low_degree_min = 20.0
  config.structure.low_degree_max = 10.0
  with pytest.raises(config_schema.ConfigError, match=r"structure.low_degree_min.*the range is empty"):
    runner.validate(config)
  config = prior_config.get_config("smoke")
  config.attributes.train_ratio_min = -0.5
  with pytest.raises(config_schema.ConfigError, match="attributes.train_ratio_min"):
    runner.validate(config)
  config = prior_config.get_config("smoke")
  config.structure.high_degree_max = 500.0
  with pytest.raises(config_schema.ConfigError, match="structure.high_degree_max"):
    runner.validate(config)


def _params(**kw):
  base = dict(n_nodes=128, n_pa=0, avg_degree=30.0, first_level_ratio=1.0, n_subgraphs=2, n_groups1=3,
              n_groups2=4, uniform_density1=True, uniform_density2=True, zipf=False, zipf_gamma=2.5)
  base.update(kw)
  return structure.StructureParams(**{k: jnp.asarray(v) for k, v in base.items()})


def test_guided_inverse_cdf_matches_searchsorted():
  """The guide-table draw is ``searchsorted(cum, t, "right")`` restricted to the block, heavy tails included."""
  r = np.random.default_rng(1)
  n = 300
  w = (r.pareto(1.1, 2 * n) + 1).astype(np.float32)
  w[n - 20:n] = 0  # padding at the end of the first segment
  tab = structure._tables(jnp.asarray(w), (n, n), 2 * n)
  ranges = np.asarray([(0, 50), (50, 200), (200, 280), (300, 310), (310, 600)], np.int32)
  q = 20_000
  which = r.integers(0, len(ranges), q)
  x = r.random(q).astype(np.float32)
  x[:50] = 0.0
  x[50:100] = np.float32(1 - 2**-24)
  lo, hi = ranges[which, 0], ranges[which, 1]
  seg = (lo >= n).astype(np.int32)
  cum = np.asarray(tab.cum)
  base = np.where(lo % n == 0, 0.0, cum[np.maximum(lo - 1, 0)]).astype(np.float32)
  top = cum[hi - 1]

  @jax.jit
  def draw(seg, lo, hi, base, top, x):
    return structure._draw(tab, seg, lo, hi, base, top, x), base + x * (top - base)

  got, t = map(np.asarray, draw(seg, lo, hi, base, top, x))
  want = np.minimum([lo[i] + np.searchsorted(cum[lo[i]:hi[i]], t[i], side="right") for i in range(q)], hi - 1)
  np.testing.assert_array_equal(got, want)
  assert np.all(w[got] > 0)


@pytest.mark.parametrize("level", [1, 2])
def test_sbm_slots_follow_block_rates_and_node_weights(level):
  """One SBM level, diagonal blocks only, equal weights: every edge stays in its block, blocks get
  edges in proportion to ``n_r (n_r - 1) / 2`` and nodes equal shares of their block's endpoints
  (chi-square statistics within 5 standard deviations of their degrees of freedom)."""
  sh, _ = _hps()
  hp = dataclasses.replace(sh, offdiagonal_coef=0.0)
  p = _params(first_level_ratio=1.0 if level == 1 else 0.0)
  out = jax.jit(jax.vmap(lambda k: structure._sbm_levels(k, p, hp, 128, 4096)))(
      jax.random.split(jax.random.key(level), 16))
  u, v, mask, block = (np.asarray(a) for a in (out[0], out[1], out[2], out[3 if level == 1 else 4]))
  valid = np.asarray(out[5])
  chi_blocks = chi_nodes = df_blocks = df_nodes = 0.0
  for i in range(len(u)):
    b, ends_u, ends_v = block[i][valid[i]], u[i][mask[i]], v[i][mask[i]]
    assert np.all(b[ends_u] == b[ends_v])
    sizes = np.bincount(b, minlength=b.max() + 1).astype(float)
    lam = sizes * (sizes - 1) / 2
    used = lam > 0
    counts = np.bincount(b[ends_u], minlength=len(sizes))
    expect = mask[i].sum() * lam / lam.sum()
    chi_blocks += np.sum((counts[used] - expect[used]) ** 2 / expect[used])
    df_blocks += used.sum() - 1
    hits = np.bincount(np.concatenate([ends_u, ends_v]), minlength=len(b))
    for blk in np.flatnonzero(used & (counts > 0)):  # given its edges, a block's endpoints are multinomial
      members = b == blk
      e = hits[members].sum() / members.sum()
      chi_nodes += np.sum((hits[members] - e) ** 2 / e)
      df_nodes += members.sum() - 1
  for chi, df in ((chi_blocks, df_blocks), (chi_nodes, df_nodes)):
    assert abs(chi - df) < 5 * np.sqrt(2 * df), (chi, df)


def test_components_and_prefix_paths_match_networkx_and_the_full_arrays():
  """Hooking components give networkx's components (smallest id as label); with ``count`` (one graph at a
  time: a switch over prefix lengths; under vmap: the whole arrays) simplify and the largest component
  equal their full-array results."""
  n, total = 300, 4096
  simplify = jax.jit(graphs.simplify)
  lcc = jax.jit(graphs.largest_component)
  labels = jax.jit(graphs.components)
  r = np.random.default_rng(3)
  batch = []
  for count in (40, 299, 1500, 2600, 4096):
    s, d = r.integers(0, n, total), r.integers(0, n, total)
    if count == 299:  # one long path: many hooking rounds
      p = r.permutation(n)
      s[:count], d[:count] = p[:-1], p[1:]
    mask = (np.arange(total) < count) & (r.random(total) < 0.9)
    g = graphs.Graph(jnp.asarray(s, jnp.int32), jnp.asarray(d, jnp.int32), jnp.asarray(mask), jnp.arange(n) < n - 7)
    nxg = nx.Graph()
    nxg.add_nodes_from(range(n))
    nxg.add_edges_from(zip(s[mask].tolist(), d[mask].tolist()))
    want = np.zeros(n, int)
    for c in nx.connected_components(nxg):
      want[list(c)] = min(c)
    np.testing.assert_array_equal(np.asarray(labels(g)), want)
    full, part = simplify(g), simplify(g, count)
    chex.assert_trees_all_equal(full, part)
    np.testing.assert_array_equal(np.asarray(lcc(full)), np.asarray(lcc(full, count)))
    batch.append((g, count))
  gs = jax.tree.map(lambda *x: jnp.stack(x), *[g for g, _ in batch])
  counts = jnp.asarray([c for _, c in batch])
  chex.assert_trees_all_equal(jax.jit(jax.vmap(graphs.simplify))(gs, counts), jax.vmap(simplify)(gs))
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(graphs.largest_component))(gs, counts)),
                                np.asarray(jax.vmap(lcc)(gs)))


def test_preferential_attachment_equals_the_sequential_loop():
  """The vectorised Barabasi-Albert step draws exactly the targets of the one-node-at-a-time loop."""
  sh, _ = _hps()
  hp = dataclasses.replace(sh, pa_max_degree=3)
  n, n_sbm, n_pa, t_max, m = 96, 60, 30, 32, 3
  r = np.random.default_rng(0)
  s = np.concatenate([np.arange(n_sbm - 1), r.integers(0, n_sbm, 80)])
  d = np.concatenate([np.arange(1, n_sbm), r.integers(0, n_sbm, 80)])
  graph = graphs.simplify(graphs.Graph(jnp.asarray(s, jnp.int32), jnp.asarray(d, jnp.int32),
                                       jnp.ones(len(s), bool), jnp.arange(n) < n_sbm))
  p = _params(n_nodes=n_sbm + n_pa, n_pa=n_pa)
  key = jax.random.key(7)
  deg = graphs.degree(graph).astype(jnp.int32)
  targets, new, keep, is_pa = map(np.asarray, structure._attach(key, deg, graph.node_mask, p, hp, t_max))
  (u,) = rng.uniforms(key, (t_max, m + 1))
  links = np.asarray(rng.randint(u[:, 0], 1, m))
  u = np.asarray(u)
  em = np.asarray(graph.edge_mask)
  deg = np.bincount(np.concatenate([np.asarray(graph.senders)[em], np.asarray(graph.receivers)[em]]), minlength=n)
  ends = list(np.repeat(np.arange(n), deg))  # a uniform entry is a degree-proportional node
  for t in range(t_max):
    row = slice(t * m, (t + 1) * m)
    if t >= n_pa:
      assert not keep[row].any()
      continue
    count = len(ends)
    drawn = [ends[min(int(np.floor(np.float32(u[t, 1 + j]) * np.float32(count))), count - 1)] for j in range(links[t])]
    assert set(targets[row][keep[row]].tolist()) == set(drawn) and keep[row].sum() == len(set(drawn))
    assert np.all(new[row] == n_sbm + t)
    for target in drawn:
      ends += [n_sbm + t, target]
  np.testing.assert_array_equal(is_pa, (np.arange(n) >= n_sbm) & (np.arange(n) < n_sbm + n_pa))
