"""The critic objectives and policy extractions that make up REG's algorithms and their baselines.

An algorithm is a pair (critic objective, policy extraction) chosen by name in
:class:`methods.reg.Hparams`; :func:`methods.reg.update` runs any pair through
the small interfaces below, so adding an objective or an extraction is one
entry in :data:`CRITICS` or :data:`EXTRACTIONS`, not a branch in the update.

References:
  IQL: Kostrikov, Nair, Levine, "Offline Reinforcement Learning with Implicit
    Q-Learning", ICLR 2022 (eqs. 5-7).
  REG / OPG: "REG: In-Sample RL via Regularizing the Evaluation Gap", ICML 2026
    (reconstructions: :mod:`methods.reg.losses`, :mod:`methods.reg.opg`).
  TD3 / TD3+BC: Fujimoto et al., ICML 2018; Fujimoto & Gu, NeurIPS 2021 (eq. 3).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from methods.reg import losses
from methods.reg import networks
from methods.reg import opg

# (state, batch, nets, hp, key) -> next-state value [B] of the TD target.
NextValue = Callable[..., jax.Array]
# (state, batch, nets, hp) -> (loss_fn(qs [2, B], target [B]) -> scalar, metrics).
CriticLoss = Callable[..., tuple[Callable[[jax.Array, jax.Array], jax.Array], dict]]
# (state, batch, nets, hp, key) -> (loss, actor gradients, metrics).
ActorStep = Callable[..., tuple[jax.Array, Any, dict]]


class CriticObjective(NamedTuple):
  """How the critic is fitted.

  Attributes:
    fits_value: an expectile V network is fitted first (IQL eq. 5).
    next_value: the next-state value of the TD target (``None``: no critic).
    loss: the critic's loss on a batch (``None``: no critic).
    delayed_actor: TD3's schedule: the actor and both targets move every
      ``policy_delay`` updates, after the critic.
  """

  fits_value: bool
  next_value: Optional[NextValue]
  loss: Optional[CriticLoss]
  delayed_actor: bool = False


class Extraction(NamedTuple):
  """How the policy is extracted: one actor step's loss and gradients."""

  step: ActorStep


def _v_next(state, batch, nets, hp, key):
  del hp, key
  return nets.value.apply(state.value, batch.next_observations)


def _td3_next(state, batch, nets, hp, key):
  """Clipped double Q with target policy smoothing (TD3)."""
  mean, _ = nets.actor.apply(state.actor_target, batch.next_observations)
  noise = jnp.clip(hp.policy_noise * jax.random.normal(key, mean.shape), -hp.noise_clip, hp.noise_clip)
  next_a = jnp.clip(mean + noise, -1.0, 1.0)
  return jnp.min(nets.critic.apply(state.critic_target, batch.next_observations, next_a), axis=0)


def _twin_loss(state, batch, nets, hp):
  """IQL eq. 6 / TD3: ``sum_i E[(Q_i - y)^2]``."""
  del state, batch, nets, hp
  return losses.twin_q_loss, {}


def _reg_loss(state, batch, nets, hp):
  """REG's objective (reconstruction): the twin loss plus ``2 alpha`` times the evaluation gap."""
  v = nets.value.apply(state.value, batch.observations)
  q_t = jnp.min(nets.critic.apply(state.critic_target, batch.observations, batch.actions), axis=0)
  xi = losses.worst_case_ratio(
      q_t - v, ambiguity=hp.reg_ambiguity, regularizer=hp.reg_regularizer, tau=hp.expectile, lam=hp.reg_lambda
  )
  metrics = {
      "gap": jnp.mean(xi * (q_t - v)) - hp.reg_lambda * losses.regularizer_value(xi, hp.reg_regularizer),
      "xi_max": jnp.max(xi),
  }
  return (lambda qs, target: losses.reg_q_loss(qs, target, v, xi, hp.reg_alpha)), metrics


