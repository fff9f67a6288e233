"""Tabular stochastic MDPs as pure JAX simulators, with exact values by DP.

Every environment of the VarDE tree-search and best-policy-identification
experiments (Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration",
ICML 2026, Sections 4-5) is a :class:`TabularMDP`: for each state-action pair
its ``M`` possible successors and their probabilities (sparse rows of ``P``,
so a chance node has at most ``M`` children), and Gaussian or rescaled
Student-t rewards with a per-pair mean and standard deviation. A simulator
call (:func:`step`) samples the successor and the reward afresh every time.

Exact optimal values come from dynamic programming on the true model:
:func:`finite_horizon_q` (the search problems, horizon ``H``) and
:func:`value_iteration` / :func:`policy_value` (discounted, for BPI). The
instances: :func:`synthetic_tree` (in ``envs.trees``), :func:`gridworld`
(FrozenLake-style slippery moves), :func:`random_mdp`, :func:`riverswim`
(Strehl and Littman, 2008) and :func:`garnet` (Archibald et al., 1995) with
high-variance or heavy-tailed rewards; :func:`from_dense` builds one from a
dense ``P [S, A, S]`` (a user's arrays: :func:`envs.mdp_files.from_arrays`).
"""

from __future__ import annotations

import math

from flax import struct
import jax
import jax.numpy as jnp
import numpy as np


@struct.dataclass
class TabularMDP:
  """A finite MDP with sparse transitions.

  Attributes:
    succ: ``[S, A, M]`` int32 successor states (padding: any state, prob 0).
    prob: ``[S, A, M]`` float32 successor probabilities (rows sum to 1).
    reward_mean: ``[S, A]`` float32 mean reward of taking ``a`` in ``s``.
    reward_std: ``[S, A]`` float32 reward standard deviation.
    terminal: ``[S]`` bool absorbing zero-reward states.
    gamma: ``[]`` float32 discount.
    s0: ``[]`` int32 start (root) state.
    df: static Student-t degrees of freedom of the reward noise
      (``math.inf``: Gaussian); t noise is rescaled to the given std.
  """

  succ: jax.Array
  prob: jax.Array
  reward_mean: jax.Array
  reward_std: jax.Array
  terminal: jax.Array
  gamma: jax.Array
  s0: jax.Array
  df: float = struct.field(pytree_node=False, default=math.inf)

  @property
  def num_states(self) -> int:
    return self.succ.shape[-3]

  @property
  def num_actions(self) -> int:
    return self.succ.shape[-2]

  @property
  def num_outcomes(self) -> int:
    return self.succ.shape[-1]


def _noise(key: jax.Array, df: float) -> jax.Array:
  if math.isinf(df):
    return jax.random.normal(key)
  return jax.random.t(key, df) * math.sqrt((df - 2.0) / df)


def decision_step(mdp: TabularMDP, key: jax.Array, state: jax.Array, action: jax.Array) -> jax.Array:
  """The reward half of a simulator call: a sampled reward of ``action`` in ``state``.

  Args:
    mdp: the MDP.
    key: randomness of the reward noise.
    state: scalar int32 state.
    action: scalar int32 action.

  Returns:
    Scalar float32 reward (0 in a terminal state). The afterstate is the
    pair ``(state, action)``; :func:`chance_step` samples its successor.
  """
  reward = mdp.reward_mean[state, action] + mdp.reward_std[state, action] * _noise(key, mdp.df)
  return jnp.where(mdp.terminal[state], 0.0, reward)


def chance_logits(mdp: TabularMDP, state: jax.Array, action: jax.Array) -> jax.Array:
  """``[M]`` log-probabilities of the successors ``succ[state, action]`` (the chance node)."""
  return jnp.log(mdp.prob[state, action])


