"""Pretraining of the ``graphpfn`` experiment: streamed prior batches, data-parallel steps, checkpoints, curve.

Step ``t`` trains on the prior batch keyed by ``fold_in(train key, t)``
(:func:`methods.graphpfn.prior_stream.prior_batch`), padded to the smallest
node and edge buckets that hold it; the jitted step compiles once per bucket
pair (each first sighting is logged, and the number of traces is in the
results). The batch's graph axis is sharded over the mesh's ``data`` axis and
the state is replicated, so XLA all-reduces the gradients (data parallelism
through ``jax.sharding``). Every step's metrics go to ``metrics.jsonl``; a
NaN/Inf in a step's metrics or state stops the run naming the step, and the
last good checkpoint is kept. The learning curve (held-out in-context scores
at ``curve_points`` equally spaced steps) is part of the checkpointed state,
so a run killed at any moment resumes bit-identically.

Keys (all folded from ``key(seed)``): 0 the training stream, 1 the batches
that fit the Riemann bins, 2 the held-out prior graphs, 3 the shifted prior's
graphs, 4 the network's initialisation, 5 the baselines.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from launch import checkpoint as ckpt_lib
from launch import mesh as mesh_lib
from launch import metrics as metrics_lib
from launch.configs import graphpfn as gcfg
from launch.runtime import Context
from methods.graphpfn import evaluation, prior_stream
from methods.graphpfn import train as train_lib
from methods.graphpfn.batching import GraphBatch

TRAIN, BINS, HELD_OUT, SHIFTED, INIT, BASELINES = range(6)
CURVE_FIELDS = ("accuracy", "accuracy_se", "r2", "r2_se")


class RunState(NamedTuple):
  """Checkpointed state of the pretraining run."""

  train: train_lib.TrainState
  borders: jax.Array  # [K + 1] Riemann bin borders (fitted before step 1)
  curve: jax.Array  # [S, 4] held-out accuracy, its s.e., R^2, its s.e. per curve point (0 where undefined)
  curve_defined: jax.Array  # [S, 4] bool: the entry was computed and finite


def key_of(seed: int, purpose: int) -> jax.Array:
  """``fold_in(key(seed), purpose)`` (purposes: the module constants)."""
  return jax.random.fold_in(jax.random.key(seed), purpose)


def curve_steps(total: int, points: int) -> list[int]:
  """``points`` equally spaced steps ending at ``total`` (duplicates removed)."""
  return sorted({max(1, round(total * (i + 1) / points)) for i in range(points)})


def stream(hp: gcfg.Hparams, key: jax.Array, *, batch_size: int, shifted: bool = False) -> Callable[[int], GraphBatch]:
  """``t -> GraphBatch``: batch ``t`` of ``batch_size`` prior graphs keyed by ``fold_in(key, t)``."""
  structure = hp.shifted() if shifted else hp.structure

  def batch(t: int) -> GraphBatch:
    return prior_stream.prior_batch(key, t, batch_size=batch_size, structure_hp=structure,
                                    attribute_hp=hp.attributes, buckets=hp.buckets, model_hp=hp.model)

  return batch


def held_out_batches(hp: gcfg.Hparams, seed: int, graphs: int, *, shifted: bool = False) -> list[GraphBatch]:
  """The first ``graphs`` held-out graphs (key ``HELD_OUT``, or ``SHIFTED`` on the shifted prior), in batches."""
  get = stream(hp, key_of(seed, SHIFTED if shifted else HELD_OUT), batch_size=hp.run.eval_batch, shifted=shifted)
  return [get(i) for i in range(math.ceil(graphs / hp.run.eval_batch))]


class StepFn:
  """The jitted, data-parallel :func:`methods.graphpfn.train.train_step`; counts its traces."""

  def __init__(self, hp: gcfg.Hparams, mesh):
    self.traces = 0
    self.mesh = mesh
    rep, data = mesh_lib.replicated(mesh), mesh_lib.data_sharding(mesh)

    def step(state, batch, borders):
      self.traces += 1  # runs at trace time only
      return train_lib.train_step(state, batch, borders, model_hp=hp.model, train_hp=hp.train)

    self._jitted = jax.jit(step, in_shardings=(rep, data, rep), out_shardings=(rep, rep))

  def __call__(self, state, batch: GraphBatch, borders):
    return self._jitted(state, jax.device_put(batch, mesh_lib.data_sharding(self.mesh)), borders)


def initial_state(hp: gcfg.Hparams, seed: int, mesh, curve_points: int) -> RunState:
  """Step 0's state, replicated over ``mesh`` (borders 0: fitted when the run starts from scratch)."""
  ts = train_lib.init(key_of(seed, INIT), model_hp=hp.model, train_hp=hp.train)
  state = RunState(ts, jnp.zeros((hp.model.num_bins + 1,), jnp.float32),
                   jnp.zeros((curve_points, len(CURVE_FIELDS)), jnp.float32),
                   jnp.zeros((curve_points, len(CURVE_FIELDS)), bool))
  return jax.device_put(state, mesh_lib.replicated(mesh))


