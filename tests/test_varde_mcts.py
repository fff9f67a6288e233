"""VarDE tree search: convergence, unfrozen chance nodes, mctx parity, shapes, devices (closed forms: test_varde_backups)."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from envs import trees
from launch import mesh as mesh_lib
from launch.configs import varde_mcts as mcts_config
from launch.experiments.varde import mcts as varde_mcts
from launch.experiments.varde import search as varde_search
from launch.experiments.varde import search
from methods.varde import mcts
from methods.varde import mctx_adapter

import mdp_cases


def test_stochastic_edge_converges_to_its_mean_and_is_not_frozen():
  mdp = mdp_cases.coin(8)
  roots = jnp.zeros(8, jnp.int32)
  for policy in (mcts.uct_policy(c=1.0), mcts.varde_policy()):
    out = mcts.search(mdp, roots, jax.random.key(1), policy=policy, num_simulations=400, horizon=2, leaf_value="zero")
    np.testing.assert_allclose(np.asarray(out.q[:, 0]), 0.5, atol=0.12)
    assert (np.asarray(out.tree.outcome_n[:, 0, 0]) > 0).sum(-1).min() == 2  # both successors in the tree
  # mctx stores the first sampled successor of (s0, a0) and reuses it.
  _, po = mctx_adapter.mctx_search(mdp, roots, jax.random.key(1), policy="mctx_muzero", num_simulations=400,
                                   horizon=2, leaf_value="zero")
  q0 = np.asarray(po.search_tree.qvalues(jnp.zeros(8, jnp.int32))[:, 0])
  assert np.all(np.abs(q0 - 0.5) > 0.45), q0  # frozen at one outcome (0 or ~1), not near 1/2


def test_regret_falls_with_the_budget():
  b, h = 64, 3
  env = jax.vmap(lambda k: trees.synthetic_tree(k, 3, h, sigma=1.0))(jax.random.split(jax.random.key(0), b))
  policy = mcts.varde_policy(tau=0.3)

  @jax.jit
  def regret(budget):
    keys = jax.random.split(jax.random.key(1), b)
    act = jax.vmap(lambda m, k: mcts.search_one(m, m.s0, k, policy=policy, num_simulations=400, horizon=h,
                                                budget=budget)[0])(env, keys)
    return jax.vmap(functools.partial(varde_search.root_regret, horizon=h))(env, action=act)

  lo, hi = np.asarray(regret(12)), np.asarray(regret(400))
  d = lo - hi
  assert d.mean() > 3 * d.std() / math.sqrt(b), (lo.mean(), hi.mean())


def test_mctx_adapter_reproduces_mctx_on_a_deterministic_tree():
  k, depth, b = 3, 3, 4
  env = jax.vmap(lambda key: trees.synthetic_tree(key, k, depth, sigma=0.0))(jax.random.split(jax.random.key(2), b))
  roots = jnp.zeros(b, jnp.int32)
  action, ours = mctx_adapter.mctx_search(env, roots, jax.random.key(3), policy="mctx_muzero", num_simulations=40,
                                          horizon=depth, leaf_value="zero")

  def recurrent_fn(params, key, a, node):  # direct: children k n + 1 + a, reward on entering a leaf
    del key
    child = node * k + 1 + a
    leaf = child >= trees.num_nodes(k, depth - 1)
    r = jax.vmap(lambda m, s, x: m.reward_mean[s, x])(params, node, a)
    out = mctx.RecurrentFnOutput(reward=r, discount=jnp.where(leaf, 0.0, 1.0), prior_logits=jnp.zeros((b, k)),
                                 value=jnp.zeros(b))
    return out, child

  root = mctx.RootFnOutput(prior_logits=jnp.zeros((b, k)), value=jnp.zeros(b), embedding=roots)
  _, k_search = jax.random.split(jax.random.key(3))
  direct = mctx.muzero_policy(env, k_search, root, recurrent_fn, 40, max_depth=depth, temperature=0.0,
                              dirichlet_fraction=0.0)
  np.testing.assert_array_equal(action, direct.action)
  np.testing.assert_array_equal(ours.search_tree.summary().visit_counts, direct.search_tree.summary().visit_counts)
  np.testing.assert_allclose(ours.search_tree.summary().qvalues, direct.search_tree.summary().qvalues, rtol=1e-6)


def test_batch_elements_are_independent_and_budgets_do_not_recompile():
  env = jax.vmap(lambda k: trees.synthetic_tree(k, 3, 3, sigma=1.0))(jax.random.split(jax.random.key(0), 2))
  keys = jax.random.split(jax.random.key(5), 2)
  policy = mcts.varde_policy(tau=0.3)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def run(e, k, budget):
    return jax.vmap(lambda m, kk: mcts.search_one(m, m.s0, kk, policy=policy, num_simulations=64, horizon=3,
                                                  budget=budget)[2])(e, k)

  both = run(env, keys, 64)
  run(env, keys, 16)
  first = jax.tree.map(lambda x: x[:1], env)
  one = jax.jit(lambda e, k: jax.vmap(lambda m, kk: mcts.search_one(m, m.s0, kk, policy=policy, num_simulations=64,
                                                                     horizon=3)[2])(e, k))(first, keys[:1])
  np.testing.assert_array_equal(both[:1], one)
  chex.clear_trace_counter()


def test_same_tallies_on_one_device_and_on_eight():
  config = mcts_config.get_config("smoke")
  config.envs, config.policies, config.budgets = ("random_mdp",), ("varde", "uct"), (8,)
  config.num_instances, config.runs_per_instance = 5, 1  # 5 runs: padding is exercised on 8 devices
  outs = [varde_mcts.unit_tally(config, mesh_lib.make_mesh(n), 0, 8, {}) for n in (1, 8)]
  np.testing.assert_array_equal(outs[0].wrong, outs[1].wrong)
  np.testing.assert_allclose(outs[0].regret, outs[1].regret, rtol=1e-5)
  assert float(outs[0].runs) == 5
  assert isinstance(outs[0], search.Tally)


def test_a_root_outside_the_mdp_is_named_not_clamped():
  batch = mdp_cases.coin(3)
  search = functools.partial(mcts.search, batch, key=jax.random.key(0), policy=mcts.uct_policy(), num_simulations=4,
                             horizon=1)
  states = batch.num_states
  with pytest.raises(ValueError, match=rf"root_state\[2\] = {states} is not a state of the MDP"):
    search(jnp.asarray([0, 1, states], jnp.int32))
  with pytest.raises(ValueError, match=r"root_state\[0\] = -1 .* 1 of 3 roots"):
    search(jnp.asarray([-1, 0, 0], jnp.int32))
  with pytest.raises(ValueError, match="dtype float32"):
    search(jnp.zeros(3, jnp.float32))
  assert search(jnp.asarray([0, 1, states - 1], jnp.int32)).action.shape == (3,)  # every state is a valid root