def chance_apply(mdp: TabularMDP, state: jax.Array, action: jax.Array, outcome: jax.Array) -> jax.Array:
  """The successor of outcome ``outcome`` in ``[0, M)``; terminal states stay put."""
  return jnp.where(mdp.terminal[state], state, mdp.succ[state, action, outcome])


def chance_step(mdp: TabularMDP, key: jax.Array, state: jax.Array, action: jax.Array):
  """The transition half of a simulator call: ``(next_state, outcome)`` sampled with ``key``."""
  outcome = jax.random.categorical(key, chance_logits(mdp, state, action)).astype(jnp.int32)
  return chance_apply(mdp, state, action, outcome), outcome


def step(mdp: TabularMDP, key: jax.Array, state: jax.Array, action: jax.Array):
  """One call of the simulator (a generative model).

  Args:
    mdp: the MDP.
    key: randomness of this call (successor and reward noise).
    state: scalar int32 state.
    action: scalar int32 action.

  Returns:
    ``(next_state, reward, outcome)``: the sampled successor, the sampled
    reward and the index in ``[0, M)`` of the successor in ``succ[s, a]``.
    Terminal states stay put with reward 0. The same as
    :func:`decision_step` then :func:`chance_step` with the two halves of
    ``jax.random.split(key)`` (successor first).
  """
  k_next, k_reward = jax.random.split(key)
  next_state, outcome = chance_step(mdp, k_next, state, action)
  return next_state, decision_step(mdp, k_reward, state, action), outcome


def rollout(mdp: TabularMDP, key: jax.Array, state: jax.Array, steps: jax.Array, max_steps: int) -> jax.Array:
  """Discounted return of ``steps`` uniformly random actions from ``state``."""

  def body(t, carry):
    s, ret, disc = carry
    k_a, k_s = jax.random.split(jax.random.fold_in(key, t))
    a = jax.random.randint(k_a, (), 0, mdp.num_actions)
    s2, r, _ = step(mdp, k_s, s, a)
    live = t < steps
    return jnp.where(live, s2, s), ret + jnp.where(live, disc * r, 0.0), disc * mdp.gamma

  _, ret, _ = jax.lax.fori_loop(0, max_steps, body, (state, jnp.float32(0.0), jnp.float32(1.0)))
  return ret


def expected_next(mdp: TabularMDP, v: jax.Array) -> jax.Array:
  """``[S, A]`` ``sum_s' P(s'|s,a) v(s')``."""
  return jnp.sum(mdp.prob * v[mdp.succ], axis=-1)


def finite_horizon_q(mdp: TabularMDP, horizon: int) -> jax.Array:
  """``[H, S, A]`` optimal ``Q_h`` with ``h + 1`` steps to go (``Q[H-1]``: the full horizon)."""

  def body(v, _):
    q = mdp.reward_mean + mdp.gamma * expected_next(mdp, v)
    q = jnp.where(mdp.terminal[:, None], 0.0, q)
    return jnp.max(q, axis=-1), q

  _, qs = jax.lax.scan(body, jnp.zeros(mdp.num_states, jnp.float32), None, length=horizon)
  return qs


def value_iteration(mdp: TabularMDP, *, tol: float = 1e-6, max_iters: int = 10_000, tau: float = 0.0):
  """Discounted optimal (``tau = 0``) or soft (``tau > 0``) ``(V [S], Q [S, A])``.

  The soft backup is ``V(s) = tau * logsumexp(Q(s, .) / tau)``.
  """

  def backup(v):
    q = jnp.where(mdp.terminal[:, None], 0.0, mdp.reward_mean + mdp.gamma * expected_next(mdp, v))
    v_new = jnp.max(q, -1) if tau == 0 else tau * jax.nn.logsumexp(q / tau, axis=-1)
    return v_new, q

  def cond(c):
    i, v, v_prev = c
    return (i < max_iters) & (jnp.max(jnp.abs(v - v_prev)) > tol)

  def body(c):
    i, v, _ = c
    return i + 1, backup(v)[0], v

  v0 = jnp.zeros(mdp.num_states, jnp.float32)
  _, v, _ = jax.lax.while_loop(cond, body, (0, backup(v0)[0], v0 + jnp.inf))
  return v, backup(v)[1]


