"""Tabular MDPs and SyntheticTree: exact DP against brute force, simulators, user files."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import mdp_files
from envs import mdps
from envs import trees


def _small_mdp(seed=0, s=3, a=2):
  rng = np.random.default_rng(seed)
  p = rng.dirichlet(np.ones(s), size=(s, a))
  rm = rng.uniform(size=(s, a))
  return mdps.from_dense(p, rm, 0.3, 0.8), p, rm


def _expectimax(p, rm, gamma, s, h):
  if h == 0:
    return 0.0
  return max(rm[s, a] + gamma * sum(p[s, a, t] * _expectimax(p, rm, gamma, t, h - 1) for t in range(p.shape[0]))
             for a in range(p.shape[1]))


def test_finite_horizon_dp_matches_brute_force_expectimax():
  mdp, p, rm = _small_mdp()
  q = np.asarray(mdps.finite_horizon_q(mdp, 3))
  for s in range(3):
    np.testing.assert_allclose(q[2, s].max(), _expectimax(p, rm, 0.8, s, 3), rtol=1e-5)


def test_value_iteration_matches_best_deterministic_policy():
  mdp, _, _ = _small_mdp(1)
  v, _ = mdps.value_iteration(mdp, tol=1e-7)
  best = -np.inf
  for pol in itertools.product(range(2), repeat=3):
    vp = mdps.policy_value(mdp, jax.nn.one_hot(jnp.asarray(pol), 2))
    best = np.maximum(best, np.asarray(vp))
  np.testing.assert_allclose(v, best, rtol=1e-4)


def test_synthetic_tree_values_are_best_leaf_path_sums():
  tree = trees.synthetic_tree(jax.random.key(0), branching=2, depth=2, sigma=1.0)
  q = np.asarray(mdps.finite_horizon_q(tree, 2))[1, 0]
  rm = np.asarray(tree.reward_mean)
  # children of the root are 1, 2; leaves 3..6; leaf means = path sums.
  np.testing.assert_allclose(q, [rm[1].max(), rm[2].max()], rtol=1e-6)
  assert tree.num_states == trees.num_nodes(2, 2) == 7 and bool(tree.terminal[3:].all())


def test_step_samples_the_transition_probabilities():
  mdp, p, _ = _small_mdp(2)
  keys = jax.random.split(jax.random.key(0), 40_000)
  s2, _, _ = jax.vmap(lambda k: mdps.step(mdp, k, jnp.int32(1), jnp.int32(0)))(keys)
  freq = np.bincount(np.asarray(s2), minlength=3) / 40_000
  np.testing.assert_allclose(freq, p[1, 0], atol=4 * math.sqrt(0.25 / 40_000))


def test_gridworld_is_slippery_and_heavy_tails_keep_the_variance():
  g = mdps.gridworld(4)
  np.testing.assert_allclose(np.asarray(g.prob).sum(-1), 1.0, rtol=1e-6)
  # From (1, 0), moving right: intended (1, 1) or sideways (0, 0) / (2, 0), 1/3 each.
  row = dict(zip(np.asarray(g.succ[4, 2]).tolist(), np.asarray(g.prob[4, 2]).tolist()))
  assert {k: round(v, 4) for k, v in row.items()} == {5: 0.3333, 0: 0.3333, 8: 0.3333}
  m = mdps.garnet(jax.random.key(0), 5, 2, 2, reward_std=(1.0, 1.0), df=5.0)
  r = jax.vmap(lambda k: mdps.step(m, k, jnp.int32(0), jnp.int32(0))[1])(jax.random.split(jax.random.key(1), 100_000))
  assert abs(float(jnp.var(r)) - 1.0) < 4 * math.sqrt(8 / 100_000)


def test_user_mdp_arrays_are_checked_and_errors_name_the_file_and_array():
  _, p, rm = _small_mdp()
  good = dict(P=p, reward_mean=rm, reward_std=np.full_like(rm, 0.1), discount=0.9)
  mdp = mdp_files.from_arrays(good, s0=2)
  np.testing.assert_allclose(np.asarray(mdp.reward_mean), rm, rtol=1e-6)
  assert int(mdp.s0) == 2 and float(mdp.gamma) == pytest.approx(0.9)
  cases = {
      "rows": (dict(P=p * 1.1), "'P': rows"),
      "shape": (dict(reward_mean=rm[:2]), "'reward_mean' must have shape"),
      "nan": (dict(reward_std=np.full_like(rm, np.nan)), "'reward_std' contains NaN"),
      "gamma": (dict(discount=1.5), "'discount'"),
  }
  for name, (override, msg) in cases.items():
    with pytest.raises(mdp_files.MDPFileError, match=f"^{name}.npz: .*" + msg.replace("(", r"\(")):
      mdp_files.from_arrays({**good, **override}, where=f"{name}.npz")
  with pytest.raises(mdp_files.MDPFileError, match=r"missing arrays \['reward_mean', 'reward_std', 'discount'\]"):
    mdp_files.from_arrays(dict(P=p), where="missing.npz")
  with pytest.raises(mdp_files.MDPFileError, match=r"start state 3 is not a state of 'P' \(S = 3\)"):
    mdp_files.from_arrays(good, s0=3)
