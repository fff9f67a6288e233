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
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import mctx

from envs import mdps

MCTX_POLICIES = ("mctx_muzero", "mctx_gumbel")


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
    policy: ``"mctx_muzero"`` or ``"mctx_gumbel"``.
    num_simulations: static budget.
    horizon: static depth (mctx's ``max_depth``).
    leaf_value: ``"rollout"`` or ``"zero"``.

  Returns:
    ``[B]`` recommended actions and mctx's full output.
  """
  chex.assert_rank(root_state, 1)
  chex.assert_shape(key, ())
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
        mdp, k_search, root, recurrent_fn, num_simulations, max_depth=horizon, temperature=0.0
    )
  elif policy == "mctx_gumbel":
    out = mctx.gumbel_muzero_policy(mdp, k_search, root, recurrent_fn, num_simulations, max_depth=horizon)
  else:
    raise ValueError(f"unknown mctx policy {policy!r}; allowed: {MCTX_POLICIES}")
  return out.action.astype(jnp.int32), out