def policy_value(mdp: TabularMDP, policy: jax.Array) -> jax.Array:
  """``[S]`` exact discounted value of a stochastic ``policy [S, A]`` (linear solve)."""
  s = mdp.num_states
  dense = jnp.zeros((s, mdp.num_actions, s)).at[
      jnp.arange(s)[:, None, None], jnp.arange(mdp.num_actions)[None, :, None], mdp.succ
  ].add(mdp.prob)
  live = ~mdp.terminal
  p_pi = jnp.einsum("sa,sat->st", policy, dense) * live[:, None]
  r_pi = jnp.sum(policy * mdp.reward_mean, -1) * live
  return jnp.linalg.solve(jnp.eye(s) - mdp.gamma * p_pi, r_pi)


def scale_rewards(mdp: TabularMDP, factor: float) -> TabularMDP:
  """A copy of ``mdp`` whose rewards (means and noise) are multiplied by ``factor > 0``.

  Values, returns and regrets scale by ``factor``; a scale-free search rule
  makes the same decisions on both.
  """
  if not factor > 0:
    raise ValueError(f"factor={factor} must be > 0")
  return mdp.replace(reward_mean=mdp.reward_mean * factor, reward_std=mdp.reward_std * factor)


# ---------------------------------------------------------------------------
# Construction and instances.


def from_dense(p, reward_mean, reward_std, gamma, *, s0=0, terminal=None, df=math.inf) -> TabularMDP:
  """Builds a :class:`TabularMDP` from a dense ``P [S, A, S]`` (NumPy)."""
  p = np.asarray(p, np.float64)
  s, a, _ = p.shape
  m = max(int((p > 0).sum(-1).max()), 1)
  order = np.argsort(-p, axis=-1, kind="stable")[..., :m]
  prob = np.take_along_axis(p, order, -1)
  prob = prob / prob.sum(-1, keepdims=True)
  return TabularMDP(
      succ=jnp.asarray(order, jnp.int32),
      prob=jnp.asarray(prob, jnp.float32),
      reward_mean=jnp.asarray(reward_mean, jnp.float32),
      reward_std=jnp.asarray(np.broadcast_to(reward_std, (s, a)), jnp.float32),
      terminal=jnp.asarray(np.zeros(s, bool) if terminal is None else terminal),
      gamma=jnp.asarray(gamma, jnp.float32),
      s0=jnp.asarray(s0, jnp.int32),
      df=df,
  )


def gridworld(size: int = 4, *, slip: bool = True, reward_std: float = 0.0, gamma: float = 0.95,
              holes: tuple = ((1, 1), (1, 3), (2, 3), (3, 0))) -> TabularMDP:
  """FrozenLake-style gridworld: the intended move with probability 1/3 (``slip``).

  Otherwise the agent moves to either side (1/3 each). Reaching the goal
  (bottom right) pays 1 (plus ``reward_std`` Gaussian noise) and ends the
  episode; holes end it with 0. Actions: left, down, right, up; start top left.
  """
  n = size * size
  moves = np.array([(0, -1), (1, 0), (0, 1), (-1, 0)])
  hole = np.zeros(n, bool)
  for r, c in holes:
    if r < size and c < size:
      hole[r * size + c] = True
  goal = n - 1
  p = np.zeros((n, 4, n))
  rm = np.zeros((n, 4))
  for s in range(n):
    r, c = divmod(s, size)
    for a in range(4):
      dirs = [(a - 1) % 4, a, (a + 1) % 4] if slip else [a]
      for d in dirs:
        rr, cc = np.clip(np.array([r, c]) + moves[d], 0, size - 1)
        t = rr * size + cc
        p[s, a, t] += 1.0 / len(dirs)
        rm[s, a] += (t == goal) / len(dirs)
  terminal = hole.copy()
  terminal[goal] = True
  return from_dense(p, rm, np.where(rm > 0, reward_std, 0.0), gamma, terminal=terminal)


