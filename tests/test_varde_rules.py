"""VarDE's score, its limits, and every baseline's allocation rule on hand-computed cases."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from methods import varde
from methods.varde import baselines
from methods.varde import elimination


def _state_with(alg, count, mean, var, *, stds=None, gaps=None):
  """``alg``'s initial state with the given statistics (past the warm start)."""
  k = len(count)
  oracle = varde.Oracle(
      stds=jnp.ones(k) if stds is None else jnp.asarray(stds, jnp.float32),
      gaps=jnp.full(k, 0.1) if gaps is None else jnp.asarray(gaps, jnp.float32),
  )
  state = alg.init(jax.random.key(0), oracle)
  count = jnp.asarray(count, jnp.int32)
  m2 = jnp.asarray(var, jnp.float32) * (count - 1)
  return state._replace(stats=varde.ArmStats(count, jnp.asarray(mean, jnp.float32), m2))


def _select_after_warm(alg, state, t=1000):
  return int(alg.select(state, jax.random.key(1), jnp.asarray(t)))


def test_score_is_exact_one_step_drop_of_first_order_variance():
  rng = np.random.default_rng(0)
  for _ in range(20):
    k = rng.integers(2, 12)
    w = jax.nn.softmax(jnp.asarray(rng.normal(size=k), jnp.float32))
    var = jnp.asarray(rng.uniform(0.01, 2.0, size=k), jnp.float32)
    n = jnp.asarray(rng.integers(2, 50, size=k), jnp.int32)
    score = varde.varde_scores(w, var, n)
    # The difference of two V's cancels badly in float32: compare in float64
    # (NumPy; JAX runs in float32 here).
    w64, var64, n64 = (np.asarray(x, np.float64) for x in (w, var, n))
    v = lambda counts: np.sum(w64**2 * var64 / counts)  # noqa: E731
    np.testing.assert_allclose(
        varde.first_order_variance(w, var, n.astype(jnp.float32)), v(n64), rtol=1e-5
    )
    for i in range(k):
      bumped = n64.copy()
      bumped[i] += 1
      np.testing.assert_allclose(score[i], v(n64) - v(bumped), rtol=1e-5)


def test_score_is_infinite_below_two_pulls():
  s = varde.varde_scores(jnp.ones(3) / 3, jnp.ones(3), jnp.asarray([0, 1, 2]))
  assert np.isinf(s[0]) and np.isinf(s[1]) and np.isfinite(s[2])


def test_first_order_variance_matches_monte_carlo_variance_of_the_decision():
  """Delta method: Var[LSE_tau(mu_hat)] ~ sum w^2 sigma^2 / N for large N."""
  mu = jnp.asarray([0.3, 0.25, 0.2, 0.1])
  sigma = jnp.asarray([0.3, 0.1, 0.25, 0.2])
  n = jnp.asarray([400.0, 300.0, 500.0, 200.0])
  tau = 0.1
  draws = 200_000
  mu_hat = mu[None] + (sigma / jnp.sqrt(n))[None] * jax.random.normal(jax.random.key(0), (draws, 4))
  f = tau * jax.nn.logsumexp(mu_hat / tau, axis=-1)
  mc_var = float(jnp.var(f))
  v = float(varde.first_order_variance(varde.lse_weights(mu, tau), sigma**2, n))
  # Sampling s.e. of a variance estimate is sqrt(2 / draws) relative (0.3%);
  # the delta method's own error here is O(sigma^2 / (N tau^2)) ~ a few %.
  assert abs(mc_var - v) / v < 0.05, (mc_var, v)


def _greedy_allocation(w, sigma, steps):
  """Greedy VarDE pulls with fixed ``w`` and ``sigma`` (no estimation)."""

  def step(n, _):
    i = jnp.argmax(varde.varde_scores(w, sigma**2, n))
    return n.at[i].add(1), None

  n, _ = jax.lax.scan(step, jnp.full(w.shape, 2, jnp.int32), None, length=steps)
  return n


