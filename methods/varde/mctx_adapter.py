"""mctx's own policies on the VarDE tree-search environments.

The anchor library (Danihelka, Guez, Schrittwieser and Silver, "Policy
improvement by planning with Gumbel", ICLR 2022; Schrittwieser et al.,
MuZero, 2020) runs unchanged: :func:`mctx_search` only supplies a
``recurrent_fn`` that calls the simulator (one sampled transition and reward
per expansion, uniform prior logits, the same leaf value -- a random rollout
to the horizon, or zero -- as :func:`methods.varde.mcts.search`), so the
tables compare VarDE against ``mctx.muzero_policy`` and
``mctx.gumbel_muzero_policy`` themselves. mctx stores an edge's first
sampled transition and reward and reuses them afterwards, which is what a
library user gets in a stochastic environment (Luong et al., "Variance
Driven Exploration", ICML 2026, Section 4, point out that this is biased).
The recommendation is mctx's own ``action`` (muzero: the most visited root
action, ``temperature=0``; Gumbel MuZero: its sequential-halving choice).
Root Dirichlet noise is off (``dirichlet_fraction=0``): these are
evaluations, not self-play.

:func:`stochastic_muzero_search` runs ``mctx.stochastic_muzero_policy``
(Antonoglou, Schrittwieser, Ozair, Hubert and Silver, "Planning in stochastic
environments with a learned model", ICLR 2022), mctx's own search with chance
nodes, on any :class:`~methods.varde.tree_search.Simulator` that enumerates its
chance outcomes (``chance_logits_fn``, ``chance_apply_fn``): the same
decision step, the same chance distribution and the same leaf value as this
project's search, at the same number of simulations. ``mctx_stochastic``
(in :data:`MCTX_POLICIES`) is that search on a tabular MDP.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import mctx

from envs import mdps
from methods.varde import mcts
from methods.varde import tree_search

MCTX_POLICIES = ("mctx_muzero", "mctx_gumbel", "mctx_stochastic")


def _values(mdp, keys, state, depth, horizon, leaf_value):
  if leaf_value == "zero":
    return jnp.zeros(state.shape, jnp.float32)
  return jax.vmap(lambda m, k, s, d: mdps.rollout(m, k, s, horizon - d, horizon))(mdp, keys, state, depth)


def make_recurrent_fn(horizon: int, leaf_value: str = "rollout"):
  """``recurrent_fn(mdp, key, action, (state, depth))`` for a batch of :class:`~envs.mdps.TabularMDP`."""

  def recurrent_fn(mdp, key, action, embedding):
    state, depth = embedding
    batch = state.shape[0]
    k_step, k_value = jax.random.split(key)
    s2, r, _ = jax.vmap(mdps.step)(mdp, jax.random.split(k_step, batch), state, action)
    done_before = jax.vmap(lambda m, s: m.terminal[s])(mdp, state) | (depth >= horizon)
    d2 = depth + 1
    end = jax.vmap(lambda m, s: m.terminal[s])(mdp, s2) | (d2 >= horizon) | done_before
    value = jnp.where(end, 0.0, _values(mdp, jax.random.split(k_value, batch), s2, d2, horizon, leaf_value))
    out = mctx.RecurrentFnOutput(
        reward=jnp.where(done_before, 0.0, r),
        discount=jnp.where(end, 0.0, mdp.gamma),
        prior_logits=jnp.zeros((batch, mdp.num_actions), jnp.float32),
        value=value,
    )
    return out, (s2, d2)

  return recurrent_fn


def mctx_search(
    mdp: mdps.TabularMDP, root_state: jax.Array, key: jax.Array, *, policy: str, num_simulations: int,
    horizon: int, leaf_value: str = "rollout",
) -> tuple[jax.Array, mctx.PolicyOutput]:
  """Runs ``mctx.muzero_policy`` or ``mctx.gumbel_muzero_policy`` on ``B`` roots.

  Args:
    mdp: environments with a leading ``[B]`` axis (as for
      :func:`methods.varde.mcts.search`).
    root_state: ``[B]`` int32 root states.
    key: randomness of the root value, the search and the simulator.
    policy: ``"mctx_muzero"``, ``"mctx_gumbel"`` or ``"mctx_stochastic"``
      (:func:`stochastic_muzero_search` on :func:`methods.varde.mcts.tabular_simulator`).
    num_simulations: static budget.
    horizon: static depth (mctx's ``max_depth``).
    leaf_value: ``"rollout"`` or ``"zero"``.

  Returns:
    ``[B]`` recommended actions and mctx's full output.
  """
  chex.assert_rank(root_state, 1)
  chex.assert_shape(key, ())
  if policy == "mctx_stochastic":
    sim = mcts.tabular_simulator(mdp, horizon=horizon, leaf_value=leaf_value)
    return stochastic_muzero_search(sim, mdp, root_state, key, num_simulations=num_simulations, horizon=horizon)
  batch = root_state.shape[0]
  k_root, k_search = jax.random.split(key)
  depth0 = jnp.zeros((batch,), jnp.int32)
  root_term = jax.vmap(lambda m, s: m.terminal[s])(mdp, root_state)
  root_value = jnp.where(root_term, 0.0, _values(mdp, jax.random.split(k_root, batch), root_state, depth0, horizon, leaf_value))
  root = mctx.RootFnOutput(
      prior_logits=jnp.zeros((batch, mdp.num_actions), jnp.float32), value=root_value, embedding=(root_state, depth0)
  )
  recurrent_fn = make_recurrent_fn(horizon, leaf_value)
  if policy == "mctx_muzero":
    out = mctx.muzero_policy(
        mdp, k_search, root, recurrent_fn, num_simulations, max_depth=horizon, temperature=0.0,
        dirichlet_fraction=0.0)
  elif policy == "mctx_gumbel":
    out = mctx.gumbel_muzero_policy(mdp, k_search, root, recurrent_fn, num_simulations, max_depth=horizon)
  else:
    raise ValueError(f"unknown mctx policy {policy!r}; allowed: {MCTX_POLICIES}")
  return out.action.astype(jnp.int32), out


def _finite_logits(logits: jax.Array) -> jax.Array:
  """``-inf`` logits replaced by the smallest float (mctx's softmax of all ``-inf`` would be NaN)."""
  return jnp.where(jnp.isfinite(logits), logits, jnp.finfo(jnp.float32).min)


def make_stochastic_fns(sim: tree_search.Simulator, horizon: int, batched_params: bool = True):
  """``(decision_recurrent_fn, chance_recurrent_fn)`` of ``mctx.stochastic_muzero_policy`` for ``sim``.

  A state embedding is ``(embedding, depth)``, an afterstate embedding
  ``(afterstate, reward, discount, illegal, depth)``. The decision step
  returns ``sim.chance_logits_fn`` and, as the afterstate's value, a
  one-sample estimate ``r + discount V(s')`` (one sampled outcome, ``value_fn``
  at it); the chance step applies mctx's chosen outcome and returns the
  decision's reward, the discount (0 at a terminal state) and ``value_fn`` of
  the new state. An illegal action (reachable below the root, where mctx
  only masks through the prior) ends the episode with reward 0. Priors are
  uniform over the legal actions.
  """
  p_axis = 0 if batched_params else None

  def decision_one(params, key, action, state, depth):
    k_dec, k_out, k_val = jax.random.split(key, 3)
    illegal = ~sim.legal(params, state)[action] | sim.terminal_fn(params, state)
    out, after = sim.decision_fn(params, k_dec, action, state)
    _, nxt = sim.chance_fn(params, k_out, after)
    v_next = jnp.where(sim.terminal_fn(params, nxt), 0.0, sim.value_fn(params, k_val, nxt, horizon - depth - 1))
    value = jnp.where(illegal, 0.0, out.reward + out.discount * v_next)
    logits = _finite_logits(sim.chance_logits_fn(params, after))
    return logits, value, (after, out.reward, out.discount, illegal, depth)

  def chance_one(params, key, outcome, after, reward, discount, illegal, depth):
    nxt = sim.chance_apply_fn(params, outcome, after)
    end = sim.terminal_fn(params, nxt) | illegal
    d2 = depth + 1
    value = jnp.where(end, 0.0, sim.value_fn(params, key, nxt, horizon - d2))
    logits = jnp.where(sim.legal(params, nxt), 0.0, jnp.finfo(jnp.float32).min)
    return logits, value, jnp.where(illegal, 0.0, reward), jnp.where(end, 0.0, discount), (nxt, d2)

  def decision_recurrent_fn(params, key, action, embedding):
    state, depth = embedding
    keys = jax.random.split(key, depth.shape[0])
    logits, value, after = jax.vmap(decision_one, in_axes=(p_axis, 0, 0, 0, 0))(params, keys, action, state, depth)
    return mctx.DecisionRecurrentFnOutput(chance_logits=logits, afterstate_value=value), after

  def chance_recurrent_fn(params, key, outcome, after_embedding):
    keys = jax.random.split(key, after_embedding[-1].shape[0])
    logits, value, reward, discount, nxt = jax.vmap(chance_one, in_axes=(p_axis, 0, 0) + (0,) * 5)(
        params, keys, outcome, *after_embedding)
    out = mctx.ChanceRecurrentFnOutput(action_logits=logits, value=value, reward=reward, discount=discount)
    return out, nxt

  return decision_recurrent_fn, chance_recurrent_fn


def stochastic_muzero_search(
    sim: tree_search.Simulator, params: Any, root_embedding: Any, key: jax.Array, *, num_simulations: int,
    horizon: int, batched_params: bool = True, pb_c_init: float = 1.25, pb_c_base: float = 19652.0,
) -> tuple[jax.Array, mctx.PolicyOutput]:
  """Runs ``mctx.stochastic_muzero_policy`` on ``B`` roots of ``sim``.

  Args:
    sim: a simulator with ``chance_logits_fn`` and ``chance_apply_fn``.
    params: as for :func:`methods.varde.tree_search.search`.
    root_embedding: ``B`` roots (leading ``[B]`` axes).
    key: randomness of the root value, the simulator and the search.
    num_simulations: static budget. One mctx simulation expands one
      decision or one chance node and uses one ``value_fn`` evaluation, as
      one of ours does (which expands a decision and a chance step at once);
      mctx's stochastic recurrent function computes both the decision and the
      chance function at every expansion and keeps one, so in wall time a
      simulation costs it two evaluations.
    horizon: decision steps below the root (mctx's ``max_depth = 2 horizon``:
      it counts decision and chance levels).
    batched_params: whether ``params`` has the batch axis.
    pb_c_init: PUCT constant ``c_1`` (mctx's default).
    pb_c_base: PUCT constant ``c_2`` (mctx's default).

  Returns:
    ``[B]`` recommended actions (the most visited legal root action,
    ``temperature=0``; no Dirichlet noise) and mctx's full output.
  """
  chex.assert_shape(key, ())
  if sim.chance_logits_fn is None or sim.chance_apply_fn is None:
    raise ValueError("stochastic_muzero_search needs a simulator with chance_logits_fn and chance_apply_fn "
                     "(mctx chooses the chance outcomes itself)")
  leaves = jax.tree.leaves(root_embedding)
  batch = jnp.shape(leaves[0])[0]
  p_axis = 0 if batched_params else None
  k_root, k_search = jax.random.split(key)

  def root_one(params, key, state):
    value = jnp.where(sim.terminal_fn(params, state), 0.0, sim.value_fn(params, key, state, jnp.int32(horizon)))
    return value, sim.legal(params, state)

  value, legal = jax.vmap(root_one, in_axes=(p_axis, 0, 0))(params, jax.random.split(k_root, batch), root_embedding)
  root = mctx.RootFnOutput(prior_logits=jnp.zeros((batch, sim.num_actions), jnp.float32), value=value,
                           embedding=(root_embedding, jnp.zeros((batch,), jnp.int32)))
  decision_fn, chance_fn = make_stochastic_fns(sim, horizon, batched_params)
  out = mctx.stochastic_muzero_policy(
      params, k_search, root, decision_fn, chance_fn, num_simulations, invalid_actions=~legal,
      max_depth=2 * horizon, dirichlet_fraction=0.0, temperature=0.0, pb_c_init=pb_c_init, pb_c_base=pb_c_base)
  return out.action.astype(jnp.int32), out
