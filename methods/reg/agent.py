"""One training state and one update for IQL, REG, REG+OPG (and ablations), TD3+BC and BC.

Every algorithm is a pair (critic objective, policy extraction) of the static
:class:`Hparams`; all share :class:`TrainState`, :func:`init`, :func:`update`
and :func:`train_chunk`, so one experiment loop runs them all (the baselines
live beside the method, as everywhere in this project).

==============  =================  ====================================
algorithm       critic objective   policy extraction
==============  =================  ====================================
IQL             ``iql``            ``awr``
REG             ``reg``            ``awr``
REG+OPG         ``reg``            ``opg`` (and its ablations)
TD3+BC          ``td3``            ``td3bc``
BC              ``none``           ``bc``
TD3 (online)    ``td3``            ``td3``
==============  =================  ====================================

TD3 (Fujimoto et al., 2018) is the online agent that trains the MuJoCo
behaviour policies of the generated datasets (``launch/experiments/reg_data.py``).

==============  =================  ====================================
==============  =================  ====================================

One update, as in ikostrikov/implicit_q_learning: value (expectile), actor,
critic, Polyak target. :func:`train_chunk` runs ``num_updates`` updates inside
one ``lax.scan`` (JAX-CORL's ``n_jitted_updates``), sampling minibatches from a
dataset held on the device; vmap it over seeds.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from methods.reg import losses
from methods.reg import networks
from methods.reg import opg

CRITIC_OBJECTIVES = ("iql", "reg", "td3", "none")
EXTRACTIONS = ("awr", "opg", "td3bc", "bc", "td3")  # "td3": online TD3 (behaviour policies)


@dataclasses.dataclass(frozen=True)
class Hparams:
  """Static hyperparameters (hashable; bind with ``functools.partial``).

  Defaults are IQL's locomotion settings (IQL paper, appendix; JAX-CORL).
  """

  critic: str = "iql"  # one of CRITIC_OBJECTIVES
  extraction: str = "awr"  # one of EXTRACTIONS
  hidden: tuple[int, ...] = (256, 256)
  layer_norm: bool = False
  batch_size: int = 256
  actor_lr: float = 3e-4
  critic_lr: float = 3e-4
  value_lr: float = 3e-4
  actor_cosine_steps: int = 0  # > 0: cosine decay of the actor lr over this many updates (IQL)
  discount: float = 0.99
  polyak: float = 0.005
  expectile: float = 0.7
  awr_beta: float = 3.0
  awr_max_weight: float = 100.0
  # REG value objective.
  reg_alpha: float = 0.0
  reg_ambiguity: str = "kappa"
  reg_regularizer: str = "none"
  reg_lambda: float = 1.0
  # OPG extraction.
  opg_eta: float = 2.5
  opg_projection: str = "flat"
  opg_conflict_only: bool = False
  opg_direction: str = "bc_plus_perp"
  opg_pg_action: str = "mean"  # "mean" (deterministic) or "sample" (reparameterised)
  opg_normalize_q: bool = True  # scale g_pg by 1 / E|Q| (TD3+BC's normalisation)
  opg_eps: float = 1e-12
  # TD3 / TD3+BC.
  td3_alpha: float = 2.5
  policy_noise: float = 0.2
  noise_clip: float = 0.5
  policy_delay: int = 2

  def __post_init__(self):
    problems = []
    if self.critic not in CRITIC_OBJECTIVES:
      problems.append(f"critic={self.critic!r}; allowed: {CRITIC_OBJECTIVES}")
    if self.extraction not in EXTRACTIONS:
      problems.append(f"extraction={self.extraction!r}; allowed: {EXTRACTIONS}")
    if self.extraction in ("awr",) and self.critic not in ("iql", "reg"):
      problems.append(f"extraction='awr' needs a V network (critic 'iql' or 'reg'), got {self.critic!r}")
    if self.extraction in ("td3bc", "td3") and self.critic != "td3":
      problems.append(f"extraction={self.extraction!r} needs critic='td3', got {self.critic!r}")
    if self.extraction == "opg" and self.critic == "none":
      problems.append(f"extraction={self.extraction!r} needs a critic")
    if self.reg_ambiguity not in losses.AMBIGUITY_SETS:
      problems.append(f"reg_ambiguity={self.reg_ambiguity!r}; allowed: {losses.AMBIGUITY_SETS}")
    if self.reg_regularizer not in losses.REGULARIZERS:
      problems.append(f"reg_regularizer={self.reg_regularizer!r}; allowed: {losses.REGULARIZERS}")
    if self.reg_ambiguity == "kappa" and self.reg_regularizer != "none":
      problems.append("reg_ambiguity='kappa' takes reg_regularizer='none'")
    if self.opg_projection not in opg.PROJECTIONS:
      problems.append(f"opg_projection={self.opg_projection!r}; allowed: {opg.PROJECTIONS}")
    if self.opg_direction not in opg.DIRECTIONS:
      problems.append(f"opg_direction={self.opg_direction!r}; allowed: {opg.DIRECTIONS}")
    if self.opg_pg_action not in ("mean", "sample"):
      problems.append(f"opg_pg_action={self.opg_pg_action!r}; allowed: ('mean', 'sample')")
    if not 0.0 < self.expectile < 1.0:
      problems.append(f"expectile={self.expectile} must be in (0, 1)")
    if problems:
      raise ValueError("invalid Hparams: " + "; ".join(problems))


class Batch(NamedTuple):
  """Transitions in ``qlearning_dataset`` form (``[N, ...]`` for a dataset, ``[B, ...]`` for a batch)."""

  observations: jax.Array  # [N, S]
  actions: jax.Array  # [N, A], clipped to +-(1 - 1e-5)
  rewards: jax.Array  # [N]
  next_observations: jax.Array  # [N, S]
  dones: jax.Array  # [N], 1.0 on terminals only (timeouts are not terminals)


class TrainState(NamedTuple):
  """Everything one seed's training carries (a pytree; checkpointed as is)."""

  actor: Any
  actor_target: Any
  critic: Any
  critic_target: Any
  value: Any
  actor_opt: Any
  critic_opt: Any
  value_opt: Any
  step: jax.Array  # [] int32, updates done
  key: jax.Array  # [2] uint32, the seed's PRNG key