def test_greedy_rule_converges_to_neyman_allocation():
  w = jax.nn.softmax(jnp.asarray([0.3, 0.22, 0.2, 0.15, 0.1]) / 0.1)
  sigma = jnp.asarray([0.15, 0.3, 0.22, 0.1, 0.2])
  n = _greedy_allocation(w, sigma, 50_000)
  shares = n / jnp.sum(n)
  np.testing.assert_allclose(shares, varde.neyman_shares(w, sigma), atol=2e-4)


def _run_deterministic(alg, means, budget, noise=0.0, stds=None, key=0):
  means = jnp.asarray(means, jnp.float32)
  stds = means if stds is None else jnp.asarray(stds, jnp.float32)

  def pull(arm, index):
    return means[arm] + noise * jnp.sin(1.0 + 7.0 * index + 3.0 * arm)

  out = varde.run_bai(alg, pull, varde.Oracle.from_means(means, stds), jax.random.key(key), budget=budget)
  return np.asarray(out.counts), int(out.recommendation)


def test_long_run_shares_of_the_algorithm_approach_w_sigma():
  """Uniform weights + known variances: the full algorithm's allocation is N ~ sigma."""
  stds = np.asarray([0.1, 0.4, 0.2, 0.3])
  budget = 20_000
  alg = varde.varde(num_arms=4, budget=budget, weighting="uniform", variance="known")
  counts, _ = _run_deterministic(alg, [0.4, 0.3, 0.2, 0.1], budget, stds=stds)
  np.testing.assert_allclose(counts / budget, stds / stds.sum(), atol=1e-3)


def test_lse_shares_with_known_variances_approach_w_sigma():
  means = np.asarray([0.5, 0.45, 0.3, 0.2])
  stds = np.asarray([0.2, 0.1, 0.3, 0.2])
  budget = 20_000
  alg = varde.varde(num_arms=4, budget=budget, tau=0.1, variance="known")
  counts, _ = _run_deterministic(alg, means, budget, stds=stds)
  w = varde.lse_weights(jnp.asarray(means), 0.1)
  np.testing.assert_allclose(counts / budget, varde.neyman_shares(w, jnp.asarray(stds)), atol=1e-3)


def test_tau_limits():
  means = [0.5, 0.3, 0.2, 0.1]
  stds = [0.1, 0.4, 0.2, 0.3]
  budget = 4_000
  big = varde.varde(num_arms=4, budget=budget, tau=1e6, variance="known")
  uni = varde.varde(num_arms=4, budget=budget, weighting="uniform", variance="known")
  counts_big, _ = _run_deterministic(big, means, budget, stds=stds)
  counts_uni, _ = _run_deterministic(uni, means, budget, stds=stds)
  np.testing.assert_allclose(counts_big, counts_uni, atol=2)  # tau -> inf: N ~ sigma
  small = varde.varde(num_arms=4, budget=budget, tau=1e-4, warm_start=3)
  counts_small, rec = _run_deterministic(small, means, budget, noise=0.01)
  # tau -> 0: all weight on the leader; the others keep their warm-start pulls.
  np.testing.assert_array_equal(counts_small, [budget - 9, 3, 3, 3])
  assert rec == 0


ALL_BUILDERS = {
    "varde": lambda k, t: varde.varde(num_arms=k, budget=t),
    "varde_uniform": lambda k, t: varde.varde(num_arms=k, budget=t, weighting="uniform"),
    "varde_known": lambda k, t: varde.varde(num_arms=k, budget=t, variance="known"),
    "uniform": lambda k, t: varde.uniform(num_arms=k, budget=t),
    "sr": lambda k, t: varde.successive_rejects(num_arms=k, budget=t),
    "sh": lambda k, t: varde.sequential_halving(num_arms=k, budget=t),
    "shvar": lambda k, t: varde.shvar(num_arms=k, budget=t),
    "shadavar": lambda k, t: varde.shadavar(num_arms=k, budget=t),
    "ucbe": lambda k, t: varde.ucbe(num_arms=k, budget=t),
    "ugape": lambda k, t: varde.ugape(num_arms=k, budget=t),
    "gapev": lambda k, t: varde.gapev(num_arms=k, budget=t),
    "ttts": lambda k, t: varde.ttts(num_arms=k, budget=t),
    "ocba": lambda k, t: varde.ocba(num_arms=k, budget=t),
}


