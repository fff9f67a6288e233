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
behaviour policies of the generated datasets (``launch/experiments/reg/data.py``).

One update, as in ikostrikov/implicit_q_learning: value (expectile), actor,
critic, Polyak target. :func:`train_chunk` runs ``num_updates`` updates inside
one ``lax.scan`` (JAX-CORL's ``n_jitted_updates``), sampling minibatches from a
dataset held on the device; vmap it over seeds.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from methods.common import hparams
from methods.reg import losses
from methods.reg import networks
from methods.reg import opg
from methods.reg import rules

CRITIC_OBJECTIVES = tuple(rules.CRITICS)
EXTRACTIONS = tuple(rules.EXTRACTIONS)  # "td3": online TD3 (behaviour policies)


F = hparams.field


@dataclasses.dataclass(frozen=True)
class Hparams(hparams.Hyperparameters):
  """Static hyperparameters (hashable; bind with ``functools.partial``), each declared once.

  Defaults are IQL's locomotion settings (Kostrikov et al., 2022, appendix B).
  ``key`` is each field's config key (the ``reg`` experiment's layout); the
  fields without one are fixed per named algorithm (:data:`methods.reg.ALGORITHMS`).
  """

  critic: str = F("iql", "Critic objective.", choices=CRITIC_OBJECTIVES, config=False)
  extraction: str = F("awr", "Policy extraction.", choices=EXTRACTIONS, config=False)
  hidden: tuple[int, ...] = F((256, 256), "Hidden widths of every network.", low=1, nonempty=True, key="agent.hidden")
  layer_norm: bool = F(False, "LayerNorm after each hidden layer.", key="agent.layer_norm")
  batch_size: int = F(256, "Transitions per update.", low=1, key="agent.batch_size")
  actor_lr: float = F(3e-4, "Actor Adam learning rate.", low=0, low_open=True, key="agent.actor_lr")
  critic_lr: float = F(3e-4, "Critic Adam learning rate.", low=0, low_open=True, key="agent.critic_lr")
  value_lr: float = F(3e-4, "Value Adam learning rate.", low=0, low_open=True, key="agent.value_lr")
  actor_cosine_steps: int = F(0, "> 0: cosine decay of the actor lr over this many updates (IQL).", low=0,
                              config=False)
  discount: float = F(0.99, "Discount gamma.", low=0, high=1, high_open=True, key="agent.discount")
  polyak: float = F(0.005, "Target network rate.", low=0, high=1, low_open=True, key="agent.polyak")
  expectile: float = F(0.7, "Expectile tau (IQL eq. 5); fixes REG's kappa = tau / (1 - tau).", low=0, high=1,
                       low_open=True, high_open=True, key="agent.expectile")
  awr_beta: float = F(3.0, "AWR inverse temperature (IQL eq. 7).", low=0, key="agent.awr_beta")
  awr_max_weight: float = F(100.0, "AWR weight cap.", low=0, low_open=True, key="agent.awr_max_weight")
  # REG value objective (reconstruction: methods/reg/__init__.py).
  reg_alpha: float = F(0.0, "Weight alpha of the evaluation gap (0: IQL).", low=0, key="reg.alpha")
  reg_ambiguity: str = F("kappa", "Ambiguity set of density ratios.", choices=losses.AMBIGUITY_SETS,
                         key="reg.ambiguity")
  reg_regularizer: str = F("none", "Regulariser R(xi) of the simplex set.", choices=losses.REGULARIZERS,
                           key="reg.regularizer")
  reg_lambda: float = F(1.0, "Regularisation strength lambda.", low=0, low_open=True, key="reg.lam")
  # OPG extraction (reconstruction: methods/reg/opg.py).
  opg_eta: float = F(2.5, "Weight eta of the orthogonal policy-gradient component.", low=0, key="opg.eta")
  opg_projection: str = F("flat", "Projection of the policy gradient.", choices=opg.PROJECTIONS, config=False)
  opg_conflict_only: bool = F(False, "Project only when the gradients conflict.", config=False)
  opg_direction: str = F("bc_plus_perp", "Update direction.", choices=opg.DIRECTIONS, config=False)
  opg_pg_action: str = F("mean", "Policy-gradient action: deterministic mean or a reparameterised sample.",
                         choices=("mean", "sample"), key="opg.pg_action")
  opg_normalize_q: bool = F(True, "Scale g_pg by 1 / E|Q| (TD3+BC's normalisation).", key="opg.normalize_q")
  opg_eps: float = F(1e-12, "Floor of the BC gradient's squared norm in the projection.", low=0, low_open=True,
                     key="opg.eps")
  # TD3 / TD3+BC (Fujimoto & Gu, 2021).
  td3_alpha: float = F(2.5, "TD3+BC's alpha (eq. 3).", low=0, key="td3bc.alpha")
  policy_noise: float = F(0.2, "Target policy smoothing noise sd.", low=0, key="td3bc.policy_noise")
  noise_clip: float = F(0.5, "Target policy smoothing noise clip.", low=0, key="td3bc.noise_clip")
  policy_delay: int = F(2, "Critic updates per actor update.", low=1, key="td3bc.policy_delay")

  def checks(self):
    if self.extraction == "awr" and self.critic not in ("iql", "reg"):
      yield "extraction", f"'awr' needs a V network (critic 'iql' or 'reg'), got critic={self.critic!r}"
    if self.extraction in ("td3bc", "td3") and self.critic != "td3":
      yield "extraction", f"{self.extraction!r} needs critic='td3', got {self.critic!r}"
    if self.extraction == "opg" and self.critic == "none":
      yield "extraction", "'opg' needs a critic"
    if self.reg_ambiguity == "kappa" and self.reg_regularizer != "none":
      yield "reg_regularizer", (f"{self.reg_regularizer!r}: ambiguity 'kappa' takes 'none' "
                                "(use ambiguity 'simplex' for a regulariser)")


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
  # [2] uint32: the seed's PRNG key as raw key data (jax.random.key_data), the
  # form orbax checkpoints; wrapped into a typed key where it is used.
  key: jax.Array


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


def _typed(key: jax.Array) -> jax.Array:
  """A typed PRNG key from a typed key or raw ``[2]`` uint32 key data."""
  return key if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(key)


def init(key: jax.Array, obs_dim: int, action_dim: int, *, hp: Hparams) -> TrainState:
  """A fresh :class:`TrainState` for one seed.

  Args:
    key: a typed PRNG key (``jax.random.key``) or its raw key data; split for
      the three networks and the carried key.
    obs_dim: ``S``.
    action_dim: ``A``.
    hp: static hyperparameters.
  """
  nets = make_nets(action_dim, hp)
  k_actor, k_critic, k_value, k_carry = jax.random.split(_typed(key), 4)
  obs = jnp.zeros((1, obs_dim), jnp.float32)
  act = jnp.zeros((1, action_dim), jnp.float32)
  actor = nets.actor.init(k_actor, obs)
  critic = nets.critic.init(k_critic, obs, act)
  value = nets.value.init(k_value, obs)
  a_tx, c_tx, v_tx = optimizers(hp)
  return TrainState(
      actor=actor, actor_target=actor, critic=critic, critic_target=critic, value=value,
      actor_opt=a_tx.init(actor), critic_opt=c_tx.init(critic), value_opt=v_tx.init(value),
      step=jnp.zeros((), jnp.int32), key=jax.random.key_data(k_carry),
  )


def act(actor_params: Any, obs: jax.Array, *, action_dim: int, hp: Hparams) -> jax.Array:
  """Deterministic evaluation action ``tanh(mu(s))``: ``[..., S] -> [..., A]``."""
  return make_nets(action_dim, hp).actor.apply(actor_params, obs)[0]


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
  """``y = r + gamma (1 - terminal) V(s')`` with the objective's next-state value."""
  next_v = rules.CRITICS[hp.critic].next_value(state, batch, nets, hp, key)
  return losses.td_target(batch.rewards, batch.dones, next_v, hp.discount)


def _update_critic(state: TrainState, batch: Batch, nets: Nets, hp: Hparams, key: jax.Array):
  """One critic step of the configured objective (:data:`methods.reg.rules.CRITICS`)."""
  target = jax.lax.stop_gradient(_critic_target(state, batch, nets, hp, key))
  loss_of, metrics = rules.CRITICS[hp.critic].loss(state, batch, nets, hp)

  def loss_fn(params):
    qs = nets.critic.apply(params, batch.observations, batch.actions)
    return loss_of(qs, target), qs

  (loss, qs), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.critic)
  critic, critic_opt = _apply(optimizers(hp)[1], grads, state.critic_opt, state.critic)
  metrics = dict(metrics, critic_loss=loss, q_mean=jnp.mean(qs), q_abs_max=jnp.max(jnp.abs(qs)))
  return state._replace(critic=critic, critic_opt=critic_opt), metrics


