"""GraphPFN prior: determinism, ranges, edge targets, simple connected graphs, permutations, shapes, bad configs,
components against networkx (the structure sampler's parts: tests/test_graphpfn_structure.py)."""

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
  assert np.all((p.n_pa >= 0) & (p.n_pa <= np.ceil(sh.pa_ratio_max * p.n_nodes)))
  assert np.all(p.n_groups2 == p.n_groups1)  # one number of groups per graph (the reference's pretraining config)
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
  """SBM edges drawn ~ Poisson(sum of the SBMs' expected edges): mean of (drawn - expected) / sqrt(expected) is 0
  within 4 s.e.; the expectation is at most the nominal target (the reference draws the upper triangle of B)."""
  sh, _ = _hps()
  keys = jax.random.split(jax.random.key(5), 64)
  fn = jax.jit(jax.vmap(lambda k: structure.sample(k, sh)))
  out = fn(keys)
  m1, m2, _ = jax.vmap(lambda p: structure.edge_targets(p, sh))(out.params)
  expected = np.asarray(out.sbm.expected_edges).sum(1)
  assert np.all(expected <= np.asarray(m1 + m2) * (1 + 1e-5))
  z = (np.asarray(out.sbm_edges) - expected) / np.sqrt(expected)
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
  config = prior_config.get_config("smoke")
  config.attribute_panel_graphs = 3
  with pytest.raises(config_schema.ConfigError, match="attribute_panel_graphs.*too few"):
    runner.validate(config)


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