@pytest.mark.parametrize("name", sorted(ALL_BUILDERS))
@pytest.mark.parametrize("k,budget", [(7, 101), (10, 150), (3, 20)])
def test_budget_is_spent_exactly(name, k, budget):
  alg = ALL_BUILDERS[name](k, budget)
  means = np.linspace(0.5, 0.1, k)
  counts, rec = _run_deterministic(alg, means, budget, noise=0.05)
  chex.assert_shape(counts, (k,))
  assert counts.sum() == budget
  assert 0 <= rec < k


def test_uniform_round_robin():
  counts, _ = _run_deterministic(varde.uniform(num_arms=3, budget=7), [0.3, 0.2, 0.1], 7)
  assert sorted(counts.tolist()) == [2, 2, 3]


def test_successive_rejects_hand_computed():
  # logbar(4) = 1/2 + 1/2 + 1/3 + 1/4; n_k = ceil(96 / (logbar (5 - k))) = 16, 21, 31.
  lengths, drops = elimination.successive_rejects_lengths(4, 100)
  assert lengths == [16 * 4, 5 * 3, 10 * 2] and drops == [1, 1, 1]
  alg = varde.successive_rejects(num_arms=4, budget=100)
  counts, rec = _run_deterministic(alg, [0.1, 0.4, 0.3, 0.2], 100)
  # Arm 0 leaves after 16 pulls, arm 3 after 21; the remaining pull of the
  # budget (100 - 99) goes to the last phase's round robin (arm 1 first).
  np.testing.assert_array_equal(counts, [16, 32, 31, 21])
  assert rec == 1


def test_sequential_halving_hand_computed():
  # Rounds of 4 and 2 arms: floor(100 / 8) = 12 pulls each, then floor(100 / 4) = 25
  # each plus the 2 leftover pulls.
  alg = varde.sequential_halving(num_arms=4, budget=100)
  counts, rec = _run_deterministic(alg, [0.1, 0.4, 0.3, 0.2], 100)
  np.testing.assert_array_equal(counts, [12, 38, 38, 12])
  assert rec == 1


def test_shvar_allocates_rounds_in_proportion_to_variances():
  # Round 1: 50 pulls over 4 arms with sigma^2 = 1, 1, 4, 1 -> about 50 * [1,1,4,1] / 7;
  # round 2: 50 pulls over arms 1 and 2 -> 10 and 40.
  alg = varde.shvar(num_arms=4, budget=100)
  counts, rec = _run_deterministic(alg, [0.1, 0.4, 0.3, 0.2], 100, stds=[1.0, 1.0, 2.0, 1.0])
  expected = np.asarray([50 / 7, 50 / 7 + 10, 200 / 7 + 40, 50 / 7])
  assert np.all(np.abs(counts - expected) <= 1.0), counts
  assert counts.sum() == 100 and rec == 1


def test_shadavar_pulls_unvisited_arms_first_and_bounds_variance_from_above():
  alg = varde.shadavar(num_arms=3, budget=60)
  state = alg.init(jax.random.key(0), varde.Oracle(jnp.ones(3), jnp.ones(3)))
  rs = varde.ArmStats(jnp.asarray([5, 1, 5]), jnp.zeros(3), jnp.asarray([0.4, 0.0, 0.4]))
  assert int(alg.select(state._replace(round_stats=rs), jax.random.key(0), jnp.asarray(0))) == 1
  rs = varde.ArmStats(jnp.asarray([5, 9, 5]), jnp.zeros(3), jnp.asarray([0.4, 0.8, 0.2]))
  # upper bounds (n-1)s^2/chi2_0.05(n-1): 0.4/0.711, 0.8/2.733, 0.2/0.711; ratio / n:
  # 0.1125, 0.0325, 0.0563 -> arm 0.
  assert int(alg.select(state._replace(round_stats=rs), jax.random.key(0), jnp.asarray(0))) == 0


