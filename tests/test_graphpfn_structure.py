"""GraphPFN structure sampler's parts against exact values and references: integer inverse CDF, compositions,
Zipf weights, the reference's five points on constructed cases (equal subgraph degree, the first-level cap,
U(0, 1) weights, group sizes, the n^2 diagonal), block rates through the slots, preferential attachment
against the sequential loop, and reproducibility by key."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special
from scipy import stats

from envs import graphs
from methods.graphpfn import StructureConfig
from methods.graphpfn import attachment
from methods.graphpfn import inverse_cdf
from methods.graphpfn import rng
from methods.graphpfn import sbm
from methods.graphpfn import structure

HP = StructureConfig(n_nodes_min=64, n_nodes_max=256, low_degree_max=16.0, high_degree_min=16.0, high_degree_max=48.0,
                     min_first_level_nodes=16, subgraphs_max=4, groups_max=4)


def _params(**kw):
  base = dict(n_nodes=200, n_pa=0, avg_degree=6.0, first_level_ratio=1.0, n_subgraphs=4, n_groups1=2, n_groups2=2,
              pa_ratio=0.0)
  base.update(kw)
  return structure.StructureParams(**{k: jnp.asarray(v, jnp.float32 if isinstance(v, float) else jnp.int32)
                                      for k, v in base.items()})


def test_integer_inverse_cdf_matches_searchsorted():
  """A guided draw is ``searchsorted(cum, t, "right")`` inside its range, heavy tails and zero weights included."""
  r = np.random.default_rng(1)
  n = 300
  units = (r.pareto(1.1, 2 * n) * 50).astype(np.int32)
  units[n - 20:n] = 0  # padding at the end of the first segment
  tab = inverse_cdf.tables(jnp.asarray(units), (n, n), 2 * n)
  cum = np.asarray(tab.cum)
  ranges = np.asarray([(0, 50), (50, 200), (200, 280), (300, 310), (310, 600)], np.int32)
  which = r.integers(0, len(ranges), 20_000)
  lo, hi = ranges[which, 0], ranges[which, 1]
  base = np.where(lo % n == 0, 0, cum[np.maximum(lo - 1, 0)])
  t = base + (r.random(len(lo)) * (cum[hi - 1] - base)).astype(np.int64)
  t[:50] = base[:50]
  t[50:100] = cum[hi[50:100] - 1] - 1
  got = np.asarray(jax.jit(inverse_cdf.draw)(tab, jnp.asarray(lo >= n, jnp.int32), jnp.asarray(lo), jnp.asarray(hi),
                                             jnp.asarray(t, jnp.int32)))
  want = np.minimum([lo[i] + np.searchsorted(cum[lo[i]:hi[i]], t[i], side="right") for i in range(len(t))], hi - 1)
  np.testing.assert_array_equal(got, want)
  assert np.all(units[got] > 0)


@pytest.mark.parametrize("total, parts, least", [(30, 4, 4), (12, 3, 0)])
def test_random_partition_is_uniform_over_compositions(total, parts, least):
  """Sizes sum to the total, respect the minimum, and the first part follows the exact composition count."""
  draws = 20_000
  u = rng.uniforms(jax.random.key(2), (draws, 7))[0]
  sizes = np.asarray(jax.jit(jax.vmap(sbm.random_partition, in_axes=(0, None, None, None)))(
      u, jnp.int32(total), jnp.int32(parts), jnp.int32(least)))
  assert np.all(sizes.sum(1) == total) and np.all(sizes[:, :parts] >= least) and not np.any(sizes[:, parts:])
  m = total - (least - 1) * parts
  first = sizes[:, 0] - (least - 1)  # the first part of a composition of m into `parts` positive parts
  support = np.arange(1, m - parts + 2)
  pmf = np.asarray([math.comb(m - j - 1, parts - 2) for j in support]) / math.comb(m - 1, parts - 1)
  counts = np.bincount(first, minlength=support[-1] + 1)[1:]
  assert stats.chisquare(counts, pmf * draws).pvalue > 1e-4


def test_zipf_matches_its_pmf():
  """Devroye's rejection sampler gives Zipf(2.5): chi-square over the bins 1, 2, 3, 4, 5-9, 10-99, >= 100."""
  x = np.asarray(jax.jit(sbm.zipf)(jax.random.key(3), jnp.full((40_000,), 2.5)))
  assert np.all(x >= 1) and np.all(x == np.floor(x))
  edges = [1, 2, 3, 4, 5, 10, 100, np.inf]
  k = np.arange(1, 100_001, dtype=float)
  pmf = k**-2.5 / special.zeta(2.5)
  probs = [pmf[(k >= a) & (k < b)].sum() for a, b in zip(edges[:-1], edges[1:])]
  probs[-1] = 1 - sum(probs[:-1])
  counts = [np.sum((x >= a) & (x < b)) for a, b in zip(edges[:-1], edges[1:])]
  assert stats.chisquare(counts, np.asarray(probs) * len(x)).pvalue > 1e-4


