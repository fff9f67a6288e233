"""Losses of IQL, REG's value objective, AWR, TD3+BC and BC (unbatched maths, batch means).

References:
  IQL: Kostrikov, Nair, Levine, "Offline Reinforcement Learning with Implicit
    Q-Learning", ICLR 2022 (eqs. 5-7; code: ikostrikov/implicit_q_learning).
  REG: "REG: In-Sample RL via Regularizing the Evaluation Gap", ICML 2026 (abstract
    only is public; the objective here is the reconstruction documented in
    ``methods/reg/__init__.py`` and in :func:`worst_case_ratio`).
  TD3+BC: Fujimoto, Gu, "A Minimalist Approach to Offline Reinforcement
    Learning", NeurIPS 2021 (eq. 3).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from methods.common import bisection

AMBIGUITY_SETS = ("kappa", "simplex")
REGULARIZERS = ("none", "kl", "chi2")


def expectile_weight(u: jax.Array, tau: float) -> jax.Array:
  """``|tau - 1{u < 0}|``, the asymmetric weight of the expectile loss (IQL eq. 5)."""
  return jnp.where(u < 0, 1.0 - tau, tau)


def expectile_loss(u: jax.Array, tau: float) -> jax.Array:
  """``E[|tau - 1{u < 0}| u^2]`` over all elements of ``u`` (IQL eq. 5; tau = 0.5 is MSE / 2)."""
  return jnp.mean(expectile_weight(u, tau) * u**2)


def td_target(reward: jax.Array, done: jax.Array, next_value: jax.Array, discount: float) -> jax.Array:
  """``y = r + gamma (1 - terminal) V(s')``: ``[B] -> [B]`` (timeouts are not terminals)."""
  return reward + discount * (1.0 - done) * next_value


def awr_weights(adv: jax.Array, beta: float, max_weight: float) -> jax.Array:
  """``min(exp(beta A), max_weight)``, IQL's advantage-weighted regression weights (eq. 7)."""
  return jnp.minimum(jnp.exp(beta * adv), max_weight)


def _chi2_ratio(u: jax.Array, lam: float, iters: int = 60) -> jax.Array:
  """``xi = (1 + (u - eta) / lam)_+`` with ``eta`` found by bisection so that ``mean(xi) = 1``."""
  f = lambda eta: jnp.mean(jax.nn.relu(1.0 + (u - eta) / lam))  # noqa: E731  decreasing in eta

  lo, hi = bisection.bisect(lambda mid: f(mid) > 1.0, jnp.min(u), jnp.max(u) + lam, iters)
  xi = jax.nn.relu(1.0 + (u - 0.5 * (lo + hi)) / lam)
  return xi / jnp.mean(xi)


def worst_case_ratio(
    u: jax.Array, *, ambiguity: str, regularizer: str, tau: float, lam: float
) -> jax.Array:
  """The maximising density ratio ``xi = pi / beta`` of REG's inner problem on a batch.

  Solves ``max_{xi in Xi} E_B[xi u] - lam R(xi)`` over ratios on the batch's
  in-sample actions (``E_B xi = 1``, ``xi >= 0``) in closed form, where
  ``u = Q(s, a) - V(s)``:

  * ``ambiguity="kappa"``, ``regularizer="none"``: ``Xi`` bounds the ratio's
    spread, ``sup xi <= kappa inf xi`` with ``kappa = tau / (1 - tau)``. Its
    extreme point is ``xi ∝ |tau - 1{u < 0}|`` when ``V`` is the tau-expectile
    (the expectile's dual representation); this is the set in which IQL's
    ``V`` is the value of the best in-support policy.
  * ``ambiguity="simplex"`` (all ratios): ``"kl"`` gives
    ``xi = B softmax(u / lam)`` (exponential weights, as in EQL/AWR);
    ``"chi2"`` gives ``xi = (1 + (u - eta) / lam)_+`` (sparse weights, as in
    IVR/SQL); ``"none"`` puts all mass on the batch's largest ``u``.

  Args:
    u: ``[B]`` advantages ``Q - V`` (treated as constants).
    ambiguity: ``"kappa"`` or ``"simplex"``.
    regularizer: ``"none"``, ``"kl"`` or ``"chi2"`` (``"kappa"`` takes ``"none"``).
    tau: expectile, fixes ``kappa``.
    lam: regularisation strength ``lambda > 0``.

  Returns:
    ``[B]`` ratios with batch mean 1 (no gradient flows through them).
  """
  u = jax.lax.stop_gradient(u)
  if ambiguity == "kappa":  # takes no regulariser (Hparams validation refuses one)
    w = expectile_weight(u, tau)
    return w / jnp.mean(w)
  if ambiguity != "simplex":
    raise ValueError(f"ambiguity={ambiguity!r}; allowed: {AMBIGUITY_SETS}")
  if regularizer == "kl":
    return u.shape[0] * jax.nn.softmax(u / lam)
  if regularizer == "chi2":
    return _chi2_ratio(u, lam)
  if regularizer == "none":
    return u.shape[0] * jax.nn.one_hot(jnp.argmax(u), u.shape[0], dtype=u.dtype)
  raise ValueError(f"regularizer={regularizer!r}; allowed: {REGULARIZERS}")


def regularizer_value(xi: jax.Array, regularizer: str) -> jax.Array:
  """``R(xi)``: ``E[xi log xi]`` (KL), ``E[(xi - 1)^2] / 2`` (chi^2) or 0."""
  if regularizer == "kl":
    return jnp.mean(jax.scipy.special.xlogy(xi, xi))
  if regularizer == "chi2":
    return 0.5 * jnp.mean((xi - 1.0) ** 2)
  return jnp.zeros((), xi.dtype)


def twin_q_loss(qs: jax.Array, target: jax.Array) -> jax.Array:
  """``E[(Q1 - y)^2 + (Q2 - y)^2]``: ``qs [2, B]``, ``target [B]`` (IQL eq. 6)."""
  return jnp.mean(jnp.sum((qs - target[None]) ** 2, axis=0))


def reg_q_loss(qs: jax.Array, target: jax.Array, value: jax.Array, xi: jax.Array, alpha: float) -> jax.Array:
  """REG's critic loss: the IQL loss plus ``2 alpha`` times the evaluation gap of each head.

  ``sum_i E[(Q_i - y)^2] + 2 alpha sum_i E[xi (Q_i(s, a) - V(s))]``, i.e. twice
  ``1/2 E[(Q - y)^2] + alpha Gap(Q, pi_xi)`` per head with
  ``Gap(Q, pi) = E_s[E_{a~pi} Q(s, a) - V(s)]`` estimated in-sample with the
  ratio ``xi``. ``V`` and ``xi`` are constants here (``V`` is fitted by the
  expectile loss; ``xi`` is the inner maximiser, Danskin). ``alpha = 0`` is IQL.
  Its fixed point is ``Q_i = y - alpha xi``.
  """
  value = jax.lax.stop_gradient(value)
  gap = jnp.mean(jnp.sum(xi[None] * (qs - value[None]), axis=0))
  return twin_q_loss(qs, target) + 2.0 * alpha * gap


def td3bc_actor_loss(q: jax.Array, pi_action: jax.Array, action: jax.Array, alpha: float) -> jax.Array:
  """``-lambda E[Q(s, pi(s))] + mean((pi(s) - a)^2)`` with ``lambda = alpha / E|Q|`` (TD3+BC eq. 3).

  The squared error is averaged over batch and action dimensions, as in the
  authors' code (``F.mse_loss``).
  """
  lmbda = jax.lax.stop_gradient(alpha / jnp.mean(jnp.abs(q)))
  return -lmbda * jnp.mean(q) + jnp.mean((pi_action - action) ** 2)