@pytest.mark.parametrize("means", [[0.0, 0.1, 0.2, 5.0], [5.0, 0.2, 0.1, 0.0]])
def test_shadavar_pulls_every_arm_in_a_round_too_short_for_two_pulls_each(means):
  # K = 4, T = 12: two rounds of 6 pulls, too few for two pulls of each of 4 arms. Every arm
  # gets its first pull before any gets a second, wherever the best arm sits (an unpulled arm
  # would be dropped on an empty mean).
  counts, rec = _run_deterministic(varde.shadavar(num_arms=4, budget=12), means, 12, stds=np.ones(4))
  assert (counts >= 1).all(), counts
  assert rec == int(np.argmax(means))


@pytest.mark.parametrize("name, builder, needs", [
    ("shadavar", varde.shadavar, 1600), ("sequential_halving", varde.sequential_halving, 1600),
    ("successive_rejects", varde.successive_rejects, 201)])
def test_a_budget_below_one_pull_per_arm_names_the_algorithm_and_the_smallest_budget(name, builder, needs):
  # K = 200: 8 halving rounds, so a first round of one pull per arm needs T >= 200 * 8.
  with pytest.raises(ValueError, match=rf"too small for {name} with 200 arms.*budget >= {needs}"):
    builder(num_arms=200, budget=needs - 1)
  builder(num_arms=200, budget=needs)


def test_varde_select_hand_computed():
  alg = varde.varde(num_arms=3, budget=100, tau=0.1)
  # w = softmax([5, 3, 6]) = [0.2595, 0.0351, 0.7054]; scores w^2 var / (n (n+1)):
  # 1.35e-4, 6.2e-7, 4.98e-4 -> arm 2.
  count, mean, var = [4, 4, 9], [0.5, 0.3, 0.6], [0.04, 0.01, 0.09]
  state = _state_with(alg, count, mean, var)
  state = state._replace(score=varde.log_scores(jnp.asarray(mean), jnp.asarray(var), jnp.asarray(count), 0.1))
  assert _select_after_warm(alg, state) == 2


@pytest.mark.parametrize("kw", [{"tau": 0.1}, {"tau": 0.02}, {"weighting": "uniform"}, {"variance": "known"}])
def test_varde_kept_scores_pick_the_argmax_of_the_exact_score(kw):
  """The state's per-arm log scores, updated one arm per pull, pick the arm of ``varde_scores``.

  Every step of noisy runs, past the warm start: the kept scores equal
  ``log_scores`` recomputed from the statistics, and the pick equals the
  argmax of the exact score ``w^2 sigma^2 / (N (N + 1))`` unless its two
  largest entries tie within float rounding.
  """
  k, budget = 6, 400
  alg = varde.varde(num_arms=k, budget=budget, **kw)
  rng = np.random.default_rng(0)
  tau = kw.get("tau", 0.1)
  for run in range(4):
    means = jnp.asarray(rng.uniform(0.0, 1.0, k), jnp.float32)
    stds = jnp.asarray(rng.uniform(0.05, 0.5, k), jnp.float32)
    state = alg.init(jax.random.key(run), varde.Oracle.from_means(means, stds))
    noise = jax.random.normal(jax.random.key(100 + run), (budget,))

    def step(state, t):
      stats = state.stats
      var = varde.sample_variance(stats, 0.01) if kw.get("variance") != "known" else state.known_var
      var = jnp.where(stats.count >= 1, var, jnp.inf)
      w = varde.lse_weights(stats.mean, tau) if kw.get("weighting") != "uniform" else jnp.full(k, 1.0 / k)
      exact = varde.varde_scores(w, var, stats.count)
      top2 = jax.lax.top_k(exact, 2)[0]
      recomputed = varde.log_scores(stats.mean, var, stats.count, None if kw.get("weighting") == "uniform" else tau)
      arm = alg.select(state, jax.random.key(0), t)
      reward = means[arm] + stds[arm] * noise[t]
      return alg.update(state, t, arm, reward), (arm, jnp.argmax(exact), top2, state.score, recomputed)

    _, (arm, best, top2, kept, recomputed) = jax.lax.scan(step, state, jnp.arange(budget))
    past = slice(k * 2, None)
    np.testing.assert_allclose(kept[past], recomputed[past], rtol=1e-6)
    differ = np.asarray(arm[past] != best[past])
    near_tie = np.asarray(top2[past, 1] >= top2[past, 0] * (1 - 1e-4))
    assert not np.any(differ & ~near_tie), np.flatnonzero(differ & ~near_tie)
    assert np.mean(differ) < 0.01


