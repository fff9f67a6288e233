"""VarDE tree search: each backup's closed form, its weights' allocation, and the first-order variance."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import mdps
from methods.varde import mcts
from methods.varde import tree_rules as rules

import mdp_cases

MEANS, STDS = np.array([0.5, 0.4, 0.3]), np.array([0.2, 0.4, 0.1])


def _bandit_tree(means, stds):
  """Two levels: a root whose actions lead to terminal leaves with N(mean, std^2) returns."""
  k = len(means)
  p = np.zeros((k + 1, k, k + 1))
  p[0, np.arange(k), 1 + np.arange(k)] = 1.0
  p[1:, :, 0] = 1.0
  rm, rs = np.zeros((k + 1, k)), np.zeros((k + 1, k))
  rm[0], rs[0] = means, stds
  return mdps.from_dense(p, rm, rs, 1.0, terminal=np.arange(k + 1) > 0)


def _lse(x, t):
  return t * np.log(np.sum(np.exp(x / t)))


def _softmax(x, t):
  e = np.exp((x - x.max()) / t)
  return e / e.sum()


@pytest.mark.parametrize("backup", rules.BACKUPS)
def test_root_value_is_the_backups_closed_form_of_the_edge_statistics(backup):
  tau, b = 0.5, 4
  mdp = mdp_cases.batch(_bandit_tree(MEANS, STDS), b)
  policy = rules.varde_policy(tau=tau, backup=backup, tau_scale="return_std")
  out = mcts.search(mdp, jnp.zeros(b, jnp.int32), jax.random.key(0), policy=policy, num_simulations=60, horizon=1,
                    leaf_value="zero")
  t = jax.tree.map(np.asarray, out.tree)
  for i in range(b):
    n, s1, s2 = (x[i, 0].astype(np.float64) for x in (t.edge_n, t.edge_sum, t.edge_sumsq))
    q = s1 / n  # terminal children: Q = mean reward = mean return
    total = n.sum()
    scale = math.sqrt((s2.sum() - s1.sum() ** 2 / total) / (total - 1))
    t_eff = tau * scale
    expected = {
        "mean": s1.sum() / (1.0 + total),  # the root's own leaf evaluation (0) counts as one visit
        "max": q.max(),
        "softmax_mean": np.sum(_softmax(q, t_eff) * q),
        "logsumexp": _lse(q, t_eff),
    }[backup]
    np.testing.assert_allclose(t.value[i, 0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.q[i]), q, rtol=1e-5)
  chex.assert_shape([out.action, out.q, out.visits], [(b,), (b, 3), (b, 3)])


@pytest.mark.parametrize("backup", ["logsumexp", "softmax_mean"])
def test_allocation_approaches_the_neyman_shares_of_the_backups_weights(backup):
  """``n_a / N -> |w_a| sigma_a / sum |w| sigma`` with ``w`` the backup's own influence weights."""
  tau, b, sims = 0.2, 16, 3000
  mdp = mdp_cases.batch(_bandit_tree(MEANS, STDS), b)
  policy = rules.varde_policy(tau=tau, backup=backup, tau_scale="none", floor_c=0.0)
  out = mcts.search(mdp, jnp.zeros(b, jnp.int32), jax.random.key(0), policy=policy, num_simulations=sims, horizon=1,
                    leaf_value="zero")
  shares = np.asarray(out.visits).mean(0) / sims
  pi = _softmax(MEANS, tau)
  w = pi if backup == "logsumexp" else pi * (1.0 + (MEANS - np.sum(pi * MEANS)) / tau)
  expected = np.abs(w) * STDS / np.sum(np.abs(w) * STDS)
  np.testing.assert_allclose(shares, expected, atol=0.03)
  if backup == "softmax_mean":  # the two backups' limits differ by more than the tolerance
    assert np.max(np.abs(expected - pi * STDS / np.sum(pi * STDS))) > 0.1


def test_decision_weights_are_the_gradients_of_the_smooth_backups():
  q = jnp.array([0.3, -0.2, 0.1, 0.7])
  visited = jnp.array([True, True, False, True])
  tau = jnp.float32(0.4)
  for backup in ("logsumexp", "softmax_mean"):
    f = lambda x, bk=backup: rules.backup_value(bk, x, visited, jnp.ones(4, jnp.int32), tau=tau)  # noqa: E731
    np.testing.assert_allclose(rules.decision_weights(backup, q, visited, tau), jax.grad(f)(q), rtol=1e-5, atol=1e-7)
  # max and mean use the smoothed max's weights.
  for backup in ("max", "mean"):
    np.testing.assert_allclose(rules.decision_weights(backup, q, visited, tau),
                               rules.decision_weights("logsumexp", q, visited, tau))