class Nets(NamedTuple):
  actor: networks.GaussianActor
  critic: networks.TwinCritic
  value: networks.ValueNet


def make_nets(action_dim: int, hp: Hparams) -> Nets:
  return Nets(
      networks.GaussianActor(hp.hidden, action_dim, hp.layer_norm),
      networks.TwinCritic(hp.hidden, hp.layer_norm),
      networks.ValueNet(hp.hidden, hp.layer_norm),
  )


def _adam(lr, hp_steps: int = 0):
  """Adam as ``scale_by_adam`` + a schedule (same state structure for every algorithm)."""
  if hp_steps > 0:
    schedule = optax.cosine_decay_schedule(-lr, hp_steps)
  else:
    schedule = lambda _: -lr  # noqa: E731
  return optax.chain(optax.scale_by_adam(), optax.scale_by_schedule(schedule))


def optimizers(hp: Hparams):
  """``(actor_tx, critic_tx, value_tx)``; IQL's actor lr follows a cosine decay."""
  return _adam(hp.actor_lr, hp.actor_cosine_steps), _adam(hp.critic_lr), _adam(hp.value_lr)


def init(key: jax.Array, obs_dim: int, action_dim: int, *, hp: Hparams) -> TrainState:
  """A fresh :class:`TrainState` for one seed.

  Args:
    key: ``[2]`` uint32 PRNG key; split for the three networks and the carried key.
    obs_dim: ``S``.
    action_dim: ``A``.
    hp: static hyperparameters.
  """
  nets = make_nets(action_dim, hp)
  k_actor, k_critic, k_value, k_carry = jax.random.split(key, 4)
  obs = jnp.zeros((1, obs_dim), jnp.float32)
  act = jnp.zeros((1, action_dim), jnp.float32)
  actor = nets.actor.init(k_actor, obs)
  critic = nets.critic.init(k_critic, obs, act)
  value = nets.value.init(k_value, obs)
  a_tx, c_tx, v_tx = optimizers(hp)
  return TrainState(
      actor=actor, actor_target=actor, critic=critic, critic_target=critic, value=value,
      actor_opt=a_tx.init(actor), critic_opt=c_tx.init(critic), value_opt=v_tx.init(value),
      step=jnp.zeros((), jnp.int32), key=k_carry,
  )


