"""Best-policy identification with a generative model: VarDE and its baselines.

Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration", ICML 2026,
Section 4. This is a **reconstruction** from the paper's principle: the
decision function is the soft value ``V_tau(s0)`` of the empirical MDP, whose
first-order variance under an allocation ``n`` is

    Var V_tau(s0) ~ sum_{s,a} d_tau(s,a)^2 (sigma_r^2(s,a) + gamma^2 Var_{P(.|s,a)} V_tau) / n(s,a),

``d_tau`` the discounted occupancy of the softmax policy from ``s0``. VarDE
samples ``argmax d^2 (sigma_r^2 + gamma^2 Var_P V) / (n (n + 1))`` (the exact
one-step decrease), whose limit is ``n`` proportional to
``d_tau sqrt(sigma_r^2 + gamma^2 Var_P V)``. Every algorithm recommends the
greedy policy of the empirical MDP's ``Q_hat``.

Baselines behind the same :class:`BPIAlgorithm` interface: uniform sampling
(round robin over the pairs), an MDP-GapE-style allocation (Jonsson, Kaufmann,
Menard, Darwiche Domingues, Leurent and Valko, NeurIPS 2020: optimistic
trajectories from ``s0`` with confidence bounds on ``Q``, the first action of
each chosen between the two gap candidates by the width ``U - L``; here with a
budget rather than a stopping rule) and a BESPOKE-style variance-aware
allocation (Zanette, Kochenderfer and Brunskill, 2019: ``n`` proportional to
the variance of the Bellman target, without occupancy weighting).

**Forced-exploration floor** (VarDE only; ``floor_c = 0`` switches it off;
the algorithm ``varde_no_floor`` is VarDE with ``floor_c = 0``, so that one run
compares both on the same instances and keys).
Occupancy weighting starves the pairs that the current softmax policy rarely
reaches: their weight ``d^2`` is tiny, so their estimates stay at the warm
start, and a wrong estimate there is never corrected. This is an estimation
problem, not an exploration trap (with a generative model every pair can be
sampled at any time). After sample ``t``, every pair must have at least

    n0(t) = floor(c sqrt(t / (S A)))

samples; while some pair has fewer, the least-sampled pair is taken
(:func:`floor_select`). Guarantee, for ``0 <= c <= 1``, whatever the rule it
overrides: ``min_{s,a} n_t(s, a) >= n0(t) - 1`` at every ``t`` (so after a
budget ``T`` every pair has ``n0(T) - 1`` samples or more). Proof: ``n0``
reaches ``j`` at ``t_j = ceil(S A j^2 / c^2)`` and ``t_{j+1} - t_j >= S A`` for
``c <= 1``; if every pair has ``j - 1`` samples at ``t_j``, at most ``S A``
forced samples lift all of them to ``j`` before ``t_{j+1}``; the round-robin
warm start keeps ``min n_t >= floor(t / (S A)) >= n0(t) - 1`` while it lasts.
The floor costs at most ``S A n0(T) ~ c sqrt(S A T)`` of the ``T`` samples.

The statistics are replanned every ``replan_every`` samples (an outer
``scan`` over blocks, an inner one over samples), so the whole run is one
branch-free jitted loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

from envs import mdps
from methods.common import hparams
from methods.common import linalg

ALGORITHMS = ("varde", "varde_no_floor", "uniform", "mdp_gape", "bespoke")
PLANNING_TAIL = 1e-4  # a planning's sweeps leave at most this share gamma^n of the horizon
MAX_SWEEPS = 1_000_000


@dataclasses.dataclass(frozen=True)
class BPIHparams(hparams.Hyperparameters):
  """BPI hyperparameters (Luong et al., 2026, Section 4; baselines' papers)."""

  tau: float = hparams.field(0.5, "Temperature tau of the soft value (VarDE).", low=0, low_open=True)
  warm_start: int = hparams.field(2, "Samples of every pair (s, a) before any rule (counted in T).", low=1)
  var_floor: float = hparams.field(1e-4, "Floor on the target variances.", low=0)
  replan_every: int = hparams.field(16, "Samples between two plannings on the empirical MDP.", low=1)
  vi_iters: int = hparams.field(
      200, "Value-iteration sweeps of each planning, at least (more where gamma^n > 1e-4: planning_sweeps).", low=1)
  gape_c: float = hparams.field(0.5, "MDP-GapE confidence width c (bonus c sqrt(log T / n) / (1 - gamma)).", low=0)
  gape_horizon: int = hparams.field(10, "MDP-GapE trajectory length before a reset to s0.", low=1)
  floor_c: float = hparams.field(1.0, "VarDE's forced-exploration floor: every pair >= floor(c sqrt(t / (S A))) samples (0: off).",
                                 low=0, high=1)


class Stats(NamedTuple):
  """Sample statistics of every pair (``[S, A]``; outcomes ``[S, A, M]``)."""

  n: jax.Array
  reward_sum: jax.Array
  reward_sumsq: jax.Array
  outcome_n: jax.Array


class BPIState(NamedTuple):
  stats: Stats
  weight: jax.Array  # [S, A] allocation weights of the last planning
  upper: jax.Array  # [S, A] MDP-GapE upper bounds on Q
  lower: jax.Array  # [S, A] MDP-GapE lower bounds on Q
  cur: jax.Array  # [] MDP-GapE trajectory state
  h: jax.Array  # [] MDP-GapE step within the trajectory


class BPIAlgorithm(NamedTuple):
  """A sample allocation rule: ``plan(state, mdp_template, t) -> state`` and ``select(state, mdp, key) -> pair``."""

  plan: Callable[[BPIState, mdps.TabularMDP, jax.Array], BPIState]
  select: Callable[[BPIState, mdps.TabularMDP, jax.Array], jax.Array]


def empirical_mdp(stats: Stats, mdp: mdps.TabularMDP) -> mdps.TabularMDP:
  """The MDP of the sample means (successor lists of ``mdp``); unsampled pairs stay put with reward 0."""
  n = stats.n.astype(jnp.float32)
  seen = n > 0
  prob = jnp.where(seen[..., None], stats.outcome_n / jnp.maximum(n, 1.0)[..., None], 0.0)
  prob = jnp.where(seen[..., None], prob, jnp.eye(mdp.num_outcomes)[0])
  succ = jnp.where(seen[..., None], mdp.succ, jnp.arange(mdp.num_states)[:, None, None])
  return mdp.replace(succ=succ, prob=prob, reward_mean=stats.reward_sum / jnp.maximum(n, 1.0))


def planning_sweeps(gamma: jax.Array, at_least: int) -> jax.Array:
  """Value-iteration sweeps of a planning: ``at_least``, and enough that ``gamma^n <= 1e-4``.

  A truncated value iteration misses ``gamma^n`` of the horizon's value, so a
  fixed count that suffices at ``gamma = 0.9`` leaves most of it out at
  ``gamma = 0.999``. The count is traced (one compilation for every discount)
  and capped at ``MAX_SWEEPS``.
  """
  g = jnp.clip(jnp.asarray(gamma, jnp.float32), 0.0, 1.0 - 1e-7)
  need = jnp.ceil(jnp.log(PLANNING_TAIL) / jnp.minimum(jnp.log(jnp.maximum(g, 1e-30)), -1e-7))
  return jnp.clip(need, at_least, MAX_SWEEPS).astype(jnp.int32)


def _vi(mdp, iters, tau=0.0, bonus=0.0):
  def body(_, v):
    q = mdp.reward_mean + bonus + mdp.gamma * mdps.expected_next(mdp, v)
    q = jnp.where(mdp.terminal[:, None], 0.0, q)
    return jnp.max(q, -1) if tau == 0 else tau * jax.nn.logsumexp(q / tau, -1)

  v = jax.lax.fori_loop(0, planning_sweeps(mdp.gamma, iters), body, jnp.zeros(mdp.num_states, jnp.float32))
  q = jnp.where(mdp.terminal[:, None], 0.0, mdp.reward_mean + bonus + mdp.gamma * mdps.expected_next(mdp, v))
  return v, q


def _dense(mdp: mdps.TabularMDP) -> jax.Array:
  """``[S, A, S]`` transition probabilities from the successor lists."""
  s = mdp.num_states
  return jnp.zeros((s, mdp.num_actions, s)).at[
      jnp.arange(s)[:, None, None], jnp.arange(mdp.num_actions)[None, :, None], mdp.succ
  ].add(mdp.prob)


def _advantages(mdp: mdps.TabularMDP, policy: jax.Array, dense: jax.Array) -> jax.Array:
  """``[S, A]`` ``Q^pi(s, a) - V^pi(s)`` of a deterministic ``policy [S]``, from relative values.

  ``dense`` is :func:`_dense` of ``mdp`` (built once by the caller, not once per policy).

  ``V^pi = h + c m`` (``m``: the live states, ``h(pin) = 0``, ``rho = (1 - gamma) c``)
  solves ``h(s) - gamma P_pi(s) h + rho k(s) = r_pi(s)``, ``k(s) = (1 - gamma P_pi(s) m) / (1 - gamma)``:
  ``h`` and ``rho`` are of the rewards' order whatever the discount, where ``V``
  grows as ``1 / (1 - gamma)`` and its float32 rounding would swamp the gaps.
  Then ``Q - V = r + gamma P h - h(s) - rho k(s, a)``; 0 on terminal states.
  """
  s = mdp.num_states
  live, rows = ~mdp.terminal, jnp.arange(s)
  m = live.astype(jnp.float32)
  k = jnp.where(live[:, None], (1.0 - mdp.gamma * dense @ m) / (1.0 - mdp.gamma), 0.0)  # [S, A]
  pin = jnp.where(live[mdp.s0], mdp.s0, jnp.argmax(live))
  a = (jnp.eye(s) - mdp.gamma * dense[rows, policy] * live[:, None]).at[:, pin].set(k[rows, policy])
  # One matrix per LAPACK call on CPU (see occupancy).
  x = linalg.solve(jnp.where(jnp.any(live), a, jnp.eye(s)), mdp.reward_mean[rows, policy] * live)
  rho, h = x[pin], x.at[pin].set(0.0)
  adv = mdp.reward_mean + mdp.gamma * dense @ h - h[:, None] - rho * k
  return jnp.where(live[:, None], adv, 0.0)


def optimal_advantages(mdp: mdps.TabularMDP, max_rounds: int = 100) -> jax.Array:
  """``[S, A]`` ``Q*(s, a) - V*(s)`` (<= 0 up to rounding) by policy iteration on :func:`_advantages`.

  Each policy is evaluated exactly (a linear solve), so, unlike a value
  iteration stopped at an absolute tolerance, the result does not depend on
  the discount or on the rewards' scale. A state changes its action only when
  that gains more than ``1e-6`` of its largest ``|Q - V|`` (float32 rounding
  cannot make the rounds cycle); at most ``max_rounds`` rounds (a few suffice
  on small MDPs).
  """
  rows, dense = jnp.arange(mdp.num_states), _dense(mdp)

  def body(c):
    i, policy, _ = c
    adv = _advantages(mdp, policy, dense)
    best = jnp.argmax(adv, -1).astype(jnp.int32)
    new = jnp.where(adv[rows, best] > 1e-6 * jnp.max(jnp.abs(adv), -1), best, policy)
    return i + 1, new, jnp.any(new != policy)

  start = jnp.argmax(mdp.reward_mean, -1).astype(jnp.int32)
  _, policy, _ = jax.lax.while_loop(lambda c: c[2] & (c[0] < max_rounds), body, (0, start, jnp.bool_(True)))
  return _advantages(mdp, policy, dense)


def occupancy(mdp: mdps.TabularMDP, policy: jax.Array) -> jax.Array:
  """``[S, A]`` discounted occupancy ``sum_t gamma^t P(s_t = s, a_t = a)`` of ``policy [S, A]`` from ``s0``."""
  s = mdp.num_states
  p_pi = jnp.einsum("sa,sat->st", policy, _dense(mdp)) * (~mdp.terminal)[:, None]
  # One matrix per LAPACK call on CPU: the runs' batch of solves would otherwise
  # be split over XLA's intra-op pool, which can stop a sharded run (methods.common.linalg).
  d = linalg.solve(jnp.eye(s) - mdp.gamma * p_pi.T, jax.nn.one_hot(mdp.s0, s))
  return d[:, None] * policy


def target_variance(stats: Stats, mdp_hat: mdps.TabularMDP, v: jax.Array, floor: float) -> jax.Array:
  """``[S, A]`` ``sigma_r^2 + gamma^2 Var_{P_hat} v`` from the samples."""
  n = stats.n.astype(jnp.float32)
  mean = stats.reward_sum / jnp.maximum(n, 1.0)
  var_r = (stats.reward_sumsq - n * mean**2) / jnp.maximum(n - 1.0, 1.0)
  ev = mdps.expected_next(mdp_hat, v)
  ev2 = jnp.sum(mdp_hat.prob * v[mdp_hat.succ] ** 2, -1)
  return jnp.maximum(jnp.maximum(var_r, 0.0) + mdp_hat.gamma**2 * jnp.maximum(ev2 - ev**2, 0.0), floor)


def varde_scores(weight: jax.Array, n: jax.Array) -> jax.Array:
  """One-step decrease ``w / (n (n + 1))`` of ``sum w / n`` (``+inf`` where ``n = 0``)."""
  nf = n.astype(jnp.float32)
  return jnp.where(n == 0, jnp.inf, weight / (nf * (nf + 1.0)))


def _greedy_pair(scores):
  return jnp.argmax(scores.reshape(-1)).astype(jnp.int32)


def exploration_floor(t: jax.Array, num_pairs: int, c: float) -> jax.Array:
  """``n0(t) = floor(c sqrt(t / (S A)))``, the samples every pair must have after ``t`` samples."""
  return jnp.floor(c * jnp.sqrt(jnp.asarray(t, jnp.float32) / num_pairs)).astype(jnp.int32)


def floor_select(counts: jax.Array, t: jax.Array, pair: jax.Array, c: float) -> jax.Array:
  """The least-sampled pair while some pair is below :func:`exploration_floor`, else ``pair``.

  Args:
    counts: ``[S, A]`` int32 samples per pair so far (``t`` in all).
    t: ``[]`` samples so far.
    pair: ``[]`` int32 flat index ``s A + a`` chosen by the allocation rule.
    c: the floor's constant (module docstring: the guarantee needs ``c <= 1``).

  Returns:
    ``[]`` int32 flat index of the pair to sample.
  """
  flat = counts.reshape(-1)
  n0 = exploration_floor(t, flat.shape[0], c)
  return jnp.where(jnp.min(flat) < n0, jnp.argmin(flat), pair).astype(jnp.int32)


def make_algorithm(name: str, hp: BPIHparams, budget) -> BPIAlgorithm:
  """One of :data:`ALGORITHMS` with hyperparameters ``hp`` for a budget ``T`` (int or traced)."""
  if name not in ALGORITHMS:
    raise ValueError(f"unknown BPI algorithm {name!r}; allowed: {ALGORITHMS}")

  def plan(state, mdp, t):
    del t
    m_hat = empirical_mdp(state.stats, mdp)
    if name in ("varde", "varde_no_floor"):
      v, q = _vi(m_hat, hp.vi_iters, tau=hp.tau)
      d = occupancy(m_hat, jax.nn.softmax(q / hp.tau, -1))
      return state._replace(weight=d**2 * target_variance(state.stats, m_hat, v, hp.var_floor))
    if name == "bespoke":
      v, _ = _vi(m_hat, hp.vi_iters)
      return state._replace(weight=target_variance(state.stats, m_hat, v, hp.var_floor))
    if name == "mdp_gape":
      n = jnp.maximum(state.stats.n, 1).astype(jnp.float32)
      bonus = hp.gape_c * jnp.sqrt(jnp.log(jnp.asarray(budget, jnp.float32)) / n) / (1.0 - m_hat.gamma)
      _, up = _vi(m_hat, hp.vi_iters, bonus=bonus)
      _, lo = _vi(m_hat, hp.vi_iters, bonus=-bonus)
      return state._replace(upper=up, lower=lo)
    return state

  def select(state, mdp, t):
    sa = mdp.num_states * mdp.num_actions
    n = state.stats.n
    if name == "uniform":
      return (t % sa).astype(jnp.int32)
    if name in ("varde", "varde_no_floor"):
      pair = _greedy_pair(varde_scores(state.weight, n))
      floor_c = hp.floor_c if name == "varde" else 0.0
      return floor_select(n, t, pair, floor_c) if floor_c > 0 else pair
    if name == "bespoke":
      return _greedy_pair(varde_scores(state.weight * (n + 1).astype(jnp.float32), n))
    # MDP-GapE: at s0 the gap candidate b or the challenger c (larger width); later optimistic.
    up, lo = state.upper[state.cur], state.lower[state.cur]
    a_idx = jnp.arange(up.shape[0])
    gap_index = jnp.array([jnp.max(jnp.where(a_idx == i, -jnp.inf, up)) for i in range(up.shape[0])]) - lo
    b = jnp.argmin(gap_index)
    c = jnp.argmax(jnp.where(a_idx == b, -jnp.inf, up))
    root_a = jnp.where(up[b] - lo[b] >= up[c] - lo[c], b, c)
    a = jnp.where(state.h == 0, root_a, jnp.argmax(up))
    return (state.cur * mdp.num_actions + a).astype(jnp.int32)

  return BPIAlgorithm(plan, select)


def _stats_update(stats: Stats, s, a, o, r) -> Stats:
  return Stats(
      stats.n.at[s, a].add(1), stats.reward_sum.at[s, a].add(r), stats.reward_sumsq.at[s, a].add(r * r),
      stats.outcome_n.at[s, a, o].add(1),
  )


class BPIOutcome(NamedTuple):
  """Result of one run: the greedy ``policy [S]`` and the allocation ``counts [S, A]``."""

  policy: jax.Array
  counts: jax.Array


def run_bpi(algorithm: BPIAlgorithm, mdp: mdps.TabularMDP, key: jax.Array, *, budget: int, hp: BPIHparams) -> BPIOutcome:
  """Spends exactly ``budget`` generative-model samples, then recommends the greedy policy of ``Q_hat``.

  Args:
    algorithm: from :func:`make_algorithm`.
    mdp: the true MDP (only sampled through :func:`envs.mdps.step`).
    key: randomness of the samples and of the rule.
    budget: ``T`` (a Python int, or traced: one compilation for all budgets); the warm start (``S A warm_start`` samples, round
      robin) counts against it.
    hp: hyperparameters (``warm_start``, ``replan_every``, ``vi_iters``).

  Returns:
    The recommended deterministic policy and the sample counts.
  """
  chex.assert_shape(key, ())
  s_, a_, m_ = mdp.num_states, mdp.num_actions, mdp.num_outcomes
  warm = s_ * a_ * hp.warm_start
  if isinstance(budget, int) and warm > budget:
    raise ValueError(f"warm_start={hp.warm_start} needs {warm} samples > budget={budget}")
  z = jnp.zeros((s_, a_), jnp.float32)
  stats = Stats(jnp.zeros((s_, a_), jnp.int32), z, z, jnp.zeros((s_, a_, m_), jnp.int32))
  state = BPIState(stats, z, z, z, mdp.s0, jnp.int32(0))
  block = hp.replan_every
  num_blocks = (budget + block - 1) // block

  def sample(state, t):
    k = jax.random.fold_in(key, t)
    sa = jnp.where(t < warm, t % (s_ * a_), algorithm.select(state, mdp, t))
    s, a = sa // a_, sa % a_
    s2, r, o = mdps.step(mdp, k, s, a)
    live = t < budget
    new = _stats_update(state.stats, s, a, o, r)
    stats = jax.tree.map(lambda x, y: jnp.where(live, y, x), state.stats, new)
    h = jnp.where((state.h + 1 >= hp.gape_horizon) | mdp.terminal[s2], 0, state.h + 1)
    cur = jnp.where(h == 0, mdp.s0, s2)
    return state._replace(stats=stats, cur=jnp.where(t < warm, state.cur, cur), h=jnp.where(t < warm, state.h, h)), None

  def run_block(b, state):
    state = algorithm.plan(state, mdp, b * block)
    state, _ = jax.lax.scan(sample, state, b * block + jnp.arange(block))
    return state

  state = jax.lax.fori_loop(0, num_blocks, run_block, state)
  _, q = _vi(empirical_mdp(state.stats, mdp), hp.vi_iters)
  return BPIOutcome(jnp.argmax(q, -1).astype(jnp.int32), state.stats.n)


def policy_regret(mdp: mdps.TabularMDP, policy: jax.Array) -> jax.Array:
  """``V*(s0) - V^pi(s0)`` of a deterministic ``policy [S]`` on the true MDP, exactly.

  By the performance-difference lemma, ``sum_{s,a} d_pi(s,a) (V*(s) - Q*(s,a))``
  over the discounted occupancy ``d_pi`` from ``s0`` (:func:`occupancy`), with
  the gaps of :func:`optimal_advantages`: a sum of non-negative terms, 0 for a
  greedy policy of ``Q*``. A discount near 1 or rewards of any scale never give
  a negative regret (a difference of two values of order ``1 / (1 - gamma)``
  would lose the gaps in the values' float32 rounding).
  """
  adv = optimal_advantages(mdp)
  d = occupancy(mdp, jax.nn.one_hot(policy, mdp.num_actions))
  return jnp.sum(d * (jnp.max(adv, -1, keepdims=True) - adv))


def plan_weights(name: str, stats: Stats, mdp: mdps.TabularMDP, hp: BPIHparams) -> Any:
  """The allocation weights ``w [S, A]`` that :func:`make_algorithm`'s ``name`` plans (for tests)."""
  z = jnp.zeros(stats.n.shape, jnp.float32)
  st = BPIState(stats, z, z, z, mdp.s0, jnp.int32(0))
  return make_algorithm(name, hp, 1000).plan(st, mdp, 0).weight