def _two_level_mdp(means, stds):
  """Root (state 0) -> decision nodes 1, 2 (deterministic) -> terminal leaves paying N(means[a, b], stds[a, b]^2)."""
  p = np.zeros((7, 2, 7))
  p[0, 0, 1] = p[0, 1, 2] = 1.0
  p[1, :, 3:5] = np.eye(2)
  p[2, :, 5:7] = np.eye(2)
  p[3:, :, 3] = 1.0
  rm, rs = np.zeros((7, 2)), np.zeros((7, 2))
  rm[1:3], rs[1:3] = means, stds
  return mdps.from_dense(p, rm, rs, 1.0, terminal=np.arange(7) >= 3)


@pytest.mark.parametrize("backup, tau, stds", [
    ("logsumexp", 0.5, ((0.5, 0.3), (0.8, 0.4))),
    # softmax_mean gives an edge about tau below f no influence (w = 0), and VarDE then starves it; a
    # temperature above the values' range keeps every edge sampled, where the delta method applies.
    ("softmax_mean", 2.0, ((0.3, 0.2), (0.35, 0.25))),
])
def test_first_order_variance_of_the_root_decision_matches_monte_carlo(backup, tau, stds):
  """Predicted ``sum (w_root w_node)^2 sigma^2 / n`` against the variance of ``V_hat(root)`` over 2,000 searches."""
  means = np.array([[0.6, 0.3], [0.5, 0.45]])
  stds = np.array(stds)
  runs, sims = 2000, 400
  mdp = mdp_cases.batch(_two_level_mdp(means, stds), runs)
  policy = rules.varde_policy(tau=tau, backup=backup, tau_scale="none", floor_c=0.0)
  out = jax.jit(lambda m, k: mcts.search(m, m.s0, k, policy=policy, num_simulations=sims, horizon=2,
                                         leaf_value="zero"))(mdp, jax.random.key(3))
  t = out.tree
  v_hat = np.asarray(t.value[:, 0], np.float64)
  # The nodes of states 1 and 2 are the root's children; their edges lead to the leaves.
  child = np.asarray(t.children[:, 0, :, 0])  # [R, 2]
  n_leaf = np.stack([np.asarray(t.edge_n)[np.arange(runs), child[:, a]] for a in range(2)], 1)  # [R, 2, 2]

  def weights(q):
    pi = _softmax(q, tau)
    return pi if backup == "logsumexp" else pi * (1.0 + (q - np.sum(pi * q)) / tau)

  f_node = np.array([_lse(m, tau) if backup == "logsumexp" else np.sum(_softmax(m, tau) * m) for m in means])
  w = weights(f_node)[:, None] * np.stack([weights(m) for m in means])  # [2, 2] path products
  predicted = np.sum(w**2 * stds**2 / n_leaf, axis=(1, 2))  # [R]
  empirical = v_hat.var(ddof=1)
  # Standard error of a sample variance (near-Gaussian decision) plus that of the mean prediction.
  se = math.sqrt(empirical**2 * 2.0 / (runs - 1) + predicted.var() / runs)
  assert abs(empirical - predicted.mean()) < 3.0 * se, (empirical, predicted.mean(), se)
  assert (n_leaf >= 2).all()


def test_a_scale_free_temperature_builds_the_same_tree_on_rescaled_rewards():
  """Rewards x100: with ``tau`` relative to the return std the root visits match; in value units they do not."""
  runs, sims, horizon = 32, 64, 6
  grid = mdps.gridworld(3, reward_std=0.5)
  keys = jax.random.split(jax.random.key(5), runs)

  def visits(mdp, tau_scale):
    policy = rules.varde_policy(tau=1.0, tau_scale=tau_scale, backup="softmax_mean")
    fn = lambda k: mcts.search_one(mdp, mdp.s0, k, policy=policy, num_simulations=sims, horizon=horizon)[2]  # noqa: E731
    return np.asarray(jax.jit(jax.vmap(fn))(keys))

  x100 = mdps.scale_rewards(grid, 100.0)
  same = np.all(visits(grid, "return_std") == visits(x100, "return_std"), axis=-1)
  assert same.mean() >= 0.9  # float rounding may flip a rare near-tie
  differ = np.any(visits(grid, "none") != visits(x100, "none"), axis=-1)
  assert differ.mean() >= 0.5