def act(actor_params: Any, obs: jax.Array, *, action_dim: int, hp: Hparams) -> jax.Array:
  """Deterministic evaluation action ``tanh(mu(s))``: ``[..., S] -> [..., A]``."""
  return make_nets(action_dim, hp).actor.apply(actor_params, obs)[0]


def _polyak(target, online, rate):
  return jax.tree.map(lambda t, o: (1.0 - rate) * t + rate * o, target, online)


def _apply(tx, grads, opt_state, params):
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state


def _update_value(state: TrainState, batch: Batch, nets: Nets, hp: Hparams):
  """IQL eq. 5: ``V <- argmin E[|tau - 1{u<0}| u^2]``, ``u = min_i Q_i_target(s, a) - V(s)``."""
  q_t = jnp.min(nets.critic.apply(state.critic_target, batch.observations, batch.actions), axis=0)

  def loss_fn(params):
    v = nets.value.apply(params, batch.observations)
    return losses.expectile_loss(q_t - v, hp.expectile), v

  (loss, v), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.value)
  value, value_opt = _apply(optimizers(hp)[2], grads, state.value_opt, state.value)
  return state._replace(value=value, value_opt=value_opt), {"value_loss": loss, "v_mean": jnp.mean(v)}


def _critic_target(state: TrainState, batch: Batch, nets: Nets, hp: Hparams, key: jax.Array):
  if hp.critic in ("iql", "reg"):
    next_v = nets.value.apply(state.value, batch.next_observations)
  else:  # TD3: clipped double Q with target policy smoothing.
    mean, _ = nets.actor.apply(state.actor_target, batch.next_observations)
    noise = jnp.clip(hp.policy_noise * jax.random.normal(key, mean.shape), -hp.noise_clip, hp.noise_clip)
    next_a = jnp.clip(mean + noise, -1.0, 1.0)
    next_v = jnp.min(nets.critic.apply(state.critic_target, batch.next_observations, next_a), axis=0)
  return losses.td_target(batch.rewards, batch.dones, next_v, hp.discount)


def _update_critic(state: TrainState, batch: Batch, nets: Nets, hp: Hparams, key: jax.Array):
  """IQL eq. 6 (``critic="iql"``), REG's objective (``"reg"``) or TD3's (``"td3"``)."""
  target = jax.lax.stop_gradient(_critic_target(state, batch, nets, hp, key))
  metrics = {}
  if hp.critic == "reg":
    v = nets.value.apply(state.value, batch.observations)
    q_t = jnp.min(nets.critic.apply(state.critic_target, batch.observations, batch.actions), axis=0)
    xi = losses.worst_case_ratio(
        q_t - v, ambiguity=hp.reg_ambiguity, regularizer=hp.reg_regularizer, tau=hp.expectile, lam=hp.reg_lambda
    )
    metrics["gap"] = jnp.mean(xi * (q_t - v)) - hp.reg_lambda * losses.regularizer_value(xi, hp.reg_regularizer)
    metrics["xi_max"] = jnp.max(xi)

  def loss_fn(params):
    qs = nets.critic.apply(params, batch.observations, batch.actions)
    if hp.critic == "reg":
      return losses.reg_q_loss(qs, target, v, xi, hp.reg_alpha), qs
    return losses.twin_q_loss(qs, target), qs

  (loss, qs), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.critic)
  critic, critic_opt = _apply(optimizers(hp)[1], grads, state.critic_opt, state.critic)
  metrics.update(critic_loss=loss, q_mean=jnp.mean(qs), q_abs_max=jnp.max(jnp.abs(qs)))
  return state._replace(critic=critic, critic_opt=critic_opt), metrics