def fit_borders(hp: gcfg.Hparams, seed: int) -> jax.Array:
  """Riemann borders from ``bin_batches`` prior batches of their own key (``BINS``)."""
  get = stream(hp, key_of(seed, BINS), batch_size=hp.train.batch_size)
  return train_lib.fit_bins([get(i) for i in range(hp.run.bin_batches)], num_bins=hp.model.num_bins)


def curve_point(params, borders, batches: list[GraphBatch], graphs: int, hp: gcfg.Hparams) -> np.ndarray:
  """``[4]`` held-out accuracy, s.e., R^2, s.e. of ``params`` on the first ``graphs`` graphs of ``batches``."""
  fn = evaluation.evaluate_fn(hp.model)
  scores = [jax.device_get(fn(params, b, borders)) for b in batches]
  joined = evaluation.Scores(*(np.concatenate([getattr(s, f) for s in scores])[:graphs]
                               for f in evaluation.Scores._fields))
  s = evaluation.summarise(joined)
  return np.asarray([s.accuracy, s.accuracy_se, s.r2, s.r2_se], np.float64)


def _check_metrics(step: int, m, ctx: Context) -> dict:
  values = {k: float(v) for k, v in zip(m._fields, jax.device_get(tuple(m)))}
  bad = [f"metrics/{k}" for k, v in values.items() if not math.isfinite(v)]
  if bad:
    raise ckpt_lib.NonFiniteError(step, bad, ctx.latest_step())
  return values


def _with_curve(state: RunState, index: int, point: np.ndarray) -> RunState:
  ok = np.isfinite(point)
  curve = np.asarray(state.curve).copy()
  defined = np.asarray(state.curve_defined).copy()
  curve[index], defined[index] = np.where(ok, point, 0.0), ok
  rep = state.borders.sharding
  return state._replace(curve=jax.device_put(curve.astype(np.float32), rep),
                        curve_defined=jax.device_put(defined, rep))


def pretrain(config, ctx: Context, hp: gcfg.Hparams) -> tuple[RunState, dict]:
  """Trains ``train.total_steps`` steps (resuming from the latest checkpoint); returns the state and run facts."""
  total, n_dev = hp.train.total_steps, ctx.mesh.devices.size
  if hp.train.batch_size % n_dev:
    raise ValueError(f"train.batch_size={hp.train.batch_size} is not a multiple of the mesh's {n_dev} devices "
                     f"(mesh.data); use a multiple, or fewer devices")
  points = curve_steps(total, hp.run.curve_points)
  start, state, _ = ctx.restore_or(initial_state(hp, config.seed, ctx.mesh, len(points)))
  if start == 0:
    state = state._replace(borders=jax.device_put(fit_borders(hp, config.seed), mesh_lib.replicated(ctx.mesh)))
  curve_set = held_out_batches(hp, config.seed, hp.run.curve_graphs)
  get = stream(hp, key_of(config.seed, TRAIN), batch_size=hp.train.batch_size)
  step_fn = StepFn(hp, ctx.mesh)
  pairs: list[tuple[int, int]] = []
  progress = metrics_lib.Progress(total, label="[graphpfn] ", start=start)
  log_every = max(1, total // 50)
  for t in range(start, total):
    batch = get(t)
    pair = (batch.x.shape[1], batch.senders.shape[1])
    if pair not in pairs:
      pairs.append(pair)
      logging.info("[graphpfn] step %d: first batch padded to %d nodes / %d edges (compiling)", t + 1, *pair)
    train_state, m = step_fn(state.train, batch, state.borders)
    values = _check_metrics(t + 1, m, ctx)
    state = state._replace(train=train_state)
    if t + 1 in points:
      point = curve_point(state.train.params, state.borders, curve_set, hp.run.curve_graphs, hp)
      state = _with_curve(state, points.index(t + 1), point)
      values |= {f"curve_{k}": float(v) for k, v in zip(CURVE_FIELDS, point) if math.isfinite(v)}
    ctx.writer.log(t + 1, **values, node_bucket=pair[0], edge_bucket=pair[1], traces=step_fn.traces)
    if (t + 1) % log_every == 0 or t + 1 == total:
      progress.update(t + 1)
    ctx.save(t + 1, state, force=t + 1 == total or t + 1 in points)
  facts = {"traces": step_fn.traces, "bucket_pairs": [list(p) for p in pairs], "curve_steps": points,
           "resumed_from": start, "steps_per_s": progress.rate(total)}
  return state, facts


def curve_of(state: RunState, points: list[int]) -> dict:
  """The learning curve as lists (``None`` where undefined)."""
  curve, defined = np.asarray(state.curve, np.float64), np.asarray(state.curve_defined)
  out = {"steps": list(points)}
  for j, k in enumerate(CURVE_FIELDS):
    out[k] = [float(curve[i, j]) if defined[i, j] else None for i in range(len(points))]
  return out


digest = ckpt_lib.tree_digest