def riverswim(num_states: int = 6, *, gamma: float = 0.95, reward_std: float = 0.1, df: float = math.inf) -> TabularMDP:
  """RiverSwim (Strehl and Littman, 2008): swim left (safe, 5e-3) or right against the current (1)."""
  n = num_states
  p = np.zeros((n, 2, n))
  rm = np.zeros((n, 2))
  for s in range(n):
    p[s, 0, max(s - 1, 0)] = 1.0
    if s == 0:
      p[s, 1, 0], p[s, 1, 1] = 0.4, 0.6
    elif s == n - 1:
      p[s, 1, s - 1], p[s, 1, s] = 0.4, 0.6
    else:
      p[s, 1, s - 1], p[s, 1, s], p[s, 1, s + 1] = 0.05, 0.6, 0.35
  rm[0, 0] = 5e-3
  rm[n - 1, 1] = 1.0
  return from_dense(p, rm, reward_std, gamma, df=df)


def random_mdp(key: jax.Array, num_states: int = 10, num_actions: int = 3, *, gamma: float = 0.9,
               reward_std: float = 0.5) -> TabularMDP:
  """Dense random MDP: ``P(.|s,a) ~ Dirichlet(1)``, reward means ``U[0, 1]``."""
  k_p, k_r = jax.random.split(key)
  shape = (num_states, num_actions)
  return TabularMDP(
      succ=jnp.broadcast_to(jnp.arange(num_states, dtype=jnp.int32), shape + (num_states,)),
      prob=jax.random.dirichlet(k_p, jnp.ones(num_states), shape),
      reward_mean=jax.random.uniform(k_r, shape),
      reward_std=jnp.full(shape, reward_std, jnp.float32),
      terminal=jnp.zeros(num_states, bool),
      gamma=jnp.asarray(gamma, jnp.float32),
      s0=jnp.asarray(0, jnp.int32),
  )


def garnet(key: jax.Array, num_states: int = 10, num_actions: int = 3, branching: int = 3, *,
           gamma: float = 0.9, reward_std: tuple = (0.1, 2.0), df: float = math.inf) -> TabularMDP:
  """Garnet MDP (Archibald, McKinnon and Thomas, 1995): ``branching`` random successors per pair.

  Successor probabilities are uniform spacings; reward means ``U[0, 1]``;
  reward stds ``U[reward_std]`` per pair (high variance), Student-t noise
  with ``df`` degrees of freedom for heavy tails.
  """
  k_s, k_p, k_r, k_v = jax.random.split(key, 4)
  shape = (num_states, num_actions)
  succ = jax.vmap(lambda k: jax.random.choice(k, num_states, (branching,), replace=False))(
      jax.random.split(k_s, num_states * num_actions)).reshape(shape + (branching,))
  cuts = jnp.sort(jax.random.uniform(k_p, shape + (branching - 1,)), -1)
  edges = jnp.concatenate([jnp.zeros(shape + (1,)), cuts, jnp.ones(shape + (1,))], -1)
  prob = jnp.maximum(jnp.diff(edges, axis=-1), 1e-3)
  return TabularMDP(
      succ=succ.astype(jnp.int32),
      prob=prob / jnp.sum(prob, -1, keepdims=True),
      reward_mean=jax.random.uniform(k_r, shape),
      reward_std=jax.random.uniform(k_v, shape, minval=reward_std[0], maxval=reward_std[1]),
      terminal=jnp.zeros(num_states, bool),
      gamma=jnp.asarray(gamma, jnp.float32),
      s0=jnp.asarray(0, jnp.int32),
      df=df,
  )