def test_ucbe_select_hand_computed():
  alg = varde.ucbe(num_arms=3, budget=100, c=1.0, scale="raw")
  # mu + sqrt(1 / N): 1.0, 1.3, 0.933 -> arm 1.
  state = _state_with(alg, [4, 1, 9], [0.5, 0.3, 0.6], [0.04, 0.01, 0.09])
  assert _select_after_warm(alg, state) == 1


def test_ucbe_hardness_rate():
  alg = varde.ucbe(num_arms=3, budget=100, c=2.0)
  state = alg.init(jax.random.key(0), varde.Oracle(jnp.ones(3), jnp.asarray([0.1, 0.1, 0.2])))
  # a = c (T - K) / H, H = 100 + 100 + 25.
  np.testing.assert_allclose(state.rate, 2.0 * 97 / 225, rtol=1e-6)


def test_ugape_select_hand_computed():
  alg = varde.ugape(num_arms=3, budget=100, c=1.0, scale="raw")
  # beta = [0.5, 1, 1/3]; U = [1.0, 1.3, 0.933]; L = [0, -0.7, 0.267];
  # B = [1.3, 1.7, 1.033] -> J = 2; u = argmax_{j != 2} U = 1; beta_1 > beta_2 -> pull 1.
  state = _state_with(alg, [4, 1, 9], [0.5, 0.3, 0.6], [0.04, 0.01, 0.09])
  assert _select_after_warm(alg, state) == 1
  # The recommendation is J of the smallest B seen: here the final J = 2.
  assert int(alg.recommend(state)) == 2


def test_gapev_select_hand_computed():
  alg = varde.gapev(num_arms=3, budget=100, c=0.1, scale="raw")
  # -gap + sqrt(2 a s^2 / N) + 7 a / (3 (N - 1)) with a = 0.1:
  # arm 0: -0.1 + 0.0447 + 0.0778 = 0.0225; arm 1: -0.3 + 0.0224 + 0.0778 = -0.200;
  # arm 2: -0.1 + 0.0447 + 0.0292 = -0.0261 -> arm 0.
  state = _state_with(alg, [4, 4, 9], [0.5, 0.3, 0.6], [0.04, 0.01, 0.09])
  assert _select_after_warm(alg, state) == 0


def test_ocba_targets_and_select_hand_computed():
  means = jnp.asarray([0.5, 0.3, 0.45])
  var = jnp.asarray([0.04, 0.01, 0.09])
  # r1 = 0.01 / 0.2^2 = 0.25, r2 = 0.09 / 0.05^2 = 36,
  # r0 = sqrt(0.04 (0.25^2 / 0.01 + 36^2 / 0.09)) = sqrt(576.25).
  r = np.asarray([math.sqrt(576.25), 0.25, 36.0])
  np.testing.assert_allclose(varde.ocba_targets(means, var), r / r.sum(), rtol=1e-5)
  alg = varde.ocba(num_arms=3, budget=100)
  # targets at t + 1 = 30: [11.95, 0.12, 17.92] - counts [10, 5, 10] -> arm 2.
  state = _state_with(alg, [10, 5, 10], means, var)
  assert _select_after_warm(alg, state, t=29) == 2


def test_ttts_plays_a_confident_leader_with_probability_beta():
  alg = varde.ttts(num_arms=3, budget=100, beta=0.5)
  state = _state_with(alg, [100, 100, 100], [0.9, 0.1, 0.0], [0.01, 0.01, 0.01])
  n = 4000
  picks = jax.vmap(lambda k: alg.select(state, k, jnp.asarray(500)))(
      jax.random.split(jax.random.key(0), n)
  )
  freq = float(jnp.mean(picks == 0))
  assert abs(freq - 0.5) < 3 * math.sqrt(0.25 / n), freq
  # The challenger is never the leader when the posterior is this confident.
  assert set(np.unique(np.asarray(picks))) <= {0, 1, 2}