def test_diagonal_blocks_count_n_squared_pairs():
  """``B = P * n n^T`` with ``n^2`` on the diagonal (``n (n - 1) / 2`` in the variant), scaled to the nominal count."""
  density = jnp.asarray([[1.0, 0.1], [0.1, 0.5]])
  sizes = jnp.asarray([3, 5])
  np.testing.assert_allclose(sbm.pair_weights(density, sizes), [[9.0, 1.5], [1.5, 12.5]], rtol=1e-6)
  np.testing.assert_allclose(sbm.pair_weights(density, sizes, True), [[3.0, 1.5], [1.5, 5.0]], rtol=1e-6)
  w = sbm.pair_weights(density, sizes)
  b = np.asarray(sbm.block_rates(w, jnp.float32(40.0), jnp.sum(w)))
  assert math.isclose(b.sum(), 40.0, rel_tol=1e-6)
  assert math.isclose(np.triu(b).sum(), (40.0 + np.trace(b)) / 2, rel_tol=1e-6)  # the reference's expectation


def test_first_level_degree_capped_at_min_first_level_nodes_minus_one():
  p = _params(avg_degree=40.0, first_level_ratio=0.9)
  total, d1, d2 = map(float, structure.level_degrees(p, HP))
  assert (total, d1) == (40.0, 15.0) and math.isclose(d2, 25.0, rel_tol=1e-6)
  _, d1, d2 = map(float, structure.level_degrees(p, HP, structure.only("no_cap")))
  assert math.isclose(d1, 36.0, rel_tol=1e-6) and math.isclose(d2, 4.0, rel_tol=1e-5)
  # PA edges are taken off first: (d - r (1 + m) / 2) / (1 - r) = (10 - 0.2 * 1.5) / 0.8.
  total, _, _ = map(float, structure.level_degrees(_params(avg_degree=10.0, pa_ratio=0.2), HP))
  assert math.isclose(total, 12.125, rel_tol=1e-6)


@functools.lru_cache(maxsize=None)
def _levels(variant: str, **changes):
  hp = dataclasses.replace(HP, **changes)
  p = _params()
  _, d1, d2 = structure.level_degrees(p, hp)
  fn = jax.jit(jax.vmap(lambda k, v: sbm.sbm_levels(k, p, hp, 256, 2048, d1, d2, v), in_axes=(0, None)))
  return jax.tree.map(np.asarray, fn(jax.random.split(jax.random.key(4), 64), structure.only(variant))), hp


