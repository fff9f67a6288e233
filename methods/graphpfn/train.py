"""Pretraining the GraphPFN network on prior batches: pure ``init`` / ``train_step`` (optax AdamW).

The PFN objective (Mueller et al., 2022, Eq. 2; GraphPFN Sec. 4): the
negative log-likelihood of the held-out nodes' targets given the training
nodes' labels, averaged over prior graphs: cross-entropy over the task's
classes for classification graphs, the Riemann bar distribution's NLL of the
training-standardised target for regression graphs (weighted by
``regression_weight``). Each graph's loss is the mean over its ``eval_mask``
nodes; the batch loss is the ``weight``-weighted mean over graphs.

Data parallelism: :func:`train_step` is a pure function of the state and a
:class:`~methods.graphpfn.batching.GraphBatch`; jit it with the batch's
leading axis sharded over a mesh (``jax.sharding.NamedSharding``) and the
state replicated, and XLA inserts the gradient all-reduce. It never draws
random numbers: the data stream keys each step's batch by
``fold_in(key, step)`` (:func:`methods.graphpfn.prior_stream.prior_batch`),
so a run resumed from a saved state is bit-identical to an uninterrupted one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from methods.graphpfn import model as model_lib
from methods.graphpfn import riemann
from methods.graphpfn.batching import GraphBatch
from methods.graphpfn.model_hparams import ModelConfig, TrainConfig
from methods.graphpfn.tasks import REGRESSION


class TrainState(NamedTuple):
  """Checkpointed training state."""

  params: Any  # the network's parameters (a pytree of float32 arrays)
  opt_state: Any  # optax AdamW state
  step: jax.Array  # [] int32: steps taken


class Metrics(NamedTuple):
  """One training step's metrics (scalars)."""

  loss: jax.Array  # [] weighted mean loss over the batch's graphs
  class_loss: jax.Array  # [] mean cross-entropy over classification graphs (0 if none)
  regression_loss: jax.Array  # [] mean Riemann NLL over regression graphs (0 if none)
  accuracy: jax.Array  # [] mean eval-node accuracy over classification graphs (0 if none)
  class_graphs: jax.Array  # [] weight of classification graphs
  regression_graphs: jax.Array  # [] weight of regression graphs
  grad_norm: jax.Array  # [] global gradient norm before clipping
  learning_rate: jax.Array  # [] learning rate of this step


class GraphLosses(NamedTuple):
  """Per-graph losses (``[B]`` each)."""

  loss: jax.Array  # [B] CE or NLL over eval nodes (NLL scaled by regression_weight)
  class_loss: jax.Array  # [B] cross-entropy (0 on regression graphs)
  regression_loss: jax.Array  # [B] Riemann NLL of the standardised target (0 on classification graphs)
  accuracy: jax.Array  # [B] eval-node accuracy (0 on regression graphs)


def schedule(hp: TrainConfig) -> optax.Schedule:
  """Linear warmup from 0 to ``learning_rate`` over ``warmup_steps``, then cosine decay to ``end_lr_ratio`` of it."""
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=hp.learning_rate, warmup_steps=hp.warmup_steps,
      decay_steps=hp.total_steps, end_value=hp.learning_rate * hp.end_lr_ratio)