def _bc_loss(actor_params, batch: Batch, nets: Nets):
  mean, log_std = nets.actor.apply(actor_params, batch.observations)
  return -jnp.mean(networks.gaussian_log_prob(mean, log_std, batch.actions))


def _pg_loss(actor_params, critic_params, batch: Batch, nets: Nets, hp: Hparams, key: jax.Array):
  """``-E_s min_i Q_i(s, pi(s))`` (optionally divided by ``E|Q|``, a constant)."""
  mean, log_std = nets.actor.apply(actor_params, batch.observations)
  a = mean
  if hp.opg_pg_action == "sample":
    a = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
  a = jnp.clip(a, -1.0, 1.0)
  q = jnp.min(nets.critic.apply(critic_params, batch.observations, a), axis=0)
  scale = 1.0 / jnp.maximum(jax.lax.stop_gradient(jnp.mean(jnp.abs(q))), 1e-6) if hp.opg_normalize_q else 1.0
  return -scale * jnp.mean(q)


def opg_gradients(actor_params, critic_params, batch: Batch, nets: Nets, hp: Hparams, key: jax.Array):
  """Raw ``(g_pg, g_bc, bc_loss)`` of OPG for one batch."""
  g_pg = jax.grad(_pg_loss)(actor_params, critic_params, batch, nets, hp, key)
  bc_loss, g_bc = jax.value_and_grad(_bc_loss)(actor_params, batch, nets)
  return g_pg, g_bc, bc_loss


def _update_actor(state: TrainState, batch: Batch, nets: Nets, hp: Hparams, key: jax.Array):
  """One actor step of the configured policy extraction."""
  metrics = {}
  if hp.extraction == "awr":  # IQL eq. 7.
    v = nets.value.apply(state.value, batch.observations)
    q_t = jnp.min(nets.critic.apply(state.critic_target, batch.observations, batch.actions), axis=0)
    w = losses.awr_weights(q_t - v, hp.awr_beta, hp.awr_max_weight)

    def loss_fn(params):
      mean, log_std = nets.actor.apply(params, batch.observations)
      return -jnp.mean(w * networks.gaussian_log_prob(mean, log_std, batch.actions))

    loss, grads = jax.value_and_grad(loss_fn)(state.actor)
    metrics["awr_weight_mean"] = jnp.mean(w)
  elif hp.extraction == "bc":
    loss, grads = jax.value_and_grad(_bc_loss)(state.actor, batch, nets)
  elif hp.extraction == "opg":
    g_pg, g_bc, loss = opg_gradients(state.actor, state.critic, batch, nets, hp, key)
    grads, info = opg.combine(
        g_pg, g_bc, eta=hp.opg_eta, projection=hp.opg_projection, conflict_only=hp.opg_conflict_only,
        direction=hp.opg_direction, eps=hp.opg_eps,
    )
    metrics.update(info._asdict())
  else:  # td3bc, td3

    def loss_fn(params):
      pi = nets.actor.apply(params, batch.observations)[0]
      q = nets.critic.apply(state.critic, batch.observations, pi)[0]
      if hp.extraction == "td3":
        return -jnp.mean(q)
      return losses.td3bc_actor_loss(q, pi, batch.actions, hp.td3_alpha)

    loss, grads = jax.value_and_grad(loss_fn)(state.actor)
  actor, actor_opt = _apply(optimizers(hp)[0], grads, state.actor_opt, state.actor)
  metrics["actor_loss"] = loss
  return state._replace(actor=actor, actor_opt=actor_opt), metrics