@pytest.mark.parametrize("variant", ["reference", "size_weighted"])
def test_every_subgraph_gets_the_same_expected_degree(variant):
  """Level 1 alone, no off-diagonal blocks: subgraph ``s`` gets ``Poisson(n_s d1 / 2)`` edges whatever its size
  (the reference); the size-weighted variant gives the largest subgraph more (its mean z > 4 standard errors)."""
  out, hp = _levels(variant, offdiagonal_coef=0.0)
  z_all, z_big = [], []
  for i in range(out.mask.shape[0]):
    sub = out.block1[i] // hp.groups_max
    sizes = np.bincount(sub[out.valid[i]], minlength=4)
    counts = np.bincount(sub[out.senders[i][out.mask[i]]], minlength=4)
    assert np.all(sub[out.senders[i][out.mask[i]]] == sub[out.receivers[i][out.mask[i]]])
    z = (counts - 3 * sizes) / np.sqrt(3 * sizes)
    z_all += list(z)
    z_big.append(z[np.argmax(sizes)])
  if variant == "reference":
    assert abs(np.mean(z_all)) < 4 / np.sqrt(len(z_all)) and abs(np.mean(z_big)) < 4 / np.sqrt(len(z_big))
  else:
    assert np.mean(z_big) > 4 * np.std(z_big) / np.sqrt(len(z_big))


def test_groups_one_number_per_graph_with_a_minimum_size():
  out, hp = _levels("reference")
  for i in range(out.mask.shape[0]):
    d = jax.tree.map(lambda x, i=i: x[i], out.draws)
    want = [structure_groups(int(n), 2, hp) for n in d.n_nodes]
    np.testing.assert_array_equal(d.n_groups, want)
    for n, g, sizes in zip(d.n_nodes, d.n_groups, d.group_sizes):
      assert sizes.sum() == n and (n == 0 or np.all(sizes[:g] >= max(hp.min_group_size, int(n / g * 0.1))))
  out, _ = _levels("unconstrained_groups")
  used = out.draws.n_nodes > 0
  assert np.any(out.draws.group_sizes[:, :, :2][used] < hp.min_group_size)


