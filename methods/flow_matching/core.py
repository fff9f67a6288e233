"""Conditional flow matching with the linear path, EMA weights and one-jit training.

Briq et al., "Exploring and Exploiting Stability in Latent Flow Matching"
(ICML 2026), Sec. 2, following Lipman et al., "Flow Matching for Generative
Modeling" (ICLR 2023) and Liu et al., "Flow Straight and Fast" (ICLR 2023):
with noise ``x0 ~ N(0, I)`` at ``t = 0`` and a data latent ``x1`` at ``t = 1``,

  x_t = t x1 + (1 - t) x0,    u_t = x1 - x0,    L = E_{t~U[0,1]} ||v(x_t, t) - u_t||^2 / D,

which is Meta ``flow_matching``'s ``CondOTProbPath`` (``alpha_t = t``,
``sigma_t = 1 - t``) and torchcfm's ``ConditionalFlowMatcher(sigma=0)``.
:func:`train_chunk` runs ``num_steps`` Adam steps in one ``lax.scan``; keys are
``fold_in(key, step)``, so a resumed run reproduces an uninterrupted one.

``FlowConfig.t_max < 1`` draws ``t ~ U[0, t_max]``: a coarse model for
coarse-to-fine sampling (paper Sec. 5) that is only ever evaluated at
``t < t_split`` spends all its capacity there (a time-restricted coarse
model; the paper's optional coarse training on ``t < t_split`` without the seam
term).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from methods.flow_matching.config import FlowConfig, NetConfig
from methods.flow_matching.networks import DiT


class TrainState(NamedTuple):
  """Velocity-network training state (checkpointed)."""

  params: dict  # network weights
  ema: dict  # EMA of ``params`` (used for sampling)
  opt_state: tuple  # Adam moments
  step: jax.Array  # [] int32, optimizer steps taken


def path_sample(x0: jax.Array, x1: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(x_t, u_t)`` of the linear (conditional OT) path; ``t`` is ``[B]``, ``x`` is ``[B, ...]``."""
  tb = t.reshape(t.shape + (1,) * (x1.ndim - 1))
  return tb * x1 + (1 - tb) * x0, x1 - x0


def fm_loss(v: jax.Array, u: jax.Array) -> jax.Array:
  """``mean((v - u)^2)`` over every element (zero iff ``v = u = x1 - x0``)."""
  return jnp.mean(jnp.square(v - u))


def per_sample_loss(v: jax.Array, u: jax.Array) -> jax.Array:
  """``[B]``: ``mean((v_i - u_i)^2)`` over each sample's elements."""
  return jnp.mean(jnp.square(v - u).reshape(v.shape[0], -1), axis=1)


def make_velocity(net: NetConfig, flow: FlowConfig):
  """``apply(params, x [B,h,w,c], t [B], y [B] | None) -> v``; labels are dropped if unconditional."""
  model = DiT(net, num_classes=flow.num_classes)

  def apply(params, x, t, y=None):
    return model.apply({"params": params}, x, t, y if flow.class_conditional else None)

  return model, apply


def _optimizer(flow: FlowConfig):
  return optax.chain(optax.clip_by_global_norm(flow.grad_clip), optax.adam(flow.learning_rate))


@functools.partial(jax.jit, static_argnames=("latent_shape", "net", "flow"))
def init(key: jax.Array, latent_shape: tuple[int, ...], *, net: NetConfig, flow: FlowConfig) -> TrainState:
  """Initial state; ``key`` draws the weights (jitted: one compilation per shape and config, not one per op)."""
  model, _ = make_velocity(net, flow)
  x = jnp.zeros((1,) + tuple(latent_shape))
  y = jnp.zeros((1,), jnp.int32) if flow.class_conditional else None
  params = model.init(key, x, jnp.zeros((1,)), y)["params"]
  return TrainState(params, params, _optimizer(flow).init(params), jnp.zeros((), jnp.int32))


def loss_fn(params, x1, y, key, *, net: NetConfig, flow: FlowConfig):
  """FM loss of one batch ``x1 [B, h, w, c]``; ``key`` draws ``t``, ``x0`` and the label dropout."""
  _, apply = make_velocity(net, flow)
  kt, kx, ky = jax.random.split(key, 3)
  t = jax.random.uniform(kt, (x1.shape[0],))
  if flow.t_max < 1.0:  # a time-restricted (coarse) model: t ~ U[0, t_max]
    t = flow.t_max * t
  x0 = jax.random.normal(kx, x1.shape)
  xt, u = path_sample(x0, x1, t)
  if flow.class_conditional:
    drop = jax.random.bernoulli(ky, flow.label_dropout, y.shape)
    y = jnp.where(drop, flow.num_classes, y)
  return fm_loss(apply(params, xt, t, y), u)