def optimizer(hp: TrainConfig) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW (Loshchilov & Hutter, 2019) with :func:`schedule`."""
  return optax.chain(
      optax.clip_by_global_norm(hp.grad_clip),
      optax.adamw(schedule(hp), b1=hp.b1, b2=hp.b2, weight_decay=hp.weight_decay))


def init(key: jax.Array, *, model_hp: ModelConfig, train_hp: TrainConfig) -> TrainState:
  """Initial state (``key``: the network's initialisation)."""
  params = model_lib.init_params(key, config=model_hp)
  return TrainState(params, optimizer(train_hp).init(params), jnp.zeros((), jnp.int32))


def graph_losses(out: model_lib.Outputs, batch: GraphBatch, borders: jax.Array, *,
                 regression_weight: float = 1.0) -> GraphLosses:
  """Per-graph PFN losses of :func:`methods.graphpfn.model.forward`'s outputs ``[B, ...]``.

  Args:
    out: outputs for ``batch``.
    batch: the graphs (targets, masks, tasks).
    borders: ``[K + 1]`` bin borders of the Riemann head.
    regression_weight: factor on a regression graph's NLL in ``loss``.
  """
  ev = batch.eval_mask.astype(jnp.float32)
  count = jnp.maximum(jnp.sum(ev, axis=1), 1.0)
  labels = jnp.clip(batch.y.astype(jnp.int32), 0, out.class_logits.shape[-1] - 1)
  logp = jax.nn.log_softmax(out.class_logits, axis=-1)
  ce_node = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
  hit = (jnp.argmax(out.class_logits, axis=-1) == labels).astype(jnp.float32)
  z, _, _ = jax.vmap(model_lib.standardise_targets)(batch.y, batch.train_mask, batch.task)
  nll_node = -riemann.log_prob(out.bin_logits, z, borders)
  reg = batch.task == REGRESSION
  ce = jnp.where(reg, 0.0, jnp.sum(ce_node * ev, axis=1) / count)
  nll = jnp.where(reg, jnp.sum(nll_node * ev, axis=1) / count, 0.0)
  acc = jnp.where(reg, 0.0, jnp.sum(hit * ev, axis=1) / count)
  return GraphLosses(ce + regression_weight * nll, ce, nll, acc)


def _weighted_mean(v, w):
  total = jnp.sum(w)
  return jnp.sum(v * w) / jnp.maximum(total, 1e-30)


def loss_fn(params, batch: GraphBatch, borders: jax.Array, *, model_hp: ModelConfig, train_hp: TrainConfig):
  """``(loss [], GraphLosses [B])``: the ``weight``-weighted mean of the per-graph losses."""
  out = model_lib.forward(params, batch, config=model_hp)
  per = graph_losses(out, batch, borders, regression_weight=train_hp.regression_weight)
  w = batch.weight * (jnp.sum(batch.eval_mask, axis=1) > 0)
  return jnp.sum(per.loss * w) / jnp.maximum(jnp.sum(w), 1e-30), per


def train_step(state: TrainState, batch: GraphBatch, borders: jax.Array, *, model_hp: ModelConfig,
               train_hp: TrainConfig) -> tuple[TrainState, Metrics]:
  """One AdamW step on ``batch``; bind the hyperparameters with ``functools.partial`` and ``jax.jit`` it.

  Args:
    state: the current state.
    batch: ``B = train_hp.batch_size`` padded graphs (its leading axis may be sharded over devices).
    borders: ``[K + 1]`` Riemann bin borders (:func:`fit_bins`), fixed for the run.

  Returns:
    ``(new state, Metrics)``.
  """
  (loss, per), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params, batch, borders, model_hp=model_hp, train_hp=train_hp)
  updates, opt_state = optimizer(train_hp).update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  w = batch.weight * (jnp.sum(batch.eval_mask, axis=1) > 0)
  reg = batch.task == REGRESSION
  wc, wr = jnp.where(reg, 0.0, w), jnp.where(reg, w, 0.0)
  metrics = Metrics(
      loss=loss, class_loss=_weighted_mean(per.class_loss, wc), regression_loss=_weighted_mean(per.regression_loss, wr),
      accuracy=_weighted_mean(per.accuracy, wc), class_graphs=jnp.sum(wc), regression_graphs=jnp.sum(wr),
      grad_norm=optax.tree.norm(grads), learning_rate=schedule(train_hp)(state.step))
  return TrainState(params, opt_state, state.step + 1), metrics


def fit_bins(batches, *, num_bins: int) -> jax.Array:
  """Riemann borders fitted to the training-standardised targets of the regression graphs in ``batches``.

  Args:
    batches: an iterable of :class:`GraphBatch` (prior samples, e.g. from a
      seed that training does not use).
    num_bins: ``K`` (the model's ``num_bins``).

  Returns:
    ``[K + 1]`` borders with equal mass over all real nodes' standardised targets.

  Raises:
    ValueError: the batches hold no regression graph with two distinct targets.
  """
  values = []
  for b in batches:
    z, _, _ = jax.vmap(model_lib.standardise_targets)(jnp.asarray(b.y), jnp.asarray(b.train_mask), jnp.asarray(b.task))
    use = np.asarray(b.node_mask) & (np.asarray(b.task) == REGRESSION)[:, None] & (np.asarray(b.weight) > 0)[:, None]
    values.append(np.asarray(z)[use])
  return riemann.fit_borders(np.concatenate(values) if values else np.zeros((0,)), num_bins)