def _update_actor(state: TrainState, batch: Batch, nets: Nets, hp: Hparams, key: jax.Array):
  """One actor step of the configured extraction (:data:`methods.reg.rules.EXTRACTIONS`)."""
  loss, grads, metrics = rules.EXTRACTIONS[hp.extraction].step(state, batch, nets, hp, key)
  actor, actor_opt = _apply(optimizers(hp)[0], grads, state.actor_opt, state.actor)
  return state._replace(actor=actor, actor_opt=actor_opt), dict(metrics, actor_loss=loss)


def _polyak(target, online, rate: float):
  """``(1 - rate) target + rate online`` with ``optax.incremental_update``.

  Passed as the target's own weight ``1 - rate`` so that the products are
  formed in the order of the published runs: XLA fuses one of them into a
  multiply-add, and the other order rounds differently in the last bit.
  """
  return optax.incremental_update(target, online, 1.0 - rate)


def _select(pred, new, old):
  return jax.tree.map(lambda n, o: jnp.where(pred, n, o), new, old)


def update(state: TrainState, batch: Batch, *, hp: Hparams) -> tuple[TrainState, dict]:
  """One update of every network (value, actor, critic, targets) on ``batch``.

  Order as in implicit_q_learning's ``_update_jit``: V, actor, Q, Polyak target.
  TD3 and TD3+BC update the critic every step and the actor and both targets
  every ``policy_delay`` steps.

  Args:
    state: one seed's :class:`TrainState`.
    batch: a :class:`Batch` of ``B`` transitions.
    hp: static hyperparameters.

  Returns:
    ``(new_state, metrics)``; ``metrics`` is a dict of scalars.
  """
  chex.assert_rank([batch.observations, batch.actions, batch.rewards], [2, 2, 1])
  nets = make_nets(batch.actions.shape[-1], hp)
  objective = rules.CRITICS[hp.critic]
  key, k_actor, k_critic = jax.random.split(_typed(state.key), 3)
  metrics: dict = {}
  if objective.fits_value:
    state, m = _update_value(state, batch, nets, hp)
    metrics.update(m)
  if objective.delayed_actor:
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
    if objective.loss is not None:
      state, m = _update_critic(state, batch, nets, hp, k_critic)
      metrics.update(m)
      state = state._replace(critic_target=_polyak(state.critic_target, state.critic, hp.polyak))
  return state._replace(step=state.step + 1, key=jax.random.key_data(key)), metrics


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
    key, k_batch = jax.random.split(_typed(s.key))
    s = s._replace(key=jax.random.key_data(key))
    return update(s, sample_batch(data, k_batch, hp.batch_size, size), hp=hp)

  state, metrics = jax.lax.scan(body, state, None, length=num_updates)
  return state, jax.tree.map(jnp.mean, metrics)
