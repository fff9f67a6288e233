"""The seed sweep: tallies, common random numbers, statistics, devices, recompiles."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import bandits
from launch import mesh as mesh_lib
from launch.configs import varde_bai as varde_config
from launch.experiments.varde import bai as varde_bai
from launch.experiments.varde import bai_report
from methods import varde
from methods.varde import core


def _instance(means):
  def instance(k_inst, k_reward):
    arms = bandits.make_arms(k_inst, jnp.asarray(means))
    return arms.means, arms.stds, functools.partial(bandits.pull, arms, k_reward)

  return instance


def test_rewards_are_common_random_numbers():
  arms = bandits.make_arms(jax.random.key(0), jnp.asarray([0.3, 0.2, 0.1]))
  key = jax.random.key(1)
  a = bandits.pull(arms, key, jnp.asarray(1), jnp.asarray(4))
  b = bandits.pull(arms, key, jnp.asarray(1), jnp.asarray(4))
  c = bandits.pull(arms, key, jnp.asarray(1), jnp.asarray(5))
  assert float(a) == float(b) and float(a) != float(c)
  # stds are a permutation of the means
  np.testing.assert_allclose(np.sort(arms.stds), np.sort(arms.means))


def test_student_t_noise_has_the_arm_variance():
  arms = bandits.make_arms(jax.random.key(0), jnp.asarray([0.5, 0.2]), std_mode="equal_mean", noise="student_t", df=5.0)
  x = jax.vmap(lambda i: bandits.pull(arms, jax.random.key(3), jnp.asarray(0), i))(jnp.arange(200_000))
  # sd of the sample variance of a t_5 with kurtosis 9: sqrt((9 - 1) / n) relative.
  assert abs(float(jnp.var(x)) / 0.25 - 1) < 4 * math.sqrt(8 / 200_000)
  with pytest.raises(ValueError, match="df"):
    bandits.make_arms(jax.random.key(0), jnp.ones(2), noise="student_t", df=2.0)


def _per_seed_errors(algs, means, keys, budget):
  """Reference: run each algorithm on each seed separately (no tallies)."""
  instance = _instance(means)

  def one(key):
    k_inst, k_reward, k_alg = varde.run_keys(key)
    m, s, pull = instance(k_inst, k_reward)
    oracle = varde.Oracle.from_means(m, s)
    return jnp.stack([varde.run_bai(a, pull, oracle, k_alg, budget=budget).recommendation for a in algs]) != 0

  return np.asarray(jax.jit(jax.vmap(one))(keys))


def test_tallies_match_per_seed_outcomes():
  means = bandits.problem_means("E1")
  budget = 60
  algs = [
      varde.varde(num_arms=10, budget=budget),
      varde.uniform(num_arms=10, budget=budget),
      varde.varde(num_arms=10, budget=budget),  # identical twin: CRN => no discord
  ]
  keys = jax.random.split(jax.random.key(0), 300)
  valid = jnp.arange(300) < 290
  stats = jax.jit(lambda k, v: varde.sweep(algs, _instance(means), k, v, budget=budget, neyman_taus=(0.1, None)))(keys, valid)
  chex.assert_shape([stats.errors, stats.discord, stats.counts, stats.neyman], [(3,), (3, 3), (3, 10), (2, 10)])
  err = _per_seed_errors(algs, means, keys, budget)[:290]
  np.testing.assert_array_equal(stats.errors, err.sum(0))
  discord = (err[:, :, None] != err[:, None, :]).sum(0)
  np.testing.assert_array_equal(stats.discord, discord)
  assert int(stats.discord[0, 2]) == 0 and int(stats.runs) == 290
  np.testing.assert_array_equal(stats.counts.sum(-1), [290 * budget] * 3)
  np.testing.assert_allclose(stats.neyman.sum(-1), [290.0, 290.0], rtol=1e-5)


def test_paired_standard_error_formula():
  rng = np.random.default_rng(0)
  n = 1000
  e = rng.random((n, 2)) < [0.3, 0.2]
  t = varde.SweepStats(
      np.asarray(n), e.sum(0), (e[:, :, None] != e[:, None, :]).sum(0), np.zeros((2, 3)), np.zeros((0, 3))
  )
  d = e[:, 0].astype(float) - e[:, 1]
  got = bai_report._paired(t, 0, 1)  # pylint: disable=protected-access
  np.testing.assert_allclose(got["diff"], d.mean())
  np.testing.assert_allclose(got["se"], d.std() / math.sqrt(n))


def test_varde_beats_uniform_on_e1_beyond_three_standard_errors():
  """E1, T = 150: VarDE (tau = 0.1) errs less than uniform, paired z < -3."""
  config = varde_config.get_config("smoke")
  config.algorithms = ("varde", "uniform")
  config.varde.taus = (0.1,)
  config.num_seeds = config.chunk_size = 4000
  mesh = mesh_lib.make_mesh()
  means = bandits.problem_means("E1")
  names, _, fn = varde_bai.make_chunk_fn(config, mesh, 150, means)
  out = varde.SweepStats(*mesh_lib.to_host(fn(varde_bai.chunk_seed_ids(config, mesh, 0))))
  assert int(out.runs) == 4000
  cmp = bai_report._paired(out, names.index("varde_tau0.1"), names.index("uniform"))  # pylint: disable=protected-access
  assert cmp["z"] < -3, cmp


def test_same_tallies_on_one_device_and_on_eight():
  assert jax.device_count() == 8
  config = varde_config.get_config("smoke")
  config.algorithms = ("varde", "successive_rejects", "ttts")
  config.num_seeds = config.chunk_size = 203  # not a multiple of 8: padding is exercised
  means = bandits.problem_means("E1")
  outs = []
  for n in (1, 8):
    mesh = mesh_lib.make_mesh(n)
    _, _, fn = varde_bai.make_chunk_fn(config, mesh, 150, means)
    outs.append(mesh_lib.to_host(fn(varde_bai.chunk_seed_ids(config, mesh, 0))))
  for a, b, name in zip(outs[0], outs[1], varde.SweepStats._fields):
    if np.issubdtype(np.asarray(a).dtype, np.integer):
      np.testing.assert_array_equal(a, b, err_msg=name)
    else:
      np.testing.assert_allclose(a, b, rtol=1e-5, err_msg=name)
  assert int(outs[0][0]) == 203


def test_chunks_do_not_recompile():
  config = varde_config.get_config("smoke")
  config.algorithms = ("varde",)
  config.varde.taus = (0.1,)
  config.num_seeds, config.chunk_size = 64, 16
  mesh = mesh_lib.make_mesh()
  means = bandits.problem_means("E1")
  instance = _instance(means)
  algs = [varde.varde(num_arms=10, budget=40)]

  @jax.jit
  @chex.assert_max_traces(n=1)
  def chunk(ids):
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.maximum(ids, 0))
    return varde.sweep(algs, instance, keys, ids >= 0, budget=40)

  for c in range(4):
    chunk(varde_bai.chunk_seed_ids(config, mesh, c))
  chex.clear_trace_counter()


def test_warm_start_then_matches_with_warm_start_under_vmap():
  orders = jax.vmap(lambda k: core.warm_start_order(k, 4, 2))(jax.random.split(jax.random.key(0), 5))
  rules = jnp.arange(5, dtype=jnp.int32) % 4
  for t in (0, 3, 7, 8, 20):
    t = jnp.asarray(t, jnp.int32)
    got = jax.vmap(lambda o, r: core.warm_start_then(t, o, lambda: r))(orders, rules)
    want = jax.vmap(lambda o, r: core.with_warm_start(t, o, r))(orders, rules)
    np.testing.assert_array_equal(got, want)

