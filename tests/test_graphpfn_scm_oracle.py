"""GraphPFN attribute prior against the reference's generator (the NumPy oracle, launch/bench/graphpfn_scm_oracle.py).

The oracle is reproducible by seed and keeps what the reference's postprocessing guarantees; the panel runs this
project's SCM and the oracle on the same graphs; and the panel's neighbour statistic has
power: on 200 graphs of the reference's structure sampler, an oracle whose targets cannot see the graph (no conv
units, no structural inputs) is rejected at the panel's Bonferroni level, while two independent draws of the
unaltered oracle pass every test of the panel.
"""

import functools

import chex
import jax
import numpy as np
import pytest

from launch.bench import graphpfn_oracle
from launch.bench import graphpfn_scm_oracle as scm_oracle
from launch.configs import graphpfn_prior as prior_config
from methods import graphpfn
from methods.graphpfn import structure

GRAPHS = 200  # for the power check: the unaltered oracle's r2_gain is positive on a minority of graphs


@functools.lru_cache(maxsize=None)
def _graphs(count: int, seed: int):
  """``count`` graphs of the reference's structure sampler at the structure test's sizes (64-128 nodes)."""
  hp = scm_oracle.SMALL
  params = jax.jit(jax.vmap(lambda k: structure.sample_params(k, hp)))(jax.random.split(jax.random.key(seed), count))
  host, rng = jax.tree.map(np.asarray, params), np.random.default_rng(seed)
  return tuple(graphpfn_oracle.sample({f: getattr(host, f)[i] for f in structure.StructureParams._fields}, hp, rng)
               for i in range(count))


def _draw(g, seed, **kwargs):
  return scm_oracle.sample_attributes(g.senders, g.receivers, g.num_nodes, seed, **kwargs)


@functools.lru_cache(maxsize=None)
def _statistics(seed: int, ignore_graph: bool):
  rows = []
  for i, g in enumerate(_graphs(GRAPHS, 5)):
    a = _draw(g, (seed, i), ignore_graph=ignore_graph)
    rows.append(scm_oracle.attribute_statistics(g.senders, g.receivers, g.num_nodes, a.x, a.y, a.task, a.train_mask))
  return graphpfn.two_sample.table(rows, scm_oracle.SCM_STATS)


def _report(results):
  return "\n".join(f"{r.statistic}/{r.test}: value {r.value:+.3f}, p {r.p_value:.2e}" for r in results)


def test_oracle_is_reproducible_by_seed():
  g = _graphs(4, 1)[0]
  a, b, c = _draw(g, 3), _draw(g, 3), _draw(g, 4)
  chex.assert_rank(a.x, 2)
  chex.assert_shape([a.y, a.train_mask], (g.num_nodes,))
  chex.assert_type([a.x, a.y], np.float32)
  assert a.train_mask.dtype == bool and a.params == b.params
  np.testing.assert_array_equal(a.x, b.x)
  np.testing.assert_array_equal(a.y, b.y)
  assert a.params != c.params


def test_oracle_keeps_the_references_guarantees():
  """Standardised columns (ddof=1; the std floored at 1e-6), none constant on the training nodes, >= 4 of them; the first
  ``int(train_ratio n)`` nodes train, ``train_ratio`` in [0.05, 0.5]; a standardised regression target; classes
  ``0..k-1`` with >= 2 among the training nodes, ``k`` at most the drawn count; sizes in the config's ranges."""
  kinds = set()
  for i, g in enumerate(_graphs(24, 2)):
    a = _draw(g, i)
    p, n, x = a.params, g.num_nodes, a.x.astype(np.float64)
    np.testing.assert_allclose(x.mean(0), 0.0, atol=1e-4)
    std = x.std(0, ddof=1)  # below 1 only where the raw spread was under the reference's floor of 1e-6
    assert np.all((np.abs(std - 1.0) < 1e-4) | (std < 1.0)) and np.mean(np.abs(std - 1.0) < 1e-4) > 0.9, std
    n_train = int(n * p.train_ratio)
    assert x.shape[1] >= scm_oracle.MIN_FEATURES and np.all(np.ptp(x[:n_train], axis=0) > 0)
    np.testing.assert_array_equal(a.train_mask, np.arange(n) < n_train)
    assert 0.05 <= p.train_ratio <= 0.5 and 4 <= p.n_features <= 100 and x.shape[1] <= p.n_features
    assert p.n_layers >= 2 and p.hidden_dim >= 4 and p.n_causes >= 1 and 0 <= p.p_dropout <= 0.9
    assert len(p.activations) == p.n_layers - int(p.causal) and p.graph_conv_ratio in np.arange(11) / 10
    if a.task == graphpfn.REGRESSION:
      assert abs(a.y.mean()) < 1e-4 and abs(a.y.std(ddof=1) - 1.0) < 1e-4
    else:
      k = len(np.unique(a.y))
      assert set(np.unique(a.y)) == set(range(k)) and len(np.unique(a.y[:n_train])) >= 2
      assert k <= (2 if a.task == graphpfn.BINARY else p.n_classes)
    kinds.add(a.task)
  assert kinds == {graphpfn.REGRESSION, graphpfn.BINARY, graphpfn.MULTICLASS}


def test_a_graph_too_small_to_train_on_is_a_named_error():
  with pytest.raises(scm_oracle.SanityCheckError, match="no valid draw in 5 attempts"):
    scm_oracle.sample_attributes(np.array([0]), np.array([1]), 2, 0, max_attempts=5)


def test_panel_runs_on_the_same_graphs():
  """At the smoke preset's SCM sizes (a quicker compilation than the default AttributeConfig's)."""
  _, attribute_hp = prior_config.hparams_of(prior_config.get_config("smoke"))
  panel = scm_oracle.scm_two_sample_panel(graphs=32, seed=0, attribute_hp=attribute_hp)
  assert [r.statistic for r in panel.rows] == list(scm_oracle.SCM_STATS)
  assert 0 < panel.ours_ok <= 32
  for r in panel.results:
    assert r.test in ("ks", "chi2") and 0.0 <= r.p_value <= 1.0 and np.isfinite(r.value), _report(panel.results)
  for k in ("n_features", "discrete_share", "mean_abs_corr", "train_share", "r2_own", "r2_gain"):
    assert np.sum(np.isfinite(panel.ours[k])) == panel.ours_ok and np.all(np.isfinite(panel.oracle[k])), k
  assert "| r2_gain | ks |" in scm_oracle.markdown(panel.rows)


def test_two_draws_of_the_oracle_pass_every_test():
  results = scm_oracle.compare(_statistics(1, False), _statistics(2, False))
  assert not graphpfn.two_sample.rejected(results), _report(results)


def test_an_oracle_blind_to_the_graph_is_rejected_by_the_neighbour_statistic():
  results = {r.statistic: r for r in scm_oracle.compare(_statistics(3, True), _statistics(1, False))}
  assert results["r2_gain"].reject, _report(results.values())
  assert np.nanmean(_statistics(3, True)["r2_gain"]) < np.nanmean(_statistics(1, False)["r2_gain"])
