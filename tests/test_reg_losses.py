"""IQL / REG losses: expectile weights, TD targets, the REG ambiguity-set ratios, alpha = 0 is IQL."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods import reg
from methods.reg import agent as agent_lib
from methods.reg import losses


def test_expectile_weights_and_mse_limit():
  u = jnp.array([-2.0, -0.5, 0.0, 0.5, 3.0])
  np.testing.assert_allclose(losses.expectile_weight(u, 0.7), [0.3, 0.3, 0.7, 0.7, 0.7])
  np.testing.assert_allclose(losses.expectile_weight(u, 0.9), [0.1, 0.1, 0.9, 0.9, 0.9], rtol=1e-6)
  # tau = 0.5 weighs both signs by 1/2: the loss is half the mean squared error.
  x = jax.random.normal(jax.random.key(0), (1000,))
  np.testing.assert_allclose(losses.expectile_loss(x, 0.5), 0.5 * jnp.mean(x**2), rtol=1e-6)
  # Positive errors weigh tau, negative ones 1 - tau.
  np.testing.assert_allclose(losses.expectile_loss(jnp.array([2.0]), 0.8), 0.8 * 4.0, rtol=1e-6)
  np.testing.assert_allclose(losses.expectile_loss(jnp.array([-2.0]), 0.8), 0.2 * 4.0, rtol=1e-6)


def test_td_target_uses_one_minus_terminal():
  r = jnp.array([1.0, 1.0, -2.0])
  done = jnp.array([0.0, 1.0, 1.0])
  v = jnp.array([10.0, 1e6, -1e6])
  np.testing.assert_allclose(losses.td_target(r, done, v, 0.9), [1.0 + 9.0, 1.0, -2.0])


def test_critic_targets_ignore_next_state_on_terminals():
  """Through the agent: with terminals the target is r whatever V(s') is."""
  hp = reg.Hparams(hidden=(8,))
  state = reg.init(jax.random.key(0), 3, 1, hp=hp)
  nets = reg.make_nets(1, hp)
  # A V network whose output is huge: scale its last layer.
  state = state._replace(value=jax.tree.map(lambda x: 1e3 * x + 50.0, state.value))
  obs = jax.random.normal(jax.random.key(1), (4, 3))
  batch = reg.Batch(obs, jnp.zeros((4, 1)), jnp.arange(4.0), obs + 1, jnp.array([1.0, 1.0, 0.0, 0.0]))
  y = agent_lib._critic_target(state, batch, nets, hp, jax.random.key(2))  # pylint: disable=protected-access
  next_v = nets.value.apply(state.value, batch.next_observations)
  np.testing.assert_allclose(y[:2], [0.0, 1.0])
  np.testing.assert_allclose(y[2:], jnp.arange(2.0, 4.0) + hp.discount * next_v[2:], rtol=1e-6)


def _exact_expectile(x: np.ndarray, p: np.ndarray, tau: float) -> float:
  lo, hi = x.min(), x.max()
  for _ in range(100):
    e = 0.5 * (lo + hi)
    g = np.sum(p * np.where(x < e, 1 - tau, tau) * (x - e))  # decreasing in e
    lo, hi = (e, hi) if g > 0 else (lo, e)
  return 0.5 * (lo + hi)


@pytest.mark.parametrize("tau", [0.5, 0.9])
def test_value_tends_to_upper_expectile_on_a_bandit(tau):
  """One state, actions with fixed rewards, gamma = 0: Q -> r(a) and V -> the tau-expectile of r."""
  rewards = np.array([0.0, 1.0, 2.0, 6.0], np.float32)
  actions = np.array([-0.75, -0.25, 0.25, 0.75], np.float32)
  probs = np.array([0.4, 0.3, 0.2, 0.1])
  n = 1000
  idx = np.repeat(np.arange(4), (probs * n).astype(int))
  obs = np.zeros((n, 1), np.float32)
  data = reg.Batch(jnp.asarray(obs), jnp.asarray(actions[idx, None]), jnp.asarray(rewards[idx]), jnp.asarray(obs),
                   jnp.ones(n))
  hp = reg.Hparams(hidden=(32, 32), expectile=tau, discount=0.0, batch_size=1024, critic_lr=3e-3, value_lr=1e-2,
                   polyak=0.05)
  state = reg.init(jax.random.key(0), 1, 1, hp=hp)
  state, _ = jax.jit(functools.partial(reg.train_chunk, num_updates=1000, hp=hp))(state, data)
  v = float(reg.make_nets(1, hp).value.apply(state.value, jnp.zeros((1, 1)))[0])
  exact = _exact_expectile(rewards, probs, tau)
  # Minibatch noise of the fixed point: the expectile of a 1024-batch has se ~ sd / sqrt(1024) ~ 0.06.
  assert abs(v - exact) < 0.15, (tau, v, exact)
  if tau > 0.5:
    assert v > float(np.sum(probs * rewards)) + 0.1  # the upper expectile is above the mean


def test_worst_case_ratios():
  u = jax.random.normal(jax.random.key(0), (512,))
  for amb, regz in [("kappa", "none"), ("simplex", "kl"), ("simplex", "chi2"), ("simplex", "none")]:
    xi = losses.worst_case_ratio(u, ambiguity=amb, regularizer=regz, tau=0.7, lam=0.5)
    chex.assert_shape(xi, (512,))
    np.testing.assert_allclose(jnp.mean(xi), 1.0, rtol=1e-5)
    assert bool(jnp.all(xi >= 0))
  xi = losses.worst_case_ratio(u, ambiguity="kappa", regularizer="none", tau=0.7, lam=1.0)
  np.testing.assert_allclose(jnp.max(xi) / jnp.min(xi), 0.7 / 0.3, rtol=1e-5)  # sup xi = kappa inf xi
  np.testing.assert_allclose(losses.worst_case_ratio(u, ambiguity="simplex", regularizer="kl", tau=0.7, lam=0.5),
                             512 * jax.nn.softmax(u / 0.5), rtol=1e-4)
  xi = losses.worst_case_ratio(u, ambiguity="simplex", regularizer="none", tau=0.7, lam=1.0)
  assert float(xi[jnp.argmax(u)]) == 512.0
  with pytest.raises(ValueError, match="kappa"):  # refused where the hyperparameters are declared
    reg.Hparams(critic="reg", reg_ambiguity="kappa", reg_regularizer="kl")


def test_kappa_ratio_is_the_expectile_dual_maximiser():
  """At the exact expectile e, xi = |tau - 1{x < e}| / mean solves max over the kappa-set of E[xi (x - e)] = 0."""
  x = np.asarray(jax.random.normal(jax.random.key(3), (400,)), np.float64)
  tau = 0.8
  e = _exact_expectile(x, np.full(len(x), 1 / len(x)), tau)
  xi = np.asarray(losses.worst_case_ratio(jnp.asarray(x - e, jnp.float32), ambiguity="kappa", regularizer="none",
                                          tau=tau, lam=1.0), np.float64)
  best = np.mean(xi * (x - e))
  assert abs(best) < 1e-4
  rng = np.random.default_rng(0)
  kappa = tau / (1 - tau)
  for _ in range(200):  # any other ratio of the set does no better
    w = rng.uniform(1.0, kappa, len(x))
    assert np.mean(w / w.mean() * (x - e)) <= best + 1e-9


def _run(hp, steps=30):
  n = 512
  k = jax.random.split(jax.random.key(0), 4)
  data = reg.Batch(jax.random.normal(k[0], (n, 3)), jnp.tanh(jax.random.normal(k[1], (n, 2))),
                   jax.random.normal(k[2], (n,)), jax.random.normal(k[3], (n, 3)),
                   (jax.random.uniform(k[0], (n,)) < 0.1).astype(jnp.float32))
  state = reg.init(jax.random.key(1), 3, 2, hp=hp)
  return jax.jit(functools.partial(reg.train_chunk, num_updates=steps, hp=hp))(state, data)


def test_reg_with_alpha_zero_is_iql_up_to_float32_rounding():
  iql, _ = _run(reg.Hparams(hidden=(16, 16), batch_size=32))
  reg0, m = _run(reg.Hparams(hidden=(16, 16), batch_size=32, critic="reg", reg_alpha=0.0))
  # Two differently compiled programs (the REG loss with alpha = 0 vs IQL's): XLA may fuse and
  # reorder their float32 sums differently, so they agree up to rounding, not bit for bit (bit
  # identity is promised only between runs of one compiled program). The tolerance is 64 float32
  # ulps of each leaf's scale, far below what alpha = 1 changes (checked below).
  for a, b in zip(jax.tree.leaves(iql), jax.tree.leaves(reg0)):
    a, b = np.asarray(a), np.asarray(b)
    if not np.issubdtype(a.dtype, np.floating):
      np.testing.assert_array_equal(a, b)  # step counters, keys
      continue
    scale = max(float(np.max(np.abs(a))), np.finfo(np.float32).tiny)
    np.testing.assert_allclose(a, b, rtol=0, atol=64 * np.finfo(np.float32).eps * scale)
  assert "gap" in m
  reg1, _ = _run(reg.Hparams(hidden=(16, 16), batch_size=32, critic="reg", reg_alpha=1.0))
  diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(iql.critic), jax.tree.leaves(reg1.critic)))
  assert diff > 1e-4


def test_reg_penalty_lowers_q_where_the_ratio_is_large():
  """The REG critic loss's gradient adds 2 alpha xi per head: its fixed point is Q = y - alpha xi."""
  qs = jnp.zeros((2, 4))
  y = jnp.zeros(4)
  xi = jnp.array([0.5, 0.5, 1.5, 1.5])
  g = jax.grad(lambda q: losses.reg_q_loss(q, y, jnp.zeros(4), xi, alpha=0.3))(qs)
  np.testing.assert_allclose(g, 2 * 0.3 * jnp.broadcast_to(xi, (2, 4)) / 4, rtol=1e-6)
