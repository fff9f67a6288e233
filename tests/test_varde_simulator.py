"""The search over a user-written simulator: parity with the tabular path, chance nodes, mctx's stochastic MuZero."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import mdps
from methods.varde import mcts
from methods.varde import mctx_adapter
from methods.varde import tree_rules as rules
from methods.varde import tree_search

import mdp_cases


def _user_simulator(horizon, leaf_value):
  """A tabular MDP written as a user would, on the arrays, with the documented key use."""

  def decision_fn(m, key, action, state):
    reward = m.reward_mean[state, action] + m.reward_std[state, action] * jax.random.normal(key)
    reward = jnp.where(m.terminal[state], 0.0, reward)
    return tree_search.DecisionOutput(reward, m.gamma), (state, action)

  def chance_fn(m, key, after):
    state, action = after
    outcome = jax.random.categorical(key, jnp.log(m.prob[state, action])).astype(jnp.int32)
    return outcome, jnp.where(m.terminal[state], state, m.succ[state, action, outcome])

  def value_fn(m, key, state, steps_left):
    if leaf_value == "zero":
      return jnp.float32(0.0)
    return mdps.rollout(m, key, state, steps_left, horizon)

  return tree_search.Simulator(decision_fn, chance_fn, value_fn, lambda m, s: m.terminal[s], None,
                               num_actions=3, num_outcomes=10)


@pytest.mark.parametrize("name, leaf_value", [("varde_mean", "rollout"), ("varde_softmax_mean", "zero"),
                                              ("ments", "rollout")])
def test_user_simulator_reproduces_the_tabular_search(name, leaf_value):
  b, h = 4, 3
  env = jax.vmap(lambda k: mdps.random_mdp(k, 10, 3, reward_std=1.0))(jax.random.split(jax.random.key(0), b))
  policy = {"varde_mean": rules.varde_policy(backup="mean"), "varde_softmax_mean": rules.varde_policy(backup="softmax_mean"),
            "uct": rules.uct_policy(), "ments": rules.ments_policy(tau=0.3)}[name]
  ours = mcts.search(env, env.s0, jax.random.key(1), policy=policy, num_simulations=40, horizon=h, leaf_value=leaf_value)
  user = tree_search.search(_user_simulator(h, leaf_value), env, env.s0, jax.random.key(1), policy=policy,
                            num_simulations=40, horizon=h)
  np.testing.assert_array_equal(ours.action, user.action)
  np.testing.assert_array_equal(ours.visits, user.visits)
  np.testing.assert_allclose(ours.q, user.q, rtol=1e-6)
  np.testing.assert_allclose(ours.tree.value, user.tree.value, rtol=1e-6)
  np.testing.assert_array_equal(ours.tree.children, user.tree.children)


def test_stochastic_muzero_through_the_adapter_enumerates_chance_outcomes():
  b = 8
  mdp = mdp_cases.coin(b)
  action, out = mctx_adapter.mctx_search(mdp, jnp.zeros(b, jnp.int32), jax.random.key(1), policy="mctx_stochastic",
                                         num_simulations=100, horizon=2, leaf_value="zero")
  tree = jax.tree.map(np.asarray, out.search_tree)
  for i in range(b):
    chance = tree.children_index[i, 0, 0]  # the afterstate of (root, a0)
    kids = np.flatnonzero(tree.parents[i] == chance)
    # mctx picks outcomes by argmax prior / (visits + 1): both successors, visited 1/2 : 1/2.
    assert sorted(tree.action_from_parent[i, kids] - 2) == [0, 1]
    visits = tree.node_visits[i, kids]
    assert visits.min() >= 2 and visits.max() - visits.min() <= 1, visits
  chex.assert_shape(action, (b,))
  # muzero_policy freezes the first sampled successor: one child only.
  _, frozen = mctx_adapter.mctx_search(mdp, jnp.zeros(b, jnp.int32), jax.random.key(1), policy="mctx_muzero",
                                       num_simulations=100, horizon=2, leaf_value="zero")
  q0 = np.asarray(frozen.search_tree.qvalues(jnp.zeros(b, jnp.int32))[:, 0])
  assert np.all(np.abs(q0 - 0.5) > 0.45), q0


def test_stochastic_muzero_needs_an_enumerable_chance_step():
  sim = _user_simulator(2, "zero")  # no chance_logits_fn
  mdp = mdp_cases.coin(2)
  with pytest.raises(ValueError, match="chance_logits_fn"):
    mctx_adapter.stochastic_muzero_search(sim, mdp, jnp.zeros(2, jnp.int32), jax.random.key(0), num_simulations=4,
                                          horizon=2)


def test_illegal_actions_are_never_searched_and_shared_params_broadcast():
  """A 2-action chain where action 1 is illegal in state 0: no visit, no recommendation."""
  gamma = 0.9

  def decision_fn(params, key, action, state):
    del key
    return tree_search.DecisionOutput(params["reward"][action], jnp.float32(gamma)), state

  sim = tree_search.Simulator(
      decision_fn=decision_fn, chance_fn=lambda p, k, s: (jnp.int32(0), s),
      value_fn=lambda p, k, s, left: jnp.float32(0.0), terminal_fn=lambda p, s: jnp.asarray(False),
      legal_fn=lambda p, s: jnp.array([True, False, True]), num_actions=3, num_outcomes=1)
  params = {"reward": jnp.array([0.1, 5.0, 0.2])}
  for policy in (rules.varde_policy(), rules.uct_policy(), rules.ments_policy(tau=0.3)):
    out = jax.jit(functools.partial(tree_search.search, sim, policy=policy, num_simulations=30, horizon=3,
                                    batched_params=False))(params, jnp.zeros(5, jnp.int32), jax.random.key(0))
    assert (np.asarray(out.tree.edge_n)[:, :, 1] == 0).all()
    np.testing.assert_array_equal(out.action, np.full(5, 2))


def _chain_simulator(reward_shape=()):
  """One state, two actions of rewards 0 and 1 (reward of shape ``reward_shape``)."""

  def decision_fn(params, key, action, state):
    del params, key
    return tree_search.DecisionOutput(jnp.full(reward_shape, action, jnp.float32), jnp.float32(0.9)), state

  return tree_search.Simulator(
      decision_fn=decision_fn, chance_fn=lambda p, k, s: (jnp.int32(0), s),
      value_fn=lambda p, k, s, left: jnp.float32(0.0), terminal_fn=lambda p, s: jnp.asarray(False),
      legal_fn=None, num_actions=2, num_outcomes=1)


def test_a_legacy_prng_key_runs_the_same_search_as_its_typed_key():
  sim, policy = _chain_simulator(), rules.varde_policy()
  run = functools.partial(tree_search.search, sim, None, jnp.zeros(3, jnp.int32), policy=policy,
                          num_simulations=8, horizon=2, batched_params=False)
  legacy, typed = run(jax.random.PRNGKey(4)), run(jax.random.wrap_key_data(jax.random.PRNGKey(4)))
  chex.assert_trees_all_equal(legacy, typed)
  np.testing.assert_array_equal(legacy.action, np.ones(3))


@pytest.mark.parametrize("kwargs, match", [
    ({"num_simulations": 0}, "num_simulations=0"), ({"horizon": 0}, "horizon=0"),
    ({"roots": jnp.int32(0)}, "leading batch axis"), ({"reward_shape": (1,)}, "scalar reward"),
    ({"key": jnp.zeros(3, jnp.uint32)}, "key must be one"),
])
def test_a_malformed_search_call_is_refused_with_the_problem_named(kwargs, match):
  kw = {"num_simulations": 4, "horizon": 2, "roots": jnp.zeros(2, jnp.int32), "reward_shape": (),
        "key": jax.random.key(0), **kwargs}
  with pytest.raises(ValueError, match=match):
    tree_search.search(_chain_simulator(kw["reward_shape"]), None, kw["roots"], kw["key"], policy=rules.uct_policy(),
                       num_simulations=kw["num_simulations"], horizon=kw["horizon"], batched_params=False)