def train_step(state: TrainState, data: jax.Array, labels: jax.Array, count: jax.Array, key: jax.Array, *,
               net: NetConfig, flow: FlowConfig) -> tuple[TrainState, jax.Array]:
  """One Adam step on a batch drawn (with replacement) from the first ``count`` rows of ``data``.

  Args:
    state: the training state.
    data: ``[N, h, w, c]`` scaled latents (rows past ``count`` are padding, never drawn).
    labels: ``[N]`` int32 classes.
    count: ``[]`` number of valid rows.
    key: this step's key (batch indices, ``t``, noise, label dropout).

  Returns:
    ``(new state, loss [])``.
  """
  kb, kl = jax.random.split(key)
  idx = jax.random.randint(kb, (flow.batch_size,), 0, count)
  loss, grads = jax.value_and_grad(functools.partial(loss_fn, net=net, flow=flow))(
      state.params, data[idx], labels[idx], kl)
  updates, opt_state = _optimizer(flow).update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  # EMA with the usual warm-up min(decay, (1 + n) / (10 + n)), so short runs average recent weights.
  n = state.step.astype(jnp.float32)
  decay = jnp.minimum(flow.ema_decay, (1 + n) / (10 + n))
  ema = jax.tree.map(lambda e, p: decay * e + (1 - decay) * p, state.ema, params)
  return TrainState(params, ema, opt_state, state.step + 1), loss


def train_chunk(state: TrainState, data, labels, count, key, *, num_steps: int, net: NetConfig,
                flow: FlowConfig) -> tuple[TrainState, jax.Array]:
  """``num_steps`` steps in one ``lax.scan``; step ``s`` uses ``fold_in(key, s)``. Returns losses ``[num_steps]``."""

  def body(s, _):
    return train_step(s, data, labels, count, jax.random.fold_in(key, s.step), net=net, flow=flow)

  return jax.lax.scan(body, state, None, length=num_steps)


def loss_scores(params, data: jax.Array, labels: jax.Array, key: jax.Array, *, net: NetConfig, flow: FlowConfig,
                num_times: int, num_draws: int, chunk: int = 256) -> jax.Array:
  """Per-sample loss score ``[N]`` (paper Sec. 6).

  The FM loss of every sample at ``t in linspace(0, 1, K + 2)[1:-1]`` with a
  fixed bank of ``num_draws`` noise draws per sample and ``t`` (drawn from
  ``key``), divided per ``t`` by its mean over the data set (the running mean's
  limit), then averaged over ``t``.
  """
  _, apply = make_velocity(net, flow)
  ts = jnp.linspace(0.0, 1.0, num_times + 2)[1:-1]
  n = data.shape[0]

  def one_t(i, t):
    def draw(j):
      x0 = jax.random.normal(jax.random.fold_in(jax.random.fold_in(key, i), j), data.shape)
      xt, u = path_sample(x0, data, jnp.full((n,), t))
      v = jax.lax.map(lambda a: apply(params, *(e[None] for e in a))[0], (xt, jnp.full((n,), t), labels),
                      batch_size=chunk)
      return per_sample_loss(v, u)

    return jnp.mean(jax.vmap(draw)(jnp.arange(num_draws)), axis=0)

  losses = jnp.stack([one_t(i, t) for i, t in enumerate(ts)])  # [K, N]
  losses = losses / jnp.mean(losses, axis=1, keepdims=True)
  return jnp.mean(losses, axis=0)


def grad_scores(params, data: jax.Array, labels: jax.Array, key: jax.Array, *, net: NetConfig, flow: FlowConfig,
                num_draws: int, chunk: int = 64) -> jax.Array:
  """Per-sample squared parameter-gradient norm ``[N]`` of the FM loss, averaged over ``num_draws`` (t, x0)."""
  _, apply = make_velocity(net, flow)

  def one(x1, y, i):
    def sq_norm(j):
      k = jax.random.fold_in(jax.random.fold_in(key, i), j)
      t = jax.random.uniform(jax.random.fold_in(k, 0), (1,))
      x0 = jax.random.normal(jax.random.fold_in(k, 1), (1,) + x1.shape)
      xt, u = path_sample(x0, x1[None], t)
      g = jax.grad(lambda p: fm_loss(apply(p, xt, t, y[None]), u))(params)
      return sum(jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(g))

    return jnp.mean(jax.vmap(sq_norm)(jnp.arange(num_draws)))

  return jax.lax.map(lambda a: one(*a), (data, labels, jnp.arange(data.shape[0])), batch_size=chunk)

