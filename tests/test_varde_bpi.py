"""VarDE best-policy identification: closed-form allocation, exact regret, budgets, user problems."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import mdps
from launch import runner
from launch.configs import varde_bai as bai_config
from launch.configs import varde_bpi as bpi_config
from launch.config_schema import ConfigError
from methods.varde import bpi


def _exact_stats(mdp, n=100):
  """Statistics whose empirical MDP is ``mdp`` exactly (probabilities are multiples of 1/n)."""
  shape = mdp.reward_mean.shape
  nn = jnp.full(shape, n, jnp.int32)
  mean, sd = mdp.reward_mean, mdp.reward_std
  return bpi.Stats(nn, mean * n, sd**2 * (n - 1) + n * mean**2, jnp.round(mdp.prob * n).astype(jnp.int32))


def test_varde_weights_match_the_closed_form_on_riverswim():
  mdp = mdps.riverswim(4, gamma=0.8, reward_std=0.3)
  hp = bpi.BPIHparams(tau=0.5, vi_iters=400, var_floor=0.0)
  w = np.asarray(bpi.plan_weights("varde", _exact_stats(mdp), mdp, hp))
  # Independent NumPy computation: soft VI, softmax policy, occupancy, variance of the target.
  s, a = 4, 2
  p = np.zeros((s, a, s))
  for i in range(s):
    for j in range(a):
      for m in range(mdp.num_outcomes):
        p[i, j, int(mdp.succ[i, j, m])] += float(mdp.prob[i, j, m])
  r, g, tau = np.asarray(mdp.reward_mean, np.float64), 0.8, 0.5
  v = np.zeros(s)
  for _ in range(2000):
    q = r + g * p @ v
    v = tau * np.log(np.exp(q / tau).sum(-1))
  pi = np.exp(q / tau) / np.exp(q / tau).sum(-1, keepdims=True)
  p_pi = np.einsum("sa,sat->st", pi, p)
  d = np.linalg.solve(np.eye(s) - g * p_pi.T, np.eye(s)[0])[:, None] * pi
  var = 0.3**2 + g**2 * (p @ v**2 - (p @ v) ** 2)
  np.testing.assert_allclose(w, d**2 * var, rtol=2e-3, atol=1e-6)


def test_greedy_allocation_converges_to_sqrt_of_the_weights():
  w = jnp.asarray([[4.0, 1.0], [0.25, 9.0]])

  def body(n, _):
    i = jnp.argmax(bpi.varde_scores(w, n).reshape(-1))
    return n.reshape(-1).at[i].add(1).reshape(n.shape), None

  n, _ = jax.lax.scan(body, jnp.ones((2, 2), jnp.int32), None, length=20_000)
  shares = np.asarray(n) / np.asarray(n).sum()
  np.testing.assert_allclose(shares, np.sqrt(w) / np.sqrt(w).sum(), atol=1e-3)


def test_policy_regret_matches_the_policy_value_solve():
  mdp = mdps.garnet(jax.random.key(2), 7, 3, 2, reward_std=(0.1, 1.0))
  policies = jax.random.randint(jax.random.key(3), (16, 7), 0, 3)
  v_star, _ = mdps.value_iteration(mdp, tol=1e-7)
  v_pi = jax.vmap(lambda p: mdps.policy_value(mdp, jax.nn.one_hot(p, 3))[mdp.s0])(policies)
  got = jax.vmap(lambda p: bpi.policy_regret(mdp, p))(policies)
  np.testing.assert_allclose(got, v_star[mdp.s0] - v_pi, rtol=1e-5, atol=1e-5)


def test_batched_runs_solve_one_matrix_per_lapack_call():
  """The runs' batch (``vmap`` over seeds, sharded over CPU devices) calls LAPACK one matrix at a time.

  A batched solve splits its batch over XLA's intra-op pool and waits for the
  chunks; with every pool thread inside such a wait a sharded run stops with
  idle cores. See ``methods.common.linalg``.
  """
  mdp = mdps.garnet(jax.random.key(0), 6, 2, 2, reward_std=(0.1, 1.0))
  hp = bpi.BPIHparams()
  alg = bpi.make_algorithm("varde", hp, 64)
  run = jax.vmap(lambda k: bpi.policy_regret(mdp, bpi.run_bpi(alg, mdp, k, budget=64, hp=hp).policy))
  hlo = jax.jit(run).lower(jax.random.split(jax.random.key(1), 32)).as_text()
  calls = [line for line in hlo.splitlines() if "custom_call @lapack" in line]
  assert any("getrf" in c for c in calls), calls
  assert all('num_batch_dims = "0"' in c for c in calls), calls


def test_policy_regret_is_exact_and_falls_with_the_budget():
  mdp = mdps.garnet(jax.random.key(0), 6, 2, 2, reward_std=(0.1, 1.0))
  _, q = mdps.value_iteration(mdp, tol=1e-7)
  assert float(bpi.policy_regret(mdp, jnp.argmax(q, -1))) == pytest.approx(0.0, abs=1e-4)
  assert float(bpi.policy_regret(mdp, jnp.argmin(q, -1))) > 0.01
  hp = bpi.BPIHparams()

  @jax.jit
  @chex.assert_max_traces(n=1)
  def regrets(budget):
    alg = bpi.make_algorithm("varde", hp, budget)
    keys = jax.random.split(jax.random.key(1), 96)
    return jax.vmap(lambda k: bpi.policy_regret(mdp, bpi.run_bpi(alg, mdp, k, budget=budget, hp=hp).policy))(keys)

  lo, hi = np.asarray(regrets(jnp.int32(48))), np.asarray(regrets(jnp.int32(2000)))
  d = lo - hi
  assert d.mean() > 3 * d.std() / math.sqrt(96), (lo.mean(), hi.mean())
  chex.clear_trace_counter()


def test_every_algorithm_spends_exactly_the_budget():
  mdp = mdps.riverswim(4)
  hp = bpi.BPIHparams(replan_every=7)
  for name in bpi.ALGORITHMS:
    out = bpi.run_bpi(bpi.make_algorithm(name, hp, 101), mdp, jax.random.key(0), budget=101, hp=hp)
    assert int(out.counts.sum()) == 101 and int(out.counts.min()) >= hp.warm_start, name
    chex.assert_shape([out.policy, out.counts], [(4,), (4, 2)])
  with pytest.raises(ValueError, match="warm_start"):
    bpi.run_bpi(bpi.make_algorithm("varde", hp, 10), mdp, jax.random.key(0), budget=10, hp=hp)


def _problems(config):
  with pytest.raises(ConfigError) as e:
    runner.validate(config)
  return str(e.value)


def test_user_bandit_is_validated_with_named_errors():
  c = bai_config.get_config("smoke,problem=custom")
  c.means, c.stds, c.budgets = (0.5, 0.4, 0.3), (1.0, 0.5), (100,)
  assert "'stds': lengths differ" in _problems(c)
  c.means, c.stds = (0.5,), ()
  assert "'means': a bandit needs at least two arms" in _problems(c)
  c.means, c.stds = (0.5, 0.4), (1.0, -0.5)
  assert "'stds': negative std" in _problems(c)
  c.stds, c.budgets = (1.0, 0.5), (3,)
  assert "'budgets'" in _problems(c) and "warm_start" in _problems(c)
  c.budgets = ()
  assert "problem=custom needs explicit budgets" in _problems(c)
  c.stds, c.budgets = (1e-50, 1e-50), (100,)  # positive, but 0 in float32
  assert "'stds': every std is 0 in float32" in _problems(c)
  c.stds, c.budgets = (1.0, 0.5), (100, 100)
  assert "'budgets': duplicate entries [100]" in _problems(c)
  c = bai_config.get_config("smoke")
  c.means = (0.1, 0.2)
  assert "'means': only used with problem=custom" in _problems(c)


def test_user_mdp_file_errors_are_named_in_the_config(tmp_path):
  c = bpi_config.get_config("smoke,envs=file")
  assert "'mdp_file': envs=file needs" in _problems(c)
  p = np.full((2, 2, 2), 0.6)
  np.savez(tmp_path / "m.npz", P=p, reward_mean=np.zeros((2, 2)), reward_std=np.ones((2, 2)), discount=0.9)
  c.mdp_file = str(tmp_path / "m.npz")
  assert "'P': rows (s, a) = [(0, 0)" in _problems(c)
  np.savez(tmp_path / "m.npz", P=p / 1.2, reward_mean=np.zeros((2, 2)), reward_std=np.ones((2, 2)), discount=0.9)
  c.budgets = (4, 64)
  assert "below the warm start" in _problems(c)
  c.budgets = (64,)
  runner.validate(c)
  c.start_state = 2
  assert "'start_state': 2 is not a state of" in _problems(c)
  c = bpi_config.get_config("smoke")  # the file is only read with envs=file
  c.mdp_file = str(tmp_path / "m.npz")
  assert "'mdp_file': only used with envs=file" in _problems(c)


def test_user_problems_run_through_the_launcher(tmp_path):
  c = bai_config.get_config("smoke,problem=custom")
  c.means, c.stds, c.std_mode, c.budgets = (0.5, 0.3, 0.2), (0.1, 0.1, 0.1), "fixed", (60,)
  c.algorithms, c.num_seeds, c.chunk_size = ("varde", "uniform"), 64, 64
  res = runner.run(c, str(tmp_path / "bai"), log_summary=False)
  assert res["error"]["varde_tau0.1"]["60"]["p"] < 0.2 and res["means"] == pytest.approx([0.5, 0.3, 0.2])
  p = np.zeros((2, 2, 2))
  p[:, 0, 0], p[:, 1, 1] = 1.0, 1.0
  np.savez(tmp_path / "m.npz", P=p, reward_mean=np.array([[0.0, 1.0], [0.0, 2.0]]), reward_std=np.ones((2, 2)),
           discount=0.5)
  c = bpi_config.get_config("smoke,envs=file")
  c.mdp_file, c.budgets, c.num_instances, c.runs_per_instance = str(tmp_path / "m.npz"), (64,), 2, 2
  c.algorithms = ("varde", "uniform")
  res = runner.run(c, str(tmp_path / "bpi"), log_summary=False)
  assert res["regret"]["file"]["varde"]["64"]["runs"] == 4


def _two_state_mdp(stay_reward, move_reward, gamma, reward_std=0.1):
  """State 0: action 0 stays (``stay_reward``), action 1 moves to the absorbing-in-effect state 1 (``move_reward``)."""
  p = np.zeros((2, 2, 2))
  p[0, 0, 0] = p[0, 1, 1] = 1.0
  p[1, :, 1] = 1.0
  r = np.array([[stay_reward, 0.0], [move_reward, move_reward]])
  return mdps.from_dense(p, r, np.full((2, 2), reward_std), gamma=gamma), p, r


def _regret_float64(p, r, gamma, policy):
  """``V*(s0) - V^pi(s0)`` in float64 by value iteration to convergence and an exact solve (a test oracle)."""
  v = np.zeros(len(r))
  for _ in range(200_000):
    v_new = np.max(r + gamma * p @ v, -1)
    if np.max(np.abs(v_new - v)) < 1e-12:
      break
    v = v_new
  p_pi, r_pi = p[np.arange(len(r)), policy], r[np.arange(len(r)), policy]
  return v[0] - np.linalg.solve(np.eye(len(r)) - gamma * p_pi, r_pi)[0]


@pytest.mark.parametrize("gamma", [0.9, 0.999, 0.9999])
def test_policy_regret_is_non_negative_and_exact_at_discounts_near_one(gamma):
  mdp, p, r = _two_state_mdp(1.0, 1.01, gamma)
  for policy in ([0, 0], [1, 0]):
    got = float(bpi.policy_regret(mdp, jnp.asarray(policy)))
    want = _regret_float64(p, r, gamma, np.asarray(policy))
    assert got >= 0.0
    assert got == pytest.approx(want, rel=1e-3, abs=1e-6 / (1 - gamma))
    if want == 0.0:
      assert got == 0.0  # the optimal policy: no gap anywhere


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_policy_regret_scales_with_the_rewards(scale):
  mdp = mdps.garnet(jax.random.key(4), 5, 2, 2, reward_std=(0.1, 1.0))
  policies = jax.random.randint(jax.random.key(5), (8, 5), 0, 2)
  base = jax.vmap(lambda pi: bpi.policy_regret(mdp, pi))(policies)
  scaled = jax.vmap(lambda pi: bpi.policy_regret(mdps.scale_rewards(mdp, scale), pi))(policies)
  assert np.all(np.asarray(scaled) >= 0.0)
  np.testing.assert_allclose(np.asarray(scaled) / scale, base, rtol=1e-4, atol=1e-6 * float(jnp.max(base)))


def test_planning_sweeps_cover_the_horizon_of_any_discount():
  assert int(bpi.planning_sweeps(0.9, 200)) == 200  # gamma^200 is far below the tail already
  n = int(bpi.planning_sweeps(0.999, 200))
  assert 0.999**n <= bpi.PLANNING_TAIL < 0.999 ** (n - 2)
  # Going to state 1 gains 0.003 per step, about 3 at gamma 0.999: 200 sweeps see too little of it.
  mdp, _, _ = _two_state_mdp(1.0, 1.003, 0.999, reward_std=0.01)
  hp = bpi.BPIHparams()
  alg = bpi.make_algorithm("uniform", hp, 512)
  policy = bpi.run_bpi(alg, mdp, jax.random.key(0), budget=512, hp=hp).policy
  assert int(policy[0]) == 1
  assert float(bpi.policy_regret(mdp, policy)) == 0.0