CRITICS = {
    "iql": CriticObjective(fits_value=True, next_value=_v_next, loss=_twin_loss),
    "reg": CriticObjective(fits_value=True, next_value=_v_next, loss=_reg_loss),
    "td3": CriticObjective(fits_value=False, next_value=_td3_next, loss=_twin_loss, delayed_actor=True),
    "none": CriticObjective(fits_value=False, next_value=None, loss=None),
}


def bc_loss(actor_params, batch, nets):
  """``-E log pi(a | s)`` on the dataset's actions."""
  mean, log_std = nets.actor.apply(actor_params, batch.observations)
  return -jnp.mean(networks.gaussian_log_prob(mean, log_std, batch.actions))


def _pg_loss(actor_params, critic_params, batch, nets, hp, key):
  """``-E_s min_i Q_i(s, pi(s))`` (optionally divided by ``E|Q|``, a constant)."""
  mean, log_std = nets.actor.apply(actor_params, batch.observations)
  a = mean
  if hp.opg_pg_action == "sample":
    a = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
  a = jnp.clip(a, -1.0, 1.0)
  q = jnp.min(nets.critic.apply(critic_params, batch.observations, a), axis=0)
  scale = 1.0 / jnp.maximum(jax.lax.stop_gradient(jnp.mean(jnp.abs(q))), 1e-6) if hp.opg_normalize_q else 1.0
  return -scale * jnp.mean(q)


def opg_gradients(actor_params, critic_params, batch, nets, hp, key):
  """Raw ``(g_pg, g_bc, bc_loss)`` of OPG for one batch."""
  g_pg = jax.grad(_pg_loss)(actor_params, critic_params, batch, nets, hp, key)
  loss, g_bc = jax.value_and_grad(bc_loss)(actor_params, batch, nets)
  return g_pg, g_bc, loss


def _awr(state, batch, nets, hp, key):
  """IQL eq. 7: advantage-weighted regression."""
  del key
  v = nets.value.apply(state.value, batch.observations)
  q_t = jnp.min(nets.critic.apply(state.critic_target, batch.observations, batch.actions), axis=0)
  w = losses.awr_weights(q_t - v, hp.awr_beta, hp.awr_max_weight)

  def loss_fn(params):
    mean, log_std = nets.actor.apply(params, batch.observations)
    return -jnp.mean(w * networks.gaussian_log_prob(mean, log_std, batch.actions))

  loss, grads = jax.value_and_grad(loss_fn)(state.actor)
  return loss, grads, {"awr_weight_mean": jnp.mean(w)}


def _bc(state, batch, nets, hp, key):
  del hp, key
  loss, grads = jax.value_and_grad(bc_loss)(state.actor, batch, nets)
  return loss, grads, {}


def _opg(state, batch, nets, hp, key):
  """OPG (reconstruction): ``g_bc + eta g_perp`` and its ablations (:func:`methods.reg.opg.combine`)."""
  g_pg, g_bc, loss = opg_gradients(state.actor, state.critic, batch, nets, hp, key)
  grads, info = opg.combine(
      g_pg, g_bc, eta=hp.opg_eta, projection=hp.opg_projection, conflict_only=hp.opg_conflict_only,
      direction=hp.opg_direction, eps=hp.opg_eps,
  )
  return loss, grads, info._asdict()


def _deterministic_pg(with_bc: bool) -> ActorStep:
  """TD3's actor (``-E Q(s, pi(s))``) or TD3+BC's (eq. 3)."""

  def step(state, batch, nets, hp, key):
    del key

    def loss_fn(params):
      pi = nets.actor.apply(params, batch.observations)[0]
      q = nets.critic.apply(state.critic, batch.observations, pi)[0]
      if not with_bc:
        return -jnp.mean(q)
      return losses.td3bc_actor_loss(q, pi, batch.actions, hp.td3_alpha)

    loss, grads = jax.value_and_grad(loss_fn)(state.actor)
    return loss, grads, {}

  return step


EXTRACTIONS = {
    "awr": Extraction(_awr),
    "opg": Extraction(_opg),
    "td3bc": Extraction(_deterministic_pg(with_bc=True)),
    "bc": Extraction(_bc),
    "td3": Extraction(_deterministic_pg(with_bc=False)),  # online TD3 (behaviour policies)
}
