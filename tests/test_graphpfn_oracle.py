"""GraphPFN structure prior against the reference's algorithm (the NumPy oracle, launch/bench/graphpfn_oracle.py).

Two-sample tests (KS and paired signed-rank, Bonferroni over 20 tests at
1%) on 200 graphs of the smoke preset's sizes, each pair drawn with the same
hyperparameters: the default (the reference's prior) passes, and each of the
five earlier variants is rejected by at least one test. All six JAX
samples come from one compilation (the variants as traced flags).
"""

import functools

import jax
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
def _params():
  return jax.jit(jax.vmap(lambda k: structure.sample_params(k, HP)))(jax.random.split(jax.random.key(11), GRAPHS))


def _kwargs(host, i):
  p = {f: getattr(host, f)[i] for f in structure.StructureParams._fields}
  n_sbm = int(p["n_nodes"] - p["n_pa"])
  groups = two_sample.effective_groups(int(p["n_groups2"]), n_sbm, HP.min_group_size, HP.groups_max)
  return p, dict(n_sbm=n_sbm, groups2=groups, groups_max=HP.groups_max)


@functools.lru_cache(maxsize=None)
def _sampler():
  """One compilation for every variant (traced flags)."""
  return jax.jit(jax.vmap(lambda k, p, v: structure.sample_graph(k, p, HP, variant=v), in_axes=(0, 0, None)))


@functools.lru_cache(maxsize=None)
def _ours(name: str):
  out = _sampler()(jax.random.split(jax.random.key(12), GRAPHS), _params(), structure.only(name))
  host = jax.tree.map(np.asarray, _params())
  rows = [two_sample.structure_statistics(g, **_kwargs(host, i)[1]) for i, g in enumerate(two_sample.host_graphs(out))]
  return two_sample.table(rows)


@functools.lru_cache(maxsize=None)
def _reference():
  host = jax.tree.map(np.asarray, _params())
  rng = np.random.default_rng(13)
  rows = []
  for i in range(GRAPHS):
    p, kw = _kwargs(host, i)
    rows.append(two_sample.structure_statistics(oracle.sample(p, HP, rng)._asdict(), **kw))
  return two_sample.table(rows)


def _report(results):
  return "\n".join(f"{r.statistic}/{r.test}: value {r.value:+.3f}, p {r.p_value:.2e}" for r in results)


def test_reference_prior_matches_the_oracle():
  results = two_sample.compare(_ours("reference"), _reference())
  assert len(results) == 2 * len(two_sample.STRUCTURE_STATS)
  assert all(r.n >= GRAPHS * 0.9 for r in results if r.statistic != "subgraph_degree_slope"), _report(results)
  assert not two_sample.rejected(results), _report(results)


@pytest.mark.parametrize("name", structure.VARIANTS)
def test_each_earlier_variant_is_rejected(name):
  results = two_sample.compare(_ours(name), _reference())
  assert two_sample.rejected(results), _report(results)


def test_compare_names_the_mismatched_statistic():
  a = {k: np.zeros(3) for k in two_sample.STRUCTURE_STATS}
  b = dict(a, clustering=np.zeros(4))
  with pytest.raises(ValueError, match="clustering"):
    two_sample.compare(a, b)
