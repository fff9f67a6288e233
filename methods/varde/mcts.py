"""Monte Carlo tree search in stochastic environments: VarDE and its baselines.

Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration", ICML 2026,
Section 4. The paper's tree-search rule is not public: this module is a
**reconstruction** from the paper's principle (allocate simulations so as to
minimise the variance of the root decision). Decision nodes back up the
smooth max ``V(s) = tau * logsumexp(Q(s, .) / tau)``, chance nodes average,
``Q(s, a) = r_hat(s, a) + gamma * sum_s' P_hat(s'|s, a) V(s')``; a node's
influence on the root is the product of ``softmax_tau(a|s) * gamma * P(s'|s,a)``
along its path, so at a decision node the ancestor factors cancel and VarDE
descends along

    argmax_a  pi_tau(a|s)^2 * sigma_hat^2(s, a) / (n(s, a) (n(s, a) + 1)),

``sigma_hat^2`` the empirical variance of the returns through edge ``(s, a)``
(the one-step decrease of the first-order variance, as for bandits).

The search follows mctx's design (Danihelka et al., 2022): dense node and
edge arrays of fixed size (one node per simulation), a ``fori_loop`` over
simulations, the descent in a ``while_loop``, ``vmap`` over a batch of roots.
Every edge stores its visit count and the sum and sum of squares of the
returns through it. Chance outcomes are sampled from the simulator on every
simulation (an edge's first sample is never frozen); a chance node's child is
indexed by the sampled outcome, so a pair ``(s, a)`` has up to ``M`` children.
Tree policies share :class:`TreePolicy`: VarDE, UCT (Kocsis and Szepesvari,
2006), MENTS (Xiao et al., 2019, E2W sampling with the soft backup) and
Power-UCT (Dam et al., 2019, power-mean backup). The root recommends the
visited action with the highest estimated value.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

from envs import mdps
from methods.common import hparams

BACKUPS = ("mean", "lse", "power")
LEAF_VALUES = ("rollout", "zero")


@dataclasses.dataclass(frozen=True)
class MCTSHparams(hparams.Hyperparameters):
  """Tree-policy hyperparameters (Luong et al., 2026, Section 4; baselines' papers)."""

  tau: float = hparams.field(0.3, "Temperature tau of the smooth max (VarDE, MENTS), in value units.", low=0, low_open=True)
  var_floor: float = hparams.field(0.01, "Floor on the edge return variances (VarDE; as for bandits).", low=0)
  uct_c: float = hparams.field(1.0, "Exploration constant c of UCT and Power-UCT.", low=0)
  ments_eps: float = hparams.field(0.1, "E2W exploration epsilon of MENTS.", low=0, low_open=True)
  power_p: float = hparams.field(2.0, "Power-mean exponent p of Power-UCT.", low=1)
  leaf_value: str = hparams.field("rollout", "Value of a new node: a random rollout or zero.", choices=LEAF_VALUES)


class NodeView(NamedTuple):
  """What a tree policy sees at one decision node.

  Attributes:
    n: ``[A]`` int32 edge visit counts.
    q: ``[A]`` value estimates (meaningless where ``n == 0``).
    var: ``[A]`` empirical variances of the returns (``+inf`` below two).
    visits: ``[]`` int32 visits of the node.
  """

  n: jax.Array
  q: jax.Array
  var: jax.Array
  visits: jax.Array


class TreePolicy(NamedTuple):
  """A tree policy: ``select(view, key) -> action`` and its decision-node backup."""

  select: Callable[[NodeView, jax.Array], jax.Array]
  backup: str  # "mean" (Monte Carlo average), "lse" (tau * logsumexp) or "power"
  tau: float = 1.0
  power_p: float = 2.0


class Tree(NamedTuple):
  """Dense search tree of one root (``N`` nodes, ``A`` actions, ``M`` outcomes)."""

  state: jax.Array  # [N] environment state of the node
  depth: jax.Array  # [N]
  visits: jax.Array  # [N]
  value: jax.Array  # [N] backed-up value V
  children: jax.Array  # [N, A, M] child node per sampled outcome (-1: none)
  outcome_n: jax.Array  # [N, A, M] times each outcome was sampled
  edge_n: jax.Array  # [N, A]
  edge_sum: jax.Array  # [N, A] sum of returns through the edge
  edge_sumsq: jax.Array  # [N, A] sum of squared returns
  reward_sum: jax.Array  # [N, A] sum of immediate rewards
  num_nodes: jax.Array  # []


class SearchOutput(NamedTuple):
  """Result of a batched search.

  Attributes:
    action: ``[B]`` recommended root actions.
    q: ``[B, A]`` root value estimates.
    visits: ``[B, A]`` root edge visit counts.
    tree: the trees (leading ``[B]`` axis).
  """

  action: jax.Array
  q: jax.Array
  visits: jax.Array
  tree: Tree


def _argmax_random_ties(x: jax.Array, key: jax.Array) -> jax.Array:
  best = x >= jnp.max(x)
  return jnp.argmax(jnp.where(best, jax.random.uniform(key, x.shape), -1.0))


def varde_policy(*, tau: float, var_floor: float = 0.01) -> TreePolicy:
  """VarDE's descent: ``argmax pi_tau^2 sigma_hat^2 / (n (n + 1))`` (reconstruction)."""

  def select(view, key):
    visited = view.n > 0
    pi = jax.nn.softmax(jnp.where(visited, view.q / tau, -jnp.inf))
    nf = view.n.astype(jnp.float32)
    score = pi**2 * jnp.maximum(view.var, var_floor) / (nf * (nf + 1.0))
    score = jnp.where((view.n < 2) | jnp.isinf(view.var), jnp.inf, score)
    return _argmax_random_ties(score, key)

  return TreePolicy(select, "lse", tau=tau)


def _ucb_select(c):
  def select(view, key):
    nf = jnp.maximum(view.n, 1).astype(jnp.float32)
    bonus = c * jnp.sqrt(jnp.log(jnp.maximum(view.visits, 1).astype(jnp.float32)) / nf)
    return _argmax_random_ties(jnp.where(view.n == 0, jnp.inf, view.q + bonus), key)

  return select


def uct_policy(*, c: float = 1.0) -> TreePolicy:
  """UCT: ``argmax Q + c sqrt(log N / n)``, Monte Carlo mean backup."""
  return TreePolicy(_ucb_select(c), "mean")


def power_uct_policy(*, c: float = 1.0, p: float = 2.0) -> TreePolicy:
  """Power-UCT: UCT selection, power-mean backup of exponent ``p``."""
  return TreePolicy(_ucb_select(c), "power", power_p=p)


def ments_policy(*, tau: float, eps: float = 0.1) -> TreePolicy:
  """MENTS: E2W sampling ``(1 - l) softmax(Q / tau) + l / A``, ``l = eps A / log(N + 1)``."""

  def select(view, key):
    a = view.n.shape[0]
    lam = jnp.minimum(eps * a / jnp.log(view.visits.astype(jnp.float32) + 2.0), 1.0)
    q = jnp.where(view.n > 0, view.q, 0.0)
    probs = (1.0 - lam) * jax.nn.softmax(q / tau) + lam / a
    return jax.random.categorical(key, jnp.log(probs))

  return TreePolicy(select, "lse", tau=tau)


def make_policy(name: str, hp: MCTSHparams) -> TreePolicy:
  """One of :data:`POLICIES` with hyperparameters ``hp``."""
  if name == "varde":
    return varde_policy(tau=hp.tau, var_floor=hp.var_floor)
  if name == "uct":
    return uct_policy(c=hp.uct_c)
  if name == "ments":
    return ments_policy(tau=hp.tau, eps=hp.ments_eps)
  if name == "power_uct":
    return power_uct_policy(c=hp.uct_c, p=hp.power_p)
  raise ValueError(f"unknown tree policy {name!r}; allowed: {POLICIES}")


POLICIES = ("varde", "uct", "ments", "power_uct")


def _edge_q(tree: Tree, node: jax.Array, gamma: jax.Array, backup: str) -> jax.Array:
  n = jnp.maximum(tree.edge_n[node], 1).astype(jnp.float32)
  if backup == "mean":
    return tree.edge_sum[node] / n
  child_v = tree.value[jnp.maximum(tree.children[node], 0)]  # [A, M]
  p_hat = tree.outcome_n[node].astype(jnp.float32) / n[:, None]
  return tree.reward_sum[node] / n + gamma * jnp.sum(p_hat * child_v, -1)


def _view(tree: Tree, node: jax.Array, gamma: jax.Array, backup: str) -> NodeView:
  n = tree.edge_n[node]
  nf = n.astype(jnp.float32)
  mean = tree.edge_sum[node] / jnp.maximum(nf, 1.0)
  var = (tree.edge_sumsq[node] - nf * mean**2) / jnp.maximum(nf - 1.0, 1.0)
  var = jnp.where(n >= 2, jnp.maximum(var, 0.0), jnp.inf)
  return NodeView(n, _edge_q(tree, node, gamma, backup), var, tree.visits[node])


def _node_value(policy: TreePolicy, tree: Tree, node, gamma, leaf_value):
  """The decision-node backup of ``policy`` at ``node`` (leaf value if no edge is visited)."""
  n = tree.edge_n[node]
  visited = n > 0
  q = _edge_q(tree, node, gamma, policy.backup)
  if policy.backup == "mean":
    total = leaf_value + jnp.sum(tree.edge_sum[node])
    return total / jnp.maximum(tree.visits[node], 1).astype(jnp.float32)
  if policy.backup == "lse":
    v = policy.tau * jax.nn.logsumexp(jnp.where(visited, q / policy.tau, -jnp.inf))
  else:  # power mean of the visited Q, weighted by visits, shifted to be non-negative
    w = n.astype(jnp.float32) / jnp.maximum(jnp.sum(n), 1)
    lo = jnp.min(jnp.where(visited, q, jnp.inf))
    x = jnp.where(visited, q - lo, 0.0)
    v = lo + jnp.sum(w * x**policy.power_p) ** (1.0 / policy.power_p)
  return jnp.where(jnp.any(visited), v, leaf_value)


def init_tree(num_nodes: int, num_actions: int, num_outcomes: int, root_state: jax.Array) -> Tree:
  """An empty tree whose node 0 is the root."""
  z = lambda *s: jnp.zeros(s, jnp.float32)  # noqa: E731
  i = lambda *s: jnp.zeros(s, jnp.int32)  # noqa: E731
  n, a, m = num_nodes, num_actions, num_outcomes
  return Tree(
      i(n).at[0].set(root_state), i(n), i(n), z(n), jnp.full((n, a, m), -1, jnp.int32), i(n, a, m),
      i(n, a), z(n, a), z(n, a), z(n, a), jnp.asarray(1, jnp.int32),
  )


def _leaf_value(mdp, key, state, depth, horizon, kind):
  if kind == "zero":
    return jnp.float32(0.0)
  return mdps.rollout(mdp, key, state, horizon - depth, horizon)


def search_one(
    mdp: mdps.TabularMDP, root_state: jax.Array, key: jax.Array, *, policy: TreePolicy,
    num_simulations: int, horizon: int, leaf_value: str = "rollout", budget: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, Tree]:
  """Unbatched search from ``root_state``; see :func:`search`.

  ``budget`` (traced, at most ``num_simulations``) runs fewer simulations in
  a tree sized for ``num_simulations``: one compilation serves every budget.
  """
  gamma = mdp.gamma
  tree = init_tree(num_simulations + 1, mdp.num_actions, mdp.num_outcomes, root_state)
  k_root, k_sims = jax.random.split(key)
  root_v = jnp.where(mdp.terminal[root_state], 0.0, _leaf_value(mdp, k_root, root_state, 0, horizon, leaf_value))
  tree = tree._replace(value=tree.value.at[0].set(root_v), visits=tree.visits.at[0].set(1))
  leaf_v0 = tree.value  # each node's value estimate at its creation

  def simulate(sim, carry):
    tree, leaf_v = carry
    key = jax.random.fold_in(k_sims, sim)
    path = jnp.zeros((horizon, 4), jnp.int32)  # node, action, outcome, (unused)
    rewards = jnp.zeros((horizon,), jnp.float32)

    def cond(c):
      return ~c[-1]

    def body(c):
      node, depth, path, rewards, _, _ = c
      k_sel, k_step = jax.random.split(jax.random.fold_in(key, depth))
      a = policy.select(_view(tree, node, gamma, policy.backup), k_sel).astype(jnp.int32)
      s2, r, o = mdps.step(mdp, k_step, tree.state[node], a)
      path = path.at[depth].set(jnp.stack([node, a, o, s2]))
      rewards = rewards.at[depth].set(r)
      child = tree.children[node, a, o]
      stop = (child < 0) | mdp.terminal[s2] | (depth + 1 >= horizon)
      return jnp.where(stop, node, child), depth + 1, path, rewards, s2, stop

    init = (jnp.int32(0), jnp.int32(0), path, rewards, root_state, jnp.asarray(False))
    _, length, path, rewards, s2, _ = jax.lax.while_loop(cond, body, init)
    last = path[length - 1]
    existing = tree.children[last[0], last[1], last[2]]
    new = existing < 0
    leaf = jnp.where(new, tree.num_nodes, existing)
    end = mdp.terminal[s2] | (length >= horizon)
    v_leaf = jnp.where(end, 0.0, _leaf_value(mdp, jax.random.fold_in(key, horizon + 1), s2, length, horizon, leaf_value))
    v_leaf = jnp.where(new, v_leaf, jnp.where(end, 0.0, tree.value[leaf]))
    tree = tree._replace(
        state=tree.state.at[leaf].set(s2), depth=tree.depth.at[leaf].set(length),
        children=tree.children.at[last[0], last[1], last[2]].set(leaf),
        num_nodes=tree.num_nodes + new.astype(jnp.int32),
        visits=tree.visits.at[leaf].add(1),
        value=tree.value.at[leaf].set(jnp.where(new, v_leaf, tree.value[leaf])),
    )
    leaf_v = leaf_v.at[leaf].set(jnp.where(new, v_leaf, leaf_v[leaf]))

    def backup(j, c):
      # Branch-free (a cond would become a select over the whole tree under vmap).
      tree, g = c
      live = j < length
      i = jnp.maximum(length - 1 - j, 0)
      node, a, o = path[i, 0], path[i, 1], path[i, 2]
      g = jnp.where(live, rewards[i] + gamma * g, g)
      add, gl = live.astype(jnp.int32), jnp.where(live, g, 0.0)
      tree = tree._replace(
          edge_n=tree.edge_n.at[node, a].add(add), edge_sum=tree.edge_sum.at[node, a].add(gl),
          edge_sumsq=tree.edge_sumsq.at[node, a].add(gl * gl),
          reward_sum=tree.reward_sum.at[node, a].add(jnp.where(live, rewards[i], 0.0)),
          outcome_n=tree.outcome_n.at[node, a, o].add(add), visits=tree.visits.at[node].add(add),
      )
      v = jnp.where(live, _node_value(policy, tree, node, gamma, leaf_v[node]), tree.value[node])
      return tree._replace(value=tree.value.at[node].set(v)), g

    tree, _ = jax.lax.fori_loop(0, horizon, backup, (tree, v_leaf))
    return tree, leaf_v

  stop = num_simulations if budget is None else jnp.minimum(budget, num_simulations)
  tree, _ = jax.lax.fori_loop(0, stop, simulate, (tree, leaf_v0))
  root = _view(tree, jnp.int32(0), gamma, policy.backup)
  action = jnp.argmax(jnp.where(root.n > 0, root.q, -jnp.inf)).astype(jnp.int32)
  return action, root.q, root.n, tree


def search(
    mdp: mdps.TabularMDP, root_state: jax.Array, key: jax.Array, *, policy: TreePolicy,
    num_simulations: int, horizon: int, leaf_value: str = "rollout",
) -> SearchOutput:
  """Batched tree search: ``B`` roots, ``num_simulations`` simulations each.

  Args:
    mdp: environments with a leading ``[B]`` axis on every array (one per
      root; broadcast a single one with ``jax.tree.map``).
    root_state: ``[B]`` int32 root states.
    key: randomness of the simulator calls, the rollouts and the policy.
    policy: the tree policy.
    num_simulations: static simulation budget per root.
    horizon: static search depth ``H`` (nodes at depth ``H`` are leaves with
      value 0; the exact values are those of the ``H``-step problem).
    leaf_value: ``"rollout"`` (one uniformly random rollout to the horizon)
      or ``"zero"``.

  Returns:
    The recommended actions, root estimates and visit counts, and the trees.
  """
  chex.assert_rank(root_state, 1)
  chex.assert_shape(key, ())
  batch = root_state.shape[0]
  chex.assert_shape(mdp.reward_mean, (batch, None, None))
  if leaf_value not in LEAF_VALUES:
    raise ValueError(f"leaf_value={leaf_value!r}; allowed: {LEAF_VALUES}")
  fn = functools.partial(
      search_one, policy=policy, num_simulations=num_simulations, horizon=horizon, leaf_value=leaf_value
  )
  action, q, n, tree = jax.vmap(fn)(mdp, root_state, jax.random.split(key, batch))
  return SearchOutput(action, q, n, tree)