def _select(pred, new, old):
  return jax.tree.map(lambda n, o: jnp.where(pred, n, o), new, old)


def update(state: TrainState, batch: Batch, *, hp: Hparams) -> tuple[TrainState, dict]:
  """One update of every network (value, actor, critic, targets) on ``batch``.

  Order as in implicit_q_learning's ``_update_jit``: V, actor, Q, Polyak target.
  TD3+BC updates the critic every step and the actor and both targets every
  ``policy_delay`` steps.

  Args:
    state: one seed's :class:`TrainState`.
    batch: a :class:`Batch` of ``B`` transitions.
    hp: static hyperparameters.

  Returns:
    ``(new_state, metrics)``; ``metrics`` is a dict of scalars.
  """
  nets = make_nets(batch.actions.shape[-1], hp)
  key, k_actor, k_critic = jax.random.split(state.key, 3)
  metrics: dict = {}
  if hp.critic in ("iql", "reg"):
    state, m = _update_value(state, batch, nets, hp)
    metrics.update(m)
  if hp.critic == "td3":
    state, m = _update_critic(state, batch, nets, hp, k_critic)
    metrics.update(m)
    new, m = _update_actor(state, batch, nets, hp, k_actor)
    new = new._replace(
        actor_target=_polyak(state.actor_target, new.actor, hp.polyak),
        critic_target=_polyak(state.critic_target, new.critic, hp.polyak),
    )
    state = _select(state.step % hp.policy_delay == 0, new, state)
    metrics.update(m)
  else:
    state, m = _update_actor(state, batch, nets, hp, k_actor)
    metrics.update(m)
    if hp.critic != "none":
      state, m = _update_critic(state, batch, nets, hp, k_critic)
      metrics.update(m)
      state = state._replace(critic_target=_polyak(state.critic_target, state.critic, hp.polyak))
  return state._replace(step=state.step + 1, key=key), metrics


def sample_batch(data: Batch, key: jax.Array, batch_size: int, size=None) -> Batch:
  """``batch_size`` transitions drawn uniformly with replacement from the first ``size`` rows of ``data``."""
  n = data.rewards.shape[0] if size is None else size
  idx = jax.random.randint(key, (batch_size,), 0, n)
  return jax.tree.map(lambda x: x[idx], data)


def train_chunk(
    state: TrainState, data: Batch, size=None, *, num_updates: int, hp: Hparams
) -> tuple[TrainState, dict]:
  """``num_updates`` updates in one ``lax.scan``; returns the state and the chunk's mean metrics.

  Args:
    state: one seed's state.
    data: the dataset ``[N, ...]`` (or a replay buffer of capacity ``N``).
    size: rows of ``data`` to sample from (a traced scalar for a filling
      replay buffer; ``None``: all ``N``).
    num_updates: updates in the scan (static).
    hp: static hyperparameters.

  Minibatch keys are splits of the carried key, so the result depends only on
  the state (bit-identical after a restore).
  """

  def body(s, _):
    key, k_batch = jax.random.split(s.key)
    s = s._replace(key=key)
    return update(s, sample_batch(data, k_batch, hp.batch_size, size), hp=hp)

  state, metrics = jax.lax.scan(body, state, None, length=num_updates)
  return state, jax.tree.map(jnp.mean, metrics)


@functools.partial(jax.jit, static_argnames=("num_updates", "hp"))
def train_chunk_seeds(states: TrainState, data: Batch, *, num_updates: int, hp: Hparams):
  """:func:`train_chunk` vmapped over a leading seed axis of ``states`` (``data`` shared)."""
  return jax.vmap(functools.partial(train_chunk, num_updates=num_updates, hp=hp), in_axes=(0, None))(states, data)
