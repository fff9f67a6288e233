"""GraphPFN structure prior against the reference's algorithm (the NumPy oracle, launch/bench/graphpfn_oracle.py).

Two-sample tests (KS and paired signed-rank, Bonferroni over 20 tests at
1%) on 200 graphs of the smoke preset's sizes, each pair drawn with the same
hyperparameters: the default (the reference's prior) passes, and each of the
five earlier variants is rejected by at least one test. All six JAX
samples come from one compilation (the variants as traced flags).
"""

import functools

import numpy as np
import pytest

from launch.bench import graphpfn_oracle as oracle
from methods.graphpfn import StructureConfig
from methods.graphpfn import structure
from methods.graphpfn import two_sample

# The smoke preset's structure sizes (launch/configs/graphpfn_prior.py): 64-128 nodes, degrees 1.5-32.
HP = StructureConfig(n_nodes_min=64, n_nodes_max=128, low_degree_max=16.0, high_degree_min=16.0,
                     high_degree_max=32.0, min_first_level_nodes=8, subgraphs_max=4, groups_max=6)
GRAPHS = 200


@functools.lru_cache(maxsize=None)
def _panel():
  return oracle.two_sample_panel(HP, graphs=GRAPHS, seed=11)


def _report(results):
  return "\n".join(f"{r.statistic}/{r.test}: value {r.value:+.3f}, p {r.p_value:.2e}" for r in results)


def test_reference_prior_matches_the_oracle():
  results = _panel().results["reference"]
  assert len(results) == 2 * len(two_sample.STRUCTURE_STATS)
  assert all(r.n >= GRAPHS * 0.9 for r in results if r.statistic != "subgraph_degree_slope"), _report(results)
  assert not two_sample.rejected(results), _report(results)


@pytest.mark.parametrize("name", structure.VARIANTS)
def test_each_earlier_variant_is_rejected(name):
  results = _panel().results[name]
  assert two_sample.rejected(results), _report(results)


def test_subgraph_degree_points_for_the_plot():
  """Every first-level subgraph of every graph gives a (size, internal degree) point, for each sampler."""
  sizes, degrees = _panel().subgraphs["oracle"]
  assert len(sizes) == len(degrees) >= GRAPHS and np.all(sizes >= 1) and np.all(degrees >= 0)
  assert set(_panel().subgraphs) == {"oracle", "reference", *structure.VARIANTS}


def test_compare_names_the_mismatched_statistic():
  a = {k: np.zeros(3) for k in two_sample.STRUCTURE_STATS}
  b = dict(a, clustering=np.zeros(4))
  with pytest.raises(ValueError, match="clustering"):
    two_sample.compare(a, b)
