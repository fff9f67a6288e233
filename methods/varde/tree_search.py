"""Batched Monte Carlo tree search over any simulator with chance nodes.

The search of Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration",
ICML 2026, Section 4 (a reconstruction; the rules are in
:mod:`methods.varde.tree_rules`), written for an environment given as pure
functions, mctx-style (Danihelka et al., 2022), rather than as a table.

**The simulator** (:class:`Simulator`) splits a transition into a decision
step and a chance step, as Stochastic MuZero does (Antonoglou et al., 2022):

* ``decision_fn(params, key, action, embedding) -> (DecisionOutput, afterstate)``:
  the action's reward (sampled with ``key`` if it is random) and discount,
  and the afterstate (the state after the action, before nature moves);
* ``chance_fn(params, key, afterstate) -> (outcome, embedding)``: nature's
  move, sampled with ``key``: an int32 ``outcome`` in ``[0, M)`` that names the
  chance node's child, and the next state's embedding;
* ``value_fn(params, key, embedding, steps_left) -> value``: the leaf value of
  a new node (e.g. a random rollout of at most ``steps_left`` steps);
* ``terminal_fn(params, embedding) -> bool`` and ``legal_fn(params,
  embedding) -> [A] bool`` (``None``: every action is legal).

Inside the compiled search these cannot be checked, so they are the
simulator's contract: a state that is not terminal has at least one legal
action (otherwise the policy picks among illegal ones: make such a state
terminal), and ``outcome`` lies in ``[0, M)`` (an index past the end is
clamped to ``M - 1``, so two outcomes would share a child). Shapes are
checked when the search is traced: the reward and discount are scalars.

``params`` is whatever the functions need (a ``TabularMDP``, network
weights, or ``None``); embeddings are any pytree of arrays. A simulator whose
chance distribution can be enumerated may also give ``chance_logits_fn``
(``(params, afterstate) -> [M]``) and ``chance_apply_fn`` (``(params,
outcome, afterstate) -> embedding``); :func:`chance_from_logits` builds
``chance_fn`` from them, and :mod:`methods.varde.mctx_adapter` needs them
for ``mctx.stochastic_muzero_policy``.

**The tree** holds dense arrays of fixed size (one node per simulation),
``fori_loop`` over simulations, the descent in a ``while_loop``, ``vmap`` over
a batch of roots. A simulation descends from the root: at each decision node
the policy picks an action, the decision step and a fresh chance step are
sampled (chance outcomes are re-sampled on every simulation, never frozen),
and the descent continues from the sampled embedding into the child named by
the outcome, until that child is new, terminal or at depth ``horizon``. The
new node gets ``value_fn``'s value (0 if terminal); the return is backed up
along the path. Every edge stores its visits and the sum and sum of squares
of its returns; every node the sum of its leaf evaluations. Keys: the
simulation's key is ``fold_in(key, simulation)``; at depth ``d`` it is split
into the policy's key and the step's key, which splits into the chance and
the decision keys (in that order); the leaf value uses ``fold_in(.., horizon + 1)``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np

from methods.varde import tree_rules as rules


class DecisionOutput(NamedTuple):
  """Output of a decision step.

  Attributes:
    reward: ``[]`` float32 reward of the action (sampled if random).
    discount: ``[]`` float32 discount of the transition (``gamma``; 1 for an
      undiscounted game). It must depend on the state and action only.
  """

  reward: jax.Array
  discount: jax.Array


class Simulator(NamedTuple):
  """An environment as pure, unbatched functions (see the module docstring).

  Hashable, so it can be a static argument; bind it with ``functools.partial``.
  """

  decision_fn: Callable[[Any, jax.Array, jax.Array, Any], tuple[DecisionOutput, Any]]
  chance_fn: Callable[[Any, jax.Array, Any], tuple[jax.Array, Any]]
  value_fn: Callable[[Any, jax.Array, Any, jax.Array], jax.Array]
  terminal_fn: Callable[[Any, Any], jax.Array]
  legal_fn: Optional[Callable[[Any, Any], jax.Array]]
  num_actions: int
  num_outcomes: int
  chance_logits_fn: Optional[Callable[[Any, Any], jax.Array]] = None
  chance_apply_fn: Optional[Callable[[Any, jax.Array, Any], Any]] = None

  def legal(self, params: Any, embedding: Any) -> jax.Array:
    """``[A]`` legal actions at ``embedding``."""
    if self.legal_fn is None:
      return jnp.ones((self.num_actions,), bool)
    return self.legal_fn(params, embedding)


def chance_from_logits(chance_logits_fn: Callable, chance_apply_fn: Callable) -> Callable:
  """``chance_fn`` that samples ``outcome ~ categorical(chance_logits_fn(params, afterstate))``."""

  def chance_fn(params, key, afterstate):
    outcome = jax.random.categorical(key, chance_logits_fn(params, afterstate)).astype(jnp.int32)
    return outcome, chance_apply_fn(params, outcome, afterstate)

  return chance_fn


class Tree(NamedTuple):
  """Dense search tree of one root (``N`` nodes, ``A`` actions, ``M`` outcomes)."""

  embedding: Any  # pytree, leaves [N, ...]: the first embedding seen at each node
  depth: jax.Array  # [N]
  visits: jax.Array  # [N] leaf evaluations + edge traversals
  value: jax.Array  # [N] backed-up value V
  leaf_sum: jax.Array  # [N] sum of the leaf evaluations made at the node
  children: jax.Array  # [N, A, M] child node per sampled outcome (-1: none)
  outcome_n: jax.Array  # [N, A, M] times each outcome was sampled
  edge_n: jax.Array  # [N, A]
  edge_sum: jax.Array  # [N, A] sum of returns through the edge
  edge_sumsq: jax.Array  # [N, A] sum of squared returns
  reward_sum: jax.Array  # [N, A] sum of immediate rewards
  edge_discount: jax.Array  # [N, A] discount of the transition
  num_nodes: jax.Array  # []


class SearchOutput(NamedTuple):
  """Result of a batched search.

  Attributes:
    action: ``[B]`` recommended root actions (the visited action of highest value).
    q: ``[B, A]`` root value estimates (of the policy's backup).
    visits: ``[B, A]`` root edge visit counts.
    tree: the trees (leading ``[B]`` axis).
  """

  action: jax.Array
  q: jax.Array
  visits: jax.Array
  tree: Tree


def init_tree(num_nodes: int, num_actions: int, num_outcomes: int, root_embedding: Any) -> Tree:
  """An empty tree whose node 0 is the root."""
  z = lambda *s: jnp.zeros(s, jnp.float32)  # noqa: E731
  i = lambda *s: jnp.zeros(s, jnp.int32)  # noqa: E731
  n, a, m = num_nodes, num_actions, num_outcomes
  emb = jax.tree.map(lambda x: jnp.zeros((n,) + jnp.shape(x), jnp.asarray(x).dtype).at[0].set(x), root_embedding)
  return Tree(emb, i(n), i(n), z(n), z(n), jnp.full((n, a, m), -1, jnp.int32), i(n, a, m), i(n, a), z(n, a), z(n, a),
              z(n, a), z(n, a), jnp.asarray(1, jnp.int32))


def edge_values(tree: Tree, node: jax.Array, backup: str) -> jax.Array:
  """``[A]`` edge estimates: the return mean (``mean``) or ``r_hat + discount sum_o p_hat_o V(child_o)``."""
  n = jnp.maximum(tree.edge_n[node], 1).astype(jnp.float32)
  if backup == "mean":
    return tree.edge_sum[node] / n
  child_v = tree.value[jnp.maximum(tree.children[node], 0)]  # [A, M]
  p_hat = tree.outcome_n[node].astype(jnp.float32) / n[:, None]
  return tree.reward_sum[node] / n + tree.edge_discount[node] * jnp.sum(p_hat * child_v, -1)


def node_view(tree: Tree, node: jax.Array, legal: jax.Array, policy: rules.TreePolicy) -> rules.NodeView:
  """What ``policy`` sees at ``node`` (``legal``: ``[A]`` bool)."""
  n = tree.edge_n[node]
  nf = n.astype(jnp.float32)
  mean = tree.edge_sum[node] / jnp.maximum(nf, 1.0)
  var = (tree.edge_sumsq[node] - nf * mean**2) / jnp.maximum(nf - 1.0, 1.0)
  var = jnp.where(n >= 2, jnp.maximum(var, 0.0), jnp.inf)
  q = edge_values(tree, node, policy.backup)
  scale = rules.value_scale(policy.tau_scale, n, tree.edge_sum[node], tree.edge_sumsq[node], q)
  return rules.NodeView(n, q, var, tree.visits[node], legal, scale)


def node_value(policy: rules.TreePolicy, tree: Tree, node: jax.Array) -> jax.Array:
  """The backup of ``policy`` at ``node`` (the mean of its leaf evaluations if no edge is visited)."""
  n = tree.edge_n[node]
  visits = jnp.maximum(tree.visits[node], 1).astype(jnp.float32)
  if policy.backup == "mean":
    return (tree.leaf_sum[node] + jnp.sum(tree.edge_sum[node])) / visits
  visited = n > 0
  q = edge_values(tree, node, policy.backup)
  scale = rules.value_scale(policy.tau_scale, n, tree.edge_sum[node], tree.edge_sumsq[node], q)
  v = rules.backup_value(policy.backup, q, visited, n, tau=rules.effective_tau(policy.tau, scale),
                         power_p=policy.power_p)
  leaf_n = jnp.maximum(tree.visits[node] - jnp.sum(n), 1).astype(jnp.float32)
  return jnp.where(jnp.any(visited), v, tree.leaf_sum[node] / leaf_n)


def _descend(sim, params, tree, policy, key, root_embedding, horizon):
  """One descent: ``(path [H, 3], rewards [H], discounts [H], length, leaf embedding, terminal)``."""

  def cond(c):
    return ~c[-1]

  def body(c):
    node, depth, path, rewards, discounts, emb, _, _ = c
    k_sel, k_step = jax.random.split(jax.random.fold_in(key, depth))
    k_chance, k_decision = jax.random.split(k_step)
    view = node_view(tree, node, sim.legal(params, emb), policy)
    a = policy.select(view, k_sel).astype(jnp.int32)
    out, after = sim.decision_fn(params, k_decision, a, emb)
    _check_step(out)
    o, emb2 = sim.chance_fn(params, k_chance, after)
    o = jnp.asarray(o, jnp.int32)
    path = path.at[depth].set(jnp.stack([node, a, o]))
    rewards = rewards.at[depth].set(out.reward)
    discounts = discounts.at[depth].set(out.discount)
    child = tree.children[node, a, o]
    term = jnp.asarray(sim.terminal_fn(params, emb2), bool)
    stop = (child < 0) | term | (depth + 1 >= horizon)
    return jnp.where(stop, node, child), depth + 1, path, rewards, discounts, emb2, term, stop

  path = jnp.zeros((horizon, 3), jnp.int32)
  zeros = jnp.zeros((horizon,), jnp.float32)
  init = (jnp.int32(0), jnp.int32(0), path, zeros, zeros, root_embedding, jnp.asarray(False), jnp.asarray(False))
  _, length, path, rewards, discounts, emb, term, _ = jax.lax.while_loop(cond, body, init)
  return path, rewards, discounts, length, emb, term


def _backup(policy, tree, path, rewards, discounts, length, g, horizon):
  """Adds the return ``g`` of the leaf and the path's rewards to every edge on the path."""

  def body(j, c):
    # Branch-free (a cond would become a select over the whole tree under vmap).
    tree, g = c
    live = j < length
    i = jnp.maximum(length - 1 - j, 0)
    node, a, o = path[i, 0], path[i, 1], path[i, 2]
    g = jnp.where(live, rewards[i] + discounts[i] * g, g)
    add, gl = live.astype(jnp.int32), jnp.where(live, g, 0.0)
    tree = tree._replace(
        edge_n=tree.edge_n.at[node, a].add(add), edge_sum=tree.edge_sum.at[node, a].add(gl),
        edge_sumsq=tree.edge_sumsq.at[node, a].add(gl * gl),
        reward_sum=tree.reward_sum.at[node, a].add(jnp.where(live, rewards[i], 0.0)),
        edge_discount=tree.edge_discount.at[node, a].set(jnp.where(live, discounts[i], tree.edge_discount[node, a])),
        outcome_n=tree.outcome_n.at[node, a, o].add(add), visits=tree.visits.at[node].add(add),
    )
    v = jnp.where(live, node_value(policy, tree, node), tree.value[node])
    return tree._replace(value=tree.value.at[node].set(v)), g

  tree, _ = jax.lax.fori_loop(0, horizon, body, (tree, g))
  return tree


def _simulate(sim, params, policy, horizon, root_embedding, key, tree):
  """One simulation: descend, expand (or re-evaluate) the leaf, back up."""
  path, rewards, discounts, length, emb, term = _descend(sim, params, tree, policy, key, root_embedding, horizon)
  last = path[length - 1]
  existing = tree.children[last[0], last[1], last[2]]
  new = existing < 0
  leaf = jnp.where(new, tree.num_nodes, existing)
  value = sim.value_fn(params, jax.random.fold_in(key, horizon + 1), emb, horizon - length)
  v_leaf = jnp.where(term, 0.0, value)
  visits = tree.visits[leaf] + 1
  leaf_sum = tree.leaf_sum[leaf] + v_leaf
  embedding = jax.tree.map(lambda t, e: t.at[leaf].set(jnp.where(new, e, t[leaf])), tree.embedding, emb)
  tree = tree._replace(
      embedding=embedding, depth=tree.depth.at[leaf].set(length),
      children=tree.children.at[last[0], last[1], last[2]].set(leaf),
      num_nodes=tree.num_nodes + new.astype(jnp.int32), visits=tree.visits.at[leaf].set(visits),
      leaf_sum=tree.leaf_sum.at[leaf].set(leaf_sum),
      # A leaf has no visited edge: its value is the mean of its evaluations.
      value=tree.value.at[leaf].set(jnp.where(new, v_leaf, leaf_sum / visits.astype(jnp.float32))),
  )
  return _backup(policy, tree, path, rewards, discounts, length, v_leaf, horizon)


def _typed_key(key: jax.Array) -> jax.Array:
  """``key`` as a typed key: a ``jax.random.key``, or a legacy ``PRNGKey`` (``uint32 [2]``) wrapped."""
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    chex.assert_shape(key, ())
    return key
  if jnp.shape(key) != (2,) or key.dtype != jnp.uint32:
    raise ValueError(f"key must be one jax.random.key(seed) (or a legacy PRNGKey, uint32 [2]); got "
                     f"{key.dtype} of shape {jnp.shape(key)}")
  return jax.random.wrap_key_data(key)


def _check_sizes(num_simulations: int, horizon: int) -> None:
  """Static sizes of a search: at least one simulation, of depth at least 1."""
  for name, value in (("num_simulations", num_simulations), ("horizon", horizon)):
    if not isinstance(value, (int, np.integer)) or value < 1:
      raise ValueError(f"{name}={value!r}: must be an int >= 1")


def _check_step(out: DecisionOutput) -> None:
  """A decision step returns scalars (shapes are static: checked when the search is traced)."""
  for name in ("reward", "discount"):
    if jnp.shape(getattr(out, name)) != ():
      raise ValueError(f"decision_fn must return a scalar {name} (one root, unbatched); got shape "
                       f"{jnp.shape(getattr(out, name))}")


def search_one(
    sim: Simulator, params: Any, root_embedding: Any, key: jax.Array, *, policy: rules.TreePolicy,
    num_simulations: int, horizon: int, budget: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, Tree]:
  """Unbatched search from ``root_embedding``; see :func:`search`.

  ``budget`` (traced, at most ``num_simulations``) runs fewer simulations in a
  tree sized for ``num_simulations``: one compilation serves every budget.

  Returns:
    ``(action [], q [A], visits [A], tree)``.
  """
  _check_sizes(num_simulations, horizon)
  tree = init_tree(num_simulations + 1, sim.num_actions, sim.num_outcomes, root_embedding)
  k_root, k_sims = jax.random.split(_typed_key(key))
  root_term = jnp.asarray(sim.terminal_fn(params, root_embedding), bool)
  root_v = jnp.where(root_term, 0.0, sim.value_fn(params, k_root, root_embedding, jnp.int32(horizon)))
  tree = tree._replace(value=tree.value.at[0].set(root_v), leaf_sum=tree.leaf_sum.at[0].set(root_v),
                       visits=tree.visits.at[0].set(1))

  def simulate(i, tree):
    return _simulate(sim, params, policy, horizon, root_embedding, jax.random.fold_in(k_sims, i), tree)

  stop = num_simulations if budget is None else jnp.minimum(budget, num_simulations)
  tree = jax.lax.fori_loop(0, stop, simulate, tree)
  root = node_view(tree, jnp.int32(0), sim.legal(params, root_embedding), policy)
  action = jnp.argmax(jnp.where(root.n > 0, root.q, -jnp.inf)).astype(jnp.int32)
  return action, root.q, root.n, tree


def search(
    sim: Simulator, params: Any, root_embedding: Any, key: jax.Array, *, policy: rules.TreePolicy,
    num_simulations: int, horizon: int, batched_params: bool = True,
) -> SearchOutput:
  """Batched tree search: ``B`` roots, ``num_simulations`` simulations each.

  Args:
    sim: the simulator (static).
    params: the simulator's parameters, with a leading ``[B]`` axis on every
      leaf (one per root) if ``batched_params``, else shared by all roots.
    root_embedding: the roots, a pytree with leading ``[B]`` axes.
    key: randomness of the simulator calls, the leaf values and the policy
      (split into one key per root).
    policy: the tree policy (:mod:`methods.varde.tree_rules`).
    num_simulations: static simulation budget per root.
    horizon: static search depth ``H``: a descent stops at depth ``H`` and
      evaluates ``value_fn`` there with ``steps_left = 0``.
    batched_params: whether ``params`` has the batch axis.

  Returns:
    The recommended actions, root estimates and visit counts, and the trees.
  """
  key = _typed_key(key)
  _check_sizes(num_simulations, horizon)
  leaves = jax.tree.leaves(root_embedding)
  if not leaves or any(jnp.ndim(leaf) == 0 for leaf in leaves):
    raise ValueError("root_embedding needs a leading batch axis [B, ...] on every array; got shapes "
                     f"{[jnp.shape(leaf) for leaf in leaves]} (one root: add the axis with x[None])")
  batch = jnp.shape(leaves[0])[0]
  for leaf in leaves:
    chex.assert_axis_dimension(leaf, 0, batch)
  fn = functools.partial(search_one, sim, policy=policy, num_simulations=num_simulations, horizon=horizon)
  in_axes = (0 if batched_params else None, 0, 0)
  action, q, n, tree = jax.vmap(fn, in_axes=in_axes)(params, root_embedding, jax.random.split(key, batch))
  return SearchOutput(action, q, n, tree)