def _old_ttts_challenger(key, mean, sd, leader, max_resamples=8):
  """The challenger as first written: a [R, K] draw and one argmax per sample."""
  k = mean.shape[0]
  thetas = mean[None] + sd[None] * jax.random.normal(key, (max_resamples, k))
  challengers = jnp.argmax(thetas, axis=-1)
  ok = challengers != leader
  runner_up = jnp.argmax(jnp.where(jnp.arange(k) == leader, -jnp.inf, thetas[-1]))
  return jnp.where(jnp.any(ok), challengers[jnp.argmax(ok)], runner_up)


def test_ttts_challenger_is_bit_identical_to_the_per_sample_argmax_rule():
  rng = np.random.default_rng(0)
  for k in (3, 10):
    mean = jnp.asarray(rng.normal(size=k), jnp.float32)
    sd = jnp.asarray(rng.uniform(0.05, 2.0, size=k), jnp.float32)
    new_fn = jax.jit(jax.vmap(lambda kk, l: baselines.ttts_challenger(kk, mean, sd, l), in_axes=(0, None)))
    old_fn = jax.jit(jax.vmap(lambda kk, l: _old_ttts_challenger(kk, mean, sd, l), in_axes=(0, None)))
    for leader in (0, k // 2, k - 1):
      keys = jax.random.split(jax.random.key(k + leader), 2000)
      new, old = new_fn(keys, jnp.asarray(leader)), old_fn(keys, jnp.asarray(leader))
      np.testing.assert_array_equal(np.asarray(new), np.asarray(old))
      assert not np.any(np.asarray(new) == leader)


def _truncated_loop_reference(rng, mean, sd, leader, n, max_resamples=8):
  """NumPy: resample until the argmax differs from the leader, else the last runner-up."""
  out = np.empty(n, np.int64)
  for i in range(n):
    for _ in range(max_resamples):
      theta = mean + sd * rng.standard_normal(len(mean))
      j = int(np.argmax(theta))
      if j != leader:
        break
    else:
      theta[leader] = -np.inf
      j = int(np.argmax(theta))
    out[i] = j
  return out


@pytest.mark.parametrize(
    "mean, sd, leader",
    [
        # A weak leader: truncation is negligible (P(argmax = 0) ~ 0.35, 0.35^8 < 1e-3),
        # so the challenger is the argmax of a sample conditioned on not being the leader.
        ([0.3, 0.25, 0.2, 0.1], [0.2, 0.2, 0.3, 0.4], 0),
        # A confident leader (P(argmax = 1) ~ 0.8): the runner-up fallback is exercised.
        ([0.1, 0.6, 0.3, 0.2], [0.2, 0.3, 0.3, 0.4], 1),
    ],
)
def test_ttts_challenger_distribution(mean, sd, leader):
  mean64, sd64 = np.asarray(mean), np.asarray(sd)
  n = 20_000
  keys = jax.random.split(jax.random.key(7), n)
  mean32, sd32 = jnp.asarray(mean, jnp.float32), jnp.asarray(sd, jnp.float32)
  got = np.asarray(jax.vmap(lambda kk: baselines.ttts_challenger(kk, mean32, sd32, jnp.asarray(leader)))(keys))
  assert not np.any(got == leader)
  rng = np.random.default_rng(0)
  m = 20_000
  ref = _truncated_loop_reference(rng, mean64, sd64, leader, m)
  # The conditional argmax distribution from fresh samples (what the loop converges to).
  theta = mean64 + sd64 * rng.standard_normal((400_000, len(mean)))
  winners = np.argmax(theta, axis=1)
  cond = np.bincount(winners[winners != leader], minlength=len(mean)) / np.sum(winners != leader)
  for j in range(len(mean)):
    p_got, p_ref = np.mean(got == j), np.mean(ref == j)
    se = math.sqrt(p_ref * (1 - p_ref) * (1 / n + 1 / m)) + 1e-4
    assert abs(p_got - p_ref) < 4 * se, (j, p_got, p_ref, se)
    if leader == 0:  # truncation negligible: the conditional argmax distribution itself
      se_c = math.sqrt(cond[j] * (1 - cond[j]) / n) + 1e-4
      assert abs(p_got - cond[j]) < 4 * se_c, (j, p_got, cond[j], se_c)
