"""Streamed prior batches for pretraining and held-out evaluation.

:func:`prior_examples` is the single adapter between the prior sampler
(``methods.graphpfn.batch_fn`` and ``statistics.host_sample``) and the
network's graph dicts (:mod:`methods.graphpfn.batching`); a change of the
sampler's output touches only it. :func:`prior_batch` keys step ``t``'s
graphs by ``fold_in(fold_in(key, t), i)``, so the stream is a function of
``(key, t)`` alone: a resumed run sees the same batches.
"""

from __future__ import annotations

import jax
import numpy as np

from methods.graphpfn.probe import batch_fn
from methods.graphpfn import statistics
from methods.graphpfn.batching import GraphBatch, collate
from methods.graphpfn.hparams import AttributeConfig, StructureConfig
from methods.graphpfn.model_hparams import BucketConfig, ModelConfig

_FIELDS = ("senders", "receivers", "num_nodes", "x", "y", "train_mask", "task", "num_classes")


def prior_examples(keys: jax.Array, *, structure_hp: StructureConfig, attribute_hp: AttributeConfig) -> list[dict]:
  """One prior sample per key, as graph dicts (padding removed; ``weight`` 0 for a sample the sampler flags unusable).

  Args:
    keys: ``[G]`` typed keys; sample ``i`` is a function of ``keys[i]`` alone.
    structure_hp, attribute_hp: the prior's hyperparameters.

  Returns:
    ``G`` dicts with ``senders, receivers, num_nodes, x, y, train_mask, task,
    num_classes, weight`` (the layout of :mod:`methods.graphpfn.batching`).
  """
  batch = jax.device_get(batch_fn(structure_hp, attribute_hp)(keys))
  out = []
  for i in range(keys.shape[0]):
    ex = statistics.host_sample(batch, i)
    out.append({k: ex[k] for k in _FIELDS} | {"weight": float(batch.ok[i])})
  return out


def step_keys(key: jax.Array, step: int, count: int) -> jax.Array:
  """``[count]`` keys of step ``step``'s graphs: ``fold_in(fold_in(key, step), i)``."""
  k = jax.random.fold_in(key, step)
  return jax.vmap(lambda i: jax.random.fold_in(k, i))(np.arange(count, dtype=np.uint32))


def prior_batch(key: jax.Array, step: int, *, batch_size: int, structure_hp: StructureConfig,
                attribute_hp: AttributeConfig, buckets: BucketConfig, model_hp: ModelConfig) -> GraphBatch:
  """Step ``step``'s batch of ``batch_size`` prior graphs, padded to the buckets (NumPy arrays).

  Args:
    key: the stream's key (training, or a held-out seed for evaluation).
    step: the step (or evaluation batch) index.
    batch_size: graphs in the batch.
    structure_hp, attribute_hp: the prior.
    buckets: node and edge buckets (the prior's largest graph must fit the last).
    model_hp: the network (its ``num_features`` and ``num_classes`` bound the prior's).
  """
  examples = prior_examples(step_keys(key, step, batch_size), structure_hp=structure_hp, attribute_hp=attribute_hp)
  return collate(examples, buckets=buckets, num_features=model_hp.num_features, num_classes=model_hp.num_classes,
                 batch_size=batch_size)