def structure_groups(n, drawn, hp):
  return int(np.clip(min(drawn, n, n // hp.min_group_size), 1, hp.groups_max))


@pytest.mark.parametrize("variant", ["reference", "equal_weights"])
def test_node_weights_are_uniform_or_equal(variant):
  """Non-Zipf SBMs: within a group, weight / max weight is U(0, 1) for the other nodes (KS); equal in the variant."""
  hp = dataclasses.replace(HP, zipf_prob=0.0)
  p = _params(n_subgraphs=1, n_groups1=1, n_groups2=1)
  _, d1, d2 = structure.level_degrees(p, hp)

  def units(k, v):
    draws, _ = sbm.sbm_draws(k, p, hp, d1, d2, v)
    return sbm._layout(k, draws, hp, 256, v.equal_weights).units  # pylint: disable=protected-access

  u = np.asarray(jax.jit(jax.vmap(units, in_axes=(0, None)))(jax.random.split(jax.random.key(5), 16),
                                                             structure.only(variant)))[:, :200]
  ratio = np.sort(u / u.max(axis=1, keepdims=True), axis=1)[:, :-1].ravel()
  if variant == "reference":
    assert stats.kstest(ratio, "uniform").pvalue > 1e-4
  else:
    np.testing.assert_array_equal(ratio, 1.0)


def test_slots_follow_the_block_rates():
  """Edges per block pair (level 2, one SBM) follow ``B_ac / sum_{a <= c} B`` (chi-square within 5 sd of its dof);
  no edge has equal ends; the level's count is ``Poisson(sum B)`` (mean z within 4 standard errors)."""
  hp = dataclasses.replace(HP, groups_max=4)
  p = _params(first_level_ratio=0.0, n_groups2=4, avg_degree=20.0)
  _, d1, d2 = structure.level_degrees(p, hp)
  keys = jax.random.split(jax.random.key(6), 32)
  v = structure.only("reference")
  out = jax.tree.map(np.asarray, jax.jit(jax.vmap(lambda k: sbm.sbm_levels(k, p, hp, 256, 4096, d1, d2, v)))(keys))
  rates = np.asarray(jax.vmap(lambda k: sbm.sbm_draws(jax.random.split(k, 4)[0], p, hp, d1, d2, v)[1])(keys))
  chi = dof = 0.0
  z = []
  for i in range(len(keys)):
    m = out.mask[i]
    u, w = out.senders[i][m], out.receivers[i][m]
    assert np.all(u != w)
    lab = out.block2[i]
    a, c = np.minimum(lab[u], lab[w]), np.maximum(lab[u], lab[w])
    b = np.triu(rates[i, -1])
    observed = np.zeros_like(b)
    np.add.at(observed, (a, c), 1)
    used = b > 0
    expect = m.sum() * b[used] / b.sum()
    chi += np.sum((observed[used] - expect) ** 2 / expect)
    dof += used.sum() - 1
    z.append((m.sum() - b.sum()) / np.sqrt(b.sum()))
  assert abs(chi - dof) < 5 * np.sqrt(2 * dof), (chi, dof)
  assert abs(np.mean(z)) < 4 / np.sqrt(len(z))


def test_preferential_attachment_equals_the_sequential_loop():
  """The vectorised step draws exactly the targets of the one-node-at-a-time loop without replacement
  (each node's first ``links`` distinct candidates from the endpoint list as it grows)."""
  n, n_sbm, n_pa, t_max, m = 96, 60, 30, 32, 3
  r = np.random.default_rng(0)
  s = np.concatenate([np.arange(n_sbm - 1), r.integers(0, 2, 80)])  # two hubs: repeated candidates
  d = np.concatenate([np.arange(1, n_sbm), r.integers(0, n_sbm, 80)])
  graph = graphs.simplify(graphs.Graph(jnp.asarray(s, jnp.int32), jnp.asarray(d, jnp.int32),
                                       jnp.ones(len(s), bool), jnp.arange(n) < n_sbm))
  key = jax.random.key(7)
  deg = graphs.degree(graph).astype(jnp.int32)
  fn = functools.partial(attachment.attach, max_degree=m, t_max=t_max)
  targets, new, keep, is_pa = map(np.asarray, jax.jit(fn)(key, deg, graph.node_mask, jnp.int32(n_sbm), jnp.int32(n_pa)))
  c = m + attachment.EXTRA_CANDIDATES
  (u,) = rng.uniforms(key, (t_max, c + 1))
  links = np.asarray(rng.randint(u[:, 0], 1, m))
  u = np.asarray(u)
  em = np.asarray(graph.edge_mask)
  ends = list(np.repeat(np.arange(n), np.bincount(np.concatenate([np.asarray(graph.senders)[em],
                                                                  np.asarray(graph.receivers)[em]]), minlength=n)))
  repeats = 0
  for t in range(t_max):
    row = slice(t * m, (t + 1) * m)
    if t >= n_pa:
      assert not keep[row].any()
      continue
    count = len(ends)
    drawn = [ends[min(int(np.floor(np.float32(u[t, 1 + j]) * np.float32(count))), count - 1)] for j in range(c)]
    chosen = list(dict.fromkeys(drawn))[:links[t]]
    repeats += len(set(drawn[:links[t]])) < links[t]
    assert targets[row][keep[row]].tolist() == chosen and np.all(new[row] == n_sbm + t)
    for target in chosen:
      ends += [n_sbm + t, target]
  assert repeats > 0  # the case without replacement was exercised
  np.testing.assert_array_equal(is_pa, (np.arange(n) >= n_sbm) & (np.arange(n) < n_sbm + n_pa))


def test_reproducible_by_key():
  """The same key gives the same graph (and the traced reference flags the static default's); another key another."""
  hp = dataclasses.replace(HP, n_nodes_max=128)
  fn = jax.jit(lambda k, v: structure.sample(k, hp, v))
  static = jax.jit(lambda k: structure.sample(k, hp))
  a, b = fn(jax.random.key(8), structure.only("reference")), fn(jax.random.key(8), structure.only("reference"))
  jax.tree.map(np.testing.assert_array_equal, a, b)
  jax.tree.map(np.testing.assert_array_equal, a.graph, static(jax.random.key(8)).graph)
  other = fn(jax.random.key(9), structure.only("reference"))
  assert not np.array_equal(np.asarray(a.graph.senders), np.asarray(other.graph.senders))


def test_unknown_variant_is_named():
  with pytest.raises(ValueError, match="no_such"):
    structure.only("no_such")
