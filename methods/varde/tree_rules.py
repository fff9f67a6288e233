"""Tree policies of the VarDE search: descent rules, backups and their decision weights.

Luong, Nguyen, Ta, Tran and Dam, "Variance Driven Exploration", ICML 2026,
Section 4. The paper's tree-search rule is not public: what follows is a
**reconstruction** from the paper's principle, allocate simulations so as to
minimise the variance of the decision.

**The rule.** At a decision node ``s`` with edges ``a`` (visits ``n_a``,
value estimates ``Q_a``, empirical variance ``sigma_a^2`` of the returns
through the edge), the node's backed-up value is ``V(s) = f(Q)`` for a
decision function ``f`` (the *backup*). Its first-order (delta-method)
variance is ``sum_a w_a^2 sigma_a^2 / n_a`` with ``w = grad f`` (the
*influence weights*), and VarDE descends along the edge whose next visit
decreases it the most::

    argmax_a  w_a^2 sigma_a^2 / (n_a (n_a + 1)).

A deeper edge influences the root decision through the product of
``w * discount * P(s'|s, a)`` along its path; every edge below ``s`` shares
the factors above ``s``, so they cancel in the argmax and the rule only
needs ``w`` at ``s``. Edges with fewer than two visits score ``+inf``
(their variance is unknown); illegal actions score ``-inf``.

**Backups** (``pi = softmax(Q / tau)`` over the visited edges):

* ``logsumexp``: ``f = tau log sum_a exp(Q_a / tau)``, ``w = pi`` exactly.
  ``max Q <= f <= max Q + tau log K``: up to ``tau log K`` per level, and the
  bias compounds with depth (the most-visited subtree gains the most).
* ``max``: ``f = max_a Q_a``, not differentiable at ties; its smooth surrogate
  is the log-sum-exp, whose gradient ``w = pi`` tends to the argmax
  indicator as ``tau -> 0``. No ``tau log K`` term, but the optimism
  ``E max Q_hat >= max E Q_hat`` of noisy estimates.
* ``softmax_mean``: ``f = sum_a pi_a Q_a``, the softmax-weighted mean
  (``min Q <= f <= max Q``, no ``log K`` term). Differentiating
  ``pi_b = exp(Q_b / tau) / Z`` gives ``d pi_b / d Q_a = pi_b (1[a = b] -
  pi_a) / tau``, hence ``w_a = pi_a (1 + (Q_a - f) / tau)``: an edge a
  temperature below ``f`` has no first-order influence, one far below has
  ``|w_a| ~ pi_a |Q_a - f| / tau``, which vanishes exponentially.
* ``mean``: ``V(s)`` is the Monte Carlo average of every return through
  ``s``, i.e. ``sum_a (n_a / N) Q_a`` with ``Q_a`` the edges' return means
  (plus the node's own leaf evaluations). It estimates the value of the
  search's visit distribution, which concentrates on the best edge. At
  fixed visit shares ``rho = n / N`` its gradient is ``rho``, and
  ``sum_a rho_a^2 sigma_a^2 / n_a = sum_a n_a sigma_a^2 / N^2`` decreases
  most by visiting the edge of *smallest* variance: that rule changes the
  estimand (the shares) instead of estimating it. The decision the node
  serves is the choice of its best edge, so VarDE uses the weights of the
  smoothed max, ``w = pi``, as for ``max``.

**Scale-free temperature.** ``tau`` is relative to a running estimate
``scale(s)`` of the value scale at the node: ``tau_eff = tau * scale(s)``,
with ``scale`` one of (``tau_scale``)

* ``return_std``: the standard deviation of all returns through ``s``
  (pooled over its edges, ``N >= 2``; 0 before);
* ``spread``: ``max_a Q_a - min_a Q_a`` over the visited edges;
* ``none``: 1 (``tau`` in value units, as in MENTS).

The variance floor is ``var_floor * scale^2`` likewise. Multiplying every
reward by ``c > 0`` multiplies returns, values, variances and ``scale`` by
``c`` (and ``c^2``): ``pi`` and the argmax of the scores are unchanged, so
the search builds the same tree (up to float rounding). Both scales are also
invariant to a constant shift of the values. ``tau_eff`` is floored at
:data:`TAU_MIN` (a node whose returns are all equal has ``scale = 0``, and
its softmax becomes the argmax).

**Forced exploration** (``floor_c``; 0 switches it off). The weights are
plug-in estimates: an edge whose first returns were unlucky gets a tiny
``w`` and, with it, too few visits to correct its estimate (with
``softmax_mean`` an edge about ``tau`` below ``f`` has ``w = 0`` exactly).
With ``floor_c = c > 0``, a legal edge of a node with ``N`` edge visits is
taken first while it has fewer than ``floor(c sqrt(N / A))`` visits
(:func:`visit_floor`; the square-root forced exploration of Garivier and
Kaufmann, 2016), so every edge's estimate is consistent.

The baselines share the interface (:class:`TreePolicy`: ``select`` and a
backup): UCT (Kocsis and Szepesvari, 2006; Monte Carlo mean), MENTS (Xiao,
Mei and Muller, 2019: E2W sampling, log-sum-exp backup with ``tau`` in value
units) and Power-UCT (Dam, D'Eramo, Peters and Pajarinen, 2019: UCT
selection, power-mean backup).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

BACKUPS = ("mean", "max", "softmax_mean", "logsumexp")
TAU_SCALES = ("return_std", "spread", "none")
TAU_MIN = 1e-12

# The defaults, chosen by measurement (the experiment varde_backups, launch/configs/varde_backups.py): on separate tuning
# instances the mean backup had the lowest regret relative to a tuned UCT, averaged over SyntheticTrees
# (two noise levels), the gridworld and random MDPs, at its best scale-free setting of the grid
# tau in {0.3, 1, 3} x tau_scale in {return_std, spread} x floor_c in {0, 1}.
DEFAULT_BACKUP = "mean"
DEFAULT_TAU_SCALE = "return_std"
DEFAULT_TAU = 1.0
DEFAULT_FLOOR_C = 1.0


class NodeView(NamedTuple):
  """What a tree policy sees at one decision node (``A`` actions).

  Attributes:
    n: ``[A]`` int32 edge visit counts.
    q: ``[A]`` value estimates of the policy's backup (meaningless where ``n == 0``).
    var: ``[A]`` empirical variances of the returns (``+inf`` below two visits).
    visits: ``[]`` int32 visits of the node.
    legal: ``[A]`` bool legal actions.
    scale: ``[]`` value scale of the node (see the module docstring; 1 for ``"none"``).
  """

  n: jax.Array
  q: jax.Array
  var: jax.Array
  visits: jax.Array
  legal: jax.Array
  scale: jax.Array


class TreePolicy(NamedTuple):
  """A tree policy: ``select(view, key) -> action`` and its decision-node backup.

  Attributes:
    select: the descent rule; ``key`` breaks ties or samples.
    backup: one of :data:`BACKUPS` or ``"power"`` (Power-UCT).
    tau: temperature of the soft backups (relative to the node's scale unless
      ``tau_scale == "none"``).
    tau_scale: one of :data:`TAU_SCALES`.
    power_p: exponent of the power-mean backup.
  """

  select: Callable[[NodeView, jax.Array], jax.Array]
  backup: str
  tau: float = 1.0
  tau_scale: str = "none"
  power_p: float = 2.0


def value_scale(kind: str, n: jax.Array, edge_sum: jax.Array, edge_sumsq: jax.Array, q: jax.Array) -> jax.Array:
  """``[]`` the value scale of a node from its ``[A]`` edge statistics (see the module docstring)."""
  if kind == "none":
    return jnp.float32(1.0)
  if kind == "spread":
    visited = n > 0
    hi = jnp.max(jnp.where(visited, q, -jnp.inf))
    lo = jnp.min(jnp.where(visited, q, jnp.inf))
    return jnp.where(jnp.sum(visited) >= 2, hi - lo, 0.0)
  if kind == "return_std":
    total = jnp.sum(n).astype(jnp.float32)
    mean = jnp.sum(edge_sum) / jnp.maximum(total, 1.0)
    var = (jnp.sum(edge_sumsq) - total * mean**2) / jnp.maximum(total - 1.0, 1.0)
    return jnp.where(total >= 2, jnp.sqrt(jnp.maximum(var, 0.0)), 0.0)
  raise ValueError(f"tau_scale={kind!r}; allowed: {TAU_SCALES}")


def effective_tau(tau: float, scale: jax.Array) -> jax.Array:
  """``tau * scale``, floored at :data:`TAU_MIN`."""
  return jnp.maximum(tau * scale, TAU_MIN)


def softmax_visited(q: jax.Array, visited: jax.Array, tau: jax.Array) -> jax.Array:
  """``[A]`` ``softmax(Q / tau)`` over the visited edges (0 elsewhere)."""
  return jax.nn.softmax(jnp.where(visited, q / tau, -jnp.inf))


def decision_weights(backup: str, q: jax.Array, visited: jax.Array, tau: jax.Array) -> jax.Array:
  """``[A]`` influence weights ``w = grad f`` of ``backup`` at ``Q`` (module docstring).

  Args:
    backup: one of :data:`BACKUPS`.
    q: ``[A]`` edge value estimates.
    visited: ``[A]`` bool edges with at least one visit (the others get 0).
    tau: effective temperature.

  Returns:
    ``pi = softmax(Q / tau)`` for ``mean``, ``max`` and ``logsumexp``;
    ``pi (1 + (Q - f) / tau)``, ``f = sum pi Q``, for ``softmax_mean``.
  """
  pi = softmax_visited(q, visited, tau)
  if backup in ("mean", "max", "logsumexp"):
    return pi
  if backup == "softmax_mean":
    f = jnp.sum(jnp.where(visited, pi * q, 0.0))
    return jnp.where(visited, pi * (1.0 + (q - f) / tau), 0.0)
  raise ValueError(f"backup={backup!r}; allowed: {BACKUPS}")


def backup_value(backup: str, q: jax.Array, visited: jax.Array, n: jax.Array, *, tau: jax.Array,
                 power_p: float = 2.0) -> jax.Array:
  """``[]`` the decision function ``f(Q)`` of a smooth backup over the visited edges.

  ``mean`` is not a function of ``Q`` alone (it averages the returns); the
  search computes it from its sums.
  """
  if backup == "logsumexp":
    return tau * jax.nn.logsumexp(jnp.where(visited, q / tau, -jnp.inf))
  if backup == "max":
    return jnp.max(jnp.where(visited, q, -jnp.inf))
  if backup == "softmax_mean":
    return jnp.sum(jnp.where(visited, softmax_visited(q, visited, tau) * q, 0.0))
  if backup == "power":  # power mean of the visited Q, weighted by visits, shifted to be non-negative
    w = n.astype(jnp.float32) / jnp.maximum(jnp.sum(n), 1)
    lo = jnp.min(jnp.where(visited, q, jnp.inf))
    x = jnp.where(visited, q - lo, 0.0)
    return lo + jnp.sum(w * x**power_p) ** (1.0 / power_p)
  raise ValueError(f"backup={backup!r} has no closed form in Q; allowed: logsumexp, max, softmax_mean, power")


def _argmax_random_ties(x: jax.Array, key: jax.Array) -> jax.Array:
  best = x >= jnp.max(x)
  return jnp.argmax(jnp.where(best, jax.random.uniform(key, x.shape), -1.0))


def visit_floor(n: jax.Array, legal: jax.Array, c) -> jax.Array:
  """``[]`` ``floor(c sqrt(N / A_legal))``: the visits every legal edge of a node with ``N`` edge visits must have."""
  total = jnp.sum(n).astype(jnp.float32)
  return jnp.floor(c * jnp.sqrt(total / jnp.maximum(jnp.sum(legal), 1))).astype(jnp.int32)


def varde_scores(view: NodeView, *, backup: str, tau: float, var_floor: float, tau_scale: str,
                 floor_c: float = 0.0) -> jax.Array:
  """``[A]`` VarDE's scores ``w^2 max(sigma^2, floor) / (n (n + 1))`` at one node.

  ``+inf`` for legal edges with fewer than two visits or below the forced
  exploration :func:`visit_floor` (``floor_c > 0``), ``-inf`` for illegal
  ones; ``floor = var_floor * scale^2`` (``var_floor`` with ``tau_scale="none"``).
  """
  visited = view.n > 0
  w = decision_weights(backup, view.q, visited, effective_tau(tau, view.scale))
  floor = var_floor if tau_scale == "none" else var_floor * view.scale**2
  nf = view.n.astype(jnp.float32)
  score = w**2 * jnp.maximum(view.var, floor) / (nf * (nf + 1.0))
  starved = (view.n < 2) | jnp.isinf(view.var)
  if not (isinstance(floor_c, (int, float)) and floor_c == 0):
    starved = starved | (view.n < visit_floor(view.n, view.legal, floor_c))
  score = jnp.where(starved, jnp.inf, score)
  return jnp.where(view.legal, score, -jnp.inf)


def varde_policy(*, tau: float = DEFAULT_TAU, var_floor: float = 0.01, backup: str = DEFAULT_BACKUP,
                 tau_scale: str = DEFAULT_TAU_SCALE, floor_c: float = DEFAULT_FLOOR_C) -> TreePolicy:
  """VarDE's descent ``argmax w^2 sigma_hat^2 / (n (n + 1))`` with ``backup`` (reconstruction).

  Args:
    tau: temperature, relative to the node's value scale (``tau_scale``).
    var_floor: floor on the edge variances, relative to ``scale^2``.
    backup: one of :data:`BACKUPS`; ``w`` is its influence weight.
    tau_scale: one of :data:`TAU_SCALES`.
    floor_c: forced exploration: every legal edge of a node with ``N`` edge
      visits gets ``floor(floor_c sqrt(N / A))`` visits before the rule
      applies (0: off).

  Returns:
    The policy.
  """
  if backup not in BACKUPS:
    raise ValueError(f"backup={backup!r}; allowed: {BACKUPS}")
  if tau_scale not in TAU_SCALES:
    raise ValueError(f"tau_scale={tau_scale!r}; allowed: {TAU_SCALES}")
  if isinstance(tau, (int, float)) and not tau > 0:  # a traced tau (a sweep) is not checked
    raise ValueError(f"tau={tau} must be > 0")

  def select(view, key):
    score = varde_scores(view, backup=backup, tau=tau, var_floor=var_floor, tau_scale=tau_scale, floor_c=floor_c)
    return _argmax_random_ties(score, key)

  return TreePolicy(select, backup, tau=tau, tau_scale=tau_scale)


def _ucb_select(c):
  def select(view, key):
    nf = jnp.maximum(view.n, 1).astype(jnp.float32)
    bonus = c * jnp.sqrt(jnp.log(jnp.maximum(view.visits, 1).astype(jnp.float32)) / nf)
    score = jnp.where(view.n == 0, jnp.inf, view.q + bonus)
    return _argmax_random_ties(jnp.where(view.legal, score, -jnp.inf), key)

  return select


def uct_policy(*, c: float = 1.0) -> TreePolicy:
  """UCT: ``argmax Q + c sqrt(log N / n)``, Monte Carlo mean backup (``c`` in value units)."""
  return TreePolicy(_ucb_select(c), "mean")


def power_uct_policy(*, c: float = 1.0, p: float = 2.0) -> TreePolicy:
  """Power-UCT: UCT selection, power-mean backup of exponent ``p``."""
  return TreePolicy(_ucb_select(c), "power", power_p=p)


def ments_policy(*, tau: float, eps: float = 0.1) -> TreePolicy:
  """MENTS: E2W sampling ``(1 - l) softmax(Q / tau) + l / A``, ``l = eps A / log(N + 1)``; ``tau`` in value units."""

  def select(view, key):
    a = jnp.sum(view.legal).astype(jnp.float32)
    lam = jnp.minimum(eps * view.n.shape[0] / jnp.log(view.visits.astype(jnp.float32) + 2.0), 1.0)
    q = jnp.where(view.n > 0, view.q, 0.0)
    soft = jax.nn.softmax(jnp.where(view.legal, q / tau, -jnp.inf))
    probs = (1.0 - lam) * soft + lam * view.legal / jnp.maximum(a, 1.0)
    return jax.random.categorical(key, jnp.log(probs))

  return TreePolicy(select, "logsumexp", tau=tau, tau_scale="none")
