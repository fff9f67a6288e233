"""SyntheticTree: the random k-ary tree benchmark of MCTS papers, as a tabular MDP.

A complete ``k``-ary tree of depth ``d`` (Tesauro, Rajan and Segal, 2010;
used by Power-UCT, Dam et al. 2019, and by the tree-search experiments of
Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration", ICML 2026):
every edge has a weight ``U[0, 1]``; a leaf's mean is the sum of the weights
on its path from the root; reaching a leaf pays ``N(mean, sigma^2)`` with a
large ``sigma``; interior moves pay nothing. Nodes are numbered heap-style
(children of ``s`` are ``k s + 1, ..., k s + k``); transitions are
deterministic (``M = 1``), so all randomness is in the returns, and the exact
optimal values follow by dynamic programming (:func:`envs.mdps.finite_horizon_q`
with horizon ``d``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from envs import mdps


def num_nodes(branching: int, depth: int) -> int:
  """Nodes of a complete ``branching``-ary tree of ``depth``."""
  return sum(branching**i for i in range(depth + 1))


def synthetic_tree(key: jax.Array, branching: int = 4, depth: int = 4, sigma: float = 1.0) -> mdps.TabularMDP:
  """A random SyntheticTree (``key`` draws the edge weights) as a :class:`~envs.mdps.TabularMDP`.

  Args:
    key: randomness of the edge weights.
    branching: actions per node ``k``.
    depth: depth ``d`` (the search horizon).
    sigma: standard deviation of the leaf returns.

  Returns:
    The tree; ``gamma = 1``, leaves are terminal.
  """
  n = num_nodes(branching, depth)
  interior = num_nodes(branching, depth - 1)
  node = np.arange(n)
  child = node[:, None] * branching + 1 + np.arange(branching)[None, :]  # [S, A]
  is_interior = node < interior
  weights = jax.random.uniform(key, (n,))  # weight of the edge into node i (i >= 1)
  weights = weights.at[0].set(0.0)
  # Path sums, level by level (parent of i is (i - 1) // k).
  parent = np.maximum((node - 1) // branching, 0)
  path = weights
  for _ in range(depth):
    path = weights + jnp.where(node > 0, path[parent], 0.0)
  safe_child = np.where(is_interior[:, None], child, node[:, None])
  leads_to_leaf = is_interior[:, None] & (safe_child >= interior)
  reward_mean = jnp.where(leads_to_leaf, path[safe_child], 0.0)
  return mdps.TabularMDP(
      succ=jnp.asarray(safe_child[..., None], jnp.int32),
      prob=jnp.ones((n, branching, 1), jnp.float32),
      reward_mean=reward_mean.astype(jnp.float32),
      reward_std=jnp.where(leads_to_leaf, sigma, 0.0).astype(jnp.float32),
      terminal=jnp.asarray(~is_interior),
      gamma=jnp.asarray(1.0, jnp.float32),
      s0=jnp.asarray(0, jnp.int32),
  )
